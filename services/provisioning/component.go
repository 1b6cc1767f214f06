package provisioning

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/services/integration/kinds"
)

// Options are the ProvisioningRequest controller's settings as `sluice
// provisioning` and `sluice dev` take them (the composition root: see
// internal/component).
type Options struct {
	// Selection is the job kinds to provision for (all by default).
	kinds.Selection
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options { return Options{Selection: kinds.Every()} }

// BindFlags binds the options to flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	o.Selection.BindFlags(fs, "job kinds to provision for")
}

// Build wires the controller: the kinds' clients, its publisher of
// answers, the controller.
func Build(_ context.Context, d component.Deps, o Options) (component.Runnable, error) {
	ads, kube, dyn, err := kinds.Clients(d.Kube, o.Kinds)
	if err != nil {
		return nil, err
	}
	ads = kinds.Queued(ads)
	pub := bus.NewPublisher(d.JS, events.Source(v1beta1.ProvisioningRequestController), bus.WithPublisherLogger(d.Log), bus.WithTracer(d.Tracing))
	s, err := New(kube, dyn, d.JS, ads, WithLogger(d.Log), WithPublisher(pub))
	if err != nil {
		return nil, component.Usage(err)
	}
	return s, nil
}
