package tracing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/tracing"
)

var (
	jobA = events.WorkloadRef{Kind: "Job", Namespace: "team-a", Name: "train", UID: "0b1c5a2e-0000-4000-8000-000000000001"}
	jobB = events.WorkloadRef{Kind: "Job", Namespace: "team-b", Name: "eval", UID: "0b1c5a2e-0000-4000-8000-000000000002"}
)

func newTracer(t *testing.T, service string) (*tracing.Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), service, tracing.Config{}, tracing.WithExporter(exp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

// Spans recorded by two services, each knowing only the workload, form one
// trace under the root recorded later by a third.
func TestSpansOfOneWorkloadFormOneTree(t *testing.T) {
	integ, integSpans := newTracer(t, "job")
	adm, admSpans := newTracer(t, "admission")

	_, submit := integ.Start(context.Background(), jobA, tracing.SpanSubmit)
	submit.End()
	_, admit := adm.Start(context.Background(), jobA, tracing.SpanAdmit)
	admit.End()
	created := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	started := created.Add(3 * time.Second)
	integ.Root(jobA, trace.WithTimestamp(created)).End(trace.WithTimestamp(started))

	spans := append(integSpans.GetSpans(), admSpans.GetSpans()...)
	if len(spans) != 3 {
		t.Fatalf("got %d spans, want 3", len(spans))
	}
	root := spans[1]
	if root.Name != tracing.RootName {
		t.Fatalf("second span of the integration is %q, want the root", root.Name)
	}
	wantTrace := tracing.WorkloadTraceID(jobA.UID)
	for _, s := range spans {
		if s.SpanContext.TraceID() != wantTrace {
			t.Errorf("%s: trace %s, want the workload's %s", s.Name, s.SpanContext.TraceID(), wantTrace)
		}
		if s.Name != tracing.RootName && s.Parent.SpanID() != root.SpanContext.SpanID() {
			t.Errorf("%s: parent %s, want the root %s", s.Name, s.Parent.SpanID(), root.SpanContext.SpanID())
		}
	}
	if root.Parent.IsValid() {
		t.Errorf("root has parent %s", root.Parent.SpanID())
	}
	if d := root.EndTime.Sub(root.StartTime); d != 3*time.Second {
		t.Errorf("root lasts %s, want 3s (creation to start)", d)
	}
	if got := integSpans.GetSpans()[0].Resource.Attributes(); !hasAttr(got, "service.name", "sluice-job") {
		t.Errorf("integration resource %v lacks service.name sluice-job", got)
	}
	if got := admSpans.GetSpans()[0].Attributes; !hasAttr(got, string(tracing.AttrWorkload), "Job/team-a/train") {
		t.Errorf("admit attributes %v lack sluice.workload", got)
	}
}

func hasAttr(kvs []attribute.KeyValue, key, value string) bool {
	for _, kv := range kvs {
		if string(kv.Key) == key && kv.Value.Emit() == value {
			return true
		}
	}
	return false
}

// A victim's span started while handling the preemptor's event is in the
// victim's trace, linked to the preemptor's span.
func TestSpanOfAnotherWorkloadLinksTheTraceItCameFrom(t *testing.T) {
	tr, exp := newTracer(t, "preemption")
	ctx, preemptor := tr.Start(context.Background(), jobA, tracing.SpanPreempt)
	_, victim := tr.Start(ctx, jobB, tracing.SpanPreempt)
	victim.End()
	preemptor.End()
	spans := exp.GetSpans()
	v := spans[0]
	if v.SpanContext.TraceID() != tracing.WorkloadTraceID(jobB.UID) {
		t.Errorf("victim span in trace %s, want the victim's", v.SpanContext.TraceID())
	}
	if len(v.Links) != 1 || v.Links[0].SpanContext.SpanID() != spans[1].SpanContext.SpanID() {
		t.Errorf("victim span links %v, want the preemptor's span", v.Links)
	}
}

// Without a tracer nothing is recorded, but the context still names the
// workload's trace, so events carry it.
func TestNilTracerStillGivesTheWorkloadTrace(t *testing.T) {
	var tr *tracing.Tracer
	ctx, span := tr.Start(context.Background(), jobA, tracing.SpanStart)
	span.End()
	if span.IsRecording() {
		t.Error("nil tracer records")
	}
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID() != tracing.WorkloadTraceID(jobA.UID) || !sc.IsSampled() {
		t.Errorf("context %v, want the workload's sampled trace", sc)
	}
	if tracing.WorkloadTraceID(jobA.UID) == tracing.WorkloadTraceID(jobB.UID) {
		t.Error("two workloads share a trace id")
	}
}

// Every service decides a workload's sampling alike, from its trace id.
func TestRatioSamplingAgreesAcrossServices(t *testing.T) {
	cfg, err := tracing.ConfigFromEnv(env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     "0.5",
	}))
	if err != nil {
		t.Fatal(err)
	}
	mk := func(service string) *tracing.Tracer {
		tr, err := tracing.New(context.Background(), service, cfg, tracing.WithExporter(tracetest.NewInMemoryExporter()))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	a, b := mk("job"), mk("admission")
	sampled := 0
	for i := range 200 {
		ref := jobA
		ref.UID = string(rune('a'+i%26)) + time.Duration(i).String()
		sa, sb := a.RootContext(ref).IsSampled(), b.RootContext(ref).IsSampled()
		if sa != sb {
			t.Fatalf("workload %s: services disagree (%v, %v)", ref.UID, sa, sb)
		}
		_, span := a.Start(context.Background(), ref, tracing.SpanAdmit)
		if span.IsRecording() != sa {
			t.Fatalf("workload %s: span recording %v, root sampled %v", ref.UID, span.IsRecording(), sa)
		}
		span.End()
		if sa {
			sampled++
		}
	}
	if sampled == 0 || sampled == 200 {
		t.Errorf("ratio 0.5 sampled %d of 200", sampled)
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestConfigFromEnv(t *testing.T) {
	cases := []struct {
		name         string
		env          map[string]string
		wantEnabled  bool
		wantProtocol string
		wantErr      string
	}{
		{name: "no endpoint: off", env: map[string]string{}},
		{name: "endpoint: http/protobuf by default", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			wantEnabled: true, wantProtocol: tracing.ProtocolHTTP},
		{name: "traces endpoint and grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			wantEnabled: true, wantProtocol: tracing.ProtocolGRPC},
		{name: "disabled SDK", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin"`},
		{name: "unknown protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "c", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`},
		{name: "unknown sampler", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "c", "OTEL_TRACES_SAMPLER": "sometimes"},
			wantErr: `OTEL_TRACES_SAMPLER="sometimes"`},
		{name: "ratio out of range", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "c", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
			wantErr: `OTEL_TRACES_SAMPLER_ARG="2"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tracing.ConfigFromEnv(env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, tracing.ErrConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want ErrConfig naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := struct {
				Enabled  bool
				Protocol string
			}{cfg.Enabled(), cfg.Protocol}
			want := struct {
				Enabled  bool
				Protocol string
			}{tc.wantEnabled, tc.wantProtocol}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
}

// A factory makes one tracer per service, and decides sampling for the
// contexts it hands out as those tracers do.
func TestFactory(t *testing.T) {
	if f := tracing.NewFactory(tracing.Config{}); f != nil {
		t.Fatalf("factory %v without an endpoint, want nil (off)", f)
	}
	var off *tracing.Factory
	if tr, err := off.For(context.Background(), "job"); tr != nil || err != nil {
		t.Errorf("nil factory made %v, %v", tr, err)
	}
	cfg, err := tracing.ConfigFromEnv(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
		"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}))
	if err != nil {
		t.Fatal(err)
	}
	f := tracing.NewFactory(cfg, tracing.WithExporter(tracetest.NewInMemoryExporter()))
	defer func() { _ = f.Shutdown(context.Background()) }()
	job1, _ := f.For(context.Background(), "job")
	job2, _ := f.For(context.Background(), "job")
	adm, _ := f.For(context.Background(), "admission")
	if job1 != job2 || job1 == adm {
		t.Errorf("tracers: job %p and %p, admission %p; want one per service", job1, job2, adm)
	}
	for i := range 50 {
		ref := jobA
		ref.UID = time.Duration(i).String()
		got := trace.SpanContextFromContext(f.Workload(context.Background(), ref))
		if got.IsSampled() != adm.RootContext(ref).IsSampled() || got.TraceID() != tracing.WorkloadTraceID(ref.UID) {
			t.Fatalf("workload %s: factory context %v, tracer's root %v", ref.UID, got, adm.RootContext(ref))
		}
	}
}
