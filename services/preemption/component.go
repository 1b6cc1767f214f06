package preemption

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/component"
)

// Options are the preemption service's settings as a command takes them
// (the composition root: see internal/component). It has none yet.
type Options struct{}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options { return Options{} }

// BindFlags binds the options to flags.
func (o *Options) BindFlags(*pflag.FlagSet) {}

// Validate refuses bad settings.
func (o Options) Validate() error { return nil }

// Build wires the service: its tracer, its publisher and the service.
func Build(ctx context.Context, d component.Deps, _ Options) (component.Runnable, error) {
	tr, err := d.Tracing.For(ctx, "preemption")
	if err != nil {
		return nil, err
	}
	pub := bus.NewPublisher(d.JS, events.Source("preemption"), bus.WithPublisherLogger(d.Log), bus.WithTracer(tr))
	return New(d.JS, pub, WithLogger(d.Log), WithTracer(tr)), nil
}
