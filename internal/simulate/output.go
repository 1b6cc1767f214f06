package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
)

// WriteJSONL writes one JSON object per line.
func WriteJSONL(w io.Writer, records []Record) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range records {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write record %s: %w", r.ID, err)
		}
	}
	return nil
}

// WriteTable writes the same records for a person: one line per
// transition, then the summary.
func WriteTable(w io.Writer, records []Record, start time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ELAPSED\tEVENT\tWORKLOAD\tCLUSTERQUEUE\tDETAIL")
	var sum *Summary
	for _, r := range records {
		if r.Type == events.TypeSimulationSummaryV1 {
			s := r.Data.(Summary)
			sum = &s
			continue
		}
		t, _ := time.Parse(time.RFC3339Nano, r.Time)
		event := r.Type[strings.LastIndex(r.Type, ".")+1:]
		switch d := r.Data.(type) {
		case WorkloadData:
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Sub(start), event, r.Subject, d.ClusterQueue, detail(d))
		case CheckData:
			fmt.Fprintf(tw, "%s\tcheck %s\t%s\t\t%s\n", t.Sub(start), d.Check, r.Subject, checkDetail(d))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if sum == nil {
		return nil
	}
	reserved := ""
	if sum.ReservedCount > 0 {
		reserved = fmt.Sprintf(", %d reserved (waiting for admission checks)", sum.ReservedCount)
	}
	fmt.Fprintf(w, "\nSummary: %.3fs elapsed, %d finished, %d running%s, %d pending, %d preemptions\n",
		sum.ElapsedSeconds, sum.FinishedCount, sum.AdmittedCount, reserved, sum.PendingCount, sum.PreemptionCount)
	if sum.Stopped != "" {
		fmt.Fprintf(w, "The run %s.\n", sum.Stopped)
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tCLUSTERQUEUE\tPRIORITY\tSTATE\tWAIT\tADMITTED\tFINISHED\tPREEMPTED")
	for _, wr := range sum.Workloads {
		wait := "-"
		if wr.WaitSeconds != nil {
			wait = fmt.Sprintf("%gs", *wr.WaitSeconds)
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\n", wr.Namespace, wr.Name, wr.ClusterQueue, wr.Priority, wr.State,
			wait, elapsed(wr.Admitted, start), elapsed(wr.Finished, start), wr.Preemptions)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTERQUEUE\tFLAVOR\tRESOURCE\tNOMINAL\tAVERAGE USE\tUTILIZATION")
	for _, q := range sum.ClusterQueues {
		for _, r := range q.Resources {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f%%\n", q.Name, r.Flavor, r.Resource,
				quantity(r.Resource, r.Nominal), quantity(r.Resource, r.AverageUsage), r.Utilization*100)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(sum.LocalQueues) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LOCALQUEUE\tUSAGE (ADMISSION FAIR SHARING)\tWEIGHTED SHARE")
		for _, lq := range sum.LocalQueues {
			var used []string
			for _, r := range slices.Sorted(maps.Keys(lq.ConsumedResources)) {
				used = append(used, fmt.Sprintf("%s=%g", r, lq.ConsumedResources[r]))
			}
			share := "inf"
			if lq.WeightedShare != nil {
				share = fmt.Sprintf("%g", *lq.WeightedShare)
			}
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\n", lq.Namespace, lq.Name, dashIfEmpty(strings.Join(used, ",")), share)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(sum.Domains) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLAVOR\tDOMAIN\tRESOURCE\tCAPACITY\tPEAK USE")
	for _, d := range sum.Domains {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Flavor, strings.Join(d.Domain, "/"), d.Resource,
			quantity(d.Resource, d.Capacity), quantity(d.Resource, d.Peak))
	}
	return tw.Flush()
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// quantity renders an amount in the resource's summary unit (cores for
// cpu) the way Kubernetes writes quantities, e.g. 16Gi or 2500m.
func quantity(res string, v float64) string {
	if res == "cpu" {
		v *= 1000
	}
	return engine.Format(res, int64(math.Round(v)))
}

func elapsed(ts string, start time.Time) string {
	if ts == "" {
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	return t.Sub(start).String()
}

func detail(d WorkloadData) string {
	var parts []string
	for _, ps := range d.PodSets {
		var fl []string
		for r, f := range ps.Flavors {
			fl = append(fl, r+"="+f)
		}
		sort.Strings(fl)
		parts = append(parts, fmt.Sprintf("%s×%d %s", ps.Name, ps.Count, strings.Join(fl, ",")))
		if ps.Topology != nil {
			parts = append(parts, "on "+placement(ps.Topology))
		}
	}
	if d.Reason != "" {
		parts = append(parts, d.Reason)
	}
	if d.Preemptor != "" {
		parts = append(parts, "by "+d.Preemptor)
	}
	if d.Message != "" {
		parts = append(parts, d.Message)
	}
	for _, c := range d.Checks {
		parts = append(parts, "awaits "+c.Name)
	}
	return strings.Join(parts, " ")
}

// placement renders a topology assignment by its lowest-level domains,
// "b1r1n1:4,b1r1n2:2" (the hostname names the node; a rack is shown with
// its block, "b1/r1:8").
func placement(t *engine.TopologyAssignment) string {
	parts := make([]string, len(t.Domains))
	for i, d := range t.Domains {
		name := strings.Join(d.Values, "/")
		if n := len(d.Values); n > 0 && len(t.Levels) == n && t.Levels[n-1] == corev1.LabelHostname {
			name = d.Values[n-1]
		}
		parts[i] = fmt.Sprintf("%s:%d", name, d.Count)
	}
	return strings.Join(parts, ",")
}

func checkDetail(d CheckData) string {
	s := d.State
	if d.Message != "" {
		s += ": " + d.Message
	}
	if d.RequeueAfterSeconds != nil {
		s += fmt.Sprintf(" (retry after %gs)", *d.RequeueAfterSeconds)
	}
	return s
}
