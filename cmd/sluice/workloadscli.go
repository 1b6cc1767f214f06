package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/sluice-dev/sluice/internal/visibility"
)

// workloadsPath is the workloads of a namespace ("" with all: every
// namespace's), or one of them.
func workloadsPath(namespace string, all bool, name string) string {
	if all {
		return visibility.Prefix + "/workloads"
	}
	p := visibility.Prefix + "/namespaces/" + url.PathEscape(namespace) + "/workloads"
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// listWorkloads reads the workloads API, selected by state when given.
func listWorkloads(ctx context.Context, api adminAPI, namespace string, all bool, state string) ([]visibility.Workload, error) {
	q := url.Values{}
	if state != "" {
		q.Set("fieldSelector", "status.state="+state)
	}
	var l visibility.WorkloadList
	if err := api.get(ctx, workloadsPath(namespace, all, ""), q, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// newGetCmd: `sluice get workloads`, what kubectl get workloads shows,
// for those without kubectl.
func newGetCmd() *cobra.Command {
	var api adminAPI
	var namespace, state, out string
	var all bool
	cmd := &cobra.Command{
		Use:   "get workloads [KIND.NAME]",
		Short: "List workloads (every job Sluice manages) with their queue, state, flavor, place and reason",
		Long: "List the workloads of a namespace (-n, default: default) or of all (-A), or show one by its name KIND.NAME " +
			"(job.train), from the visibility API's workloads — what `kubectl get workloads` shows. The admission service " +
			"is reached as for `sluice pending`.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 || (args[0] != "workloads" && args[0] != "workload" && args[0] != "wl") {
				return usageError{Err: fmt.Errorf("give: workloads [KIND.NAME]")}
			}
			if len(args) == 2 {
				if _, _, ok := visibility.ParseWorkloadName(args[1]); !ok {
					return usageError{Err: fmt.Errorf("workload %q: give KIND.NAME, e.g. job.train", args[1])}
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			wide := out == "wide"
			o := output(out)
			if wide {
				o = "table"
			}
			if err := o.check(); err != nil {
				return usageError{Err: fmt.Errorf("-o %q: must be table, wide, json or yaml", out)}
			}
			if namespace == "" && !all {
				namespace = "default"
			}
			var items []visibility.Workload
			if len(args) == 2 {
				if all {
					return usageError{Err: fmt.Errorf("-A lists; a workload is named in one namespace (-n)")}
				}
				var w visibility.Workload
				if err := api.get(cmd.Context(), workloadsPath(namespace, false, args[1]), nil, &w); err != nil {
					return err
				}
				items = []visibility.Workload{w}
			} else {
				var err error
				if items, err = listWorkloads(cmd.Context(), api, namespace, all, state); err != nil {
					return err
				}
			}
			var v any = items
			if len(args) == 2 {
				v = items[0]
			}
			return o.print(cmd.OutOrStdout(), v, func(w io.Writer) { printWorkloads(w, items, all, wide, time.Now()) })
		},
	}
	f := cmd.Flags()
	bindServer(f, &api)
	f.StringVarP(&namespace, "namespace", "n", "", "the namespace (default: default)")
	f.BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	f.StringVar(&state, "state", "", "only workloads in this state (Pending, Reserved, Admitted, Running, Finished, Evicted, Deactivated)")
	f.StringVarP(&out, "output", "o", "table", "table, wide, json or yaml")
	return cmd
}

// printWorkloads writes the table kubectl shows (with NAMESPACE for all
// namespaces, and the wide columns).
func printWorkloads(w io.Writer, items []visibility.Workload, all, wide bool, now time.Time) {
	head := "NAME\tQUEUE\tSTATE\tFLAVOR\tPRIORITY\tPOSITION\tREASON\tAGE"
	if all {
		head = "NAMESPACE\t" + head
	}
	if wide {
		head += "\tCLUSTERQUEUE\tLQ POSITION\tTRACE"
	}
	fmt.Fprintln(w, head)
	for _, it := range items {
		var flavors []string
		seen := map[string]bool{}
		for _, p := range it.Status.Flavors {
			if _, f, _ := strings.Cut(p, "="); !seen[f] {
				seen[f] = true
				flavors = append(flavors, f)
			}
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", it.Name, it.Spec.LocalQueue, it.Status.State, dash(strings.Join(flavors, ",")),
			it.Spec.Priority, place(it.Status.PositionInClusterQueue), dash(oneLine(it.Status.Reason)), duration.HumanDuration(now.Sub(it.CreationTimestamp.Time)))
		if all {
			line = it.Namespace + "\t" + line
		}
		if wide {
			line += fmt.Sprintf("\t%s\t%s\t%s", dash(it.Status.ClusterQueue), place(it.Status.PositionInLocalQueue), dash(it.Status.TraceID))
		}
		fmt.Fprintln(w, line)
	}
}

func place(p *int32) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// oneLine keeps a reason on one line of at most 80 characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 80 {
		return string(r[:79]) + "…"
	}
	return s
}

// pendingAcross is `sluice pending -n NS` (or -A): what waits in the
// namespace's queues, by ClusterQueue and place.
func pendingAcross(ctx context.Context, api adminAPI, namespace string, all bool) (visibility.PendingWorkloadsSummary, error) {
	items, err := listWorkloads(ctx, api, namespace, all, visibility.StatePending)
	if err != nil {
		return visibility.PendingWorkloadsSummary{}, err
	}
	sort.SliceStable(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if a.Status.ClusterQueue != b.Status.ClusterQueue {
			return a.Status.ClusterQueue < b.Status.ClusterQueue
		}
		return pos(a.Status.PositionInClusterQueue) < pos(b.Status.PositionInClusterQueue)
	})
	sum := visibility.PendingWorkloadsSummary{Kind: "PendingWorkloadsSummary", APIVersion: visibility.APIVersion, Total: len(items),
		Items: []visibility.PendingWorkload{}}
	now := time.Now()
	for _, it := range items {
		sum.Items = append(sum.Items, visibility.PendingWorkload{
			Metadata: visibility.ObjectMeta{Name: it.Spec.JobName, Namespace: it.Namespace, CreationTimestamp: it.CreationTimestamp.Time},
			JobKind:  it.Spec.JobKind, Priority: it.Spec.Priority, LocalQueueName: it.Spec.LocalQueue, ClusterQueueName: it.Status.ClusterQueue,
			PositionInClusterQueue: pos(it.Status.PositionInClusterQueue), PositionInLocalQueue: pos(it.Status.PositionInLocalQueue),
			Reason: it.Status.Reason, WaitingSeconds: max(0, now.Sub(it.CreationTimestamp.Time).Seconds()),
		})
	}
	return sum, nil
}

// pos is a place, or past every place when there is none (not in line).
func pos(p *int32) int32 {
	if p == nil {
		return 1<<31 - 1
	}
	return *p
}
