package catalog

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/visibility"
)

// Follower reads the workload and usage events of the event stream into a
// Catalog,
// from the stream's first message on, then each new one as it is stored.
type Follower struct {
	cat   *Catalog
	ready chan struct{}
	once  sync.Once
}

// NewFollower follows into cat.
func NewFollower(cat *Catalog) *Follower {
	return &Follower{cat: cat, ready: make(chan struct{})}
}

// Ready closes once the stream's history as of the start is applied.
func (f *Follower) Ready() <-chan struct{} { return f.ready }

// Run follows until ctx ends. An event that does not decode is skipped:
// the catalog shows what it can, and the stream's own audit reports it.
func (f *Follower) Run(ctx context.Context, nc *nats.Conn) error {
	// The whole stream (workload events and the ClusterQueues' usage);
	// woken by workload events, and looking at least every second.
	wake := events.SubjectFilter("workload", "", "", "")
	return bus.FollowNotify(ctx, nc, bus.StreamEvents, "", f.cat.Seq()+1, func(m bus.Stored) error {
		if !strings.HasPrefix(m.Subject, "sluice.workload.") && !strings.HasPrefix(m.Subject, "sluice.quota.v1.usage.") {
			return nil
		}
		if env, ev, ok := decode(m); ok {
			f.cat.Apply(m.Sequence, env, ev)
		}
		return nil
	}, func() { f.once.Do(func() { close(f.ready) }) }, wake)
}

// decode reads a stored event; ok is false for one that does not decode
// (the stream's own audit reports it).
func decode(m bus.Stored) (events.Envelope, events.Event, bool) {
	env, err := events.DecodeParts(m.Subject, m.Header, m.Data)
	if err != nil {
		return env, nil, false
	}
	ev, err := env.Event()
	return env, ev, err == nil
}

// Events is every event the stream holds of a workload, oldest first:
// those of the job of uid only, when uid is given (a name used again by a
// new job has events of its own).
func Events(ctx context.Context, nc *nats.Conn, ref events.WorkloadRef, uid string) ([]visibility.WorkloadEvent, error) {
	var out []visibility.WorkloadEvent
	_, err := bus.Page(ctx, nc, bus.StreamEvents, events.WorkloadFilter(ref), 1, func(m bus.Stored) error {
		env, ev, ok := decode(m)
		if !ok {
			return nil
		}
		if r, ok := events.WorkloadOf(ev); ok && uid != "" && r.UID != "" && r.UID != uid {
			return nil
		}
		out = append(out, visibility.WorkloadEvent{Time: metav1.NewTime(env.Time), Type: strings.TrimPrefix(env.Type, events.TypePrefix),
			Message: Describe(ev), TraceID: env.TraceID()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the events of %s: %w", ref, err)
	}
	return out, nil
}
