package multicluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/services/integration/kinds"
)

// DispatcherOptions are the dispatcher's settings as `sluice multicluster`
// and `sluice dev` take them (the composition root: see
// internal/component).
type DispatcherOptions struct {
	// Selection is the job kinds to dispatch (all by default).
	kinds.Selection
}

// DefaultDispatcherOptions are the flags' defaults.
func DefaultDispatcherOptions() DispatcherOptions { return DispatcherOptions{Selection: kinds.Every()} }

// BindFlags binds the options to flags.
func (o *DispatcherOptions) BindFlags(fs *pflag.FlagSet) {
	o.Selection.BindFlags(fs, "job kinds to dispatch")
}

// BuildDispatcher wires the dispatcher of a manager cluster.
func BuildDispatcher(_ context.Context, d component.Deps, o DispatcherOptions) (component.Runnable, error) {
	ads, _, dyn, err := kinds.Clients(d.Kube, o.Kinds)
	if err != nil {
		return nil, err
	}
	ads = kinds.Queued(ads)
	pub := bus.NewPublisher(d.JS, events.Source(v1beta1.MultiClusterController), bus.WithPublisherLogger(d.Log), bus.WithTracer(d.Tracing))
	disp, err := NewDispatcher(dyn, d.JS, ads, WithDispatcherLogger(d.Log), WithDispatcherPublisher(pub))
	if err != nil {
		return nil, component.Usage(err)
	}
	return disp, nil
}

// WorkerOptions are a worker cluster's agent's settings, as `sluice
// worker` takes them; `sluice dev --leaf-remote` sets them from its own
// flags.
type WorkerOptions struct {
	// Name is the worker cluster's: its leaf node user in the manager's
	// NATS, as the MultiClusterConfig lists it.
	Name string
	// ManagerDomain is the JetStream domain of the manager's NATS,
	// reached through this cluster's leaf node ("": this NATS is the
	// manager's).
	ManagerDomain string
	// Heartbeat is how often the manager is told the worker is there.
	Heartbeat time.Duration
	// Namespaces copies may be created in (empty: every one).
	Namespaces []string
	// Selection is the job kinds to run (all by default).
	kinds.Selection
}

// DefaultWorkerOptions are the flags' defaults.
func DefaultWorkerOptions() WorkerOptions {
	return WorkerOptions{ManagerDomain: "hub", Heartbeat: 5 * time.Second, Selection: kinds.Every()}
}

// BindFlags binds the options to flags, their current values the defaults.
func (o *WorkerOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Name, "name", o.Name, "this worker cluster's name: its leaf node user in the manager's NATS, as the MultiClusterConfig lists it")
	fs.StringVar(&o.ManagerDomain, "manager-domain", o.ManagerDomain, "the JetStream domain of the manager's NATS, reached through this cluster's leaf node (empty: this NATS is the manager's)")
	fs.DurationVar(&o.Heartbeat, "heartbeat", o.Heartbeat, "how often the manager is told this worker is there")
	fs.StringSliceVar(&o.Namespaces, "namespaces", o.Namespaces, "namespaces copies may be created in (default: every one); an offer for another is refused")
	o.Selection.BindFlags(fs, "job kinds to run")
}

// Validate refuses a worker without a name, or an unknown kind.
func (o WorkerOptions) Validate() error {
	if o.Name == "" {
		return component.Usage(errors.New("a worker needs its name (--worker-name / --name)"))
	}
	if o.Heartbeat <= 0 {
		return component.Usage(fmt.Errorf("--heartbeat %s: must be positive", o.Heartbeat))
	}
	return o.Selection.Validate()
}

// BuildWorker wires the agent of a worker cluster. It opens a connection
// of its own, whose inbox prefix is the one the manager lets this worker's
// leaf node receive, and closes it once the agent stops.
func BuildWorker(_ context.Context, d component.Deps, o WorkerOptions) (component.Runnable, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ads, _, dyn, err := kinds.Clients(d.Kube, o.Kinds)
	if err != nil {
		return nil, err
	}
	ads = kinds.Queued(ads)
	opts, err := d.NATS.Options("sluice-worker-" + o.Name)
	if err != nil {
		return nil, component.Usage(err)
	}
	nc, err := nats.Connect(d.NATS.URL, append(opts, nats.CustomInboxPrefix(InboxPrefix(o.Name)))...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", d.NATS.URL, err)
	}
	// No domain: this NATS is the manager's own (one server for both).
	hub, err := jetstream.New(nc)
	if o.ManagerDomain != "" {
		hub, err = jetstream.NewWithDomain(nc, o.ManagerDomain)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	w, err := NewWorker(o.Name, dyn, hub, ads, WithWorkerLogger(d.Log), WithHeartbeat(o.Heartbeat),
		WithManagerDomain(o.ManagerDomain), WithNamespaces(o.Namespaces...))
	if err != nil {
		nc.Close()
		return nil, component.Usage(err)
	}
	return component.Closing{Runnable: w, Close: nc.Close}, nil
}
