package bus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/internal/workloads"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func setup(t *testing.T) (context.Context, jetstream.JetStream) {
	t.Helper()
	ctx := testCtx(t)
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	return ctx, js
}

func ref(name string) events.WorkloadRef {
	return events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: name, UID: "uid-" + name}
}

func submitted(name string) events.WorkloadSubmittedV1 {
	return events.WorkloadSubmittedV1{
		Workload:     ref(name),
		LocalQueue:   "main",
		CreationTime: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		PodSets:      []events.PodSetV1{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "1"}}},
	}
}

func publish(t *testing.T, ctx context.Context, js jetstream.JetStream, ev events.Event) {
	t.Helper()
	p := bus.NewPublisher(js, events.Source("test"))
	if err := p.Publish(ctx, ev, events.ID(ev.Type(), ev.CESubject())); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

func streamMsgs(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// dlq returns every dead letter stored so far.
func dlq(t *testing.T, ctx context.Context, js jetstream.JetStream) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(ctx, bus.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run starts bus.Run in the background; the returned stop cancels it and
// returns its error.
func run(t *testing.T, js jetstream.JetStream, spec bus.ConsumerSpec, h bus.Handler, opts ...bus.RunOption) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	opts = append([]bus.RunOption{bus.WithFetchWait(100 * time.Millisecond)}, opts...)
	go func() { errc <- bus.Run(ctx, js, spec, h, opts...) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(30 * time.Second):
				err = errors.New("Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestConfigValidate(t *testing.T) {
	if err := (bus.Config{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
	if err := bus.DefaultConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
	if err := (bus.Config{Replicas: 3}).Validate(); err != nil {
		t.Errorf("R3: %v", err)
	}
	bad := []bus.Config{
		{Replicas: -1},
		{Replicas: 6},
		{MaxAge: -time.Hour},
		{Duplicates: time.Hour, MaxAge: time.Minute},
		{Duplicates: 31 * 24 * time.Hour, MaxAge: 60 * 24 * time.Hour},
		{KVHistory: 65},
		{KVHistory: -1},
		{DLQMaxAge: -1},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, bus.ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
	js := natstest.JetStream(t)
	if err := bus.Setup(testCtx(t), js, bus.Config{Replicas: 9}); !errors.Is(err, bus.ErrInvalidConfig) {
		t.Errorf("Setup(bad) = %v", err)
	}
}

func TestSetupIdempotent(t *testing.T) {
	ctx, js := setup(t)
	publish(t, ctx, js, submitted("a"))
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	if n := streamMsgs(t, ctx, js, bus.StreamEvents); n != 1 {
		t.Errorf("stream has %d messages after second Setup, want 1", n)
	}

	s, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	// AllowDirect: the last event about a workload is read with a direct
	// get (TestPublishAllExpectsTheLastEvent reads it so).
	if cfg.MaxAge != 7*24*time.Hour || cfg.Duplicates != 2*time.Minute || cfg.Replicas != 1 || !cfg.AllowDirect ||
		cfg.Storage != jetstream.FileStorage || cfg.Retention != jetstream.LimitsPolicy ||
		strings.Join(cfg.Subjects, ",") != "sluice.workload.>,sluice.preemption.>,sluice.quota.>,sluice.config.>,sluice.check.>" {
		t.Errorf("SLUICE config %+v", cfg)
	}
	d, err := js.Stream(ctx, bus.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	if dc := d.CachedInfo().Config; dc.MaxAge != 30*24*time.Hour || strings.Join(dc.Subjects, ",") != "sluice.dlq.>" {
		t.Errorf("SLUICE_DLQ config %+v", dc)
	}
	// The ledger, the records and the fences keep one revision per key
	// (a deletion's marker replaces the value and expires); the ledger
	// takes atomic batches too.
	for b, want := range map[string]int64{"sluice-quota": 1, "sluice-workloads": 1, "sluice-fence": 1, "sluice-config": 1} {
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatalf("bucket %s: %v", b, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.History() != want {
			t.Errorf("bucket %s history %d, want %d", b, st.History(), want)
		}
	}
	q, err := js.Stream(ctx, "KV_"+bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	if qc := q.CachedInfo().Config; !qc.AllowAtomicPublish || !qc.AllowMsgTTL {
		t.Errorf("ledger stream: atomic batches %v, message TTLs %v; want both", qc.AllowAtomicPublish, qc.AllowMsgTTL)
	}
	for _, b := range []string{bus.BucketWorkloads, bus.BucketFence} {
		st, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if !st.CachedInfo().Config.AllowMsgTTL {
			t.Errorf("bucket %s does not take message TTLs", b)
		}
	}

	// A changed config updates in place.
	if err := bus.Setup(ctx, js, bus.Config{MaxAge: 24 * time.Hour, KVHistory: 2}); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 24*time.Hour || info.State.Msgs != 1 {
		t.Errorf("after update: max age %s, %d messages", info.Config.MaxAge, info.State.Msgs)
	}
	kv, _ := js.KeyValue(ctx, bus.BucketConfig)
	if st, _ := kv.Status(ctx); st.History() != 2 {
		t.Errorf("history not updated: %d", st.History())
	}
	// Updating the other buckets left the ledger open to batches.
	if info, err := q.Info(ctx); err != nil || !info.Config.AllowAtomicPublish {
		t.Errorf("ledger stream after update: %v, %v", info, err)
	}
}

// TestSetupUpgradesBucketsToExpiringMarkers: record and fence buckets made
// by an earlier Sluice (five revisions per key, no message TTLs) keep
// their keys and get one revision per key and message TTLs, so that
// removals from then on expire.
func TestSetupUpgradesBucketsToExpiringMarkers(t *testing.T) {
	ctx := testCtx(t)
	js := natstest.JetStream(t)
	for _, b := range []string{bus.BucketWorkloads, bus.BucketFence} {
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 5, Storage: jetstream.FileStorage})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"1", "2"} {
			if _, err := kv.Put(ctx, "job.ns.a", []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("Setup over older buckets: %v", err)
	}
	for _, b := range []string{bus.BucketWorkloads, bus.BucketFence} {
		kv, err := bus.OpenKV(ctx, js, b)
		if err != nil {
			t.Fatal(err)
		}
		if e, err := kv.Get(ctx, "job.ns.a"); err != nil || string(e.Value()) != "2" {
			t.Errorf("bucket %s after the upgrade: %v, %v; want the key's last value", b, e, err)
		}
		if err := bus.Remove(ctx, kv, "job.ns.a", 0); err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, "$KV."+b+".job.ns.a")
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ttl := m.Header.Get("Nats-TTL"); ttl == "" || info.State.Msgs != 1 {
			t.Errorf("bucket %s: a removal left TTL %q and %d messages; want a TTL and only the marker", b, ttl, info.State.Msgs)
		}
	}
}

func TestPublishDeduplicates(t *testing.T) {
	ctx, js := setup(t)
	p := bus.NewPublisher(js, events.Source("test"))
	ev := events.WorkloadAdmittedV1{Workload: ref("a"), ClusterQueue: "gpu", PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1}}}
	id := events.ID(ev.Type(), ev.Workload.UID, uint64(1))
	first, err := p.PublishAck(ctx, ev, id)
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.PublishAck(ctx, ev, id)
	if err != nil {
		t.Fatalf("duplicate publish: %v", err)
	}
	if first.Duplicate || !second.Duplicate || second.Sequence != first.Sequence {
		t.Errorf("acks %+v then %+v", first, second)
	}
	if err := p.Publish(ctx, ev, id); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, ctx, js, bus.StreamEvents); n != 1 {
		t.Fatalf("stream has %d messages, want 1", n)
	}
	// The next admission generation is a new event.
	if err := p.Publish(ctx, ev, events.ID(ev.Type(), ev.Workload.UID, uint64(2))); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, ctx, js, bus.StreamEvents); n != 2 {
		t.Fatalf("stream has %d messages, want 2", n)
	}
	// Invalid events never reach the stream.
	bad := ev
	bad.Workload.Name = "Not Valid"
	if err := p.Publish(ctx, bad, "x"); !errors.Is(err, events.ErrInvalidEvent) {
		t.Errorf("invalid publish: %v", err)
	}
	if n := streamMsgs(t, ctx, js, bus.StreamEvents); n != 2 {
		t.Fatalf("stream has %d messages after an invalid publish", n)
	}
}

func TestHandlerErrorIsRetriedWithBackoff(t *testing.T) {
	ctx, js := setup(t)
	var mu sync.Mutex
	var deliveries []time.Time
	done := make(chan struct{})
	spec := bus.ConsumerSpec{
		Durable:        "retry",
		FilterSubjects: []string{events.SubjectFilter("workload", "submitted", "", "")},
		BackoffMin:     300 * time.Millisecond,
		BackoffMax:     time.Second,
	}
	run(t, js, spec, func(ctx context.Context, env events.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		deliveries = append(deliveries, time.Now())
		if len(deliveries) < 3 {
			return errors.New("database briefly unavailable")
		}
		var ev events.WorkloadSubmittedV1
		if err := env.As(&ev); err != nil {
			return err
		}
		if ev.Workload.Name != "a" {
			return fmt.Errorf("got %s", ev.Workload.Name)
		}
		close(done)
		return nil
	})
	publish(t, ctx, js, submitted("a"))
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("event not handled")
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := deliveries[1].Sub(deliveries[0]); gap < 250*time.Millisecond {
		t.Errorf("first redelivery after %s, want ≥ 300ms backoff", gap)
	}
	if gap := deliveries[2].Sub(deliveries[1]); gap < 550*time.Millisecond {
		t.Errorf("second redelivery after %s, want ≥ 600ms backoff", gap)
	}
	cons, err := js.Consumer(ctx, bus.StreamEvents, "retry")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "ack", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == 1
	})
	if got := dlq(t, ctx, js); len(got) != 0 {
		t.Errorf("%d dead letters", len(got))
	}
}

func TestPoisonGoesToDLQAndStreamKeepsFlowing(t *testing.T) {
	ctx, js := setup(t)

	// 1: bad CloudEvents headers (no ce-type).
	good, err := events.NewMessage(ctx, events.Source("test"), submitted("bad-headers"), "id-1")
	if err != nil {
		t.Fatal(err)
	}
	good.Header.Del(events.HeaderType)
	if _, err := js.PublishMsg(ctx, good); err != nil {
		t.Fatal(err)
	}
	// 2: valid headers, payload is not JSON.
	junk, err := events.NewMessage(ctx, events.Source("test"), submitted("junk"), "id-2")
	if err != nil {
		t.Fatal(err)
	}
	junk.Data = []byte("not json")
	if _, err := js.PublishMsg(ctx, junk); err != nil {
		t.Fatal(err)
	}
	// 3: a valid event the handler declares poison.
	publish(t, ctx, js, submitted("refused"))
	// 4: a valid event about one workload on another's subject.
	forged, err := events.NewMessage(ctx, events.Source("test"), submitted("victim"), "id-4")
	if err != nil {
		t.Fatal(err)
	}
	forged.Subject = submitted("bystander").NATSSubject()
	forged.Header.Set(events.HeaderSubject, submitted("bystander").CESubject())
	if _, err := js.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	// 5: a good event after them.
	publish(t, ctx, js, submitted("fine"))

	var handled sync.Map
	handledFine := make(chan struct{})
	spec := bus.ConsumerSpec{Durable: "admission", FilterSubjects: []string{"sluice.workload.>"}}
	run(t, js, spec, func(ctx context.Context, env events.Envelope) error {
		ev, err := env.Event()
		if err != nil {
			return err
		}
		name := ev.(events.WorkloadSubmittedV1).Workload.Name
		handled.Store(name, true)
		switch name {
		case "refused":
			return fmt.Errorf("local queue main of team-a does not exist: %w", bus.ErrPoison)
		case "fine":
			close(handledFine)
		}
		return nil
	})
	select {
	case <-handledFine:
	case <-time.After(20 * time.Second):
		t.Fatal("the good event after the poison ones was not handled")
	}
	if _, ok := handled.Load("bad-headers"); ok {
		t.Error("handler saw the message without ce-type")
	}

	var letters []*jetstream.RawStreamMsg
	if _, ok := handled.Load("victim"); ok {
		t.Error("handler saw the event about victim published on bystander's subject")
	}
	eventually(t, "4 dead letters", func() bool { letters = dlq(t, ctx, js); return len(letters) == 4 })
	want := []struct {
		reason, subject, seq string
		data                 []byte
	}{
		{"missing-attribute", "sluice.workload.v1.submitted.job.team-a.bad-headers", "1", nil},
		{"bad-data", "sluice.workload.v1.submitted.job.team-a.junk", "2", []byte("not json")},
		{"poison", "sluice.workload.v1.submitted.job.team-a.refused", "3", nil},
		{"subject-mismatch", "sluice.workload.v1.submitted.job.team-a.bystander", "4", nil},
	}
	for i, w := range want {
		m := letters[i]
		h := m.Header
		if m.Subject != "sluice.dlq.admission" {
			t.Errorf("dead letter %d on %s", i, m.Subject)
		}
		if h.Get(bus.HeaderDLQReason) != w.reason || h.Get(bus.HeaderDLQSubject) != w.subject ||
			h.Get(bus.HeaderDLQSequence) != w.seq || h.Get(bus.HeaderDLQStream) != "SLUICE" ||
			h.Get(bus.HeaderDLQConsumer) != "admission" || h.Get(bus.HeaderDLQDeliveries) != "1" ||
			h.Get(bus.HeaderDLQError) == "" || h.Get(bus.HeaderDLQTime) == "" {
			t.Errorf("dead letter %d headers %v, want reason %s subject %s seq %s", i, h, w.reason, w.subject, w.seq)
		}
		if w.data != nil && !bytes.Equal(m.Data, w.data) {
			t.Errorf("dead letter %d data %q", i, m.Data)
		}
	}
	if e := letters[2].Header.Get(bus.HeaderDLQError); !strings.Contains(e, "local queue main of team-a does not exist") {
		t.Errorf("poison error header %q", e)
	}
	// The original CloudEvents headers travel with the dead letter.
	if letters[2].Header.Get(events.HeaderType) != events.TypeWorkloadSubmittedV1 {
		t.Errorf("dead letter lost ce-type: %v", letters[2].Header)
	}

	cons, err := js.Consumer(ctx, bus.StreamEvents, "admission")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "all settled", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.NumRedelivered == 0
	})
}

// TestRetryForeverOutlastsAnOutage: a consumer that retries forever
// handles a message that failed more times than DefaultMaxDeliver, once
// what it needs is back, and parks nothing.
func TestRetryForeverOutlastsAnOutage(t *testing.T) {
	ctx, js := setup(t)
	var calls atomic.Int32
	done := make(chan struct{})
	spec := bus.ConsumerSpec{
		Durable:        "patient",
		FilterSubjects: []string{"sluice.workload.>"},
		MaxDeliver:     bus.RetryForever,
		BackoffMin:     5 * time.Millisecond,
		BackoffMax:     10 * time.Millisecond,
	}
	run(t, js, spec, func(ctx context.Context, env events.Envelope) error {
		if calls.Add(1) <= 2*bus.DefaultMaxDeliver {
			return errors.New("the ledger is down")
		}
		close(done)
		return nil
	})
	publish(t, ctx, js, submitted("released-late"))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("not handled after %d attempts", calls.Load())
	}
	if letters := dlq(t, ctx, js); len(letters) != 0 {
		t.Errorf("%d dead letters, want none", len(letters))
	}
}

func TestMaxDeliverGoesToDLQ(t *testing.T) {
	ctx, js := setup(t)
	var calls atomic.Int32
	spec := bus.ConsumerSpec{
		Durable:        "flaky",
		FilterSubjects: []string{"sluice.workload.>"},
		MaxDeliver:     3,
		BackoffMin:     20 * time.Millisecond,
		BackoffMax:     50 * time.Millisecond,
	}
	run(t, js, spec, func(ctx context.Context, env events.Envelope) error {
		calls.Add(1)
		return errors.New("always failing")
	})
	publish(t, ctx, js, submitted("doomed"))
	var letters []*jetstream.RawStreamMsg
	eventually(t, "dead letter", func() bool { letters = dlq(t, ctx, js); return len(letters) == 1 })
	h := letters[0].Header
	if h.Get(bus.HeaderDLQReason) != "max-deliver" || h.Get(bus.HeaderDLQDeliveries) != "3" ||
		!strings.Contains(h.Get(bus.HeaderDLQError), "always failing") {
		t.Errorf("dead letter headers %v", h)
	}
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 3 {
		t.Errorf("handler called %d times, want 3", n)
	}
}

func TestShutdownLetsInFlightHandlerFinish(t *testing.T) {
	ctx, js := setup(t)
	started := make(chan struct{})
	release := make(chan struct{})
	var handlerCtxErr atomic.Value
	spec := bus.ConsumerSpec{Durable: "slow", FilterSubjects: []string{"sluice.workload.>"}}
	stop := run(t, js, spec, func(hctx context.Context, env events.Envelope) error {
		close(started)
		<-release
		handlerCtxErr.Store(fmt.Sprint(hctx.Err()))
		return nil
	}, bus.WithDrainTimeout(10*time.Second))
	publish(t, ctx, js, submitted("slow"))
	<-started

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while a handler was in flight", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Run = %v, want nil on shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the handler finished")
	}
	if got := handlerCtxErr.Load(); got != "<nil>" {
		t.Errorf("handler context was %v during the drain", got)
	}
	cons, err := js.Consumer(ctx, bus.StreamEvents, "slow")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "ack", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream == 1
	})
}

func TestShutdownDrainTimeoutReturnsMessage(t *testing.T) {
	ctx, js := setup(t)
	started := make(chan struct{})
	var once sync.Once
	spec := bus.ConsumerSpec{Durable: "stubborn", FilterSubjects: []string{"sluice.workload.>"}, MaxDeliver: 1}
	stop := run(t, js, spec, func(hctx context.Context, env events.Envelope) error {
		once.Do(func() { close(started) })
		<-hctx.Done()
		return hctx.Err()
	}, bus.WithDrainTimeout(200*time.Millisecond))
	publish(t, ctx, js, submitted("x"))
	<-started
	begin := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("shutdown took %s", took)
	}
	// Cancelled by shutdown: back to the stream, not to the DLQ (even
	// with MaxDeliver 1).
	if got := dlq(t, ctx, js); len(got) != 0 {
		t.Errorf("%d dead letters after shutdown", len(got))
	}
	cons, err := js.Consumer(ctx, bus.StreamEvents, "stubborn")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != 0 {
		t.Errorf("message acked: %+v", info.AckFloor)
	}
	// A new runner handles it.
	got := make(chan string, 1)
	run(t, js, spec, func(hctx context.Context, env events.Envelope) error {
		got <- env.Subject
		return nil
	})
	select {
	case s := <-got:
		if s != "team-a/x" {
			t.Errorf("redelivered %q", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("message not redelivered after restart")
	}
}

func TestTwoReplicasShareTheConsumer(t *testing.T) {
	ctx, js := setup(t)
	const n = 30
	var mu sync.Mutex
	seen := map[string]int{}
	h := func(ctx context.Context, env events.Envelope) error {
		mu.Lock()
		seen[env.ID]++
		mu.Unlock()
		return nil
	}
	spec := bus.ConsumerSpec{Durable: "shared", FilterSubjects: []string{"sluice.workload.>"}}
	run(t, js, spec, h)
	run(t, js, spec, h, bus.WithConcurrency(3), bus.WithBatch(2))
	for i := range n {
		publish(t, ctx, js, submitted(fmt.Sprintf("w%d", i)))
	}
	eventually(t, "all handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	})
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		if c != 1 {
			t.Errorf("event %s handled %d times", id, c)
		}
	}
}

func TestHandlerContextCarriesTraceAndLogger(t *testing.T) {
	ctx, js := setup(t)
	var buf syncBuffer
	logger := zerolog.New(&buf)
	got := make(chan string, 1)
	spec := bus.ConsumerSpec{Durable: "traced", FilterSubjects: []string{"sluice.workload.>"}}
	run(t, js, spec, func(hctx context.Context, env events.Envelope) error {
		zerolog.Ctx(hctx).Info().Msg("handling")
		got <- events.TraceParent(hctx)
		return nil
	}, bus.WithLogger(logger))
	msg, err := events.NewMessage(ctx, events.Source("test"), submitted("t"), "trace-1")
	if err != nil {
		t.Fatal(err)
	}
	tp := msg.Header.Get(events.HeaderTraceParent)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	select {
	case inCtx := <-got:
		if inCtx == "" || events.TraceID(inCtx) != events.TraceID(tp) {
			t.Errorf("handler trace %q, published %q", inCtx, tp)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("not handled")
	}
	var line map[string]any
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `"handling"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line["event_type"] != events.TypeWorkloadSubmittedV1 || line["workload"] != "team-a/t" ||
		line["trace_id"] != events.TraceID(tp) || line["consumer"] != "traced" {
		t.Errorf("log line %v", line)
	}
}

func TestHandlerPanicIsRetried(t *testing.T) {
	ctx, js := setup(t)
	var calls atomic.Int32
	done := make(chan struct{})
	spec := bus.ConsumerSpec{Durable: "panicky", FilterSubjects: []string{"sluice.workload.>"}, BackoffMin: 10 * time.Millisecond}
	run(t, js, spec, func(ctx context.Context, env events.Envelope) error {
		if calls.Add(1) == 1 {
			var m map[string]int
			m["boom"]++ // nil map write
		}
		close(done)
		return nil
	})
	publish(t, ctx, js, submitted("p"))
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("not retried after a panic")
	}
}

func TestKVCompareAndSetOneWinner(t *testing.T) {
	ctx, js := setup(t)
	kv, err := js.KeyValue(ctx, bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(ctx, "cohort.research", []byte(`{"reservations":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "cohort.research", []byte(`{}`)); !bus.IsRevisionConflict(err) {
		t.Errorf("second Create = %v, want a revision conflict", err)
	}
	for round := range 20 {
		var wins, conflicts atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		var newRev atomic.Uint64
		for replica := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := kv.Update(ctx, "cohort.research", []byte(fmt.Sprintf(`{"round":%d,"replica":%d}`, round, replica)), rev)
				switch {
				case err == nil:
					wins.Add(1)
					newRev.Store(r)
				case bus.IsRevisionConflict(err):
					conflicts.Add(1)
				default:
					t.Errorf("round %d replica %d: %v", round, replica, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 || conflicts.Load() != 1 {
			t.Fatalf("round %d: %d winners, %d conflicts", round, wins.Load(), conflicts.Load())
		}
		rev = newRev.Load()
	}
	if bus.IsRevisionConflict(errors.New("timeout")) || bus.IsRevisionConflict(nil) {
		t.Error("IsRevisionConflict of an unrelated error")
	}
}

func TestConsumerSpec(t *testing.T) {
	s := bus.ConsumerSpec{Durable: "d", FilterSubjects: []string{"sluice.>"}, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second}
	want := []time.Duration{100, 100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := s.Backoff(uint64(i)); got != w*time.Millisecond {
			t.Errorf("Backoff(%d) = %s, want %s", i, got, w*time.Millisecond)
		}
	}
	if got := s.Backoff(1 << 40); got != time.Second {
		t.Errorf("Backoff(huge) = %s", got)
	}
	cc := s.ConsumerConfig()
	if cc.AckPolicy != jetstream.AckExplicitPolicy || cc.MaxDeliver != -1 || cc.AckWait != bus.DefaultAckWait || cc.Durable != "d" {
		t.Errorf("consumer config %+v", cc)
	}
	bad := []bus.ConsumerSpec{
		{FilterSubjects: []string{"x"}},
		{Durable: "a.b", FilterSubjects: []string{"x"}},
		{Durable: "d"},
		{Durable: "d", FilterSubjects: []string{""}},
		{Durable: "d", FilterSubjects: []string{"x"}, BackoffMin: time.Minute, BackoffMax: time.Second},
		{Durable: "d", FilterSubjects: []string{"x"}, AckWait: -1},
	}
	for _, b := range bad {
		if err := b.Validate(); !errors.Is(err, bus.ErrInvalidSpec) {
			t.Errorf("Validate(%+v) = %v", b, err)
		}
		if err := bus.Run(context.Background(), nil, b, func(context.Context, events.Envelope) error { return nil }); !errors.Is(err, bus.ErrInvalidSpec) {
			t.Errorf("Run(%+v) = %v", b, err)
		}
	}
	if err := bus.Run(context.Background(), nil, s, nil); !errors.Is(err, bus.ErrInvalidSpec) {
		t.Errorf("Run(nil handler) = %v", err)
	}
	if !bus.IsPoison(bus.Poison(errors.New("x"))) || !bus.IsPoison(&events.DecodeError{}) || bus.IsPoison(errors.New("x")) {
		t.Error("IsPoison")
	}
}

func TestRunFailsWithoutStream(t *testing.T) {
	js := natstest.JetStream(t)
	err := bus.Run(testCtx(t), js, bus.ConsumerSpec{Durable: "d", FilterSubjects: []string{"sluice.>"}}, func(context.Context, events.Envelope) error { return nil })
	if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("Run without Setup = %v", err)
	}
}

func TestRunReturnsWhenConnectionCloses(t *testing.T) {
	url, _ := natstest.Start(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if err := bus.Setup(testCtx(t), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- bus.Run(context.Background(), js, bus.ConsumerSpec{Durable: "d", FilterSubjects: []string{"sluice.>"}},
			func(context.Context, events.Envelope) error { return nil }, bus.WithFetchWait(100*time.Millisecond))
	}()
	time.Sleep(200 * time.Millisecond)
	nc.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("Run = %v, want ErrConnectionClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the connection closed")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReadOnlySubscriber runs the subscriber example of docs/events.md.
func TestReadOnlySubscriber(t *testing.T) {
	ctx, js := setup(t)
	ev := events.WorkloadAdmittedV1{Workload: ref("r"), ClusterQueue: "gpu", PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1}}}
	publish(t, ctx, js, submitted("r"))
	publish(t, ctx, js, ev)

	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SubjectFilter("workload", "admitted", "", "")},
	})
	if err != nil {
		t.Fatal(err)
	}
	iter, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer iter.Stop()
	m, err := iter.Next(jetstream.NextMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	env, err := events.DecodeParts(m.Subject(), m.Headers(), m.Data())
	if err != nil {
		t.Fatal(err)
	}
	var adm events.WorkloadAdmittedV1
	if err := env.As(&adm); err != nil || adm.ClusterQueue != "gpu" || env.Subject != "team-a/r" {
		t.Errorf("read %+v from %+v: %v", adm, env, err)
	}
}

func TestSlowHandlerIsNotRedelivered(t *testing.T) {
	ctx, js := setup(t)
	var calls atomic.Int32
	done := make(chan struct{})
	spec := bus.ConsumerSpec{Durable: "slowpoke", FilterSubjects: []string{"sluice.workload.>"}, AckWait: time.Second}
	run(t, js, spec, func(ctx context.Context, env events.Envelope) error {
		if calls.Add(1) == 1 {
			time.Sleep(2500 * time.Millisecond) // 2.5 × AckWait
			close(done)
		}
		return nil
	}, bus.WithConcurrency(2))
	publish(t, ctx, js, submitted("slow"))
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("not handled")
	}
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times: redelivered while in progress", n)
	}
}

// TestWaitingMessageIsNotRedelivered: with one handler, the messages of a
// fetch wait for it longer than AckWait; none may be redelivered meanwhile
// (each is kept alive from the fetch, not from its handler's start).
func TestWaitingMessageIsNotRedelivered(t *testing.T) {
	ctx, js := setup(t)
	var mu sync.Mutex
	calls := map[string]int{}
	spec := bus.ConsumerSpec{Durable: "queued", FilterSubjects: []string{"sluice.workload.>"}, AckWait: time.Second}
	for _, n := range []string{"q1", "q2", "q3"} {
		publish(t, ctx, js, submitted(n))
	}
	run(t, js, spec, func(ctx context.Context, env events.Envelope) error {
		mu.Lock()
		calls[env.Subject]++
		mu.Unlock()
		time.Sleep(1200 * time.Millisecond) // the last waits 2.4 × AckWait
		return nil
	}, bus.WithBatch(3))
	eventually(t, "all three handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 3
	})
	time.Sleep(1500 * time.Millisecond) // a redelivery of the last would show by now
	mu.Lock()
	defer mu.Unlock()
	for subj, n := range calls {
		if n != 1 {
			t.Errorf("%s handled %d times: redelivered while waiting for the handler", subj, n)
		}
	}
}

// TestPublishAllPipelines publishes more events than the window at once:
// every one is stored once and in order, an invalid one fails alone, and
// publishing the same ids again stores nothing more.
func TestPublishAllPipelines(t *testing.T) {
	ctx, js := setup(t)
	p := bus.NewPublisher(js, events.Source("test"))
	const n = 700
	var out []bus.Outgoing
	for i := range n {
		ev := events.WorkloadAdmittedV1{Workload: ref(fmt.Sprintf("w%03d", i)), ClusterQueue: "gpu", PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1}}}
		if i == 350 {
			ev.Workload.Name = "Not Valid"
		}
		out = append(out, bus.Outgoing{Ctx: ctx, Event: ev, ID: events.ID(ev.Type(), ev.Workload.UID, uint64(1))})
	}
	errs := p.PublishAll(ctx, out)
	for i, err := range errs {
		if wantErr := i == 350; (err != nil) != wantErr || (wantErr && !errors.Is(err, events.ErrInvalidEvent)) {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	// Each stored event has the sequence it was stored at; the invalid one
	// none.
	for i, o := range out {
		want := uint64(i + 1)
		switch {
		case i == 350:
			want = 0
		case i > 350:
			want = uint64(i)
		}
		if o.Stored != want {
			t.Fatalf("event %d: Stored = %d, want %d", i, o.Stored, want)
		}
	}
	if got := streamMsgs(t, ctx, js, bus.StreamEvents); got != n-1 {
		t.Fatalf("stream has %d messages, want %d", got, n-1)
	}
	again := slices.Clone(out[:10])
	for i := range again {
		again[i].Stored = 0
	}
	for i, err := range p.PublishAll(ctx, again) {
		if err != nil {
			t.Fatal(err)
		}
		if again[i].Stored != uint64(i+1) {
			t.Fatalf("event %d sent again: Stored = %d, want the first copy's %d", i, again[i].Stored, i+1)
		}
	}
	if got := streamMsgs(t, ctx, js, bus.StreamEvents); got != n-1 {
		t.Fatalf("after publishing ten again, the stream has %d messages, want %d", got, n-1)
	}
	s, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= n-1; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		i := int(seq - 1)
		if i >= 350 {
			i++
		}
		if want := out[i].ID; m.Header.Get("Nats-Msg-Id") != want {
			t.Fatalf("message %d has id %s, want %s (event %d)", seq, m.Header.Get("Nats-Msg-Id"), want, i)
		}
	}
}

// TestPartitionsKeepEachWorkloadsOrder: with partitions, events about one
// workload are handled in stream order, while events about different
// workloads are handled side by side.
func TestPartitionsKeepEachWorkloadsOrder(t *testing.T) {
	ctx, js := setup(t)
	p := bus.NewPublisher(js, events.Source("test"))
	const workloads, each = 6, 20
	for i := range each {
		for w := range workloads {
			ev := events.WorkloadPendingV1{Workload: ref(fmt.Sprintf("w%d", w)), ClusterQueue: "cq", Reason: fmt.Sprint(i)}
			if err := p.Publish(ctx, ev, events.ID(ev.Type(), ev.Workload.UID, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	running, most, total := 0, 0, 0
	done := make(chan struct{})
	spec := bus.ConsumerSpec{Durable: "parts", FilterSubjects: []string{"sluice.workload.>"}}
	run(t, js, spec, func(_ context.Context, env events.Envelope) error {
		var ev events.WorkloadPendingV1
		if err := env.As(&ev); err != nil {
			return err
		}
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		running--
		seen[ev.Workload.Name] = append(seen[ev.Workload.Name], ev.Reason)
		if total++; total == workloads*each {
			close(done)
		}
		return nil
	}, bus.WithPartitions(4, events.SubjectWorkload))
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("handled %d of %d", total, workloads*each)
	}
	mu.Lock()
	defer mu.Unlock()
	for w, got := range seen {
		for i, r := range got {
			if r != fmt.Sprint(i) {
				t.Fatalf("%s handled out of order: %v", w, got)
			}
		}
	}
	if most < 2 {
		t.Errorf("at most %d handlers ran at once, want several", most)
	}
}

// TestPublishAllExpectsTheLastEvent: an event published expecting the last
// event about its workload is refused with ErrLastChanged once anything
// else about the workload was stored, so an announcement checked against
// the workload's end never lands after it.
func TestPublishAllExpectsTheLastEvent(t *testing.T) {
	ctx, js := setup(t)
	p := bus.NewPublisher(js, events.Source("test"))
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	w := ref("w")
	publish(t, ctx, js, submitted("w"))
	publish(t, ctx, js, submitted("other")) // about another workload: no matter
	seq, ended, err := workloads.LastEvent(ctx, stream, w)
	if err != nil || ended || seq != 1 {
		t.Fatalf("LastEvent after submitted = %d, %v, %v; want 1, false, nil", seq, ended, err)
	}
	fin := events.WorkloadFinishedV1{Workload: w, ClusterQueue: "cq", Succeeded: true}
	if err := p.Publish(ctx, fin, "fin"); err != nil {
		t.Fatal(err)
	}
	adm := events.WorkloadAdmittedV1{Workload: w, ClusterQueue: "cq", PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1}}}
	out := []bus.Outgoing{{Ctx: ctx, Event: adm, ID: "adm", ExpectLast: events.WorkloadFilter(w), ExpectSeq: seq}}
	if err := p.PublishAll(ctx, out)[0]; !errors.Is(err, bus.ErrLastChanged) {
		t.Fatalf("admitted after finished: got %v, want ErrLastChanged", err)
	}
	seq, ended, err = workloads.LastEvent(ctx, stream, w)
	if err != nil || !ended || seq != 3 {
		t.Fatalf("LastEvent after finished = %d, %v, %v; want 3, true, nil", seq, ended, err)
	}
	// A workload of the same name, created again, is not ended by the end
	// of the old one.
	again := w
	again.UID = "uid-w-2"
	if _, ended, _ := workloads.LastEvent(ctx, stream, again); ended {
		t.Error("a new job of the same name is taken for ended")
	}
	out[0].ExpectSeq = seq
	if err := p.PublishAll(ctx, out)[0]; err != nil {
		t.Fatalf("publish expecting the current last event: %v", err)
	}
	if n := streamMsgs(t, ctx, js, bus.StreamEvents); n != 4 {
		t.Fatalf("stream has %d messages, want 4", n)
	}
}

// RunMessages hands plain messages to the handler as they are; with
// WithTerminatePoison a poison message is terminated, not dead-lettered,
// and the stream keeps flowing; WithFetched hears of every fetch.
func TestRunMessages(t *testing.T) {
	ctx, js := setup(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PLAIN", Subjects: []string{"plain.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"one", "bad", "two"} {
		if _, err := js.Publish(ctx, "plain."+body, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var handled []string
	var fetches atomic.Int64
	h := func(_ context.Context, m jetstream.Msg) error {
		if string(m.Data()) == "bad" {
			return fmt.Errorf("%w: unreadable", bus.ErrPoison)
		}
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, string(m.Data()))
		return nil
	}
	rctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- bus.RunMessages(rctx, js, bus.ConsumerSpec{Stream: "PLAIN", Durable: "plain", FilterSubjects: []string{"plain.>"}}, h,
			bus.WithFetchWait(100*time.Millisecond), bus.WithTerminatePoison(), bus.WithFetched(func(ok bool) {
				if ok {
					fetches.Add(1)
				}
			}))
	}()
	eventually(t, "two messages handled and a fetch told", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 2 && fetches.Load() > 0
	})
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("RunMessages: %v", err)
	}
	if diff := cmp.Diff([]string{"one", "two"}, handled); diff != "" {
		t.Errorf("handled (-want +got):\n%s", diff)
	}
	if n := len(dlq(t, ctx, js)); n != 0 {
		t.Errorf("%d dead letters; want none (the poison message is terminated)", n)
	}
	c, err := js.Consumer(ctx, "PLAIN", "plain")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.AckFloor.Stream != 3 {
		t.Errorf("consumer: %d pending, %d ack pending, ack floor %d; want all three settled", info.NumPending, info.NumAckPending, info.AckFloor.Stream)
	}
}
