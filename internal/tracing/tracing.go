package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
)

// Span names. RootName is the workload's root span: its job's admission
// latency.
const (
	RootName   = "workload"
	SpanSubmit = "submit"
	SpanQueued = "queued"
	SpanAdmit  = "admit"
	// SpanPreempt in the preemptor's trace asks for victims; in a victim's
	// trace it is the victim's preemption.
	SpanPreempt = "preempt"
	SpanEvict   = "evict"
	SpanStart   = "start"
	SpanStop    = "stop"
)

// Attribute keys of Sluice's spans.
const (
	AttrWorkload     = attribute.Key("sluice.workload") // kind/namespace/name
	AttrWorkloadUID  = attribute.Key("sluice.workload.uid")
	AttrLocalQueue   = attribute.Key("sluice.local_queue")
	AttrClusterQueue = attribute.Key("sluice.cluster_queue")
	AttrPriority     = attribute.Key("sluice.priority")
	AttrAdmission    = attribute.Key("sluice.admission")
	AttrReason       = attribute.Key("sluice.reason")
	AttrCycle        = attribute.Key("sluice.cycle")
	AttrFlavors      = attribute.Key("sluice.flavors")
	// AttrTopology: where the pods of pod sets placed on topology-aware
	// flavors go, "podset:domain=count" with the domain's values joined by
	// "/".
	AttrTopology    = attribute.Key("sluice.topology")
	AttrBorrowing   = attribute.Key("sluice.borrowing")
	AttrPreemptions = attribute.Key("sluice.preemptions")
	AttrPreemptor   = attribute.Key("sluice.preemptor")
	AttrVictims     = attribute.Key("sluice.victims")
)

const instrumentation = "github.com/sluice-dev/sluice"

// defaultSampler is OTEL_TRACES_SAMPLER's default.
var defaultSampler = sdktrace.ParentBased(sdktrace.AlwaysSample())

// WorkloadTraceID is the trace id of a workload: the same in every service
// and across restarts.
func WorkloadTraceID(uid string) trace.TraceID {
	h := sha256.Sum256([]byte("sluice trace " + uid))
	var id trace.TraceID
	copy(id[:], h[:])
	return id
}

// rootSpanID is the span id of a workload's root span.
func rootSpanID(uid string) trace.SpanID {
	h := sha256.Sum256([]byte("sluice root span " + uid))
	var id trace.SpanID
	copy(id[:], h[:])
	return id
}

// Flavors is the sluice.flavors attribute of an assignment:
// "podset:resource=flavor", sorted.
func Flavors(ps []engine.PodSetAssignment) attribute.KeyValue {
	var out []string
	for _, p := range ps {
		for r, f := range p.Flavors {
			out = append(out, p.Name+":"+r+"="+f)
		}
	}
	sort.Strings(out)
	return AttrFlavors.StringSlice(out)
}

// Topology is the sluice.topology attribute of an admission; empty when
// no pod set was placed on a topology-aware flavor.
func Topology(ps []engine.PodSetAssignment) attribute.KeyValue {
	var out []string
	for _, p := range ps {
		if p.Topology == nil {
			continue
		}
		for _, d := range p.Topology.Domains {
			out = append(out, fmt.Sprintf("%s:%s=%d", p.Name, strings.Join(d.Values, "/"), d.Count))
		}
	}
	return AttrTopology.StringSlice(out)
}

// WorkloadName is the sluice.workload attribute: kind/namespace/name.
func WorkloadName(ref events.WorkloadRef) string {
	return ref.Kind + "/" + ref.Namespace + "/" + ref.Name
}

// Tracer records the spans of one service. The nil *Tracer records
// nothing.
type Tracer struct {
	tp      *sdktrace.TracerProvider
	tr      trace.Tracer
	sampler sdktrace.Sampler
}

// Option tunes New.
type Option func(*options)

type options struct {
	exporter sdktrace.SpanExporter
	sync     bool
}

// WithExporter exports to exp instead of OTLP (tests), one span at a
// time as each ends.
func WithExporter(exp sdktrace.SpanExporter) Option {
	return func(o *options) { o.exporter, o.sync = exp, true }
}

// New returns the tracer of service (service.name "sluice-<service>"),
// or nil when cfg turns tracing off.
func New(ctx context.Context, service string, cfg Config, opts ...Option) (*Tracer, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if !cfg.Enabled() && o.exporter == nil {
		return nil, nil
	}
	exp := o.exporter
	if exp == nil {
		var err error
		switch cfg.Protocol {
		case ProtocolGRPC:
			exp, err = otlptracegrpc.New(ctx)
		default:
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter (%s, %s): %w", cfg.Protocol, cfg.Endpoint, err)
		}
	}
	// The service's name comes last, so that one process running every
	// service (sluice dev) keeps them apart even with OTEL_SERVICE_NAME set.
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "sluice-"+service)))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	sampler := cfg.Sampler
	if sampler == nil {
		sampler = defaultSampler
	}
	process := sdktrace.WithBatcher(exp)
	if o.sync {
		process = sdktrace.WithSyncer(exp)
	}
	tp := sdktrace.NewTracerProvider(process, sdktrace.WithResource(res), sdktrace.WithSampler(sampler), sdktrace.WithIDGenerator(ids{}))
	return &Tracer{tp: tp, tr: tp.Tracer(instrumentation), sampler: sampler}, nil
}

// Shutdown exports what is left and stops; bounded by ctx.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// RootContext is the span context of a workload's root span. Its sampled
// flag is the sampler's decision for the workload's trace id, which every
// service takes alike; without a tracer it is sampled, so that whoever
// reads the events may record the trace.
func (t *Tracer) RootContext(ref events.WorkloadRef) trace.SpanContext {
	tid := WorkloadTraceID(ref.UID)
	flags := trace.FlagsSampled
	if t != nil {
		r := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid, Name: RootName, Kind: trace.SpanKindInternal})
		if r.Decision != sdktrace.RecordAndSample {
			flags = 0
		}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: rootSpanID(ref.UID), TraceFlags: flags, Remote: true})
}

// Workload returns ctx in the workload's trace. A span of that trace
// already in ctx stays the parent; otherwise the workload's root is.
func (t *Tracer) Workload(ctx context.Context, ref events.WorkloadRef) context.Context {
	root := t.RootContext(ref)
	if cur := trace.SpanContextFromContext(ctx); cur.IsValid() && cur.TraceID() == root.TraceID() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, root)
}

// Start starts a span of the workload's trace, under the span of that
// trace in ctx or under the root. A span of another trace in ctx (the
// preemptor's, for a victim) becomes a link. The span carries the
// workload's name and UID; the caller ends it.
func (t *Tracer) Start(ctx context.Context, ref events.WorkloadRef, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cur := trace.SpanContextFromContext(ctx)
	ctx = t.Workload(ctx, ref)
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	opts = append(opts, trace.WithAttributes(AttrWorkload.String(WorkloadName(ref)), AttrWorkloadUID.String(ref.UID)))
	if cur.IsValid() && cur.TraceID() != WorkloadTraceID(ref.UID) {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: cur}))
	}
	return t.tr.Start(ctx, name, opts...)
}

// Root records the workload's root span, from its job's creation (first
// seen) to its start. It is recorded once per workload, at its first
// start, by the service that starts it.
func (t *Tracer) Root(ref events.WorkloadRef, opts ...trace.SpanStartOption) trace.Span {
	if t == nil {
		return trace.SpanFromContext(context.Background())
	}
	ctx := context.WithValue(context.Background(), forcedIDs{}, ids{trace: WorkloadTraceID(ref.UID), span: rootSpanID(ref.UID)})
	opts = append(opts, trace.WithNewRoot(), trace.WithAttributes(AttrWorkload.String(WorkloadName(ref)), AttrWorkloadUID.String(ref.UID)))
	_, span := t.tr.Start(ctx, RootName, opts...)
	return span
}

// Enabled reports whether t records spans.
func (t *Tracer) Enabled() bool { return t != nil }

// forcedIDs is the context key under which Root asks the id generator for
// the workload's ids.
type forcedIDs struct{}

// ids generates random ids, except for a workload's root span, whose ids
// are derived from its UID.
type ids struct {
	trace trace.TraceID
	span  trace.SpanID
}

func (ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if f, ok := ctx.Value(forcedIDs{}).(ids); ok {
		return f.trace, f.span
	}
	var tid trace.TraceID
	_, _ = rand.Read(tid[:])
	return tid, randomSpanID()
}

func (ids) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}

// Factory makes one Tracer per service name, on first use, so that one
// process running several services (sluice dev, an integration of several
// kinds) names each apart. The nil *Factory makes nil tracers.
type Factory struct {
	cfg  Config
	opts []Option
	// sampling decides sampling as every tracer of the factory does, for
	// those who only put contexts into workload traces.
	sampling *Tracer
	mu       sync.Mutex
	m        map[string]*Tracer
}

// NewFactory returns a factory of tracers configured by cfg, or nil when
// tracing is off.
func NewFactory(cfg Config, opts ...Option) *Factory {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if !cfg.Enabled() && o.exporter == nil {
		return nil
	}
	sampler := cfg.Sampler
	if sampler == nil {
		sampler = defaultSampler
	}
	return &Factory{cfg: cfg, opts: opts, m: map[string]*Tracer{}, sampling: &Tracer{sampler: sampler}}
}

// For returns service's tracer.
func (f *Factory) For(ctx context.Context, service string) (*Tracer, error) {
	if f == nil {
		return nil, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.m[service]; ok {
		return t, nil
	}
	t, err := New(ctx, service, f.cfg, f.opts...)
	if err != nil {
		return nil, err
	}
	f.m[service] = t
	return t, nil
}

// Workload puts ctx into the workload's trace, with the sampling every
// tracer of the factory decides (see Tracer.Workload).
func (f *Factory) Workload(ctx context.Context, ref events.WorkloadRef) context.Context {
	if f == nil {
		return (*Tracer)(nil).Workload(ctx, ref)
	}
	return f.sampling.Workload(ctx, ref)
}

// Shutdown shuts every tracer down, exporting what is left.
func (f *Factory) Shutdown(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, t := range f.m {
		errs = append(errs, t.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
