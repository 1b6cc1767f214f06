package webview

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/events"
)

// NATSFeed follows the workload events published on a NATS connection (a
// plain subscription: a view needs no history and acknowledges nothing).
type NATSFeed struct{ NC *nats.Conn }

// Follow implements Feed.
func (f NATSFeed) Follow(ctx context.Context, ready func(), deliver func(Event)) error {
	sub, err := f.NC.Subscribe(events.SubjectFilter("workload", "", "", ""), func(m *nats.Msg) {
		env, err := events.Decode(m)
		if err != nil {
			return
		}
		ev, err := env.Event()
		if err != nil {
			return
		}
		deliver(feedEvent(env, ev))
	})
	if err != nil {
		return fmt.Errorf("live feed: subscribe: %w", err)
	}
	// The server has the subscription once a round trip is done: what is
	// published after ready reaches it.
	if err := f.NC.FlushTimeout(10 * time.Second); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("live feed: subscribe: %w", err)
	}
	ready()
	<-ctx.Done()
	return sub.Unsubscribe()
}

// feedEvent is the feed's line of an event.
func feedEvent(env events.Envelope, ev events.Event) Event {
	e := Event{Time: env.Time, Type: transition(env.Type)}
	if ref, ok := events.WorkloadOf(ev); ok {
		e.Workload, e.Kind = ref.Namespace+"/"+ref.Name, ref.Kind
	}
	switch v := ev.(type) {
	case events.WorkloadSubmittedV1:
		e.Detail = "LocalQueue " + v.LocalQueue
	case events.WorkloadPendingV1:
		e.ClusterQueue, e.Detail = v.ClusterQueue, v.Reason
	case events.WorkloadAdmittedV1:
		e.ClusterQueue = v.ClusterQueue
		var fl []string
		for _, ps := range v.PodSets {
			for r, f := range ps.Flavors {
				fl = append(fl, r+"="+f)
			}
		}
		e.Detail = strings.Join(fl, ", ")
	case events.WorkloadPreemptedV1:
		e.ClusterQueue, e.Detail = v.ClusterQueue, v.Reason+" by "+v.Preemptor.Namespace+"/"+v.Preemptor.Name
	case events.WorkloadEvictedV1:
		e.ClusterQueue, e.Detail = v.ClusterQueue, v.Reason
	case events.WorkloadStartedV1:
		e.ClusterQueue = v.ClusterQueue
	case events.WorkloadStoppedV1:
		e.ClusterQueue, e.Detail = v.ClusterQueue, v.Reason
	case events.WorkloadFinishedV1:
		e.ClusterQueue = v.ClusterQueue
		e.Detail = "failed"
		if v.Succeeded {
			e.Detail = "succeeded"
		}
	}
	return e
}

// transition is the last part of an event type: dev.sluice.workload.v1.admitted → admitted.
func transition(typ string) string {
	if i := strings.LastIndexByte(typ, '.'); i >= 0 {
		return typ[i+1:]
	}
	return typ
}
