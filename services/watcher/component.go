package watcher

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/nodecap"
)

// Options are the watcher's settings as `sluice watcher` and `sluice dev`
// take them (the composition root: see internal/component).
type Options struct {
	// StatusInterval is how often queue status is written (0: never).
	StatusInterval time.Duration
	// Resync re-lists the configuration objects this often.
	Resync time.Duration
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{StatusInterval: 5 * time.Second, Resync: 10 * time.Minute}
}

// BindFlags binds the options to flags, their current values the defaults.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.StatusInterval, "status-interval", o.StatusInterval, "how often queue status is written (0: never)")
	fs.DurationVar(&o.Resync, "resync", o.Resync, "full re-list interval of Kubernetes watches")
}

// Validate refuses settings the service would refuse, naming the flag.
func (o Options) Validate() error {
	if o.Resync <= 0 {
		return component.Usage(fmt.Errorf("--resync %s: must be positive", o.Resync))
	}
	if o.StatusInterval < 0 {
		return component.Usage(fmt.Errorf("--status-interval %s: must not be negative", o.StatusInterval))
	}
	return nil
}

// Build wires the watcher: the cluster client, the configuration bucket,
// its publisher, and the storage metrics, which the watcher reports for
// the whole install (one service of every install does, so each stream
// and bucket is reported once).
func Build(ctx context.Context, d component.Deps, o Options) (component.Runnable, error) {
	dyn, err := dynamic.NewForConfig(d.Kube)
	if err != nil {
		return nil, err
	}
	kv, err := bus.OpenKV(ctx, d.JS, configstore.Bucket)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(d.Kube)
	if err != nil {
		return nil, err
	}
	nodesKV, err := bus.OpenKV(ctx, d.JS, nodecap.Bucket)
	if err != nil {
		return nil, err
	}
	opts := []Option{WithLogger(d.Log), WithNodes(client, nodesKV)}
	if o.StatusInterval > 0 {
		opts = append(opts, WithStatus(d.JS, o.StatusInterval, client.CoreV1().RESTClient()))
	}
	pub := bus.NewPublisher(d.JS, events.Source("watcher"), bus.WithPublisherLogger(d.Log))
	s, err := New(Config{Resync: o.Resync}, dyn, kv, pub, opts...)
	if err != nil {
		return nil, component.Usage(err)
	}
	return withStorage{Service: s, storage: bus.StorageCollector(d.JS)}, nil
}

// withStorage is the watcher reporting the streams' and buckets' sizes.
type withStorage struct {
	*Service
	storage prometheus.Collector
}

// Collectors are the storage metrics.
func (w withStorage) Collectors() []prometheus.Collector { return []prometheus.Collector{w.storage} }
