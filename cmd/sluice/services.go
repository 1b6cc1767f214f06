package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/services/admission"
	"github.com/sluice-dev/sluice/services/integration"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/services/multicluster"
	"github.com/sluice-dev/sluice/services/preemption"
	"github.com/sluice-dev/sluice/services/provisioning"
	"github.com/sluice-dev/sluice/services/quota"
	"github.com/sluice-dev/sluice/services/watcher"
)

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
// settings, which the flags write; build is its Build; kube says whether
// the service uses Kubernetes with those settings (nil: never). Both are
// handed the options as they are when called, after the flags are parsed.
func newBuilder[O any, PO options[O]](name string, o PO, kube func(O) bool,
	build func(context.Context, component.Deps, O) (component.Runnable, error)) builder {
	b := builder{name: name, bind: o.BindFlags, validate: o.Validate,
		build: func(ctx context.Context, d component.Deps) (component.Runnable, error) { return build(ctx, d, *o) }}
	if kube != nil {
		b.kube = func() bool { return kube(*o) }
	}
	return b
}

// always: the service uses Kubernetes whatever its settings.
func always[O any](O) bool { return true }

// The services, each from its own package's composition root.
func admissionBuilder(o *admission.Options) builder {
	return newBuilder("admission", o, admission.Options.NeedsKube, admission.Build)
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
			if _, err := applyGCPercent(c.gcPercent, os.Getenv("GOGC")); err != nil {
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
