package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/internal/configfile"
)

// Options are the admission service's settings as `sluice admission` and
// `sluice dev` take them (the composition root: see internal/component).
type Options struct {
	// Interval is the admission cycle's interval while something changed.
	Interval time.Duration
	// FairSharing orders admission and chooses victims by dominant
	// resource share (also set by ConfigFile).
	FairSharing bool
	// PendingInterval is the least time between two pending events about
	// one workload.
	PendingInterval time.Duration
	// ConfigFile is --config: a Configuration document (configfile).
	ConfigFile string
	// Visibility says where the pending API is served, and to whom.
	Visibility VisibilityOptions
	// Replica names this replica among the admission replicas.
	Replica string
}

// VisibilityOptions say where the pending API is served, and to whom.
type VisibilityOptions struct {
	// Addr serves it over TLS to whom the cluster authenticates and
	// authorizes (the APIService's backend); "" for nowhere.
	Addr string
	// CertDir holds its serving certificate (tls.crt, tls.key).
	CertDir string
	// Open also serves it, and the web view, on the process's plain HTTP
	// port to anyone who reaches it (sluice dev, on loopback).
	Open bool
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{Interval: 20 * time.Millisecond, PendingInterval: DefaultPendingInterval}
}

// BindFlags binds the options to flags, their current values the defaults.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Visibility.Addr, "visibility-address", o.Visibility.Addr, "address serving the pending API over TLS to users the cluster authenticates and authorizes, "+
		"the backend of the APIService v1beta1.visibility.sluice.dev, e.g. :8443 (empty: none; needs Kubernetes access and --visibility-cert-dir)")
	fs.StringVar(&o.Visibility.CertDir, "visibility-cert-dir", o.Visibility.CertDir, "directory with the pending API's serving certificate (tls.crt, tls.key)")
	fs.BoolVar(&o.Visibility.Open, "visibility-insecure", o.Visibility.Open, "also serve the pending API and the web view on --http-address to anyone who reaches it")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "admission cycle interval while something changed")
	fs.BoolVar(&o.FairSharing, "fair-sharing", o.FairSharing, "order admission and choose victims by dominant resource share")
	fs.DurationVar(&o.PendingInterval, "pending-interval", o.PendingInterval, "least time between two pending events about one workload")
	fs.StringVar(&o.Replica, "replica", o.Replica, "name of this replica among the admission replicas, which share the cohort trees, e.g. the pod name (default: random)")
	configfile.BindFlag(fs, &o.ConfigFile)
}

// NeedsKube: Kubernetes is used only to authenticate and authorize the
// pending API's users.
func (o Options) NeedsKube() bool { return o.Visibility.Addr != "" }

// Validate refuses bad settings, naming the flag, before anything
// connects.
func (o Options) Validate() error {
	if o.Visibility.Addr != "" && o.Visibility.CertDir == "" {
		return component.Usage(errors.New("--visibility-address needs --visibility-cert-dir (tls.crt, tls.key)"))
	}
	if _, err := configfile.Load(o.ConfigFile); err != nil {
		return component.Usage(fmt.Errorf("--config: %w", err))
	}
	return component.Usage(o.config(configfile.Settings{}).Validate())
}

// config is the service's Config under the settings of --config.
func (o Options) config(set configfile.Settings) Config {
	return Config{Interval: o.Interval, FairSharing: o.FairSharing || set.FairSharing, FairStrategies: set.FairStrategies,
		PendingInterval: o.PendingInterval, WaitForPodsReady: set.PodsReady, Replica: o.Replica, AdmissionFairSharing: set.AdmissionFairSharing}
}

// Build wires the service: its tracer, its publisher, the service and,
// with Visibility, the pending API in front of it.
func Build(ctx context.Context, d component.Deps, o Options) (component.Runnable, error) {
	set, err := configfile.Load(o.ConfigFile)
	if err != nil {
		return nil, component.Usage(fmt.Errorf("--config: %w", err))
	}
	tr, err := d.Tracing.For(ctx, "admission")
	if err != nil {
		return nil, err
	}
	pub := bus.NewPublisher(d.JS, events.Source("admission"), bus.WithPublisherLogger(d.Log), bus.WithTracer(tr))
	s, err := New(o.config(set), d.JS, pub, WithLogger(d.Log), WithTracer(tr))
	if err != nil {
		return nil, component.Usage(err)
	}
	var r component.Runnable = s
	if o.Visibility.Open {
		r = openAdmission{s}
	}
	if o.Visibility.Addr != "" {
		return newGuardedVisibility(s, r, o.Visibility, d.Kube, d.Log)
	}
	return r, nil
}
