// Command workload is the program of the workload image the end-to-end
// tests run in real containers: it stands for a job's work. It runs for a
// while, may report ready, and exits with a given code.
//
// How long it runs comes from -run-for, else from $SLUICE_RUN_FOR (a pod
// sets it from its sluice.dev/run-for annotation through the downward
// API, the annotation a kwok node reads), else it runs until stopped.
//
// On a real node it can also check the cluster from inside a pod before it
// runs: -check-api asks the API server for its version through the
// kubernetes Service with the pod's service-account token, -api-get
// PATH=STATUS asks for a path and wants that status (what the pod's
// ServiceAccount may and may not read), and -resolve looks a name up
// through the cluster DNS.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
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
	// apiGets are the API server's answers the pod must get, in order.
	apiGets []apiGet
	resolve []string
}

// apiGet is a path to GET from the API server and the status it must
// answer with.
type apiGet struct {
	path string
	want int
}

// apiGets collects -api-get and -check-api.
type apiGets []apiGet

func (a *apiGets) String() string { return fmt.Sprint(*a) }
func (a *apiGets) Set(v string) error {
	path, status, ok := strings.Cut(v, "=")
	code, err := strconv.Atoi(status)
	if !ok || !strings.HasPrefix(path, "/") || err != nil || code < 100 || code > 599 {
		return fmt.Errorf("%q: want PATH=STATUS, e.g. /api/v1/secrets=403", v)
	}
	*a = append(*a, apiGet{path: path, want: code})
	return nil
}

// names collects a repeatable flag.
type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("workload", flag.ContinueOnError)
	runFor := fs.String("run-for", "", "how long to run (a Go duration); default $SLUICE_RUN_FOR, else until stopped")
	fs.IntVar(&c.exitCode, "exit-code", 0, "the code to exit with once the time is up (0-255)")
	fs.StringVar(&c.readyFile, "ready-file", "", "a file to create once started, for an exec readiness probe")
	fs.StringVar(&c.listen, "listen", "", "an address to answer GET /readyz on with 200, for an HTTP readiness probe")
	fs.BoolFunc("check-api", "first GET /version from the API server with the pod's service-account token; fail if that fails", func(string) error {
		c.apiGets = append(c.apiGets, apiGet{path: "/version", want: 200})
		return nil
	})
	fs.Var((*apiGets)(&c.apiGets), "api-get", "first GET `PATH=STATUS` from the API server with the pod's service-account token; fail unless it answers STATUS (repeatable)")
	fs.Var((*names)(&c.resolve), "resolve", "first resolve this DNS `name`; fail if that fails (repeatable)")
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
	for _, name := range c.resolve {
		if err := resolve(ctx, name); err != nil {
			return err
		}
	}
	for _, g := range c.apiGets {
		if err := getFromAPI(ctx, serviceAccountDir, g); err != nil {
			return err
		}
	}
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

func resolve(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", name, err)
	}
	fmt.Printf("workload: %s resolves to %s\n", name, strings.Join(addrs, " "))
	return nil
}

// serviceAccountDir is where the kubelet mounts a pod's service-account
// token and the cluster's CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// getFromAPI does what an in-cluster client does: GET a path from the API
// server at $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (the
// kubernetes Service), trusting the cluster's CA, with the token; the
// answer must have the status wanted.
func getFromAPI(ctx context.Context, saDir string, g apiGet) error {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return errors.New("check API: KUBERNETES_SERVICE_HOST and _PORT are not set: not in a pod")
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return fmt.Errorf("check API: service-account token: %w", err)
	}
	ca, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return fmt.Errorf("check API: cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return errors.New("check API: no certificate in " + saDir + "/ca.crt")
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	url := "https://" + net.JoinHostPort(host, port) + g.path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("check API: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("check API: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return fmt.Errorf("check API: read %s: %w", url, err)
	}
	summary := strings.Join(strings.Fields(string(body)), " ")
	if len(summary) > 300 {
		summary = summary[:300] + "…"
	}
	if resp.StatusCode != g.want {
		return fmt.Errorf("check API: GET %s: %s, want %d: %s", url, resp.Status, g.want, summary)
	}
	fmt.Printf("workload: GET %s: %s as wanted: %s\n", url, resp.Status, summary)
	return nil
}
