package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/internal/configfile"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/kinds"
)

// Options are an integration process's settings as `sluice integration
// KIND...` and `sluice dev` take them (the composition root: see
// internal/component).
type Options struct {
	// Kinds are the kinds to run, each once its CRD is served (the
	// command's arguments, or dev's --integrations).
	Kinds []string
	// ConfigFile is --config: a Configuration document (configfile),
	// whose waitForPodsReady and resources the integrations apply.
	ConfigFile string
	// Config holds the rest; its Requests and ReportPodsReady come from
	// ConfigFile.
	Config Config
	// Poll is how often the API server is asked whether it serves a
	// kind not served yet.
	Poll time.Duration
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	// A reconcile mostly waits on NATS and the API server; with 32, a
	// burst of admissions queued for seconds before starting
	// (docs/performance.md).
	return Options{Config: Config{Workers: 128, Resync: 10 * time.Minute, WebhookAddress: "127.0.0.1:9443", WebhookHost: "127.0.0.1"},
		Poll: 10 * time.Second}
}

// BindFlags binds the options to flags, their current values the
// defaults. The kinds are not a flag here: the command's arguments, or
// --integrations in `sluice dev`.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	c := &o.Config
	fs.IntVar(&c.Workers, "workers", c.Workers, "objects of each kind reconciled in parallel")
	fs.StringVar(&c.WebhookAddress, "webhook-address", c.WebhookAddress, "address of the suspend-on-create webhook (empty: none)")
	fs.StringVar(&c.WebhookHost, "webhook-host", c.WebhookHost, "host the API server reaches the webhook by")
	fs.StringVar(&c.WebhookCertDir, "webhook-cert-dir", c.WebhookCertDir, "directory with the webhook's serving certificate (tls.crt, tls.key; ca.crt optional) (empty: self-signed at start)")
	fs.BoolVar(&c.ExternalWebhookConfiguration, "webhook-configuration-external", c.ExternalWebhookConfiguration,
		"the MutatingWebhookConfigurations are installed by someone else (the Helm chart): do not write them (needs --webhook-cert-dir)")
	fs.StringVar(&c.Replica, "replica", c.Replica, "name of this replica among the kind's replicas, e.g. the pod name (default: random)")
	fs.BoolVar(&c.KueueLabels, "kueue-labels", c.KueueLabels,
		"also queue objects created with Kueue's kueue.x-k8s.io/queue-name label (and priority-class), giving them Sluice's labels")
	fs.DurationVar(&c.Resync, "resync", c.Resync, "full re-list interval of Kubernetes watches")
	configfile.BindFlag(fs, &o.ConfigFile)
}

// Validate refuses bad settings before anything connects.
func (o Options) Validate() error {
	if len(o.Kinds) == 0 {
		return component.Usage(fmt.Errorf("name a kind to integrate: %s", strings.Join(kinds.Names(), ", ")))
	}
	if _, err := kinds.Select(o.Kinds); err != nil {
		return component.Usage(err)
	}
	if _, err := configfile.Load(o.ConfigFile); err != nil {
		return component.Usage(fmt.Errorf("--config: %w", err))
	}
	return component.Usage(o.Config.Validate())
}

// Build wires the integrations of the kinds: their clients, one publisher,
// and a service per batch of kinds the API server serves together, each
// started once it does (RunWhenServed).
func Build(_ context.Context, d component.Deps, o Options) (component.Runnable, error) {
	ads, kube, dyn, err := kinds.Clients(d.Kube, o.Kinds)
	if err != nil {
		return nil, err
	}
	set, err := configfile.Load(o.ConfigFile)
	if err != nil {
		return nil, component.Usage(fmt.Errorf("--config: %w", err))
	}
	cfg := o.Config
	cfg.ReportPodsReady = set.PodsReady != nil
	if set.Resources != nil {
		cfg.Requests = set.Resources.Apply
		cfg.Devices = set.Resources
	}
	cfg.ManageJobsWithoutQueueName, cfg.ManagedNamespaces = set.ManageJobsWithoutQueueName, set.ManagedNamespaces
	for _, ad := range kinds.All {
		cfg.QueuedKinds = append(cfg.QueuedKinds, ad.Kind().GVK.GroupKind())
	}
	if err := cfg.Validate(); err != nil {
		return nil, component.Usage(err)
	}
	pub := bus.NewPublisher(d.JS, events.Source("integration"), bus.WithPublisherLogger(d.Log), bus.WithTracer(d.Tracing))
	g := &served{metrics: NewQueueMetrics()}
	g.run = func(ctx context.Context) error {
		mk := func(c Config, ads []jobframework.Adapter) (*Service, error) {
			svc, err := New(c, ads, kube, dyn, d.JS, pub, WithLogger(d.Log), WithTracing(d.Tracing), WithQueueMetrics(g.metrics))
			if err == nil {
				g.add(svc)
			}
			return svc, err
		}
		return RunWhenServed(ctx, cfg, ads, kube.Discovery(), mk, d.Log, o.Poll)
	}
	return g, nil
}

// served are the services RunWhenServed starts, one per batch of kinds
// served together: ready when each started is.
type served struct {
	run     func(context.Context) error
	metrics *QueueMetrics
	mu      sync.Mutex
	svcs    []*Service
}

// Run runs the kinds until ctx ends.
func (g *served) Run(ctx context.Context) error { return g.run(ctx) }

// Collectors are the metrics every kind's service shares.
func (g *served) Collectors() []prometheus.Collector { return g.metrics.Collectors() }

func (g *served) add(s *Service) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.svcs = append(g.svcs, s)
}

// Ready: no kind served yet is not ready (the webhook does not serve).
func (g *served) Ready() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.svcs) == 0 {
		return errors.New("no kind served by the API server yet")
	}
	for _, s := range g.svcs {
		if err := s.Ready(); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(s.Kinds(), ","), err)
		}
	}
	return nil
}
