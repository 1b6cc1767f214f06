package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	// exitBadInput: the command line or an input file is wrong.
	exitBadInput = 2
)

// usageError marks errors caused by what the user gave us.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Sluice queues Kubernetes batch jobs by quota, priority and fairness",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newSimulateCmd())
	root.AddCommand(newServiceCmds()...)
	root.AddCommand(newEventsCmd())
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
