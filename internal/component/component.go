// Package component is the shape every service's composition root takes,
// so that `sluice <service>` and `sluice dev` build services the same way:
//
//	o := quota.DefaultOptions()      // typed settings with their defaults
//	o.BindFlags(cmd.Flags())         // flags → settings
//	err := o.Validate()              // refused before anything connects
//	r, err := quota.Build(ctx, deps, o) // wiring: clients, publisher, service
//	err = r.Run(ctx)                 // until ctx ends
//
// The process (cmd/sluice) owns what services share: the NATS connection
// and the streams' setup, the Kubernetes client configuration, logging,
// tracing, the HTTP port (probes, metrics, a service's routes) and the
// supervisor (internal/supervise) that runs and stops them in order.
package component

import (
	"context"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/internal/natsconn"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// Deps are what the process gives a service's Build.
type Deps struct {
	// JS is JetStream over the process's connection.
	JS jetstream.JetStream
	// NATS is how that connection was made, for a service that opens one
	// of its own (the worker agent's, with its own inbox prefix).
	NATS natsconn.Config
	// Kube is the cluster's client configuration; nil when the service
	// runs without Kubernetes access.
	Kube *rest.Config
	// Log is the service's logger (its "service" field set).
	Log zerolog.Logger
	// Tracing makes the service's tracer; nil when tracing is off.
	Tracing *tracing.Factory
}

// Runnable is what Build returns: it runs until its context ends and says
// whether it is ready (loaded, consuming). It may also implement Metrics
// and Router.
type Runnable interface {
	Run(ctx context.Context) error
	Ready() error
}

// Metrics is a Runnable with metrics of its own, served on /metrics.
type Metrics interface {
	Collectors() []prometheus.Collector
}

// Router is a Runnable with HTTP routes of its own on the process's HTTP
// port (the admission service's pending API, when open).
type Router interface {
	Routes(mux *http.ServeMux)
}

// UsageError marks an error in what the user gave (a flag, a file): the
// command exits with status 2 and does not retry.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usage wraps err as a UsageError (nil stays nil).
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return UsageError{Err: err}
}

// Closing runs a Runnable and then closes what its Build opened for it.
type Closing struct {
	Runnable
	Close func()
}

// Run runs the Runnable, then closes.
func (c Closing) Run(ctx context.Context) error {
	defer c.Close()
	return c.Runnable.Run(ctx)
}
