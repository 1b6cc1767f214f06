// Command workload is the program of the workload image the end-to-end
// tests run in real containers: it stands for a job's work. It runs for a
// while, may report ready, and exits with a given code.
//
// How long it runs comes from -run-for, else from $SLUICE_RUN_FOR (a pod
// sets it from its sluice.dev/run-for annotation through the downward
// API, the annotation a kwok node reads), else it runs until stopped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		var ex exitCode
		if errors.As(err, &ex) {
			os.Exit(int(ex))
		}
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(2)
	}
}

// exitCode is the code the workload was told to end with.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit code %d", int(e)) }

type config struct {
	// forever: no time was given; it runs until stopped.
	forever   bool
	runFor    time.Duration
	exitCode  int
	readyFile string
	listen    string
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("workload", flag.ContinueOnError)
	runFor := fs.String("run-for", "", "how long to run (a Go duration); default $SLUICE_RUN_FOR, else until stopped")
	fs.IntVar(&c.exitCode, "exit-code", 0, "the code to exit with once the time is up (0-255)")
	fs.StringVar(&c.readyFile, "ready-file", "", "a file to create once started, for an exec readiness probe")
	fs.StringVar(&c.listen, "listen", "", "an address to answer GET /readyz on with 200, for an HTTP readiness probe")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.exitCode < 0 || c.exitCode > 255 {
		return c, fmt.Errorf("-exit-code %d: must be within 0-255", c.exitCode)
	}
	if *runFor == "" {
		*runFor = os.Getenv("SLUICE_RUN_FOR")
	}
	c.forever = *runFor == ""
	if !c.forever {
		d, err := time.ParseDuration(*runFor)
		if err != nil || d < 0 {
			return c, fmt.Errorf("run for %q: not a non-negative Go duration such as 30s", *runFor)
		}
		c.runFor = d
	}
	return c, nil
}

func run(args []string) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if c.listen != "" {
		ln, err := net.Listen("tcp", c.listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", c.listen, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	if c.readyFile != "" {
		if err := os.WriteFile(c.readyFile, []byte("ready\n"), 0o644); err != nil {
			return fmt.Errorf("ready file: %w", err)
		}
	}
	var timeUp <-chan time.Time // nil: never
	if c.forever {
		fmt.Println("workload: started; running until stopped")
	} else {
		fmt.Printf("workload: started; running for %s, then exiting with %d\n", c.runFor, c.exitCode)
		timeUp = time.After(c.runFor)
	}
	select {
	case <-timeUp:
	case <-ctx.Done():
		fmt.Println("workload: stopped")
		return nil
	}
	fmt.Println("workload: done")
	if c.exitCode != 0 {
		return exitCode(c.exitCode)
	}
	return nil
}
