package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/embeddednats"
	"github.com/sluice-dev/sluice/internal/natsconn"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/services/multicluster"
)

// dispatcherRunner runs the multicluster admission check controller (in
// a manager cluster).
func dispatcherRunner(names func() []string) runner {
	return func(ctx context.Context, js jetstream.JetStream, kc *rest.Config, log zerolog.Logger, tf *tracing.Factory) (service, error) {
		ads, _, dyn, err := kindClients(kc, names())
		if err != nil {
			return nil, err
		}
		pub := bus.NewPublisher(js, events.Source(v1beta1.MultiClusterController), bus.WithPublisherLogger(log), bus.WithTracer(tf))
		d, err := multicluster.NewDispatcher(dyn, js, ads, multicluster.WithDispatcherLogger(log),
			multicluster.WithDispatcherPublisher(pub))
		if err != nil {
			return nil, usageError{err}
		}
		return d, nil
	}
}

// workerFlags are a worker agent's settings.
type workerFlags struct {
	name          string
	managerDomain string
	heartbeat     time.Duration
	namespaces    []string
}

func (f *workerFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "name", f.name, "this worker cluster's name: its leaf node user in the manager's NATS, as the MultiClusterConfig lists it")
	cmd.Flags().StringVar(&f.managerDomain, "manager-domain", "hub", "the JetStream domain of the manager's NATS, reached through this cluster's leaf node (empty: this NATS is the manager's)")
	cmd.Flags().DurationVar(&f.heartbeat, "heartbeat", 5*time.Second, "how often the manager is told this worker is there")
	cmd.Flags().StringSliceVar(&f.namespaces, "namespaces", nil, "namespaces copies may be created in (default: every one); an offer for another is refused")
}

// workerRunner runs the agent of a worker cluster. It opens a connection
// of its own, whose inbox prefix is the one the manager lets this
// worker's leaf node receive.
func workerRunner(f *workerFlags, cfg func() (natsconn.Config, error), names func() []string) runner {
	return func(ctx context.Context, _ jetstream.JetStream, kc *rest.Config, log zerolog.Logger, _ *tracing.Factory) (service, error) {
		if f.name == "" {
			return nil, usageError{fmt.Errorf("a worker needs its name (--worker-name / --name)")}
		}
		ads, _, dyn, err := kindClients(kc, names())
		if err != nil {
			return nil, err
		}
		c, err := cfg()
		if err != nil {
			return nil, err
		}
		opts, err := c.Options("sluice-worker-" + f.name)
		if err != nil {
			return nil, usageError{err}
		}
		nc, err := nats.Connect(c.URL, append(opts, nats.CustomInboxPrefix(multicluster.InboxPrefix(f.name)))...)
		if err != nil {
			return nil, fmt.Errorf("connect to NATS at %s: %w", c.URL, err)
		}
		// No domain: this NATS is the manager's own (one server for both).
		hub, err := jetstream.New(nc)
		if f.managerDomain != "" {
			hub, err = jetstream.NewWithDomain(nc, f.managerDomain)
		}
		if err != nil {
			nc.Close()
			return nil, err
		}
		w, err := multicluster.NewWorker(f.name, dyn, hub, ads, multicluster.WithWorkerLogger(log), multicluster.WithHeartbeat(f.heartbeat),
			multicluster.WithManagerDomain(f.managerDomain), multicluster.WithNamespaces(f.namespaces...))
		if err != nil {
			nc.Close()
			return nil, usageError{err}
		}
		return closing{service: w, close: nc.Close}, nil
	}
}

// closing is a service that closes what it opened once it stops.
type closing struct {
	service
	close func()
}

func (c closing) Run(ctx context.Context) error {
	defer c.close()
	return c.service.Run(ctx)
}

// newMultiClusterCmds are `sluice multicluster` (the manager's
// dispatcher) and `sluice worker` (a worker cluster's agent).
func newMultiClusterCmds() []*cobra.Command {
	var names []string
	disp := newServiceCmd("multicluster", "Run the multicluster admission check controller ("+v1beta1.MultiClusterController+") of a manager cluster", true,
		nil, dispatcherRunner(func() []string { return names }))
	disp.Flags().StringSliceVar(&names, "integrations", kinds.Names(), "job kinds to dispatch ("+strings.Join(kinds.Names(), ", ")+")")

	f := &workerFlags{}
	var wnames []string
	worker := newServiceCmdWith("worker", "Run a worker cluster's multicluster agent: create the jobs a manager dispatches here, report their status back", true,
		f.bind,
		func(c *common) runner { return workerRunner(f, c.natsConfig, func() []string { return wnames }) })
	worker.Long = worker.Short + ". It connects to this cluster's NATS server, which joins the manager's as a leaf node (see docs/multicluster.md)."
	worker.Flags().StringSliceVar(&wnames, "integrations", kinds.Names(), "job kinds to run ("+strings.Join(kinds.Names(), ", ")+")")
	return []*cobra.Command{disp, worker}
}

// leafFlags are `sluice dev`'s multicluster settings: a manager accepts
// workers' leaf nodes, a worker joins its manager as one.
type leafFlags struct {
	domain  string
	port    int
	workers []string // NAME=PASSWORD
	remote  string
	worker  workerFlags
}

func (l *leafFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&l.domain, "nats-domain", "", "JetStream domain of the embedded server (default: hub with --leaf-port, the worker's name with --leaf-remote)")
	cmd.Flags().IntVar(&l.port, "leaf-port", 0, "as a manager: port accepting worker clusters' leaf nodes (0: none)")
	cmd.Flags().StringSliceVar(&l.workers, "leaf-worker", nil, "as a manager: a worker cluster allowed to join, NAME=PASSWORD (repeat per worker)")
	cmd.Flags().StringVar(&l.remote, "leaf-remote", "", "as a worker: the manager's leaf node URL, nats-leaf://NAME:PASSWORD@HOST:PORT (runs the worker agent)")
	l.worker.managerDomain = "hub"
	cmd.Flags().StringVar(&l.worker.managerDomain, "manager-domain", "hub", "as a worker: the JetStream domain of the manager's NATS")
	cmd.Flags().DurationVar(&l.worker.heartbeat, "worker-heartbeat", 5*time.Second, "as a worker: how often the manager is told this worker is there")
}

// apply sets the embedded server's leaf node options.
func (l *leafFlags) apply(o *embeddednats.Options) error {
	o.JetStreamDomain = l.domain
	if l.port != 0 {
		if o.JetStreamDomain == "" {
			o.JetStreamDomain = "hub"
		}
		o.LeafPort = l.port
		for _, w := range l.workers {
			name, pw, ok := strings.Cut(w, "=")
			if !ok || name == "" || pw == "" {
				return usageError{fmt.Errorf("--leaf-worker %q: must be NAME=PASSWORD", w)}
			}
			pub, sub := multicluster.WorkerPermissions(name, o.JetStreamDomain)
			o.LeafUsers = append(o.LeafUsers, embeddednats.LeafUser{Name: name, Password: pw, Publish: pub, Subscribe: sub})
		}
	} else if len(l.workers) > 0 {
		return usageError{fmt.Errorf("--leaf-worker needs --leaf-port")}
	}
	if l.remote != "" {
		name, err := leafUser(l.remote)
		if err != nil {
			return usageError{err}
		}
		l.worker.name = name
		if o.JetStreamDomain == "" {
			o.JetStreamDomain = name
		}
		o.LeafRemotes = []string{l.remote}
	}
	return nil
}

// leafUser is the user of a nats-leaf:// URL: the worker's name.
func leafUser(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || u.User.Username() == "" || u.Host == "" {
		return "", fmt.Errorf("--leaf-remote %q: must be nats-leaf://NAME:PASSWORD@HOST:PORT", raw)
	}
	return u.User.Username(), nil
}
