package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/cmd/sluice/natsperm"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/internal/embeddednats"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/natsconn"
	"github.com/sluice-dev/sluice/internal/supervise"
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
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	addr, err := health.Serve(ctx, c.httpAddr, mux)
	if err != nil {
		return usageError{Err: fmt.Errorf("--http-address: %w", err)}
	}
	log.Info().Str("address", addr.String()).Msg("serving /healthz, /readyz, /metrics")
	return nil
}

// builder is one service as the commands run it, from its composition root
// (internal/component): its name, whether it uses Kubernetes with the
// settings given, its flags, the check of its settings (before anything
// connects), and its Build.
type builder struct {
	name     string
	kube     func() bool
	bind     func(*pflag.FlagSet)
	validate func() error
	build    func(context.Context, component.Deps) (component.Runnable, error)
}

// options are a service's Options, bound to flags and checked.
type options[O any] interface {
	*O
	BindFlags(*pflag.FlagSet)
	Validate() error
}

// newBuilder is the builder of a service's composition root: o holds its
// settings, which the flags write; build is its Build.
func newBuilder[O any, PO options[O]](name string, o PO, kube func() bool,
	build func(context.Context, component.Deps, O) (component.Runnable, error)) builder {
	return builder{name: name, kube: kube, bind: o.BindFlags, validate: o.Validate,
		build: func(ctx context.Context, d component.Deps) (component.Runnable, error) { return build(ctx, d, *o) }}
}

func always() bool { return true }

// The services, each from its own package's composition root.
func admissionBuilder(o *admission.Options) builder {
	return newBuilder("admission", o, o.NeedsKube, admission.Build)
}
func watcherBuilder(o *watcher.Options) builder {
	return newBuilder("watcher", o, always, watcher.Build)
}
func integrationBuilder(o *integration.Options) builder {
	return newBuilder("integration", o, always, integration.Build)
}
func preemptionBuilder(o *preemption.Options) builder {
	return newBuilder("preemption", o, nil, preemption.Build)
}
func quotaBuilder(o *quota.Options) builder { return newBuilder("quota", o, nil, quota.Build) }
func provisioningBuilder(o *provisioning.Options) builder {
	return newBuilder("provisioning", o, always, provisioning.Build)
}
func dispatcherBuilder(o *multicluster.DispatcherOptions) builder {
	return newBuilder("multicluster", o, always, multicluster.BuildDispatcher)
}
func workerBuilder(o *multicluster.WorkerOptions) builder {
	return newBuilder("worker", o, always, multicluster.BuildWorker)
}

// newServiceCmd is the command that runs one service alone.
func newServiceCmd(b builder, short string) *cobra.Command {
	c := &common{}
	cmd := &cobra.Command{
		Use:   b.name,
		Short: short,
		Args:  noArgs,
		// Bad settings are refused before anything connects.
		PreRunE: func(*cobra.Command, []string) error { return b.validate() },
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.logger(b.name)
			if err != nil {
				return err
			}
			var kc *rest.Config
			if b.kube != nil && b.kube() {
				if kc, err = c.kube(); err != nil {
					return err
				}
			}
			tf, err := c.tracing(log)
			if err != nil {
				return err
			}
			err = c.retryAtStart(cmd.Context(), log, func(ctx context.Context) error {
				nc, js, err := c.connect(ctx, b.name)
				if err != nil {
					return err
				}
				defer nc.Close()
				return c.runServices(ctx, nc, js, kc, tf, []builder{b}, func(string) zerolog.Logger { return log })
			})
			// Flush what was recorded and published before closing.
			flushTraces(tf, log)
			log.Info().Err(err).Msg("stopped")
			return err
		},
	}
	c.bind(cmd, b.kube != nil)
	b.bind(cmd.Flags())
	return cmd
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

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{Err: fmt.Errorf("unexpected argument %q", args[0])}
	}
	return nil
}

func newServiceCmds() []*cobra.Command {
	a, w, q, pr := admission.DefaultOptions(), watcher.DefaultOptions(), quota.DefaultOptions(), preemption.DefaultOptions()
	prov, disp, wk := provisioning.DefaultOptions(), multicluster.DefaultDispatcherOptions(), multicluster.DefaultWorkerOptions()
	worker := newServiceCmd(workerBuilder(&wk), "Run a worker cluster's multicluster agent: create the jobs a manager dispatches here, report their status back")
	worker.Long = worker.Short + ". It connects to this cluster's NATS server, which joins the manager's as a leaf node (see docs/multicluster.md)."
	return []*cobra.Command{
		newServiceCmd(admissionBuilder(&a), "Run the admission service"),
		newServiceCmd(watcherBuilder(&w), "Run the configuration watcher"),
		newIntegrationCmd(),
		newServiceCmd(preemptionBuilder(&pr), "Run the preemption service"),
		newServiceCmd(quotaBuilder(&q), "Run the quota accounting service"),
		newServiceCmd(provisioningBuilder(&prov), "Run the ProvisioningRequest admission check controller ("+v1beta1.ProvisioningRequestController+")"),
		newServiceCmd(dispatcherBuilder(&disp), "Run the multicluster admission check controller ("+v1beta1.MultiClusterController+") of a manager cluster"),
		worker,
		newDevCmd(),
		newSetupCmd(),
		newNATSAuthCmd(),
	}
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

// newIntegrationCmd is `sluice integration KIND...`.
func newIntegrationCmd() *cobra.Command {
	o := integration.DefaultOptions()
	cmd := newServiceCmd(integrationBuilder(&o), "Run the integration of one or more kinds of job")
	cmd.Use = "integration KIND [KIND...]"
	cmd.Long = "Run the integration of the named kinds (" + strings.Join(kinds.Names(), ", ") + "): suspend their objects on create, " +
		"queue them as workloads, start them when admitted and stop them when preempted. Run any number of replicas."
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageError{Err: fmt.Errorf("name a kind to integrate: %s", strings.Join(kinds.Names(), ", "))}
		}
		if _, err := kinds.Select(args); err != nil {
			return usageError{Err: err}
		}
		o.Kinds = args
		return nil
	}
	return cmd
}

// newDevCmd runs every service in one process with an embedded JetStream
// server, against the cluster in KUBECONFIG.
func newDevCmd() *cobra.Command {
	c := &common{httpAddr: "127.0.0.1:8090"}
	a, w, q, pr := admission.DefaultOptions(), watcher.DefaultOptions(), quota.DefaultOptions(), preemption.DefaultOptions()
	in, prov, disp := integration.DefaultOptions(), provisioning.DefaultOptions(), multicluster.DefaultDispatcherOptions()
	// On loopback, the pending API and the web view are open.
	a.Visibility.Open = true
	var port int
	var storeDir string
	memLimit := devMemoryLimit
	leaf := &leafFlags{worker: multicluster.DefaultWorkerOptions()}
	all := []builder{watcherBuilder(&w), quotaBuilder(&q), preemptionBuilder(&pr), admissionBuilder(&a), integrationBuilder(&in),
		provisioningBuilder(&prov)}
	var share func() error
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run every service in one process with an embedded NATS JetStream server",
		Args:  noArgs,
		PreRunE: func(*cobra.Command, []string) error {
			// One flag for what several services take (--config,
			// --resync, --integrations): its value reaches each.
			if err := share(); err != nil {
				return usageError{Err: err}
			}
			in.Kinds = prov.Kinds
			disp.Kinds, leaf.worker.Kinds = prov.Kinds, prov.Kinds
			for _, b := range all {
				if err := b.validate(); err != nil {
					return err
				}
			}
			return nil
		},
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
			svcs := slices.Clone(all)
			if leaf.remote == "" {
				svcs = append(svcs, dispatcherBuilder(&disp))
			} else {
				// A worker cluster: its jobs come from the manager.
				svcs = append(svcs, workerBuilder(&leaf.worker))
			}
			tf, err := c.tracing(log)
			if err != nil {
				return err
			}
			defer flushTraces(tf, log)
			nc, js, err := c.connect(cmd.Context(), "dev")
			if err != nil {
				return err
			}
			defer nc.Close()
			return c.runServices(cmd.Context(), nc, js, kc, tf, svcs, func(name string) zerolog.Logger {
				if name == "" {
					return log
				}
				return serviceLogger(log, name)
			})
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
	cmd.Flags().StringSliceVar(&prov.Kinds, "integrations", prov.Kinds, "kinds to integrate, each once its CRD is installed ("+strings.Join(kinds.Names(), ", ")+")")
	share = bindShared(cmd.Flags(), all)
	leaf.bind(cmd)
	return cmd
}

// bindShared binds every builder's flags on fs. A flag two builders
// define (--config, --resync, --integrations) is bound once, the first
// builder's; shareFlags, called once the flags are parsed, gives its
// value to the others.
func bindShared(fs *pflag.FlagSet, bs []builder) (shareFlags func() error) {
	var sets []*pflag.FlagSet
	for _, b := range bs {
		own := pflag.NewFlagSet(b.name, pflag.ContinueOnError)
		b.bind(own)
		fs.AddFlagSet(own)
		sets = append(sets, own)
	}
	return func() error {
		for _, own := range sets {
			var err error
			own.VisitAll(func(f *pflag.Flag) {
				top := fs.Lookup(f.Name)
				if err != nil || top == nil || top == f || !top.Changed {
					return
				}
				if from, ok := top.Value.(pflag.SliceValue); ok {
					if to, ok := f.Value.(pflag.SliceValue); ok {
						err = to.Replace(from.GetSlice())
						return
					}
				}
				if e := f.Value.Set(top.Value.String()); e != nil {
					err = fmt.Errorf("--%s: %w", f.Name, e)
				}
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
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
