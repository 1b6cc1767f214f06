package admission

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
)

// recordingPublisher stores what it is given, refusing the ids in fail
// once each.
type recordingPublisher struct {
	published []string
	fail      map[string]bool
}

func (p *recordingPublisher) Publish(_ context.Context, _ events.Event, id string) error {
	if p.fail[id] {
		delete(p.fail, id)
		return errors.New("no answer")
	}
	p.published = append(p.published, id)
	return nil
}

func pendingEvent(name string) events.Event {
	return events.WorkloadPendingV1{Workload: events.WorkloadRef{Kind: "job", Namespace: "ns", Name: name, UID: "u-" + name},
		ClusterQueue: "cq", Reason: "waiting"}
}

// The outbox publishes in the order added, keeps what fails, and
// publishes it first on Retry; an announcement whose job ended meanwhile
// (its record gone) is dropped, not kept.
func TestOutbox(t *testing.T) {
	pub := &recordingPublisher{fail: map[string]bool{"b": true}}
	records := map[string]bool{"job/ns/alive": true}
	out := outbox{pub: pub, log: zerolog.Nop(), recordExists: func(_ context.Context, key string) bool { return records[key] }}
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		out.Add(ctx, outgoing{ev: pendingEvent(id), id: id})
	}
	out.Add(ctx, outgoing{ev: pendingEvent("alive"), id: "admitted-alive", ended: "job/ns/alive"})
	out.Add(ctx, outgoing{ev: pendingEvent("gone"), id: "admitted-gone", ended: "job/ns/gone"})
	if err := out.Flush(ctx); err == nil {
		t.Error("Flush with a refused publish returned no error")
	}
	if queued, unsent := out.Waiting(); queued != 0 || unsent != 1 {
		t.Errorf("after Flush: %d queued, %d unsent; want 0, 1", queued, unsent)
	}
	out.Add(ctx, outgoing{ev: pendingEvent("d"), id: "d"})
	if err := out.Retry(ctx); err != nil {
		t.Errorf("Retry: %v", err)
	}
	if queued, unsent := out.Waiting(); queued != 0 || unsent != 0 {
		t.Errorf("after Retry: %d queued, %d unsent; want none", queued, unsent)
	}
	if diff := cmp.Diff([]string{"a", "c", "admitted-alive", "b", "d"}, pub.published); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
}
