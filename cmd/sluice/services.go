package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/cmd/sluice/natsperm"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/embeddednats"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/natsconn"
	"github.com/sluice-dev/sluice/internal/queueconfig"
	"github.com/sluice-dev/sluice/internal/simulate"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/services/admission"
	"github.com/sluice-dev/sluice/services/integration"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/services/multicluster"
	"github.com/sluice-dev/sluice/services/preemption"
	"github.com/sluice-dev/sluice/services/provisioning"
	"github.com/sluice-dev/sluice/services/quota"
	"github.com/sluice-dev/sluice/services/watcher"
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
}

// bind binds the flags of a service; c's httpAddr is the default of
// --http-address.
func (c *common) bind(cmd *cobra.Command, kube bool) {
	c.bindSetup(cmd)
	cmd.Flags().BoolVar(&c.setup, "setup", true, "create or update Sluice's streams and buckets at start (false: they must exist, see sluice setup)")
	cmd.Flags().StringVar(&c.httpAddr, "http-address", c.httpAddr, "address serving /healthz and /readyz, e.g. :8080 (empty: none)")
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
		return cfg, usageError{err}
	}
	return cfg, nil
}

func (c *common) logger(service string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(c.logLevel)
	if err != nil || c.logLevel == "" {
		return zerolog.Logger{}, usageError{fmt.Errorf("--log-level %q: must be debug, info, warn or error", c.logLevel)}
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
		return nil, usageError{fmt.Errorf("kubeconfig: %w", err)}
	}
	// One write per admission is the budget; let the client spend it.
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg, nil
}

// kindClients selects the named kinds' adapters and makes the clients
// that read and write their objects.
func kindClients(kc *rest.Config, names []string) ([]jobframework.Adapter, kubernetes.Interface, dynamic.Interface, error) {
	ads, err := kinds.Select(names)
	if err != nil {
		return nil, nil, nil, usageError{err}
	}
	kube, err := kubernetes.NewForConfig(protobuf(kc))
	if err != nil {
		return nil, nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(kc)
	if err != nil {
		return nil, nil, nil, err
	}
	return ads, kube, dyn, nil
}

// protobuf is kc speaking protobuf, for clients of built-in kinds only
// (custom resources have no protobuf encoding): the API server encodes
// each watch event once per encoding its watchers ask for, and the
// cluster's own controllers ask for protobuf, so JSON would be a second
// encoding of every Job and Pod change, and a slower one.
func protobuf(kc *rest.Config) *rest.Config {
	out := rest.CopyConfig(kc)
	out.ContentType = runtime.ContentTypeProtobuf
	out.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return out
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
			return usageError{fmt.Errorf("%s %q: %v (a size such as 8Gi, or -1 for none)", f.flag, f.value, err)}
		}
		n, ok := q.AsInt64()
		if !ok || n < -1 || n == 0 {
			return usageError{fmt.Errorf("%s %q: must be a positive size such as 8Gi, or -1 for none", f.flag, f.value)}
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
		return nil, nil, usageError{fmt.Errorf("--replicas %d: must be 1 to 5", c.replicas)}
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
func (c *common) serveHTTP(ctx context.Context, nc *nats.Conn, svcs map[string]service, log zerolog.Logger) error {
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
		if m, ok := svc.(interface{ Collectors() []prometheus.Collector }); ok {
			reg.MustRegister(m.Collectors()...)
		}
		if r, ok := svc.(interface{ Routes(*http.ServeMux) }); ok {
			r.Routes(mux)
		}
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	addr, err := health.Serve(ctx, c.httpAddr, mux)
	if err != nil {
		return usageError{fmt.Errorf("--http-address: %w", err)}
	}
	log.Info().Str("address", addr.String()).Msg("serving /healthz, /readyz, /metrics")
	return nil
}

// serviceFlags are the settings of every service, for `sluice dev` too.
type serviceFlags struct {
	interval       time.Duration
	fairSharing    bool
	statusInterval time.Duration
	resync         time.Duration
	workers        int
	webhookAddr    string
	webhookHost    string
	webhookCertDir string
	// webhookExternal: the chart installs the webhook configurations.
	webhookExternal bool
	// kueueLabels: integration.Config.KueueLabels.
	kueueLabels bool
	replica     string
	reconcile   time.Duration
	// pendingInterval: admission.Config.PendingInterval.
	pendingInterval time.Duration
	// configFile is --config: a Configuration document.
	configFile string
	// visibility: where the pending API is served, and to whom.
	visibility visibilityFlags
}

// bindConfig is shared by admission and the integrations, which
// `sluice dev` runs together under one flag.
func (f *serviceFlags) bindConfig(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.configFile, "config", "",
		"file with a Configuration document, as sluice simulate reads it: fairSharing, waitForPodsReady and resources, under Kueue's names")
	// A bad file is refused before anything connects.
	cmd.PreRunE = func(*cobra.Command, []string) error {
		_, err := f.configuration()
		return err
	}
}

// settings are what --config (and --fair-sharing) decide.
type settings struct {
	fairSharing    bool
	fairStrategies engine.FairStrategies
	podsReady      *engine.WaitForPodsReady
	// resources is Kueue's resources block, which the integrations apply
	// to the requests they queue jobs with.
	resources *queueconfig.Resources
}

// configuration reads --config; without one, fair sharing is --fair-sharing
// and waitForPodsReady is off.
func (f *serviceFlags) configuration() (settings, error) {
	if f.configFile == "" {
		return settings{fairSharing: f.fairSharing}, nil
	}
	file, err := os.Open(f.configFile)
	if err != nil {
		return settings{}, usageError{fmt.Errorf("--config: %w", err)}
	}
	defer file.Close()
	sc, err := simulate.Load([]simulate.Source{{Name: f.configFile, R: file}})
	if err != nil {
		return settings{}, usageError{fmt.Errorf("--config: %w", err)}
	}
	o := sc.Config
	if len(sc.Workloads)+len(o.Flavors)+len(o.ClusterQueues)+len(o.Cohorts)+len(o.LocalQueues)+len(o.PriorityClasses)+len(o.Namespaces) > 0 {
		return settings{}, usageError{fmt.Errorf("--config %s: only a Configuration document belongs here (queues come from the cluster)", f.configFile)}
	}
	return settings{fairSharing: f.fairSharing || o.FairSharing, fairStrategies: o.FairStrategies, podsReady: o.WaitForPodsReady,
		resources: o.Resources}, nil
}

// bindAdmission binds admission's flags; open is whether the pending API
// and the web view are served on the plain HTTP port by default.
func (f *serviceFlags) bindAdmission(cmd *cobra.Command, open bool) {
	f.visibility.bind(cmd.Flags(), open)
	cmd.Flags().DurationVar(&f.interval, "interval", 20*time.Millisecond, "admission cycle interval while something changed")
	cmd.Flags().BoolVar(&f.fairSharing, "fair-sharing", false, "order admission and choose victims by dominant resource share")
	cmd.Flags().DurationVar(&f.pendingInterval, "pending-interval", admission.DefaultPendingInterval, "least time between two pending events about one workload")
}
func (f *serviceFlags) bindWatcher(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.statusInterval, "status-interval", 5*time.Second, "how often queue status is written (0: never)")
}

// bindResync is shared by the watcher and the integrations, which
// `sluice dev` runs together under one flag.
func (f *serviceFlags) bindResync(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.resync, "resync", 10*time.Minute, "full re-list interval of Kubernetes watches")
}
func (f *serviceFlags) bindIntegration(cmd *cobra.Command) {
	// A reconcile mostly waits on NATS and the API server; with 32, a
	// burst of admissions queued for seconds before starting (docs/performance.md).
	cmd.Flags().IntVar(&f.workers, "workers", 128, "objects of each kind reconciled in parallel")
	cmd.Flags().StringVar(&f.webhookAddr, "webhook-address", "127.0.0.1:9443", "address of the suspend-on-create webhook (empty: none)")
	cmd.Flags().StringVar(&f.webhookHost, "webhook-host", "127.0.0.1", "host the API server reaches the webhook by")
	cmd.Flags().StringVar(&f.webhookCertDir, "webhook-cert-dir", "", "directory with the webhook's serving certificate (tls.crt, tls.key; ca.crt optional) (empty: self-signed at start)")
	cmd.Flags().BoolVar(&f.webhookExternal, "webhook-configuration-external", false,
		"the MutatingWebhookConfigurations are installed by someone else (the Helm chart): do not write them (needs --webhook-cert-dir)")
	cmd.Flags().StringVar(&f.replica, "replica", "", "name of this replica among the kind's replicas, e.g. the pod name (default: random)")
	cmd.Flags().BoolVar(&f.kueueLabels, "kueue-labels", false,
		"also queue objects created with Kueue's kueue.x-k8s.io/queue-name label (and priority-class), giving them Sluice's labels")
}
func (f *serviceFlags) bindQuota(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.reconcile, "reconcile", 30*time.Second, "ledger reconciliation interval")
}

// service is what a runner builds: it runs until its context ends, and
// says whether it is ready (synced, consuming).
type service interface {
	Run(ctx context.Context) error
	Ready() error
}

// runner builds one service; tf makes its tracer (nil: tracing off).
type runner func(ctx context.Context, js jetstream.JetStream, kube *rest.Config, log zerolog.Logger, tf *tracing.Factory) (service, error)

func admissionRunner(f *serviceFlags) runner {
	return func(ctx context.Context, js jetstream.JetStream, kc *rest.Config, log zerolog.Logger, tf *tracing.Factory) (service, error) {
		set, err := f.configuration()
		if err != nil {
			return nil, err
		}
		if err := f.visibility.validate(); err != nil {
			return nil, err
		}
		tr, err := tf.For(ctx, "admission")
		if err != nil {
			return nil, err
		}
		s, err := admission.New(admission.Config{Interval: f.interval, FairSharing: set.fairSharing, FairStrategies: set.fairStrategies,
			PendingInterval: f.pendingInterval, WaitForPodsReady: set.podsReady}, js,
			bus.NewPublisher(js, events.Source("admission"), bus.WithPublisherLogger(log), bus.WithTracer(tr)),
			admission.WithLogger(log), admission.WithTracer(tr))
		if err != nil {
			return nil, usageError{err}
		}
		var svc service = s
		if f.visibility.open {
			svc = openAdmission{s}
		}
		if f.visibility.addr != "" {
			return newGuardedVisibility(s, svc, f.visibility, kc, log)
		}
		return svc, nil
	}
}

func watcherRunner(f *serviceFlags) runner {
	return func(ctx context.Context, js jetstream.JetStream, kc *rest.Config, log zerolog.Logger, _ *tracing.Factory) (service, error) {
		dyn, err := dynamic.NewForConfig(kc)
		if err != nil {
			return nil, err
		}
		kv, err := bus.OpenKV(ctx, js, configstore.Bucket)
		if err != nil {
			return nil, err
		}
		opts := []watcher.Option{watcher.WithLogger(log)}
		if f.statusInterval > 0 {
			opts = append(opts, watcher.WithStatus(js, f.statusInterval))
		}
		s, err := watcher.New(watcher.Config{Resync: f.resync}, dyn, kv, bus.NewPublisher(js, events.Source("watcher")), opts...)
		if err != nil {
			return nil, usageError{err}
		}
		return storageReporter{s, bus.StorageCollector(js)}, nil
	}
}

// storageReporter is the watcher, which also reports the size of the
// streams and buckets against their bounds: one service of every install
// does, so each store is reported once.
type storageReporter struct {
	service
	storage prometheus.Collector
}

func (r storageReporter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.storage}
}

// integrationRunner runs the named kinds' integrations, each once its
// CRD is served.
func integrationRunner(f *serviceFlags, names func() []string) runner {
	return func(ctx context.Context, js jetstream.JetStream, kc *rest.Config, log zerolog.Logger, tf *tracing.Factory) (service, error) {
		ads, kube, dyn, err := kindClients(kc, names())
		if err != nil {
			return nil, err
		}
		set, err := f.configuration()
		if err != nil {
			return nil, err
		}
		cfg := integration.Config{Workers: f.workers, Resync: f.resync, WebhookAddress: f.webhookAddr, WebhookHost: f.webhookHost,
			WebhookCertDir: f.webhookCertDir, ExternalWebhookConfiguration: f.webhookExternal, KueueLabels: f.kueueLabels, Replica: f.replica,
			ReportPodsReady: set.podsReady != nil, Tracing: tf, QueueMetrics: integration.NewQueueMetrics()}
		if set.resources != nil {
			cfg.Requests = set.resources.Apply
		}
		if err := cfg.Validate(); err != nil {
			return nil, usageError{err}
		}
		pub := bus.NewPublisher(js, events.Source("integration"), bus.WithPublisherLogger(log), bus.WithTracer(tf))
		g := &integrations{metrics: cfg.QueueMetrics}
		g.run = func(ctx context.Context) error {
			mk := func(c integration.Config, ads []jobframework.Adapter) (*integration.Service, error) {
				svc, err := integration.New(c, ads, kube, dyn, js, pub, log)
				if err == nil {
					g.add(svc)
				}
				return svc, err
			}
			return integration.RunWhenServed(ctx, cfg, ads, kube.Discovery(), mk, log, 10*time.Second)
		}
		return g, nil
	}
}

// integrations are the services RunWhenServed starts, one per batch of
// kinds served together: ready when each started is.
type integrations struct {
	run     func(context.Context) error
	metrics *integration.QueueMetrics
	mu      sync.Mutex
	svcs    []*integration.Service
}

func (g *integrations) Run(ctx context.Context) error { return g.run(ctx) }

// Collectors are the metrics every kind's service shares.
func (g *integrations) Collectors() []prometheus.Collector { return g.metrics.Collectors() }

func (g *integrations) add(s *integration.Service) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.svcs = append(g.svcs, s)
}

// Ready: no kind served yet is not ready (the webhook does not serve).
func (g *integrations) Ready() error {
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

// provisioningRunner runs the provisioning admission check controller for
// the named kinds, once the API server serves ProvisioningRequests.
func provisioningRunner(names func() []string) runner {
	return func(ctx context.Context, js jetstream.JetStream, kc *rest.Config, log zerolog.Logger, tf *tracing.Factory) (service, error) {
		ads, kube, dyn, err := kindClients(kc, names())
		if err != nil {
			return nil, err
		}
		pub := bus.NewPublisher(js, events.Source(v1beta1.ProvisioningRequestController), bus.WithPublisherLogger(log), bus.WithTracer(tf))
		s, err := provisioning.New(kube, dyn, js, ads, provisioning.WithLogger(log), provisioning.WithPublisher(pub))
		if err != nil {
			return nil, usageError{err}
		}
		return s, nil
	}
}

func preemptionRunner() runner {
	return func(ctx context.Context, js jetstream.JetStream, _ *rest.Config, log zerolog.Logger, tf *tracing.Factory) (service, error) {
		tr, err := tf.For(ctx, "preemption")
		if err != nil {
			return nil, err
		}
		return preemption.New(js, bus.NewPublisher(js, events.Source("preemption"), bus.WithTracer(tr)), log, preemption.WithTracer(tr)), nil
	}
}

func quotaRunner(f *serviceFlags) runner {
	return func(ctx context.Context, js jetstream.JetStream, _ *rest.Config, log zerolog.Logger, _ *tracing.Factory) (service, error) {
		s, err := quota.New(quota.Config{Reconcile: f.reconcile}, js, bus.NewPublisher(js, events.Source("quota")), log)
		if err != nil {
			return nil, usageError{err}
		}
		return s, nil
	}
}

// newServiceCmd is the composition root of one service run alone.
func newServiceCmd(name, short string, kube bool, bind func(*cobra.Command), mk runner) *cobra.Command {
	return newServiceCmdWith(name, short, kube, bind, func(*common) runner { return mk })
}

// newServiceCmdWith is newServiceCmd for a service whose runner reads the
// shared flags (the NATS connection, the replicas).
func newServiceCmdWith(name, short string, kube bool, bind func(*cobra.Command), mkFor func(*common) runner) *cobra.Command {
	c := &common{}
	mk := mkFor(c)
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.logger(name)
			if err != nil {
				return err
			}
			var kc *rest.Config
			if kube && (c.kubeIf == nil || c.kubeIf()) {
				if kc, err = c.kube(); err != nil {
					return err
				}
			}
			tf, err := c.tracing(log)
			if err != nil {
				return err
			}
			err = c.retryAtStart(cmd.Context(), log, func(ctx context.Context) error {
				nc, js, err := c.connect(ctx, name)
				if err != nil {
					return err
				}
				defer nc.Close()
				svc, err := mk(ctx, js, kc, log, tf)
				if err != nil {
					return err
				}
				if err := c.serveHTTP(ctx, nc, map[string]service{name: svc}, log); err != nil {
					return err
				}
				log.Info().Msg("started")
				err = svc.Run(ctx)
				_ = nc.Drain()
				return err
			})
			// Flush what was recorded and published before closing.
			flushTraces(tf, log)
			log.Info().Err(err).Msg("stopped")
			return err
		},
	}
	c.bind(cmd, kube)
	if bind != nil {
		bind(cmd)
	}
	return cmd
}

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", args[0])}
	}
	return nil
}

func newServiceCmds() []*cobra.Command {
	f := &serviceFlags{}
	a := &serviceFlags{}
	j := &serviceFlags{}
	q := &serviceFlags{}
	return append([]*cobra.Command{
		newServiceCmdWith("admission", "Run the admission service", true, func(c *cobra.Command) { a.bindAdmission(c, false); a.bindConfig(c) },
			func(c *common) runner {
				// Kubernetes only to authenticate and authorize the
				// pending API's users.
				c.kubeIf = func() bool { return a.visibility.addr != "" }
				return admissionRunner(a)
			}),
		newServiceCmd("watcher", "Run the configuration watcher", true, func(c *cobra.Command) { f.bindWatcher(c); f.bindResync(c) }, watcherRunner(f)),
		newIntegrationCmd(j),
		newServiceCmd("preemption", "Run the preemption service", false, nil, preemptionRunner()),
		newServiceCmd("quota", "Run the quota accounting service", false, q.bindQuota, quotaRunner(q)),
		newProvisioningCmd(),
		newDevCmd(),
		newSetupCmd(),
		newNATSAuthCmd(),
	}, newMultiClusterCmds()...)
}

// newProvisioningCmd runs the provisioning admission check controller.
func newProvisioningCmd() *cobra.Command {
	var names []string
	cmd := newServiceCmd("provisioning", "Run the ProvisioningRequest admission check controller ("+v1beta1.ProvisioningRequestController+")", true,
		nil, provisioningRunner(func() []string { return names }))
	cmd.Flags().StringSliceVar(&names, "integrations", kinds.Names(), "job kinds to provision for ("+strings.Join(kinds.Names(), ", ")+")")
	return cmd
}

// newNATSAuthCmd prints the nats-server authorization block with one user
// per service and the permissions it needs.
func newNATSAuthCmd() *cobra.Command {
	var controllers, workers []string
	var domain, agent, passwordsFrom, out string
	cmd := &cobra.Command{
		Use:   "nats-authorization",
		Short: "Print a nats-server authorization block: one user per service, each allowed only its subjects",
		Long: "Print a nats-server authorization block: one user per service (" + strings.Join(natsperm.Services, ", ") +
			") and per admission check controller of your own, each allowed only the subjects it uses. Passwords are read by the server from $SLUICE_<USER>_PASSWORD.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := []natsperm.Option{natsperm.WithCheckControllers(controllers...),
				natsperm.WithWorkers(domain, workers...), natsperm.WithWorkerAgent(domain, agent)}
			if passwordsFrom != "" {
				hashes, err := passwordHashes(passwordsFrom, natsperm.LoginUsers(opts...))
				if err != nil {
					return err
				}
				opts = append(opts, natsperm.WithPasswordHashes(hashes))
			}
			conf := natsperm.ServerConfig(opts...)
			if out == "" {
				_, err := fmt.Fprint(cmd.OutOrStdout(), conf)
				return err
			}
			if err := os.WriteFile(out, []byte(conf), 0o600); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&passwordsFrom, "passwords-from", "",
		"a directory with one file per user holding its password (a mounted Secret with a key per user): the block then carries each password's bcrypt hash instead of $SLUICE_<USER>_PASSWORD")
	cmd.Flags().StringVar(&out, "out", "", "write the block to this file (mode 0600) instead of standard output")
	cmd.Flags().StringSliceVar(&controllers, "check-controllers", nil,
		"admission check controllers of your own, by controllerName: a user each, check-<name> (Sluice's own, "+strings.Join(natsperm.BuiltinCheckControllers, ", ")+", are the users provisioning and multicluster)")
	cmd.Flags().StringSliceVar(&workers, "workers", nil,
		"worker clusters that join this (manager's) NATS as leaf nodes: a user each, allowed only its own offers and reports (password from $SLUICE_WORKER_<NAME>_PASSWORD)")
	cmd.Flags().StringVar(&domain, "manager-domain", "hub", "JetStream domain of the manager's NATS, as the workers reach it")
	cmd.Flags().StringVar(&agent, "worker-agent", "", "on a worker cluster's NATS: the user \"worker\" for the agent of the worker of this name (password from $SLUICE_WORKER_PASSWORD)")
	return cmd
}

// newSetupCmd creates or updates Sluice's streams and buckets and exits:
// run once per install or upgrade by a NATS user allowed to manage them,
// so that the services' own users need not be.
func newSetupCmd() *cobra.Command {
	c := &common{setup: true}
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Create or update Sluice's JetStream streams, buckets and durable consumers, then exit",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.logger("setup")
			if err != nil {
				return err
			}
			if err := c.retryAtStart(cmd.Context(), log, func(ctx context.Context) error {
				nc, _, err := c.connect(ctx, "setup")
				if err == nil {
					nc.Close()
				}
				return err
			}); err != nil {
				return err
			}
			log.Info().Int("replicas", c.replicas).Msg("streams and buckets ready")
			return nil
		},
	}
	c.bindSetup(cmd)
	cmd.Flags().BoolVar(&c.worker, "worker-cluster", false, "this NATS is a worker cluster's (docs/multicluster.md): leave out the multicluster stream, which only the manager's has")
	cmd.Flags().StringSliceVar(&c.checkControllers, "check-controllers", nil,
		"admission check controllers of your own, by controllerName: setup makes each one's durable consumer, check-<name> (no service's NATS user may make a consumer)")
	cmd.Flags().StringSliceVar(&c.workers, "workers", nil, "worker clusters of this manager: setup makes each one's durable consumer of its offers on the multicluster stream")
	return cmd
}

// newIntegrationCmd is the composition root of `sluice integration KIND...`.
func newIntegrationCmd(f *serviceFlags) *cobra.Command {
	var names []string
	cmd := newServiceCmd("integration", "Run the integration of one or more kinds of job", true,
		func(c *cobra.Command) { f.bindIntegration(c); f.bindResync(c); f.bindConfig(c) }, integrationRunner(f, func() []string { return names }))
	cmd.Use = "integration KIND [KIND...]"
	cmd.Long = "Run the integration of the named kinds (" + strings.Join(kinds.Names(), ", ") + "): suspend their objects on create, " +
		"queue them as workloads, start them when admitted and stop them when preempted. Run any number of replicas."
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageError{fmt.Errorf("name a kind to integrate: %s", strings.Join(kinds.Names(), ", "))}
		}
		if _, err := kinds.Select(args); err != nil {
			return usageError{err}
		}
		names = args
		return nil
	}
	return cmd
}

// newDevCmd runs every service in one process with an embedded JetStream
// server, against the cluster in KUBECONFIG.
func newDevCmd() *cobra.Command {
	c := &common{httpAddr: "127.0.0.1:8090"}
	f := &serviceFlags{}
	var port int
	var storeDir string
	var integrations []string
	memLimit := devMemoryLimit
	leaf := &leafFlags{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run every service in one process with an embedded NATS JetStream server",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.logger("dev")
			if err != nil {
				return err
			}
			limit, err := applyMemoryLimit(memLimit, os.Getenv("GOMEMLIMIT"))
			if err != nil {
				return err
			}
			kc, err := c.kube()
			if err != nil {
				return err
			}
			nopts := embeddednats.Options{Port: port, StoreDir: storeDir}
			if err := leaf.apply(&nopts); err != nil {
				return err
			}
			srv, err := embeddednats.Start(nopts)
			if err != nil {
				return err
			}
			defer srv.Shutdown()
			c.nats.URL = srv.ClientURL()
			c.worker = leaf.remote != ""
			// The workers may not make their consumers of offers: the
			// manager's setup does.
			for _, u := range nopts.LeafUsers {
				c.workers = append(c.workers, u.Name)
			}
			log.Info().Str("nats", c.nats.URL).Str("domain", nopts.JetStreamDomain).Int("leaf_port", nopts.LeafPort).Str("memory_limit", limit).Msg("embedded JetStream server started")
			kindNames := func() []string { return integrations }
			svcs := []named{
				{"watcher", watcherRunner(f)},
				{"quota", quotaRunner(f)},
				{"preemption", preemptionRunner()},
				{"admission", admissionRunner(f)},
				{"integration", integrationRunner(f, kindNames)},
				{"provisioning", provisioningRunner(kindNames)},
			}
			if leaf.remote == "" {
				svcs = append(svcs, named{"multicluster", dispatcherRunner(kindNames)})
			} else {
				// A worker cluster: its jobs come from the manager.
				svcs = append(svcs, named{"worker", workerRunner(&leaf.worker, c.natsConfig, kindNames)})
			}
			return runAll(cmd.Context(), c, kc, log, svcs)
		},
	}
	c.bind(cmd, true)
	// The embedded server needs no address, credentials or TLS.
	for _, f := range []string{"nats", "nats-creds", "nats-nkey", "nats-user", "nats-ca", "nats-cert", "nats-key", "setup"} {
		_ = cmd.Flags().MarkHidden(f)
	}
	cmd.Flags().IntVar(&port, "nats-port", 4222, "port of the embedded NATS server (0: any free port)")
	cmd.Flags().StringVar(&storeDir, "nats-store", "", "JetStream store directory (default: a temporary one, removed at exit)")
	cmd.Flags().StringVar(&memLimit, "memory-limit", memLimit, "the Go runtime's soft memory limit, written as GOMEMLIMIT is (900MiB, 2GiB; 0 or off for none); GOMEMLIMIT in the environment wins")
	f.bindAdmission(cmd, true)
	f.bindWatcher(cmd)
	f.bindIntegration(cmd)
	f.bindResync(cmd)
	f.bindQuota(cmd)
	f.bindConfig(cmd)
	cmd.Flags().StringSliceVar(&integrations, "integrations", kinds.Names(), "kinds to integrate, each once its CRD is installed ("+strings.Join(kinds.Names(), ", ")+")")
	leaf.bind(cmd)
	return cmd
}

type named struct {
	name string
	mk   runner
}

// tracing reads the OTEL_* environment: spans are recorded and exported
// when an OTLP endpoint is set.
func (c *common) tracing(log zerolog.Logger) (*tracing.Factory, error) {
	cfg, err := tracing.ConfigFromEnv(os.Getenv)
	if err != nil {
		return nil, usageError{err}
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

// runAll starts services in order and stops them in reverse: each
// finishes its in-flight work before the connection is drained.
func runAll(ctx context.Context, c *common, kc *rest.Config, log zerolog.Logger, svcs []named) error {
	tf, err := c.tracing(log)
	if err != nil {
		return err
	}
	nc, js, err := c.connect(ctx, "dev")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(svcs))
	started := map[string]service{}
	for _, s := range svcs {
		svc, err := s.mk(ctx, js, kc, serviceLogger(log, s.name), tf)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("%s: %w", s.name, err)
		}
		started[s.name] = svc
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := svc.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", s.name, err)
			}
		}()
	}
	if err := c.serveHTTP(ctx, nc, started, log); err != nil {
		cancel()
		wg.Wait()
		return err
	}
	log.Info().Msg("all services started")
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		log.Error().Err(runErr).Msg("a service failed; stopping the others")
	}
	cancel()
	wg.Wait()
	flushTraces(tf, log)
	_ = nc.Drain()
	return runErr
}
