package quota

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
)

// usageStream sets the streams and buckets up on a new server and returns
// the event stream and a publisher to it.
func usageStream(ctx context.Context, t *testing.T) (jetstream.Stream, events.Publisher) {
	t.Helper()
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	return stream, bus.NewPublisher(js, events.Source("quota"))
}

// A usage that comes back is a new event with an id of its own; a usage
// already stored is not announced again after a restart, and one that
// changed meanwhile follows the stored one.
func TestUsageAnnouncements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, pub := usageStream(ctx, t)
	full := events.QuotaUsageV1{ClusterQueue: "cq-a", Usage: map[string]map[string]string{"default": {"cpu": "10"}}, Pending: 3, Admitted: 5}
	less := events.QuotaUsageV1{ClusterQueue: "cq-a", Usage: map[string]map[string]string{"default": {"cpu": "4"}}, Pending: 0, Admitted: 2}
	empty := events.QuotaUsageV1{ClusterQueue: "cq-b", Usage: map[string]map[string]string{}}

	var last usageAnnounced
	announce := func(ev events.QuotaUsageV1) string {
		t.Helper()
		next, changed := last.next(ev)
		if !changed {
			t.Fatalf("%+v after %+v: not news", ev, last)
		}
		if err := pub.Publish(ctx, ev, next.id); err != nil {
			t.Fatal(err)
		}
		last = next
		return next.id
	}
	first := announce(full)
	if _, changed := last.next(full); changed {
		t.Error("the same usage again is news")
	}
	announce(less)
	again := announce(full)
	if again == first {
		t.Errorf("the usage back again has the first one's id %s", first)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 {
		t.Errorf("stream holds %d usage events, want 3 (the usage back again was dropped as a re-send)", info.State.Msgs)
	}

	// A restart reads what was stored last.
	stored := storedUsage(ctx, stream, full)
	if stored != last {
		t.Errorf("stored = %+v, want %+v", stored, last)
	}
	if _, changed := stored.next(full); changed {
		t.Error("after a restart the stored usage is announced again")
	}
	if next, changed := stored.next(less); !changed || next.id == first || next.id == again {
		t.Errorf("a changed usage after a restart: %+v, %v", next, changed)
	}
	// An empty usage reads back the same; a queue never announced reads
	// as nothing.
	if got := storedUsage(ctx, stream, empty); got != (usageAnnounced{}) {
		t.Errorf("a queue never announced: %+v", got)
	}
	last = usageAnnounced{}
	announce(empty)
	if _, changed := storedUsage(ctx, stream, empty).next(empty); changed {
		t.Error("an empty usage read back is news")
	}
}

// Two replicas announcing the same changes store each once, even when one
// of them missed a usage in between.
func TestUsageAnnouncedOnceByReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, pub := usageStream(ctx, t)
	a := &Service{pub: pub, lastUsage: map[string]usageAnnounced{}}
	b := &Service{pub: pub, lastUsage: map[string]usageAnnounced{}}
	usage := func(cpu string) events.QuotaUsageV1 {
		return events.QuotaUsageV1{ClusterQueue: "cq-a", Usage: map[string]map[string]string{"default": {"cpu": cpu}}, Admitted: 1}
	}
	stored := func() uint64 {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	steps := []struct {
		replica    *Service
		cpu        string
		wantStored uint64
	}{
		{a, "10", 1},
		{b, "10", 1}, // b starts and finds it stored
		{a, "4", 2},
		{b, "4", 2},
		{a, "10", 3}, // b misses this one
		{a, "6", 4},
		{b, "6", 4},
		{b, "10", 5},
		{a, "10", 5},
	}
	for i, st := range steps {
		if err := st.replica.announceUsage(ctx, stream, usage(st.cpu)); err != nil {
			t.Fatal(err)
		}
		if got := stored(); got != st.wantStored {
			t.Fatalf("step %d (cpu %s): %d usage events stored, want %d", i, st.cpu, got, st.wantStored)
		}
	}
}
