// Package health answers a process's liveness and readiness probes over
// HTTP, the way Kubernetes asks for them: /healthz says the process should
// keep running, /readyz that it does its work now (connected to NATS, its
// watches synced). Each says which check failed, so a probe's failure in
// `kubectl describe pod` names the cause.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Check reports nil when what it checks is fine, or why it is not.
type Check func() error

// Probe holds named liveness and readiness checks. The zero value is not
// usable; use New.
type Probe struct {
	mu    sync.Mutex
	live  map[string]Check
	ready map[string]Check
}

// New returns a probe with no checks (live and ready).
func New() *Probe {
	return &Probe{live: map[string]Check{}, ready: map[string]Check{}}
}

// Live adds a liveness check: a failure that only a restart cures (a
// connection closed for good).
func (p *Probe) Live(name string, c Check) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live[name] = c
}

// Ready adds a readiness check: a state the process gets out of by itself
// (reconnecting, syncing a watch).
func (p *Probe) Ready(name string, c Check) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready[name] = c
}

// failing returns "name: reason" for each failing liveness check and,
// withReady, readiness check, sorted: a readiness probe also fails on a
// failing liveness check.
func (p *Probe) failing(withReady bool) []string {
	type named struct {
		name  string
		check Check
	}
	p.mu.Lock()
	var checks []named
	for n, c := range p.live {
		checks = append(checks, named{n, c})
	}
	if withReady {
		for n, c := range p.ready {
			checks = append(checks, named{n, c})
		}
	}
	p.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, c := range checks {
		if err := c.check(); err != nil {
			if line := c.name + ": " + err.Error(); !seen[line] {
				seen[line] = true
				out = append(out, line)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Handler serves /healthz (liveness) and /readyz (readiness): 200 "ok", or
// 503 with one failing check per line.
func (p *Probe) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", p.serve(false))
	mux.HandleFunc("GET /readyz", p.serve(true))
	return mux
}

func (p *Probe) serve(withReady bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		failing := p.failing(withReady)
		if len(failing) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(failing, "\n"))
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// Gate is a readiness condition a service opens once, when it has synced.
// A gate may also name the parts it still waits for (Wait, Loaded), so a
// probe that stays unready says which watch or cache holds it back.
type Gate struct {
	open    atomic.Bool
	what    string
	mu      sync.Mutex
	waiting []string
}

// NewGate returns a closed gate; what says what it waits for ("watches
// not synced").
func NewGate(what string) *Gate { return &Gate{what: what} }

// Wait adds parts the gate waits for; they are named by Check until
// Loaded is called for each.
func (g *Gate) Wait(parts ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range parts {
		if !slices.Contains(g.waiting, p) {
			g.waiting = append(g.waiting, p)
		}
	}
}

// Loaded marks one part as no longer waited for.
func (g *Gate) Loaded(part string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting = slices.DeleteFunc(g.waiting, func(p string) bool { return p == part })
}

// Waiting lists the parts still waited for, in the order they were added.
func (g *Gate) Waiting() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.waiting)
}

// Open marks the condition met.
func (g *Gate) Open() { g.open.Store(true) }

// IsOpen reports whether the condition is met.
func (g *Gate) IsOpen() bool { return g.open.Load() }

// Check reports the gate as a readiness check.
func (g *Gate) Check() error {
	if g.IsOpen() {
		return nil
	}
	if w := g.Waiting(); len(w) > 0 {
		return fmt.Errorf("%s (waiting for %s)", g.what, strings.Join(w, ", "))
	}
	return errors.New(g.what)
}

// Serve serves h on addr until ctx ends, then shuts down within a second.
// It returns once the listener is bound, with the address bound (addr may
// name port 0).
func Serve(ctx context.Context, addr string, h http.Handler) (net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return l.Addr(), nil
}
