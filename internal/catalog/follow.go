package catalog

import (
	"context"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
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
		env, err := events.DecodeParts(m.Subject, m.Header, m.Data)
		if err != nil {
			return nil
		}
		ev, err := env.Event()
		if err != nil {
			return nil
		}
		f.cat.Apply(m.Sequence, env, ev)
		return nil
	}, func() { f.once.Do(func() { close(f.ready) }) }, wake)
}
