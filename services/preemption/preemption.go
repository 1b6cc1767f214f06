// Package preemption is the preemption service: it turns the admission
// service's preemption requests into evictions. The victims were chosen by
// the engine (the same pure code the simulator runs); this service checks
// each still holds quota and announces its preemption, with the reason and
// the preemptor, so the job integration stops it.
package preemption

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// Publisher publishes an event under its deterministic id.
type Publisher interface {
	Publish(ctx context.Context, ev events.Event, id string) error
}

// Service is the preemption service.
type Service struct {
	js  jetstream.JetStream
	pub Publisher
	log zerolog.Logger
}

// New returns the service.
func New(js jetstream.JetStream, pub Publisher, log zerolog.Logger) *Service {
	return &Service{js: js, pub: pub, log: log}
}

// Run consumes preemption requests until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	led, err := s.js.KeyValue(ctx, ledger.Bucket)
	if err != nil {
		return fmt.Errorf("preemption: open %s: %w", ledger.Bucket, err)
	}
	return bus.Run(ctx, s.js, bus.ConsumerSpec{
		Stream:         bus.StreamEvents,
		Durable:        "preemption",
		FilterSubjects: []string{events.SubjectFilter("preemption", "requested", "*", "*")},
	}, func(ctx context.Context, env events.Envelope) error { return s.handle(ctx, led, env) }, bus.WithLogger(s.log))
}

func (s *Service) handle(ctx context.Context, led ledger.KV, env events.Envelope) error {
	var req events.PreemptionRequestedV1
	if err := env.As(&req); err != nil {
		return fmt.Errorf("%w: %v", bus.ErrPoison, err)
	}
	holding, err := holders(ctx, led)
	if err != nil {
		return err
	}
	for _, v := range req.Victims {
		key := workloads.EngineKey(v.Workload)
		if !holding[key] {
			// Already gone: finished, or stopped for an earlier request.
			continue
		}
		ev := events.WorkloadPreemptedV1{Workload: v.Workload, ClusterQueue: v.ClusterQueue, Reason: v.Reason, Preemptor: req.Preemptor}
		s.log.Info().Str("workload", key).Str("queue", v.ClusterQueue).Str("preemptor", workloads.EngineKey(req.Preemptor)).
			Str("reason", v.Reason).Msg("preempting")
		if err := s.pub.Publish(ctx, ev, events.ID(ev.Type(), v.Workload.UID, req.Preemptor.UID)); err != nil {
			return err
		}
	}
	return nil
}

// holders lists the workloads that hold quota now.
func holders(ctx context.Context, led ledger.KV) (map[string]bool, error) {
	keys, err := ledger.Keys(ctx, led)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, k := range keys {
		v, err := ledger.Read(ctx, led, k)
		if err != nil {
			return nil, err
		}
		for wk := range v.Entry.Reservations {
			out[wk] = true
		}
	}
	return out, nil
}
