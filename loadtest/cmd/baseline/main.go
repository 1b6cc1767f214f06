// Command baseline replays a Kueue scheduler performance workload (a
// built-in profile or a Kueue generator file) against a live cluster
// running Sluice, as real batch/v1 Jobs (see package loadtest/baseline),
// and prints what it measured:
//
//	go run ./loadtest/cmd/baseline --kubeconfig KUBECONFIG --scale 0.1 --nats nats://127.0.0.1:4222
//	go run ./loadtest/cmd/baseline --kubeconfig KUBECONFIG --profile large-scale --ranges loadtest/ranges/large-scale.yaml
//
// It exits 1 if the run found a problem (quota exceeded, events out of
// order, Jobs not finished) or could not run, and 2 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-dev/sluice/loadtest/baseline"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o baseline.Options
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster (default $KUBECONFIG)")
	fs.StringVar(&o.Profile, "profile", "baseline", "the workload: a built-in profile ("+strings.Join(baseline.BuiltinProfiles(), ", ")+") or the path of a Kueue generator file")
	fs.Float64Var(&o.Scale, "scale", 1, "fraction of the profile's per-queue Job counts (1 = 15,000 Jobs of the baseline)")
	fs.StringVar(&o.NATSURL, "nats", "nats://127.0.0.1:4222", "NATS URL of Sluice's services: their requests are counted during the run, the event stream read after it (empty: neither)")
	fs.DurationVar(&o.Timeout, "timeout", 15*time.Minute, "give up after this long")
	fs.StringVar(&o.Namespace, "namespace", "baseline", "namespace of the Jobs and LocalQueues")
	fs.StringVar(&o.Prefix, "prefix", "bl", "prefix of the ClusterQueue, LocalQueue, flavor, cohort and priority class names")
	fs.IntVar(&o.Creators, "creators", 0, "concurrent creators of Jobs (0: the default, 64)")
	fs.IntVar(&o.Completers, "completers", 0, "concurrent writers of finished Jobs' status, the simulated Job controller (0: the default, 256)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the Jobs at the end")
	fs.BoolVar(&o.Unqueued, "unqueued", false, "measure the floor on a cluster without Sluice: the same Jobs, each unsuspended by its creator (no queue, no quota check, no event stream)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	rangesFile := fs.String("ranges", "", "a range file (loadtest/ranges/*.yaml): fail when a figure is outside it")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baseline: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected arguments %q", fs.Args())
	case *kubeconfig == "":
		return usage("--kubeconfig (or KUBECONFIG) is required")
	case !(o.Scale > 0 && o.Scale <= 10):
		return usage("--scale %g: must be more than 0 and at most 10", o.Scale)
	case o.Timeout <= 0:
		return usage("--timeout %s: must be positive", o.Timeout)
	case o.Creators < 0:
		return usage("--creators %d: must be positive (0: the default)", o.Creators)
	case o.Completers < 0:
		return usage("--completers %d: must be positive (0: the default)", o.Completers)
	}
	profile, err := baseline.LoadProfile(o.Profile)
	if err != nil {
		return usage("--profile: %v", err)
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return usage("--namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(o.Prefix); len(errs) > 0 || len(o.Prefix) > 30 {
		return usage("--prefix %q: must be a DNS label of at most 30 characters", o.Prefix)
	}
	if o.NATSURL != "" && !strings.HasPrefix(o.NATSURL, "nats://") && !strings.HasPrefix(o.NATSURL, "tls://") {
		return usage("--nats %q: want nats://HOST:PORT", o.NATSURL)
	}
	var ranges *baseline.Ranges
	if *rangesFile != "" {
		r, err := baseline.LoadRanges(*rangesFile, profile)
		if err != nil {
			return usage("--ranges: %v", err)
		}
		ranges = &r
	}
	if !*quiet {
		o.Log = stderr
	}

	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(stderr, "baseline:", err)
		return 1
	}
	clients, err := baseline.Clients(rc)
	if err != nil {
		fmt.Fprintln(stderr, "baseline:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o.Watch = clients.Watch
	res, err := baseline.Run(ctx, clients.Kube, clients.Dyn, o)
	if err != nil {
		fmt.Fprintln(stderr, "baseline:", err)
		return 1
	}
	res.Print(stdout)
	failed := len(res.Failures()) > 0
	if ranges != nil {
		for _, f := range ranges.Check(res) {
			fmt.Fprintln(stdout, "out of range:", f)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}
