package admission

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/internal/workloads"
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

// countingStream counts the reads of the last event about a subject.
type countingStream struct {
	jetstream.Stream
	reads atomic.Int32
}

func (s *countingStream) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	s.reads.Add(1)
	return s.Stream.GetLastMsgForSubject(ctx, subject)
}

// countedEventStream sets the streams and buckets up on a new server and
// returns the event stream, the same counting its reads, and a publisher.
func countedEventStream(ctx context.Context, t *testing.T) (jetstream.Stream, *countingStream, events.Publisher) {
	t.Helper()
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	raw, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	return raw, &countingStream{Stream: raw}, bus.NewPublisher(js, events.Source("admission"))
}

// An admission after the pending reason the outbox stored about the
// workload expects that reason's sequence instead of reading the stream;
// when something came since, the publish is refused and the stream is
// read after all, so an ended job's admission is still not announced.
func TestOutboxExpectsItsOwnPendingReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, stream, pub := countedEventStream(ctx, t)
	out := outbox{pub: pub, log: zerolog.Nop(), stream: stream, recordExists: func(context.Context, string) bool { return true }}
	wl := func(name string) events.WorkloadRef {
		return events.WorkloadRef{Kind: "job", Namespace: "ns", Name: name, UID: "u-" + name}
	}
	key := func(name string) string { return workloads.EngineKey(wl(name)) }
	admitted := func(name string) outgoing {
		ev := events.WorkloadAdmittedV1{Workload: wl(name), ClusterQueue: "cq", PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1}}}
		return outgoing{ev: ev, id: "admitted-" + name, ended: key(name)}
	}
	for _, name := range []string{"quiet", "ended", "forgotten"} {
		ev := events.WorkloadPendingV1{Workload: wl(name), ClusterQueue: "cq", Reason: "waiting"}
		out.Add(ctx, outgoing{ev: ev, id: "pending-" + name, about: key(name)})
	}
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := stream.reads.Load(); n != 0 {
		t.Fatalf("%d reads to publish pending reasons", n)
	}
	// The job of "ended" finishes after its pending reason.
	fin := events.WorkloadFinishedV1{Workload: wl("ended"), ClusterQueue: "cq", Succeeded: true}
	if err := pub.Publish(ctx, fin, "finished-ended"); err != nil {
		t.Fatal(err)
	}
	out.Forget(key("forgotten"))

	out.Add(ctx, admitted("quiet"))
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := stream.reads.Load(); n != 0 {
		t.Errorf("the admission after its own pending reason read the stream %d times, want 0", n)
	}
	out.Add(ctx, admitted("ended"))
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := stream.reads.Load(); n != 1 {
		t.Errorf("the admission refused for the end since read the stream %d times, want 1", n)
	}
	out.Add(ctx, admitted("forgotten"))
	if err := out.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := stream.reads.Load(); n != 2 {
		t.Errorf("the admission of a forgotten workload read the stream %d times in all, want 2", n)
	}

	var got []string
	for _, name := range []string{"quiet", "ended", "forgotten"} {
		msg, err := raw.GetLastMsgForSubject(ctx, events.WorkloadFilter(wl(name)))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, name+": "+msg.Header.Get(jetstream.MsgIDHeader))
	}
	want := []string{"quiet: admitted-quiet", "ended: finished-ended", "forgotten: admitted-forgotten"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("last event about each workload (-want +got):\n%s", diff)
	}
	if len(out.stored) != 0 {
		t.Errorf("remembered after the admissions: %v", out.stored)
	}
}

// A workload's first pending reason is told after reading the last event
// about it (a restarted replica must not announce again what its earlier
// run did); a later reason of another kind, told by the replica that has
// decided for the workload since, is announced without that read.
func TestTellPendingReadsOnlyWhatItDidNotTell(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, stream, pub := countedEventStream(ctx, t)
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	s := &Service{stream: stream, log: zerolog.Nop(), clock: func() time.Time { return now }, told: map[string]told{},
		out: outbox{pub: pub, log: zerolog.Nop(), stream: stream, recordExists: func(context.Context, string) bool { return true }}}
	w := events.WorkloadRef{Kind: "job", Namespace: "ns", Name: "w", UID: "u-w"}
	key := workloads.EngineKey(w)
	tell := func(reason string, told bool) {
		t.Helper()
		s.tellPending(ctx, []pendingTell{{ref: w, key: key, cq: "cq", reason: reason, told: told}})
		if err := s.out.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
	}
	lastReason := func() string {
		t.Helper()
		msg, err := raw.GetLastMsgForSubject(ctx, events.WorkloadFilter(w))
		if err != nil {
			t.Fatal(err)
		}
		var ev events.WorkloadPendingV1
		env, err := events.DecodeParts(msg.Subject, msg.Header, msg.Data)
		if err != nil || env.As(&ev) != nil {
			t.Fatalf("last event about %s: %v", key, err)
		}
		return ev.Reason
	}

	tell("insufficient quota", false)
	if n := stream.reads.Load(); n != 1 {
		t.Errorf("first reason: %d reads, want 1", n)
	}
	// A restarted replica (nothing told) finds the same kind stored: no
	// new event.
	delete(s.told, key)
	tell("insufficient quota", false)
	if n := stream.reads.Load(); n != 2 {
		t.Errorf("after a restart: %d reads in all, want 2", n)
	}
	tell("waiting for preemption", true)
	if n := stream.reads.Load(); n != 2 {
		t.Errorf("a reason of another kind after its own: %d reads in all, want 2", n)
	}
	info, err := raw.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lastReason(), "waiting for preemption"; got != want || info.State.Msgs != 2 {
		t.Errorf("stream holds %d events, the last with reason %q; want 2, the last %q", info.State.Msgs, got, want)
	}
	if got := s.told[key].class; got != engine.ReasonClass("waiting for preemption") {
		t.Errorf("told class %q", got)
	}
}
