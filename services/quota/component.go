package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/component"
)

// Options are the quota service's settings as `sluice quota` and `sluice
// dev` take them (the composition root: see internal/component).
type Options struct {
	// Reconcile is how often the ledger is reconciled with the records.
	Reconcile time.Duration
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options { return Options{Reconcile: 30 * time.Second} }

// BindFlags binds the options to flags, their current values the defaults.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Reconcile, "reconcile", o.Reconcile, "ledger reconciliation interval")
}

// Validate refuses settings the service would refuse, naming the flag.
func (o Options) Validate() error {
	if o.Reconcile <= 0 {
		return component.Usage(fmt.Errorf("--reconcile %s: must be positive", o.Reconcile))
	}
	return nil
}

// Build wires the service: its publisher and the service itself.
func Build(_ context.Context, d component.Deps, o Options) (component.Runnable, error) {
	pub := bus.NewPublisher(d.JS, events.Source("quota"), bus.WithPublisherLogger(d.Log))
	s, err := New(Config{Reconcile: o.Reconcile}, d.JS, pub, WithLogger(d.Log))
	if err != nil {
		return nil, component.Usage(err)
	}
	return s, nil
}
