// Package supervise runs the parts of a process together and stops them in
// order: the one supervisor of every service command, of `sluice dev`, and
// of a service's own goroutines (watches, consumers, servers).
//
// A Group starts each part (a unit) with a context of its own. It stops
// when its context ends or a unit fails (returns an error while its context
// is still live; a unit that returns nil is simply done). Stopping cancels
// the units still running in the reverse order of their start, each given a
// bounded time to return, so that what started last (and depends on what
// started before it) finishes its in-flight work first, and a unit that
// hangs cannot hold the process forever.
package supervise

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// DefaultStopTimeout is how long a unit is given to return once cancelled.
const DefaultStopTimeout = 30 * time.Second

// Group runs units until its context ends or one fails.
type Group struct {
	ctx         context.Context
	log         zerolog.Logger
	stopTimeout time.Duration

	mu      sync.Mutex
	units   []*unit
	stopped bool
	err     error
	failed  chan struct{}
}

type unit struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
}

// Option tunes a Group.
type Option func(*Group)

// WithLogger logs the units that do not stop in time.
func WithLogger(l zerolog.Logger) Option { return func(g *Group) { g.log = l } }

// WithStopTimeout bounds the wait for each unit once cancelled (0: wait
// as long as it takes).
func WithStopTimeout(d time.Duration) Option { return func(g *Group) { g.stopTimeout = d } }

// New is a Group whose units run under ctx.
func New(ctx context.Context, opts ...Option) *Group {
	g := &Group{ctx: ctx, log: zerolog.Nop(), stopTimeout: DefaultStopTimeout, failed: make(chan struct{})}
	for _, o := range opts {
		o(g)
	}
	return g
}

// Go starts a unit. Its failure is reported as "name: error". A unit
// started once the group is stopping is not started. Every Group must end
// with Wait or Stop: that is what cancels its units.
func (g *Group) Go(name string, run func(context.Context) error) {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return
	}
	// The unit's context keeps the group's values but not its
	// cancellation: Stop cancels the units one by one, in order.
	ctx, cancel := context.WithCancel(context.WithoutCancel(g.ctx))
	u := &unit{name: name, cancel: cancel, done: make(chan struct{})}
	g.units = append(g.units, u)
	g.mu.Unlock()
	go func() {
		defer close(u.done)
		if err := run(ctx); err != nil && ctx.Err() == nil {
			g.fail(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

func (g *Group) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
		close(g.failed)
	}
}

// Failed closes when a unit fails.
func (g *Group) Failed() <-chan struct{} { return g.failed }

// Err is the first unit's failure, nil if none failed.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Wait blocks until the group's context ends or a unit fails, then stops
// the units (Stop) and returns the first failure.
func (g *Group) Wait() error {
	select {
	case <-g.ctx.Done():
	case <-g.failed:
	}
	return g.Stop()
}

// Stop cancels the units in the reverse order of their start, waiting for
// each to return (at most the stop timeout: one that does not is logged
// and left behind), and returns the first failure. It may be called more
// than once.
func (g *Group) Stop() error {
	g.mu.Lock()
	g.stopped = true
	units := slices.Clone(g.units)
	g.mu.Unlock()
	for _, u := range slices.Backward(units) {
		u.cancel()
		if g.stopTimeout <= 0 {
			<-u.done
			continue
		}
		t := time.NewTimer(g.stopTimeout)
		select {
		case <-u.done:
		case <-t.C:
			g.log.Warn().Str("unit", u.name).Dur("after", g.stopTimeout).Msg("did not stop in time; left behind")
		}
		t.Stop()
	}
	return g.Err()
}

// Unit is a named part of a process, for Run.
type Unit struct {
	Name string
	Run  func(context.Context) error
}

// Run starts the units in order and returns once ctx ends or one fails,
// having stopped them in reverse order.
func Run(ctx context.Context, units []Unit, opts ...Option) error {
	g := New(ctx, opts...)
	for _, u := range units {
		g.Go(u.Name, u.Run)
	}
	return g.Wait()
}
