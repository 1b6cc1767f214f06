package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/internal/embeddednats"
	"github.com/sluice-dev/sluice/internal/visibility"
	"github.com/sluice-dev/sluice/services/admission"
	"github.com/sluice-dev/sluice/services/integration"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/services/multicluster"
	"github.com/sluice-dev/sluice/services/preemption"
	"github.com/sluice-dev/sluice/services/provisioning"
	"github.com/sluice-dev/sluice/services/quota"
	"github.com/sluice-dev/sluice/services/watcher"
)

// newDevCmd runs every service in one process with an embedded JetStream
// server, against the cluster in KUBECONFIG.
func newDevCmd() *cobra.Command {
	c := &common{httpAddr: "127.0.0.1:8090"}
	a, w, q, pr := admission.DefaultOptions(), watcher.DefaultOptions(), quota.DefaultOptions(), preemption.DefaultOptions()
	in, prov, disp := integration.DefaultOptions(), provisioning.DefaultOptions(), multicluster.DefaultDispatcherOptions()
	// On loopback, the pending API and the web view are open.
	a.Visibility.Open = true
	// One admission replica under a fixed name: restarted, even after a
	// kill, it takes its tree leases back at once instead of waiting for
	// them to expire.
	a.Replica = "dev"
	var port int
	var storeDir string
	memLimit := devMemoryLimit
	leaf := &leafFlags{worker: multicluster.DefaultWorkerOptions()}
	all := []builder{watcherBuilder(&w), quotaBuilder(&q), preemptionBuilder(&pr), admissionBuilder(&a), integrationBuilder(&in),
		provisioningBuilder(&prov)}
	var share func() error
	var registerAPI bool
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
			if registerAPI {
				if a.Visibility.Addr == "" {
					a.Visibility.Addr = devVisibilityAddress
				}
				if a.Visibility.CertDir == "" {
					dir, err := os.MkdirTemp("", "sluice-dev-visibility-")
					if err != nil {
						return err
					}
					a.Visibility.CertDir = dir
				}
			}
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
			gc, err := applyGCPercent(c.gcPercent, os.Getenv("GOGC"))
			if err != nil {
				return err
			}
			kc, err := c.kube()
			if err != nil {
				return err
			}
			if registerAPI {
				if kc == nil {
					return usageError{Err: errNoKube}
				}
				ca, err := devVisibilityCert(a.Visibility.CertDir, time.Now())
				if err != nil {
					return usageError{Err: err}
				}
				if err := registerDevVisibility(cmd.Context(), kc, a.Visibility.Addr, ca); err != nil {
					return err
				}
				log.Info().Str("address", a.Visibility.Addr).Str("apiservice", visibility.Version+"."+visibility.Group).
					Msg("visibility API registered with the API server (kubectl get workloads)")
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
			log.Info().Str("nats", c.nats.URL).Str("domain", nopts.JetStreamDomain).Int("leaf_port", nopts.LeafPort).Str("memory_limit", limit).Str("gc_percent", gc).Msg("embedded JetStream server started")
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
	cmd.Flags().BoolVar(&registerAPI, "visibility-apiservice", false, "serve the visibility API through the cluster's API server, "+
		"as make dev does: register the APIService v1beta1.visibility.sluice.dev and a Service "+DevVisibilityService+" (ExternalName localhost) in namespace "+
		DevVisibilityNamespace+" for --visibility-address (default "+devVisibilityAddress+"), with a self-signed certificate written to --visibility-cert-dir "+
		"(default: a new temporary directory) unless one is there; for a cluster whose API server runs on this host")
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
