package quota_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/internal/workloads"
	"github.com/sluice-dev/sluice/services/quota"
)

type harness struct {
	t    *testing.T
	ctx  context.Context
	js   jetstream.JetStream
	led  jetstream.KeyValue
	wls  jetstream.KeyValue
	pub  *bus.JetStreamPublisher
	mu   sync.Mutex
	evs  []events.QuotaReleasedV1
	logs *lines
}

type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, string(p))
	return len(p), nil
}

func (l *lines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

func newHarness(t *testing.T, reconcile time.Duration) *harness {
	t.Helper()
	return newHarnessAfter(t, reconcile, nil)
}

// newHarnessAfter is newHarness that runs before, if set, before the
// quota service starts.
func newHarnessAfter(t *testing.T, reconcile time.Duration, before func(h *harness)) *harness {
	t.Helper()
	return newHarnessWith(t, quota.Config{Reconcile: reconcile}, before)
}

// newHarnessWith is newHarnessAfter with a whole configuration.
func newHarnessWith(t *testing.T, cfg quota.Config, before func(h *harness)) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: ctx, js: js, pub: bus.NewPublisher(js, events.Source("job")), logs: &lines{}}
	var err error
	if h.led, err = bus.OpenKV(ctx, js, ledger.Bucket); err != nil {
		t.Fatal(err)
	}
	if h.wls, err = bus.OpenKV(ctx, js, workloads.Bucket); err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SubjectFilter("quota", "released", "", "")},
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		env, err := events.DecodeParts(m.Subject(), m.Headers(), m.Data())
		var ev events.QuotaReleasedV1
		if err == nil {
			err = env.As(&ev)
		}
		if err != nil {
			t.Errorf("released event: %v", err)
			return
		}
		h.mu.Lock()
		h.evs = append(h.evs, ev)
		h.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	if before != nil {
		before(h)
	}

	s, err := quota.New(cfg, js, bus.NewPublisher(js, events.Source("quota")), quota.WithLogger(zerolog.New(h.logs)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("quota Run: %v", err)
		}
	})
	return h
}

func ref(name string) events.WorkloadRef {
	return events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: name, UID: "uid-" + name}
}

// reservation is what an admission replica writes for a workload.
func reservation(name string, count int32) ledger.Reservation {
	return ledger.Reservation{
		ClusterQueue: "cq",
		UID:          ref(name).UID,
		PodSets:      []engine.PodSetAssignment{{Name: "main", Count: count, Flavors: map[string]string{"cpu": "default"}}},
		AdmittedAt:   time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC),
	}
}

// heldAdmission names the admission reservation writes.
const heldAdmission = "2025-06-07T08:09:10Z"

// hold writes reservations for the named workloads, and their records.
func (h *harness) hold(names ...string) {
	h.t.Helper()
	res := map[string]ledger.Reservation{}
	for i, n := range names {
		res[workloads.EngineKey(ref(n))] = reservation(n, int32(i+1))
		if _, err := h.wls.Put(h.ctx, workloads.Key(ref(n)), []byte(`{}`)); err != nil {
			h.t.Fatal(err)
		}
	}
	if _, err := ledger.NewWriter(h.js).Reserve(h.ctx, "cq/cq", 0, res); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) held() []string {
	h.t.Helper()
	snap, err := ledger.Read(h.ctx, h.led)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, n := range []string{"a", "b", "c", "orphan"} {
		if _, ok := snap.Reservations[workloads.EngineKey(ref(n))]; ok {
			out = append(out, n)
		}
	}
	return out
}

func (h *harness) released() []events.QuotaReleasedV1 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]events.QuotaReleasedV1(nil), h.evs...)
}

func (h *harness) publish(ev events.Event, id string) {
	h.t.Helper()
	if err := h.pub.Publish(h.ctx, ev, id); err != nil {
		h.t.Fatal(err)
	}
}

func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cond()
}

func TestReleases(t *testing.T) {
	stopped := func(n string) events.Event {
		return events.WorkloadStoppedV1{Workload: ref(n), ClusterQueue: "cq", Reason: "Preempted", Admission: reservation(n, 1).Admission()}
	}
	stoppedFrom := func(n, admission string) events.Event {
		return events.WorkloadStoppedV1{Workload: ref(n), ClusterQueue: "cq", Reason: "Preempted", Admission: admission}
	}
	recreated := func(n string) events.WorkloadRef { r := ref(n); r.UID = "uid-of-an-older-" + n; return r }
	finished := func(n string) events.Event {
		return events.WorkloadFinishedV1{Workload: ref(n), ClusterQueue: "cq", Succeeded: true}
	}
	deleted := func(n string) events.Event { return events.WorkloadDeletedV1{Workload: ref(n)} }
	cases := []struct {
		name string
		// publish these, in order, each under its own id
		events       []events.Event
		wantHeld     []string
		wantReleased []string
	}{
		{name: "stopped", events: []events.Event{stopped("b")}, wantHeld: []string{"a", "c"}, wantReleased: []string{"b"}},
		{name: "finished", events: []events.Event{finished("a")}, wantHeld: []string{"b", "c"}, wantReleased: []string{"a"}},
		{name: "deleted", events: []events.Event{deleted("c")}, wantHeld: []string{"a", "b"}, wantReleased: []string{"c"}},
		{
			name:         "stopped, then finished, then deleted: released once",
			events:       []events.Event{stopped("a"), finished("a"), deleted("a")},
			wantHeld:     []string{"b", "c"},
			wantReleased: []string{"a"},
		},
		{
			name:         "several workloads",
			events:       []events.Event{finished("a"), finished("c")},
			wantHeld:     []string{"b"},
			wantReleased: []string{"a", "c"},
		},
		{name: "a workload holding nothing", events: []events.Event{finished("nobody")}, wantHeld: []string{"a", "b", "c"}},
		{
			name:     "a stop of an earlier admission leaves the current one booked",
			events:   []events.Event{stoppedFrom("b", "2025-06-07T08:00:00Z")},
			wantHeld: []string{"a", "b", "c"},
		},
		{
			name:     "a stop from no admission releases nothing",
			events:   []events.Event{stoppedFrom("b", "")},
			wantHeld: []string{"a", "b", "c"},
		},
		{
			name:     "the end of an older job of the same name leaves the new one booked",
			events:   []events.Event{events.WorkloadFinishedV1{Workload: recreated("a"), ClusterQueue: "cq"}, events.WorkloadDeletedV1{Workload: recreated("c")}},
			wantHeld: []string{"a", "b", "c"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each stop waits out the consumer's pull (2s)
			h := newHarness(t, time.Hour)
			h.hold("a", "b", "c")
			for i, ev := range tc.events {
				h.publish(ev, events.ID(ev.Type(), ev.CESubject(), i))
			}
			// A marker in another ClusterQueue is released too; the events
			// are done once the consumer has every one acknowledged.
			h.hold2("marker")
			h.publish(finished("marker"), "marker")
			if !waitFor(10*time.Second, func() bool { return !h.holds("marker") && h.consumed() }) {
				t.Fatal("quota accounting did not handle the events")
			}
			waitFor(2*time.Second, func() bool { return len(h.released()) >= len(tc.wantReleased)+1 })
			if d := cmp.Diff(tc.wantHeld, h.held()); d != "" {
				t.Errorf("held after the events (-want +got):\n%s", d)
			}
			var want []events.QuotaReleasedV1
			for _, n := range tc.wantReleased {
				want = append(want, events.QuotaReleasedV1{Workload: ref(n), ClusterQueue: "cq", Admission: heldAdmission})
			}
			want = append(want, events.QuotaReleasedV1{Workload: ref("marker"), ClusterQueue: "other", Admission: heldAdmission})
			// Releases of different workloads run side by side.
			byName := cmpopts.SortSlices(func(a, b events.QuotaReleasedV1) bool { return a.Workload.Name < b.Workload.Name })
			if d := cmp.Diff(want, h.released(), byName); d != "" {
				t.Errorf("released events (-want +got):\n%s", d)
			}
		})
	}
}

// consumed reports whether quota accounting's consumer has acknowledged
// every event of its subjects.
func (h *harness) consumed() bool {
	c, err := h.js.Consumer(h.ctx, bus.StreamEvents, "quota")
	if err != nil {
		return false
	}
	info, err := c.Info(h.ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

// hold2 reserves for a workload in a second ledger key.
func (h *harness) hold2(name string) {
	h.t.Helper()
	r := reservation(name, 1)
	r.ClusterQueue = "other"
	if _, err := h.wls.Put(h.ctx, workloads.Key(ref(name)), []byte(`{}`)); err != nil {
		h.t.Fatal(err)
	}
	if _, err := ledger.NewWriter(h.js).Reserve(h.ctx, "cq/other", 0, map[string]ledger.Reservation{workloads.EngineKey(ref(name)): r}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) holds(name string) bool {
	_, ok, err := ledger.Get(h.ctx, h.led, workloads.EngineKey(ref(name)))
	if err != nil {
		h.t.Fatal(err)
	}
	return ok
}

// TestReconcileReleasesOrphans: a reservation whose workload record is
// gone (its finished event lost or not handled yet) is released by the
// reconciliation, and the release is announced like any other.
func TestReconcileReleasesOrphans(t *testing.T) {
	h := newHarness(t, 20*time.Millisecond)
	h.hold("a", "orphan")
	if err := h.wls.Delete(h.ctx, workloads.Key(ref("orphan"))); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { return len(h.held()) == 1 }) {
		t.Fatalf("orphan's reservation not released by reconciliation; held: %v", h.held())
	}
	if d := cmp.Diff([]string{"a"}, h.held()); d != "" {
		t.Errorf("held (-want +got):\n%s", d)
	}
	if !waitFor(time.Second, func() bool { return len(h.released()) > 0 }) {
		t.Errorf("no dev.sluice.quota.v1.released event for the reconciled release of job/team-a/orphan; quota logged: %v", h.logs.all())
		return
	}
	want := []events.QuotaReleasedV1{{Workload: ref("orphan"), ClusterQueue: "cq", Admission: heldAdmission}}
	if d := cmp.Diff(want, h.released()); d != "" {
		t.Errorf("released events (-want +got):\n%s", d)
	}
}

// TestReconcileReleasesAnEarlierWorkloadsReservation: the record of a job
// that came back to its queue names a new workload (uid-orphan_1); the
// reservation of the earlier one (uid-orphan) is an orphan all the same,
// while a reservation whose record names its own workload is kept.
func TestReconcileReleasesAnEarlierWorkloadsReservation(t *testing.T) {
	h := newHarness(t, 20*time.Millisecond)
	h.hold("a", "orphan")
	for name, uid := range map[string]string{"a": "uid-a", "orphan": "uid-orphan_1"} {
		rec := fmt.Sprintf(`{"workload":{"kind":"job","namespace":"team-a","name":%q,"uid":%q}}`, name, uid)
		if _, err := h.wls.Put(h.ctx, workloads.Key(ref(name)), []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(5*time.Second, func() bool { return len(h.held()) == 1 }) {
		t.Fatalf("the earlier workload's reservation not released by reconciliation; held: %v", h.held())
	}
	if d := cmp.Diff([]string{"a"}, h.held()); d != "" {
		t.Errorf("held (-want +got):\n%s", d)
	}
}

// TestEachAdmissionReleasedIsItsOwnEvent: a workload admitted again to the
// same ClusterQueue and stopped again is released again, under another
// id (so the stream keeps both), naming the admission each time.
func TestEachAdmissionReleasedIsItsOwnEvent(t *testing.T) {
	h := newHarness(t, time.Hour)
	stop := func(admission string) events.Event {
		return events.WorkloadStoppedV1{Workload: ref("a"), ClusterQueue: "cq", Reason: "Preempted", Admission: admission}
	}
	h.hold("a")
	h.publish(stop(heldAdmission), "stop-1")
	if !waitFor(10*time.Second, func() bool { return len(h.released()) == 1 }) {
		t.Fatalf("first release: got %v", h.released())
	}
	again := reservation("a", 1)
	again.AdmittedAt = again.AdmittedAt.Add(time.Minute)
	snap, err := ledger.Read(h.ctx, h.led)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.NewWriter(h.js).Reserve(h.ctx, "cq/cq", snap.Trees[ledger.TreeKey("cq/cq")], map[string]ledger.Reservation{workloads.EngineKey(ref("a")): again}); err != nil {
		t.Fatal(err)
	}
	h.publish(stop(again.Admission()), "stop-2")
	waitFor(10*time.Second, func() bool { return len(h.released()) == 2 })
	want := []events.QuotaReleasedV1{
		{Workload: ref("a"), ClusterQueue: "cq", Admission: heldAdmission},
		{Workload: ref("a"), ClusterQueue: "cq", Admission: again.Admission()},
	}
	if d := cmp.Diff(want, h.released()); d != "" {
		t.Errorf("released events (-want +got):\n%s", d)
	}
}

// TestReleasesAreNeverGivenUp: the release consumer retries a failing
// release forever (the bus runs such a consumer past any outage,
// TestRetryForeverOutlastsAnOutage); with the default, ten failures
// parked the release and the quota stayed booked.
func TestReleasesAreNeverGivenUp(t *testing.T) {
	if got := quota.ReleaseConsumer().MaxDeliver; got != bus.RetryForever {
		t.Errorf("release consumer MaxDeliver = %d, want RetryForever", got)
	}
}

// TestReconcileReleasesWhatSluiceStopped: a job Sluice stopped (its fence
// stops the admission, and the stop is announced) whose release was lost
// (dead-lettered by a Sluice that still gave up on releases) has its
// quota released by the reconciliation, under the stop's id; a job whose
// stop is decided but not yet announced, still running, keeps its quota.
func TestReconcileReleasesWhatSluiceStopped(t *testing.T) {
	const stopID = "stopped-a"
	h := newHarnessAfter(t, 20*time.Millisecond, func(h *harness) {
		h.hold("a", "b")
		fk, err := bus.OpenKV(h.ctx, h.js, fence.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"a", "b"} {
			if err := fence.Stop(h.ctx, fk, workloads.Key(ref(n)), heldAdmission, "preempt-"+n); err != nil {
				t.Fatal(err)
			}
		}
		// a's stop was announced, and its release given up on: the
		// consumer acknowledged it without releasing.
		h.publish(events.WorkloadStoppedV1{Workload: ref("a"), ClusterQueue: "cq", Reason: "Preempted", Admission: heldAdmission}, stopID)
		spec := quota.ReleaseConsumer()
		cons, err := h.js.CreateOrUpdateConsumer(h.ctx, spec.Stream, spec.ConsumerConfig())
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			if err := m.Term(); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != 1 {
			t.Fatalf("fetched %d stop events, want 1", n)
		}
	})
	if !waitFor(5*time.Second, func() bool { return len(h.held()) == 1 }) {
		t.Fatalf("a's reservation not released by reconciliation; held: %v", h.held())
	}
	if d := cmp.Diff([]string{"b"}, h.held()); d != "" {
		t.Errorf("held (-want +got):\n%s", d)
	}
	if !waitFor(time.Second, func() bool { return len(h.released()) > 0 }) {
		t.Fatalf("no released event for a; quota logged: %v", h.logs.all())
	}
	want := []events.QuotaReleasedV1{{Workload: ref("a"), ClusterQueue: "cq", Admission: heldAdmission}}
	if d := cmp.Diff(want, h.released()); d != "" {
		t.Errorf("released events (-want +got):\n%s", d)
	}
}

// TestFencesOutliveEveryRetry: the fence of an ended job is kept while a
// consumer that may still stop it holds a message stored before the end
// (a preemption decided before it, retried with backoff), and while its
// reservation is held; then it is collected.
func TestFencesOutliveEveryRetry(t *testing.T) {
	var pending jetstream.Msg
	var fk jetstream.KeyValue
	h := newHarnessWith(t, quota.Config{Reconcile: 20 * time.Millisecond, FenceAge: time.Millisecond}, func(h *harness) {
		var err error
		if fk, err = bus.OpenKV(h.ctx, h.js, fence.Bucket); err != nil {
			t.Fatal(err)
		}
		// A preemption decided while a ran, not handled yet.
		cons, err := h.js.CreateOrUpdateConsumer(h.ctx, bus.StreamEvents, jetstream.ConsumerConfig{
			Durable: "preemption", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
			FilterSubjects: []string{events.SubjectFilter("preemption", "requested", "*", "*")},
		})
		if err != nil {
			t.Fatal(err)
		}
		h.publish(events.PreemptionRequestedV1{Preemptor: ref("p"), ClusterQueue: "cq",
			Victims: []events.VictimV1{{Workload: ref("a"), ClusterQueue: "cq", Reason: "InClusterQueue"}}}, "preempt-a")
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			pending = m
		}
		if pending == nil {
			t.Fatal("the preemption request was not delivered")
		}
		for _, n := range []string{"a", "b"} {
			if err := fence.Finish(h.ctx, fk, workloads.Key(ref(n)), heldAdmission, ref(n).UID, &fence.End{Succeeded: true}); err != nil {
				t.Fatal(err)
			}
		}
		// b's end is not accounted for yet: its quota is still held.
		h.hold("b")
	})
	exists := func(n string) bool {
		st, err := fence.Get(h.ctx, fk, workloads.Key(ref(n)))
		if err != nil {
			t.Fatal(err)
		}
		return st.Phase != ""
	}
	time.Sleep(500 * time.Millisecond) // many reconciliations
	if !exists("a") || !exists("b") {
		t.Fatalf("fences collected while a preemption stored before the ends is unhandled: a %t, b %t", exists("a"), exists("b"))
	}
	if err := pending.Ack(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { return !exists("a") }) {
		t.Fatal("a's fence not collected once every stop consumer handled the stream past its end")
	}
	time.Sleep(200 * time.Millisecond)
	if !exists("b") {
		t.Error("b's fence collected while its reservation is held")
	}
}
