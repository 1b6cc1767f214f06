package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/internal/health"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	// exitBadInput: the command line or an input file is wrong.
	exitBadInput = 2
)

// buildVersion is set at link time (-X main.buildVersion=v1.2.3); without
// it the module's version, or the VCS revision, names the build.
var buildVersion string

func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "(devel) " + rev
}

// usageError marks errors caused by what the user gave us; a service's
// composition root marks them the same way (component.Usage).
type usageError = component.UsageError

func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(ctx)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "sluice:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitBadInput
	}
	return exitFailure
}

// newRootCmd is the command tree.
func newRootCmd(ctx context.Context) *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Sluice queues Kubernetes batch jobs by quota, priority and fairness",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.Version = version()
	root.SetVersionTemplate("sluice {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{Err: err} })
	var pprofAddr string
	root.PersistentFlags().StringVar(&pprofAddr, "pprof-address", "", "serve Go's profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6060 (empty: off)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return servePprof(ctx, pprofAddr) }
	root.AddCommand(newSimulateCmd())
	root.AddCommand(newConvertCmd())
	root.AddCommand(newServiceCmds()...)
	root.AddCommand(newEventsCmd())
	root.AddCommand(newPendingCmd(), newQueuesCmd(), newDescribeCmd(), newGetCmd())
	root.AddCommand(newStopCmds()...)
	return root
}

// servePprof serves the runtime profiles on addr until ctx ends, for
// measuring a live service; "" serves nothing.
func servePprof(ctx context.Context, addr string) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	if _, err := health.Serve(ctx, addr, mux); err != nil {
		return usageError{Err: fmt.Errorf("--pprof-address: %w", err)}
	}
	return nil
}
