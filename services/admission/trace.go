package admission

import (
	"context"
	"sort"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// WithTracer records the spans of admission decisions (queued, admit,
// preempt, evict) in each workload's trace.
func WithTracer(t *tracing.Tracer) Option { return func(s *Service) { s.tracer = t } }

// queuedTrace is what the queued span of a waiting workload will show:
// since when it waits, each kind of reason it waited for, and how many
// preemptions were asked for it. Kept only while tracing is on.
type queuedTrace struct {
	since       time.Time
	class       string
	reasons     []reasonAt
	preemptions int
}

type reasonAt struct {
	at     time.Time
	reason string
}

// maxTracedReasons bounds the span events of one queued span: a workload
// that waits for days changes reasons many times, and its span need not
// grow with it.
const maxTracedReasons = 32

func (s *Service) queuedOf(key string, now time.Time) *queuedTrace {
	q := s.queued[key]
	if q == nil {
		q = &queuedTrace{since: now}
		s.queued[key] = q
	}
	return q
}

// noteWaiting records a waiting workload's reason when its kind changed.
func (s *Service) noteWaiting(key, class, reason string, now time.Time) {
	if !s.tracer.Enabled() {
		return
	}
	q := s.queuedOf(key, now)
	if q.class == class {
		return
	}
	q.class = class
	if len(q.reasons) < maxTracedReasons {
		q.reasons = append(q.reasons, reasonAt{at: now, reason: reason})
	}
}

// tracePreemption starts the preempt span of a preemptor asking for its
// victims; the request is published under it.
func (s *Service) tracePreemption(ctx context.Context, p *events.PreemptionRequestedV1, now time.Time) (context.Context, trace.Span) {
	if !s.tracer.Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	names := make([]string, 0, len(p.Victims))
	for _, v := range p.Victims {
		names = append(names, tracing.WorkloadName(v.Workload))
	}
	sort.Strings(names)
	s.queuedOf(workloads.EngineKey(p.Preemptor), now).preemptions += len(p.Victims)
	return s.tracer.Start(ctx, p.Preemptor, tracing.SpanPreempt, trace.WithAttributes(
		tracing.AttrClusterQueue.String(p.ClusterQueue), tracing.AttrVictims.StringSlice(names),
		tracing.AttrCycle.Int64(s.cycles)))
}

// traceAdmission records the time the workload waited (the queued span,
// with each kind of reason as an event) and starts the admit span the
// admission is announced under.
func (s *Service) traceAdmission(ctx context.Context, w *events.WorkloadSubmittedV1, d engine.Decision, admission string, now time.Time) (context.Context, trace.Span) {
	if !s.tracer.Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	q := s.queued[d.Key]
	delete(s.queued, d.Key)
	if q == nil {
		q = &queuedTrace{since: w.CreationTime}
	}
	_, queued := s.tracer.Start(ctx, w.Workload, tracing.SpanQueued, trace.WithTimestamp(q.since), trace.WithAttributes(
		tracing.AttrLocalQueue.String(w.LocalQueue), tracing.AttrClusterQueue.String(d.ClusterQueue), tracing.AttrPriority.Int64(int64(w.Priority))))
	for _, r := range q.reasons {
		queued.AddEvent("pending", trace.WithTimestamp(r.at), trace.WithAttributes(tracing.AttrReason.String(r.reason)))
	}
	queued.End(trace.WithTimestamp(now))
	return s.tracer.Start(ctx, w.Workload, tracing.SpanAdmit, trace.WithTimestamp(now), trace.WithAttributes(
		tracing.AttrCycle.Int64(s.cycles),
		tracing.AttrClusterQueue.String(d.ClusterQueue),
		tracing.AttrAdmission.String(admission),
		tracing.Flavors(d.PodSets),
		tracing.Topology(d.PodSets),
		tracing.AttrBorrowing.Bool(s.eng.Borrowing(d.Key)),
		tracing.AttrPreemptions.Int(q.preemptions)))
}

// traceEviction starts the evict span the eviction is announced under.
func (s *Service) traceEviction(ctx context.Context, ref events.WorkloadRef, d engine.Decision, admission string) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, ref, tracing.SpanEvict, trace.WithAttributes(
		tracing.AttrClusterQueue.String(d.ClusterQueue), tracing.AttrReason.String(d.Reason),
		tracing.AttrAdmission.String(admission), tracing.AttrCycle.Int64(s.cycles)))
}
