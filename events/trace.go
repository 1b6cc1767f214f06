package events

import (
	"context"
	"crypto/rand"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// W3C trace-context headers. They are carried as plain NATS headers (not
// ce-prefixed) so any OpenTelemetry-aware NATS tool picks them up.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

var traceContext = propagation.TraceContext{}

// headerCarrier adapts nats.Header to OpenTelemetry's TextMapCarrier, with
// case-insensitive lookups.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string { return headerGet(nats.Header(c), key) }

func (c headerCarrier) Set(key, value string) { nats.Header(c).Set(strings.ToLower(key), value) }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// ContextWithTraceParent returns ctx carrying the remote span context
// described by traceparent (and tracestate, which may be empty), so that
// events published with it continue the same trace. An invalid traceparent
// leaves ctx unchanged.
func ContextWithTraceParent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	h := nats.Header{HeaderTraceParent: {traceparent}}
	if tracestate != "" {
		h[HeaderTraceState] = []string{tracestate}
	}
	return traceContext.Extract(ctx, headerCarrier(h))
}

// TraceParent returns the traceparent header describing ctx's span context,
// or "" when ctx has none.
func TraceParent(ctx context.Context) string {
	h := nats.Header{}
	traceContext.Inject(ctx, headerCarrier(h))
	return h.Get(HeaderTraceParent)
}

// TraceID returns the 32-hex-digit trace id of a traceparent header, or ""
// when it is not a valid one.
func TraceID(traceparent string) string {
	sc := trace.SpanContextFromContext(ContextWithTraceParent(context.Background(), traceparent, ""))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// injectTrace writes traceparent/tracestate for an outgoing message. A span
// context in ctx, local or carried in from a consumed event, is passed on
// as it is: the parent it names is a span that exists (a span recorded by
// a service, or a workload's root, see internal/tracing), never a made-up
// hop. Without any, a new sampled trace starts here.
func injectTrace(ctx context.Context, h nats.Header) error {
	if sc := trace.SpanContextFromContext(ctx); !sc.IsValid() {
		var tid trace.TraceID
		if _, err := rand.Read(tid[:]); err != nil {
			return err
		}
		sid, err := newSpanID()
		if err != nil {
			return err
		}
		sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	traceContext.Inject(ctx, headerCarrier(h))
	return nil
}

func newSpanID() (trace.SpanID, error) {
	var sid trace.SpanID
	_, err := rand.Read(sid[:])
	return sid, err
}
