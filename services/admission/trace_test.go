package admission_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// A preemptor's trace shows its wait, the preemption it asked for (under
// which the request is published) and its admission; the victim's trace
// is its own.
func TestDecisionsAreTraced(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), "admission", tracing.Config{}, tracing.WithExporter(exp))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t)
	h.tracer = tr
	h.configure("4", &v1beta1.ClusterQueuePreemption{WithinClusterQueue: v1beta1.PreemptionLowerPriority})
	h.start()
	for _, st := range []step{
		submit("low", "main", 0, 4, "1"),
		ledgerIs(map[string]int32{"low": 4}),
		submit("high", "main", 100, 4, "1"),
		preemptionRequested("high", "low"),
		pending("high", "cq", "waiting for 1 preempted workload(s) to release quota"),
		release("low"),
		admitted("high", 4),
	} {
		st.do(h)
	}

	high := tracing.WorkloadTraceID(ref("high").UID)
	got := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == high {
			got[s.Name] = s
		}
	}
	preempt, admit, queued := got[tracing.SpanPreempt], got[tracing.SpanAdmit], got[tracing.SpanQueued]
	if !preempt.SpanContext.IsValid() || !admit.SpanContext.IsValid() || !queued.SpanContext.IsValid() {
		t.Fatalf("spans of high: %v, want preempt, queued and admit", keys(got))
	}
	attrs := func(s tracetest.SpanStub) map[string]string {
		m := map[string]string{}
		for _, kv := range s.Attributes {
			m[string(kv.Key)] = kv.Value.Emit()
		}
		return m
	}
	if v := attrs(preempt)["sluice.victims"]; !strings.Contains(v, "job/"+ns+"/low") {
		t.Errorf("preempt span victims %q, want low", v)
	}
	if v := attrs(admit)["sluice.preemptions"]; v != "1" {
		t.Errorf("admit span preemptions %q, want 1", v)
	}
	var reasons []string
	for _, e := range queued.Events {
		for _, kv := range e.Attributes {
			reasons = append(reasons, kv.Value.Emit())
		}
	}
	if !strings.Contains(strings.Join(reasons, "|"), "waiting for 1 preempted workload(s)") {
		t.Errorf("queued span reasons %q", reasons)
	}
	// The request is published under the preempt span, so the preemption
	// service's spans link to it.
	req := h.envelopes(events.TypePreemptionRequestedV1)
	if len(req) == 0 || !strings.Contains(req[0].TraceParent, preempt.SpanContext.SpanID().String()) {
		t.Errorf("preemption request traceparent %v, want the preempt span %s", req, preempt.SpanContext.SpanID())
	}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() != high && s.SpanContext.TraceID() != tracing.WorkloadTraceID(ref("low").UID) {
			t.Errorf("span %s in trace %s of neither workload", s.Name, s.SpanContext.TraceID())
		}
	}
}

func keys(m map[string]tracetest.SpanStub) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
