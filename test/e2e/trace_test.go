package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/tracing/tracingtest"
)

// One Job that waits for quota, then starts: its trace, as the OTLP
// receiver got it from sluice dev's services, is one tree under the root
// the Job's admission latency is, with each service under its own name.
func TestTraceOfOneJob(t *testing.T) {
	ns := "e2e-trace"
	queues(t, ns, 4, "Never")
	createJob(t, jobSpec{ns: ns, name: "first", queue: "q", pods: 4, gpus: 1, runFor: "6s"})
	waitRunning(t, ns, "first", 30*time.Second)
	job := createJob(t, jobSpec{ns: ns, name: "second", queue: "q", pods: 2, gpus: 1, runFor: "1s"})
	waitRunning(t, ns, "second", 60*time.Second)

	traceID := tracing.WorkloadTraceID(string(job.UID)).String()
	var spans []tracingtest.Span
	byName := map[string][]tracingtest.Span{}
	// The root is exported when the job starts, and every other span of
	// the path has ended before it.
	eventually(t, 15*time.Second, "the trace of job second", func() (bool, string) {
		spans = nil
		byName = map[string][]tracingtest.Span{}
		for _, s := range env.traces.Spans() {
			if s.TraceID == traceID {
				spans = append(spans, s)
				byName[s.Name] = append(byName[s.Name], s)
			}
		}
		for _, n := range []string{tracing.RootName, tracing.SpanSubmit, tracing.SpanQueued, tracing.SpanAdmit, tracing.SpanStart} {
			if len(byName[n]) == 0 {
				return false, fmt.Sprintf("no %s span yet; have %s", n, names(spans))
			}
		}
		return true, ""
	})
	if len(byName[tracing.RootName]) != 1 {
		t.Fatalf("%d root spans, want 1: %s", len(byName[tracing.RootName]), names(spans))
	}
	root := byName[tracing.RootName][0]
	t.Logf("trace %s:\n%s", traceID, tracingtest.Tree(spans, "sluice.workload", "sluice.cluster_queue", "sluice.flavors",
		"sluice.cycle", "sluice.borrowing", "sluice.preemptions"))
	wantService := map[string]string{tracing.RootName: "sluice-job", tracing.SpanSubmit: "sluice-job", tracing.SpanStart: "sluice-job",
		tracing.SpanQueued: "sluice-admission", tracing.SpanAdmit: "sluice-admission"}
	for _, s := range spans {
		if want, ok := wantService[s.Name]; ok && s.Service != want {
			t.Errorf("%s span from %q, want %q", s.Name, s.Service, want)
		}
		if s.Name != tracing.RootName && s.ParentID != root.SpanID {
			t.Errorf("%s span's parent %s, want the root %s", s.Name, s.ParentID, root.SpanID)
		}
		if s.Attrs["sluice.workload"] != "job/"+ns+"/second" || s.Attrs["sluice.workload.uid"] != string(job.UID) {
			t.Errorf("%s span's workload attributes %v", s.Name, s.Attrs)
		}
	}
	if root.ParentID != "" {
		t.Errorf("root has parent %s", root.ParentID)
	}

	// The root runs from the Job's creation to its start.
	got := getJob(t, ns, "second")
	if !root.Start.Equal(got.CreationTimestamp.Time) {
		t.Errorf("root starts %s, want the Job's creation %s", root.Start, got.CreationTimestamp.Time)
	}
	if got.Status.StartTime != nil {
		// status.startTime is set by the Job controller after the
		// unsuspend, in whole seconds.
		if d := got.Status.StartTime.Sub(root.End); d < -time.Second || d > 3*time.Second {
			t.Errorf("root ends %s, the Job's startTime is %s", root.End, got.Status.StartTime)
		}
	}
	if d := root.End.Sub(root.Start); d < 2*time.Second {
		t.Errorf("root lasts %s, but the Job waited for the first one (6s)", d)
	}

	// The time queued shows why it waited; the decision says where.
	queued, admit := byName[tracing.SpanQueued][0], byName[tracing.SpanAdmit][0]
	var reasons []string
	for _, e := range queued.Events {
		reasons = append(reasons, e.Attrs["sluice.reason"])
	}
	if len(reasons) == 0 || !strings.Contains(strings.Join(reasons, "|"), "insufficient unused quota") {
		t.Errorf("queued span's reasons %q, want insufficient unused quota", reasons)
	}
	if admit.Attrs["sluice.cluster_queue"] != ns || !strings.Contains(admit.Attrs["sluice.flavors"], "nvidia.com/gpu=a100") ||
		admit.Attrs["sluice.cycle"] == "" || admit.Attrs["sluice.borrowing"] != "false" {
		t.Errorf("admit span attributes %v", admit.Attrs)
	}
	for _, s := range spans {
		if s.Name != tracing.RootName && (s.Start.Before(root.Start.Add(-time.Second)) || s.End.After(root.End.Add(time.Second))) {
			t.Errorf("%s span [%s, %s] outside the root [%s, %s]", s.Name, s.Start, s.End, root.Start, root.End)
		}
	}

	// The events carry the same trace, and describe prints it.
	out := sluiceCLI(t, "describe", "workload", ns+"/second", "--nats", env.nats)
	if !strings.Contains(out, "Trace ID:\t"+traceID) && !strings.Contains(out, traceID) {
		t.Errorf("describe does not print the trace id %s:\n%s", traceID, out)
	}
	if strings.Count(out, traceID) < 4 {
		t.Errorf("describe: fewer than 4 events carry trace %s:\n%s", traceID, out)
	}
	waitComplete(t, ns, "second", 60*time.Second)
}

func names(spans []tracingtest.Span) string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Service+":"+s.Name)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
