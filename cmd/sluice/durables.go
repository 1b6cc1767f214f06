package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/cmd/sluice/natsperm"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/services/admission"
	"github.com/sluice-dev/sluice/services/integration"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/services/multicluster"
	"github.com/sluice-dev/sluice/services/preemption"
	"github.com/sluice-dev/sluice/services/provisioning"
	"github.com/sluice-dev/sluice/services/quota"
)

// durableConsumers are the durable consumers on the SLUICE stream: every
// service's, each kind's, each admission check controller's Sluice ships,
// and one for each of your own named.
func durableConsumers(checkControllers []string) []bus.ConsumerSpec {
	specs := []bus.ConsumerSpec{admission.ChecksConsumer(), preemption.Consumer(), quota.ReleaseConsumer(),
		multicluster.EndedConsumer(), provisioning.EndedConsumer()}
	for _, k := range kinds.QueuedNames() {
		specs = append(specs, integration.PendingConsumer(k))
	}
	for _, c := range append(slices.Clone(natsperm.BuiltinCheckControllers), checkControllers...) {
		specs = append(specs, checks.Consumer(c))
	}
	return specs
}

// setupConsumers makes the durable consumers: a service's NATS user may
// not (bus.Page says why), so `sluice setup` does, and so does every
// service started with --setup (a server without authorization).
func (c *common) setupConsumers(ctx context.Context, js jetstream.JetStream) error {
	if err := bus.SetupConsumers(ctx, js, durableConsumers(c.checkControllers)...); err != nil {
		return err
	}
	if c.worker {
		return nil
	}
	cfgs := []jetstream.ConsumerConfig{multicluster.ReportsConsumer()}
	for _, w := range c.workers {
		cfgs = append(cfgs, multicluster.WorkerConsumer(w))
	}
	for _, cfg := range cfgs {
		if _, err := bus.EnsureConsumer(ctx, js, multicluster.Stream, cfg); err != nil {
			return fmt.Errorf("multicluster: %w", err)
		}
	}
	return nil
}
