package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/natsconn"
	"github.com/sluice-dev/sluice/internal/supervise"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/services/multicluster"
)

// common holds the flags every service shares.
type common struct {
	nats       natsconn.Config
	kubeconfig string
	logLevel   string
	replicas   int
	// setup: create or update the streams and buckets at start; off when
	// `sluice setup` did it with a user allowed to (least privilege).
	setup bool
	// httpAddr serves /healthz and /readyz ("" for none).
	httpAddr string
	// metricsNames is --metrics-names: sluice, or kueue for Kueue's names.
	metricsNames string
	// worker: this NATS is a worker cluster's, whose multicluster
	// messages go to the manager's stream: it must have none of its own.
	worker bool
	// kubeIf, when set, says whether a service that may use Kubernetes
	// does with the flags given (nil: it does).
	kubeIf func() bool
	// maxBytes, dlqMaxBytes and kvMaxBytes bound the streams and
	// buckets (bus.Config), as quantities ("8Gi"); "" keeps the current
	// bound, "-1" removes it.
	maxBytes, dlqMaxBytes, kvMaxBytes string
	// checkControllers and workers (`sluice setup` only) name the check
	// controllers of your own and the worker clusters whose durable
	// consumers setup makes.
	checkControllers, workers []string
	// startupWait bounds how long a start waits for NATS to answer and
	// for what `sluice setup` makes (0: not at all).
	startupWait time.Duration
	// gcPercent is --gc-percent, the collector's GOGC unless the
	// environment sets one.
	gcPercent int
}

// bind binds the flags of a service; c's httpAddr is the default of
// --http-address.
func (c *common) bind(cmd *cobra.Command, kube bool) {
	c.bindSetup(cmd)
	cmd.Flags().BoolVar(&c.setup, "setup", true, "create or update Sluice's streams and buckets at start (false: they must exist, see sluice setup)")
	cmd.Flags().StringVar(&c.httpAddr, "http-address", c.httpAddr, "address serving /healthz and /readyz, e.g. :8080 (empty: none)")
	cmd.Flags().IntVar(&c.gcPercent, "gc-percent", defaultGCPercent,
		"the Go collector's GOGC: how far, in percent of what is live, the heap grows before a collection (lower: less memory, more CPU); GOGC in the environment wins")
	cmd.Flags().StringVar(&c.metricsNames, "metrics-names", "sluice", "names of the metrics Kueue also has: sluice (sluice_…) or kueue (Kueue's own kueue_… names, for its dashboards)")
	if kube {
		cmd.Flags().StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	}
}

// bindSetup binds what `sluice setup` needs too: the connection, the
// streams' replicas and the log level.
func (c *common) bindSetup(cmd *cobra.Command) {
	c.bindNATS(cmd)
	cmd.Flags().IntVar(&c.replicas, "replicas", 1, "replicas of Sluice's streams and buckets (3 on a 3-node NATS cluster)")
	cmd.Flags().StringVar(&c.maxBytes, "max-bytes", "", "bound on the SLUICE stream's size, e.g. 8Gi (oldest events dropped past it; empty: keep the current bound, -1: none)")
	cmd.Flags().StringVar(&c.dlqMaxBytes, "dlq-max-bytes", "", "bound on the SLUICE_DLQ stream's size, e.g. 1Gi (empty: keep the current bound, -1: none)")
	cmd.Flags().StringVar(&c.kvMaxBytes, "kv-max-bytes", "", "bound on each bucket's size, e.g. 1Gi (a full bucket refuses writes; empty: keep the current bound, -1: none)")
	cmd.Flags().StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	cmd.Flags().DurationVar(&c.startupWait, "startup-wait", 0,
		"at start, retry for this long while NATS does not answer yet and (for a service) what sluice setup makes is missing, e.g. 4m (0: fail at once)")
}

// bindNATS binds the connection flags; the password comes from the
// environment only.
func (c *common) bindNATS(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.nats.URL, "nats", nats.DefaultURL, "NATS server URL(s), comma-separated (tls:// for TLS)")
	f.StringVar(&c.nats.CredsFile, "nats-creds", "", "NATS credentials file (user JWT and seed)")
	f.StringVar(&c.nats.NKeyFile, "nats-nkey", "", "file with the NKey seed of this service's NATS user")
	f.StringVar(&c.nats.User, "nats-user", "", "NATS user name (password in $"+natsconn.PasswordEnv+")")
	f.StringVar(&c.nats.CAFile, "nats-ca", "", "CA certificate (PEM) that verifies the NATS server")
	f.StringVar(&c.nats.CertFile, "nats-cert", "", "client certificate (PEM) for NATS servers that verify clients")
	f.StringVar(&c.nats.KeyFile, "nats-key", "", "key of the client certificate (PEM)")
}

// natsConfig is the connection configuration, the password read from the
// environment.
func (c *common) natsConfig() (natsconn.Config, error) {
	cfg := c.nats
	if cfg.Password == "" {
		cfg.Password = os.Getenv(natsconn.PasswordEnv)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{Err: err}
	}
	return cfg, nil
}

func (c *common) logger(service string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(c.logLevel)
	if err != nil || c.logLevel == "" {
		return zerolog.Logger{}, usageError{Err: fmt.Errorf("--log-level %q: must be debug, info, warn or error", c.logLevel)}
	}
	return zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Str("service", service).Logger(), nil
}

// serviceLogger is the logger of one service inside `sluice dev`.
func serviceLogger(dev zerolog.Logger, service string) zerolog.Logger {
	return zerolog.New(os.Stderr).Level(dev.GetLevel()).With().Timestamp().Str("service", service).Logger()
}

// kube loads the cluster configuration with client-go's rules.
func (c *common) kube() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.kubeconfig != "" {
		rules.ExplicitPath = c.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, usageError{Err: fmt.Errorf("kubeconfig: %w", err)}
	}
	// One write per admission is the budget; let the client spend it.
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg, nil
}

// bounds reads the size bounds' flags into bc.
func (c *common) bounds(bc *bus.Config) error {
	for _, f := range []struct {
		flag, value string
		into        *int64
	}{{"--max-bytes", c.maxBytes, &bc.MaxBytes}, {"--dlq-max-bytes", c.dlqMaxBytes, &bc.DLQMaxBytes}, {"--kv-max-bytes", c.kvMaxBytes, &bc.KVMaxBytes}} {
		if f.value == "" {
			continue
		}
		q, err := resource.ParseQuantity(f.value)
		if err != nil {
			return usageError{Err: fmt.Errorf("%s %q: %v (a size such as 8Gi, or -1 for none)", f.flag, f.value, err)}
		}
		n, ok := q.AsInt64()
		if !ok || n < -1 || n == 0 {
			return usageError{Err: fmt.Errorf("%s %q: must be a positive size such as 8Gi, or -1 for none", f.flag, f.value)}
		}
		*f.into = n
	}
	return nil
}

// connect opens NATS and JetStream and, unless --setup=false, makes sure
// streams and buckets exist.
func (c *common) connect(ctx context.Context, name string) (*nats.Conn, jetstream.JetStream, error) {
	cfg, err := c.natsConfig()
	if err != nil {
		return nil, nil, err
	}
	if c.replicas < 1 || c.replicas > 5 {
		return nil, nil, usageError{Err: fmt.Errorf("--replicas %d: must be 1 to 5", c.replicas)}
	}
	bc := bus.DefaultConfig()
	bc.Replicas = c.replicas
	if err := c.bounds(&bc); err != nil {
		return nil, nil, err
	}
	nc, js, err := connectJS(cfg, "sluice-"+name)
	if err != nil {
		return nil, nil, err
	}
	if c.setup {
		if err := bus.Setup(ctx, js, bc); err != nil {
			nc.Close()
			return nil, nil, err
		}
		if !c.worker {
			if err := multicluster.Setup(ctx, js, c.replicas); err != nil {
				nc.Close()
				return nil, nil, err
			}
		}
		if err := c.setupConsumers(ctx, js); err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	return nc, js, nil
}

// serveHTTP serves, on --http-address if set, the probes (live while the
// NATS connection is not closed for good, ready while it is connected and
// each service says it is), /metrics (the process's, the bus's and each
// service's own), and whatever routes a service adds (admission: the
// visibility API).
func (c *common) serveHTTP(ctx context.Context, nc *nats.Conn, svcs map[string]component.Runnable, log zerolog.Logger) error {
	if c.httpAddr == "" {
		return nil
	}
	p := health.New()
	p.Live("nats", func() error {
		if nc.IsClosed() {
			return errors.New("connection closed")
		}
		return nil
	})
	p.Ready("nats", func() error {
		if !nc.IsConnected() {
			return fmt.Errorf("not connected (%s)", nc.Status())
		}
		return nil
	})
	mux := http.NewServeMux()
	probes := p.Handler()
	mux.Handle("GET /healthz", probes)
	mux.Handle("GET /readyz", probes)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(bus.Collectors()...)
	for name, svc := range svcs {
		p.Ready(name, svc.Ready)
		if m, ok := svc.(component.Metrics); ok {
			reg.MustRegister(m.Collectors()...)
		}
		if r, ok := svc.(component.Router); ok {
			r.Routes(mux)
		}
	}
	gatherer, err := metricNames(reg, c.metricsNames)
	if err != nil {
		return err
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	addr, err := health.Serve(ctx, c.httpAddr, mux)
	if err != nil {
		return usageError{Err: fmt.Errorf("--http-address: %w", err)}
	}
	log.Info().Str("address", addr.String()).Msg("serving /healthz, /readyz, /metrics")
	return nil
}

// runServices builds the services in order, serves the HTTP port, and
// runs them under one supervisor until ctx ends or one fails: they stop
// in reverse order, each finishing its in-flight work, and then the
// connection is drained.
func (c *common) runServices(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, kc *rest.Config, tf *tracing.Factory,
	bs []builder, logFor func(name string) zerolog.Logger) error {
	ncfg, err := c.natsConfig()
	if err != nil {
		return err
	}
	log := logFor("")
	started := map[string]component.Runnable{}
	var units []supervise.Unit
	for _, b := range bs {
		r, err := b.build(ctx, component.Deps{JS: js, NATS: ncfg, Kube: kc, Log: logFor(b.name), Tracing: tf})
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		started[b.name] = r
		units = append(units, supervise.Unit{Name: b.name, Run: r.Run})
	}
	if err := c.serveHTTP(ctx, nc, started, log); err != nil {
		return err
	}
	log.Info().Int("services", len(bs)).Msg("started")
	err = supervise.Run(ctx, units, supervise.WithLogger(log))
	if err != nil {
		log.Error().Err(err).Msg("a service failed; the others stopped")
	}
	_ = nc.Drain()
	return err
}

// tracing reads the OTEL_* environment: spans are recorded and exported
// when an OTLP endpoint is set.
func (c *common) tracing(log zerolog.Logger) (*tracing.Factory, error) {
	cfg, err := tracing.ConfigFromEnv(os.Getenv)
	if err != nil {
		return nil, usageError{Err: err}
	}
	if cfg.Enabled() {
		log.Info().Str("endpoint", cfg.Endpoint).Str("protocol", cfg.Protocol).Msg("exporting traces over OTLP")
	}
	return tracing.NewFactory(cfg), nil
}

// flushTraces exports the spans still buffered, for at most a few seconds.
func flushTraces(tf *tracing.Factory, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tf.Shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("traces not all exported")
	}
}
