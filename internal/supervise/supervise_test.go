package supervise_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/internal/supervise"
)

// recorder notes the order in which units return.
type recorder struct {
	mu    sync.Mutex
	order []string
}

func (r *recorder) note(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.order = append(r.order, name)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// untilCancelled is a unit that runs until its context ends.
func untilCancelled(r *recorder, name string) supervise.Unit {
	return supervise.Unit{Name: name, Run: func(ctx context.Context) error {
		<-ctx.Done()
		r.note(name)
		return ctx.Err()
	}}
}

func TestRun(t *testing.T) {
	errBoom := errors.New("boom")
	cases := []struct {
		name string
		// units are started in order; cancel ends the parent context
		// once they run.
		units     func(r *recorder) []supervise.Unit
		cancel    bool
		wantErr   string
		wantOrder []string
	}{
		{
			name: "stopped by its context: the units stop in reverse order",
			units: func(r *recorder) []supervise.Unit {
				return []supervise.Unit{untilCancelled(r, "nats"), untilCancelled(r, "admission"), untilCancelled(r, "integration")}
			},
			cancel:    true,
			wantOrder: []string{"integration", "admission", "nats"},
		},
		{
			name: "a unit fails: the others stop, the failure is named",
			units: func(r *recorder) []supervise.Unit {
				return []supervise.Unit{untilCancelled(r, "watcher"), untilCancelled(r, "quota"),
					{Name: "admission", Run: func(context.Context) error { r.note("admission"); return errBoom }}}
			},
			wantErr:   "admission: boom",
			wantOrder: []string{"admission", "quota", "watcher"},
		},
		{
			name: "a unit that is done is no failure",
			units: func(r *recorder) []supervise.Unit {
				return []supervise.Unit{{Name: "setup", Run: func(context.Context) error { r.note("setup"); return nil }},
					untilCancelled(r, "admission")}
			},
			cancel:    true,
			wantOrder: []string{"setup", "admission"},
		},
		{
			name: "an error returned once cancelled is no failure",
			units: func(r *recorder) []supervise.Unit {
				return []supervise.Unit{{Name: "consumer", Run: func(ctx context.Context) error {
					<-ctx.Done()
					r.note("consumer")
					return errors.New("connection closed")
				}}}
			},
			cancel:    true,
			wantOrder: []string{"consumer"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				// Let every unit start, then end the context.
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			err := supervise.Run(ctx, tc.units(r), supervise.WithStopTimeout(5*time.Second))
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tc.wantErr {
				t.Errorf("error %q; want %q", gotErr, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantOrder, r.got()); diff != "" {
				t.Errorf("order of return (-want +got):\n%s", diff)
			}
		})
	}
}

// A unit that ignores its cancellation is left behind after the stop
// timeout; the ones started before it still stop.
func TestStopIsBounded(t *testing.T) {
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	g := supervise.New(ctx, supervise.WithStopTimeout(100*time.Millisecond))
	release := make(chan struct{})
	defer close(release)
	g.Go("first", untilCancelled(r, "first").Run)
	g.Go("stuck", func(context.Context) error { <-release; return nil })
	cancel()
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Wait: %v; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return: the stuck unit held the stop")
	}
	if diff := cmp.Diff([]string{"first"}, r.got()); diff != "" {
		t.Errorf("stopped (-want +got):\n%s", diff)
	}
}

// Once stopping, a unit started is not run.
func TestGoAfterStop(t *testing.T) {
	g := supervise.New(context.Background())
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	g.Go("late", func(context.Context) error { ran <- struct{}{}; return nil })
	select {
	case <-ran:
		t.Error("a unit started after Stop ran")
	case <-time.After(100 * time.Millisecond):
	}
	select {
	case <-g.Failed():
		t.Error("Failed closed without a failure")
	default:
	}
}
