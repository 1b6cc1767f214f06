package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/simulate"
)

type simulateFlags struct {
	files  []string
	until  time.Duration
	stop   time.Duration
	start  string
	output string
}

func newSimulateCmd() *cobra.Command {
	f := &simulateFlags{}
	cmd := &cobra.Command{
		Use:   "simulate -f SCENARIO [-f MORE]",
		Short: "Run the admission engine over a scenario in virtual time",
		Long: `simulate reads queue configuration (ResourceFlavor, Topology,
ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, AdmissionCheck,
Namespace, Configuration), v1 Node documents for topology-aware flavors, and
SimulatedWorkload documents, runs the same engine the admission service runs,
and prints one CloudEvent-shaped JSON object per workload transition, then a
summary. See docs/simulate.md.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{Err: fmt.Errorf("simulate: unexpected argument %q: scenario files go after -f", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSimulate(cmd, f)
		},
	}
	cmd.Flags().StringArrayVarP(&f.files, "file", "f", nil, "scenario file (multi-document YAML); repeat for more, - for stdin")
	cmd.Flags().DurationVar(&f.until, "until", 0, "stop after this much virtual time (default: when nothing more can happen)")
	cmd.Flags().DurationVar(&f.stop, "stop-delay", 0, "how long an evicted workload takes to stop, holding its quota meanwhile (default: at once)")
	cmd.Flags().StringVar(&f.start, "start", simulate.DefaultStart.Format(time.RFC3339), "virtual wall time of the start (RFC 3339)")
	cmd.Flags().StringVarP(&f.output, "output", "o", "jsonl", "output format: jsonl or table")
	return cmd
}

func runSimulate(cmd *cobra.Command, f *simulateFlags) error {
	if len(f.files) == 0 {
		return usageError{Err: errors.New("simulate: give at least one scenario with -f")}
	}
	if f.output != "jsonl" && f.output != "table" {
		return usageError{Err: fmt.Errorf("simulate: --output %q: must be jsonl or table", f.output)}
	}
	if f.until < 0 {
		return usageError{Err: fmt.Errorf("simulate: --until %s: must not be negative", f.until)}
	}
	if f.stop < 0 {
		return usageError{Err: fmt.Errorf("simulate: --stop-delay %s: must not be negative", f.stop)}
	}
	start, err := time.Parse(time.RFC3339, f.start)
	if err != nil {
		return usageError{Err: fmt.Errorf("simulate: --start %q: not an RFC 3339 time such as 2000-01-01T00:00:00Z", f.start)}
	}
	var sources []simulate.Source
	for _, name := range f.files {
		if name == "-" {
			sources = append(sources, simulate.Source{Name: "<stdin>", R: cmd.InOrStdin()})
			continue
		}
		fh, err := os.Open(name)
		if err != nil {
			return usageError{Err: fmt.Errorf("simulate: %w", err)}
		}
		defer fh.Close()
		sources = append(sources, simulate.Source{Name: name, R: fh})
	}
	sc, err := simulate.Load(sources)
	if err != nil {
		return usageError{Err: err}
	}
	records, err := simulate.Run(sc, simulate.Options{Start: start.UTC(), Until: f.until, StopDelay: f.stop})
	if err != nil {
		if errors.Is(err, simulate.ErrInvalid) {
			return usageError{Err: err}
		}
		return err
	}
	out := bufio.NewWriterSize(cmd.OutOrStdout(), 1<<16)
	if f.output == "table" {
		err = simulate.WriteTable(out, records, start.UTC())
	} else {
		err = simulate.WriteJSONL(out, records)
	}
	if err != nil {
		return err
	}
	return out.Flush()
}
