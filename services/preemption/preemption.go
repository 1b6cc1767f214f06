// Package preemption is the preemption service: it turns the admission
// service's preemption requests into evictions. The victims were chosen by
// the engine (the same pure code the simulator runs); this service checks
// each still holds quota and announces its preemption, with the reason and
// the preemptor, so the job integration stops it.
package preemption

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// Service is the preemption service.
type Service struct {
	// consuming opens once the consumer exists (Ready).
	consuming *health.Gate
	js        jetstream.JetStream
	pub       events.Publisher
	log       zerolog.Logger
	tracer    *tracing.Tracer
}

// Option tunes the service.
type Option func(*Service)

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(s *Service) { s.log = l } }

// WithTracer records a preempt span in each victim's trace, linked to the
// preemptor's.
func WithTracer(t *tracing.Tracer) Option { return func(s *Service) { s.tracer = t } }

// New returns the service.
func New(js jetstream.JetStream, pub events.Publisher, opts ...Option) *Service {
	s := &Service{consuming: health.NewGate("preemption requests not consumed yet"), js: js, pub: pub, log: zerolog.Nop()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Ready reports whether the service consumes preemption requests.
func (s *Service) Ready() error { return s.consuming.Check() }

// Run consumes preemption requests until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	kvs, stream, err := bus.OpenBuckets(ctx, s.js, true, ledger.Bucket, fence.Bucket)
	if err != nil {
		return fmt.Errorf("preemption: %w", err)
	}
	led, fk := kvs[0], kvs[1]
	return bus.Run(ctx, s.js, Consumer(), func(ctx context.Context, env events.Envelope) error { return s.handle(ctx, led, fk, stream, env) }, bus.WithLogger(s.log),
		bus.WithStarted(s.consuming.Open))
}

// handle announces each victim that still holds its reservation, after
// fencing that reservation's start: once a victim's preemption is
// announced, the admission it loses never starts, so the quota it keeps
// booked until its job is stopped is never used by it again.
func (s *Service) handle(ctx context.Context, led jetstream.KeyValue, fk fence.KV, stream workloads.LastMsgReader, env events.Envelope) error {
	var req events.PreemptionRequestedV1
	if err := env.As(&req); err != nil {
		return fmt.Errorf("%w: %v", bus.ErrPoison, err)
	}
	for _, v := range req.Victims {
		key := workloads.EngineKey(v.Workload)
		r, ok, err := ledger.Get(ctx, led, key)
		if errors.Is(err, ledger.ErrCorrupt) {
			s.log.Error().Err(err).Str("workload", key).Msg("victim's reservation not understood; not preempted")
			continue
		}
		if err != nil {
			return err
		}
		if !ok {
			// Already gone: finished, or stopped for an earlier request.
			continue
		}
		if v.Admission != "" && r.Admission() != v.Admission {
			// The admission chosen is gone and the workload admitted
			// again since (a request redelivered late): the new admission
			// was never chosen as a victim.
			continue
		}
		// The replica that reserved the victim's quota may not have
		// announced the admission yet (it is slow, or stopped in between
		// and its successor announces it): a preemption never comes
		// before its admission on the stream.
		if err := awaitAnnounced(ctx, stream, v.Workload, r.Admission()); err != nil {
			return err
		}
		ev := events.WorkloadPreemptedV1{Workload: v.Workload, ClusterQueue: v.ClusterQueue, Reason: v.Reason, Preemptor: req.Preemptor,
			Admission: r.Admission()}
		id := events.ID(ev.Type(), v.Workload.UID, r.Admission(), req.Preemptor.UID)
		err = stopFenced(ctx, fk, workloads.Key(v.Workload), r.Admission(), id, fence.OfJob(v.Workload.UID))
		switch {
		case errors.Is(err, fence.ErrFinished):
			continue // its job ended: the end releases the quota
		case errors.Is(err, fence.ErrStopTaken), errors.Is(err, fence.ErrSuperseded):
			// Another preemptor (or an eviction) stops this admission
			// already, or it is over and the workload admitted again
			// (the ledger read above was stale): one preemption is
			// announced per admission, and none of a later one.
			s.log.Debug().Err(err).Str("workload", key).Str("preemptor", workloads.EngineKey(req.Preemptor)).Msg("victim not preempted again")
			continue
		case err != nil:
			return err
		}
		s.log.Info().Str("workload", key).Str("queue", v.ClusterQueue).Str("preemptor", workloads.EngineKey(req.Preemptor)).
			Str("reason", v.Reason).Msg("preempting")
		vctx, span := s.tracer.Start(ctx, v.Workload, tracing.SpanPreempt, trace.WithAttributes(
			tracing.AttrPreemptor.String(tracing.WorkloadName(req.Preemptor)), tracing.AttrClusterQueue.String(v.ClusterQueue),
			tracing.AttrReason.String(v.Reason), tracing.AttrAdmission.String(r.Admission())))
		// Not after the job's end, which may have come since the fence.
		err = workloads.AnnounceUnlessEnded(vctx, s.pub, stream, ev, id, v.Workload)
		span.End()
		if err != nil {
			return err
		}
	}
	return nil
}

// startWait bounds how long a preemption waits for a start in flight
// (one API write and one publish) before it hands the message back to be
// redelivered with backoff.
const (
	startWait = 2 * time.Second
	startPoll = 5 * time.Millisecond
)

// ErrNotAnnounced: a victim's admission is still unannounced after
// startWait; the request is handed back and redelivered with backoff.
var ErrNotAnnounced = errors.New("victim's admission not announced yet")

func awaitAnnounced(ctx context.Context, stream workloads.LastMsgReader, w events.WorkloadRef, admission string) error {
	deadline := time.Now().Add(startWait)
	for {
		// A reservation waiting for its admission checks is announced as
		// reserved, and may be preempted like an admitted workload.
		ok, err := workloads.Reserved(ctx, stream, w, admission)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s, admission %s", ErrNotAnnounced, workloads.EngineKey(w), admission)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(startPoll):
		}
	}
}

func stopFenced(ctx context.Context, fk fence.KV, key, admission, stopID string, opts ...fence.StopOption) error {
	deadline := time.Now().Add(startWait)
	for {
		err := fence.Stop(ctx, fk, key, admission, stopID, opts...)
		if !errors.Is(err, fence.ErrStarting) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(startPoll):
		}
	}
}

// Consumer is the durable consumer of preemption requests.
func Consumer() bus.ConsumerSpec {
	return bus.ConsumerSpec{
		Stream:         bus.StreamEvents,
		Durable:        "preemption",
		FilterSubjects: []string{events.SubjectFilter("preemption", "requested", "*", "*")},
		// A preemption given up on would leave its preemptor waiting.
		MaxDeliver: bus.RetryForever,
	}
}
