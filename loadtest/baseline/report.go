package baseline

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Print writes the Result for a person.
func (r *Result) Print(w io.Writer) {
	o := r.Options
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	fmt.Fprintf(w, "Kueue profile %s, live: %d cohorts, %d ClusterQueues, scale %g, %d Jobs (namespace %s, prefix %s)\n",
		r.Profile.Name, r.Profile.Cohorts, len(r.Profile.Queues), o.Scale, r.Jobs, o.Namespace, o.Prefix)
	if o.Unqueued {
		fmt.Fprintf(w, "  unqueued: the floor (each Job unsuspended by its creator; nothing queued or decided)\n")
	}
	fmt.Fprintf(w, "  created     %d (creates spanned %s; lateness against the pacing: %s)\n", r.Created, ms(r.CreateSpan), r.CreateLate)
	fmt.Fprintf(w, "  finished    %d (failed %d, deleted early %d)\n", r.Finished, r.Failed, r.Gone)
	ratio := 0.0
	if r.CapacityBound > 0 {
		ratio = r.Wall.Seconds() / r.CapacityBound.Seconds()
	}
	fmt.Fprintf(w, "  wall        %s, capacity bound %s: wall/bound %.2f\n", ms(r.Wall), ms(r.CapacityBound), ratio)
	fmt.Fprintf(w, "  time to admission (create → first unsuspend):\n")
	for _, cl := range r.Classes {
		if s, ok := r.TimeToAdmission[cl.Name]; ok {
			fmt.Fprintf(w, "    %-16s %s\n", cl.Name, s)
		}
	}
	for _, class := range slices.Sorted(maps.Keys(r.Usage)) {
		if o.Unqueued {
			break // no queue holds quota: a share of it means nothing
		}
		fmt.Fprintf(w, "  usage       ClusterQueue class %s: %.1f%% of its nominal CPU over the wall time\n", class, r.Usage[class])
	}
	fmt.Fprintf(w, "  admissions  %d (unsuspensions), preemptions %d of %d Jobs", r.Admissions, r.Preemptions, r.PreemptedJobs)
	if r.Preemptions > 0 {
		fmt.Fprintf(w, " (")
		for i, cl := range r.Classes {
			if i > 0 {
				fmt.Fprintf(w, ", ")
			}
			fmt.Fprintf(w, "%s %d", cl.Name, r.PreemptionsByClass[cl.Name])
		}
		fmt.Fprintf(w, ")")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  completion  %d status writes, %d conflicts, %d stale; lag after the runtime: %s\n",
		r.StatusWrites, r.StatusConflicts, r.StatusStale, r.CompletionLag)
	if r.WritesErr != "" {
		fmt.Fprintf(w, "  API writes  not counted: %s\n", r.WritesErr)
	} else {
		fmt.Fprintf(w, "  API writes  %s\n", r.Writes.summary(r.Jobs))
		fmt.Fprintf(w, "  API watches of Jobs closed for falling behind %.0f, events replayed to their watchers %.0f\n", r.Writes.JobWatchesClosed, r.Writes.JobEventsReplayed)
	}
	switch {
	case r.NATSErr != "":
		fmt.Fprintf(w, "  NATS        not counted: %s\n", r.NATSErr)
	case r.NATS.Total > 0:
		fmt.Fprintf(w, "  NATS        %s\n", r.NATS.summary(r.Jobs))
	}
	switch q := r.Quota; {
	case o.Unqueued:
		fmt.Fprintf(w, "  quota check not run: unqueued\n")
	case q == nil:
		fmt.Fprintf(w, "  quota check did not run: %s\n", r.QuotaErr)
	default:
		fmt.Fprintf(w, "  quota check %d Job events, %d violations, %d relists, %d gaps\n", q.Events, len(q.Violations)+q.Dropped, q.Relists, len(q.Gaps))
		for i, v := range q.Violations {
			if i == 10 {
				fmt.Fprintf(w, "    … %d more\n", len(q.Violations)+q.Dropped-10)
				break
			}
			fmt.Fprintf(w, "    %s\n", v)
		}
		if len(q.Max) > 0 {
			fmt.Fprintf(w, "    most used at once:")
			for _, node := range slices.Sorted(maps.Keys(q.Max)) {
				if len(q.Max) > 12 && !isCohort(node) {
					continue
				}
				for _, fr := range slices.Sorted(maps.Keys(q.Max[node])) {
					v := q.Max[node][fr]
					fmt.Fprintf(w, " %s %s=%s;", node, fr, v.String())
				}
			}
			fmt.Fprintln(w)
		}
	}
	e := r.Events
	switch {
	case o.NATSURL == "":
		fmt.Fprintf(w, "  events      not read (no NATS URL)\n")
	case !e.Read:
		fmt.Fprintf(w, "  events      not read: %s\n", e.Err)
	default:
		fmt.Fprintf(w, "  events      %d messages read (to sequence %d); about this run's Jobs: %.2f per Job (min %d, max %d; %d Jobs seen, %d without finished); %.2f per Job never preempted nor evicted (%d Jobs)\n",
			e.Messages, e.LastSeq, e.PerJob, e.PerJobMin, e.PerJobMax, e.JobsSeen, e.NoFinished, e.PerUndisturbedJob, e.Undisturbed)
		fmt.Fprintf(w, "    by type:")
		for _, k := range slices.Sorted(maps.Keys(e.ByType)) {
			fmt.Fprintf(w, " %s %d;", k, e.ByType[k])
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "    rest of the stream: %d about the probe Jobs;", e.ProbeEvents)
		for _, k := range slices.Sorted(maps.Keys(e.Other)) {
			fmt.Fprintf(w, " %s %d;", k, e.Other[k])
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "    stages: admitted → started %s\n", e.Stages.AdmittedToStarted)
		fmt.Fprintf(w, "            started → finished %s\n", e.Stages.StartedToFinished)
		fmt.Fprintf(w, "            finished → quota released %s\n", e.Stages.FinishedToReleased)
		fmt.Fprintf(w, "    preempted but finished without a stop %d, stopped while not started %d, repeated preempted %d\n",
			e.Tally.PreemptedNotStopped, e.Tally.StoppedNotRunning, e.Tally.RepeatPreempted)
		fmt.Fprintf(w, "    re-sent events (same id, same data) %d %v, id collisions (same id, other data) %d, undecodable %d, order violations %d\n",
			e.DuplicateIDs, e.DuplicatesByType, e.IDCollisions, e.Undecodable, len(e.Order))
		for i, v := range e.Order {
			if i == 10 {
				fmt.Fprintf(w, "    … %d more\n", len(e.Order)-10)
				break
			}
			fmt.Fprintf(w, "    %s\n", v)
		}
		if e.Err != "" {
			fmt.Fprintf(w, "    error: %s\n", e.Err)
		}
	}
	if f := r.Failures(); len(f) == 0 {
		fmt.Fprintf(w, "PASS\n")
	} else {
		fmt.Fprintf(w, "FAIL: %d problems\n", len(f))
		for _, s := range f {
			fmt.Fprintf(w, "  - %s\n", s)
		}
	}
}

func isCohort(node string) bool { return strings.HasPrefix(node, "Cohort/") }
