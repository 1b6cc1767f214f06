package tracing_test

import (
	"context"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/tracing/tracingtest"
)

// Spans reach a real OTLP receiver over each protocol, configured only by
// the OTEL_* environment, as the services are.
func TestExportOverOTLP(t *testing.T) {
	rcv, err := tracingtest.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	for _, tc := range []struct {
		protocol, endpoint string
		ref                string
	}{
		{protocol: tracing.ProtocolHTTP, endpoint: "http://" + rcv.HTTP, ref: "over-http"},
		{protocol: tracing.ProtocolGRPC, endpoint: "http://" + rcv.GRPC, ref: "over-grpc"},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tc.endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
			cfg, err := tracing.ConfigFromEnv(os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := tracing.New(context.Background(), "job", cfg)
			if err != nil {
				t.Fatal(err)
			}
			ref := jobA
			ref.UID = tc.ref
			_, span := tr.Start(context.Background(), ref, tracing.SpanSubmit)
			span.End()
			created := time.Now().Add(-2 * time.Second)
			tr.Root(ref, trace.WithTimestamp(created)).End()
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			var got []tracingtest.Span
			for _, s := range rcv.Spans() {
				if s.TraceID == tracing.WorkloadTraceID(ref.UID).String() {
					got = append(got, s)
				}
			}
			if len(got) != 2 {
				t.Fatalf("received %d spans of the workload, want 2: %+v", len(got), got)
			}
			root, submit := got[0], got[1]
			if root.Name != tracing.RootName || submit.Name != tracing.SpanSubmit || submit.ParentID != root.SpanID || root.ParentID != "" {
				t.Errorf("spans %s (parent %q) and %s (parent %q), want the root and submit under it", root.Name, root.ParentID, submit.Name, submit.ParentID)
			}
			if root.Service != "sluice-job" || root.Attrs["sluice.workload"] != "Job/team-a/train" {
				t.Errorf("root service %q, attributes %v", root.Service, root.Attrs)
			}
		})
	}
}
