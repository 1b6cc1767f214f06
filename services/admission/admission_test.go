package admission_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/workloads"
	"github.com/sluice-dev/sluice/services/admission"
)

const (
	ns = "team-a"
	// waitFor bounds every poll; a healthy service answers in milliseconds.
	waitFor = 10 * time.Second
)

// now is the admission service's clock in these tests, so reservations
// compare exactly.
var now = time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)

// harness is one JetStream server with Sluice's streams and buckets, a
// recorder of every workload and preemption event, and (once started) an
// admission service.
type harness struct {
	// clock and pendingInterval, when set, replace the fixed clock and the
	// default pending interval.
	clock           func() time.Time
	pendingInterval time.Duration
	// podsReady, when set, turns waitForPodsReady on.
	podsReady *engine.WaitForPodsReady
	// afs, when set, turns Admission Fair Sharing on.
	afs *engine.AdmissionFairSharing

	t     *testing.T
	ctx   context.Context
	js    jetstream.JetStream
	cfg   jetstream.KeyValue
	wls   jetstream.KeyValue
	led   jetstream.KeyValue
	recs  map[string]events.WorkloadSubmittedV1
	mu    sync.Mutex
	evs   []events.Envelope
	stopF func()
	// wrap, if set, wraps the publisher of the services started next.
	wrap func(events.Publisher) events.Publisher
	// svc is the service started last.
	svc *admission.Service
	// tracer, when set, records the spans of the services started next.
	tracer *tracing.Tracer
	// queriesPerSecond, when set, bounds the next services' queries.
	queriesPerSecond int
	// replica, when set, names the services started next.
	replica string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("bus.Setup: %v", err)
	}
	h := &harness{t: t, ctx: ctx, js: js, recs: map[string]events.WorkloadSubmittedV1{}}
	var err error
	for name, kv := range map[string]*jetstream.KeyValue{configstore.Bucket: &h.cfg, workloads.Bucket: &h.wls, ledger.Bucket: &h.led} {
		if *kv, err = bus.OpenKV(ctx, js, name); err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
	}
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{
			events.SubjectFilter("workload", "", "", ""),
			events.SubjectFilter("preemption", "", "", ""),
		},
	})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		env, err := events.DecodeParts(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Errorf("undecodable event on %s: %v", m.Subject(), err)
			return
		}
		h.mu.Lock()
		h.evs = append(h.evs, env)
		h.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	t.Cleanup(cc.Stop)
	return h
}

// start runs an admission service until the test ends.
func (h *harness) start() {
	h.t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(h.t)).Level(zerolog.WarnLevel)
	var pub events.Publisher = bus.NewPublisher(h.js, events.Source("admission"))
	if h.wrap != nil {
		pub = h.wrap(pub)
	}
	clock := h.clock
	if clock == nil {
		clock = func() time.Time { return now }
	}
	s, err := admission.New(admission.Config{Interval: 5 * time.Millisecond, PendingInterval: h.pendingInterval, WaitForPodsReady: h.podsReady,
		AdmissionFairSharing: h.afs,
		QueriesPerSecond:     h.queriesPerSecond, Replica: h.replica}, h.js, pub,
		admission.WithClock(clock), admission.WithLogger(log), admission.WithTracer(h.tracer))
	if err != nil {
		h.t.Fatalf("admission.New: %v", err)
	}
	h.svc = s
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	h.stopF = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("admission Run: %v", err)
			}
		})
	}
	h.t.Cleanup(h.stopF)
}

func (h *harness) put(kv jetstream.KeyValue, key string, v any) {
	h.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := kv.Put(h.ctx, key, b); err != nil {
		h.t.Fatalf("put %s: %v", key, err)
	}
}

func ref(name string) events.WorkloadRef {
	return events.WorkloadRef{Kind: "job", Namespace: ns, Name: name, UID: "uid-" + name}
}

func key(name string) string { return workloads.EngineKey(ref(name)) }

// --- configuration ---

func flavor(name string) v1beta1.ResourceFlavor {
	return v1beta1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// clusterQueue has nominal cpu quota in flavor "default" and selects every
// namespace.
func clusterQueue(name, cpu string, preemption *v1beta1.ClusterQueuePreemption) v1beta1.ClusterQueue {
	return v1beta1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1beta1.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			Preemption:        preemption,
			ResourceGroups: []v1beta1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{"cpu"},
				Flavors: []v1beta1.FlavorQuotas{{Name: "default", Resources: []v1beta1.ResourceQuota{
					{Name: "cpu", NominalQuota: resource.MustParse(cpu)},
				}}},
			}},
		},
	}
}

func localQueue(name, cq string) v1beta1.LocalQueue {
	return v1beta1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1beta1.LocalQueueSpec{ClusterQueue: cq},
	}
}

// configure writes a flavor "default", ClusterQueue "cq" with cpu quota,
// and LocalQueue team-a/main pointing at it.
func (h *harness) configure(cpu string, preemption *v1beta1.ClusterQueuePreemption) {
	h.put(h.cfg, configstore.Key(configstore.KindResourceFlavor, "", "default"), flavor("default"))
	h.put(h.cfg, configstore.Key(configstore.KindClusterQueue, "", "cq"), clusterQueue("cq", cpu, preemption))
	h.put(h.cfg, configstore.Key(configstore.KindLocalQueue, ns, "main"), localQueue("main", "cq"))
}

// --- the job integration's side ---

// submit writes the workload record of a job whose single pod set has
// count pods of cpu each. Records are stamped one second apart in
// submission order, so queue order is submission order.
func (h *harness) submit(name, queue string, priority int32, count int32, cpu string, with ...func(*events.WorkloadSubmittedV1)) {
	h.t.Helper()
	rec := events.WorkloadSubmittedV1{
		Workload:     ref(name),
		LocalQueue:   queue,
		Priority:     priority,
		CreationTime: now.Add(time.Duration(len(h.recs)) * time.Second),
		PodSets:      []events.PodSetV1{{Name: "main", Count: count, Requests: map[string]string{"cpu": cpu}}},
	}
	for _, f := range with {
		f(&rec)
	}
	h.recs[name] = rec
	h.put(h.wls, workloads.Key(rec.Workload), rec)
}

// reprioritize changes the priority in a workload's record, as the job
// integration does when the priority class label changes.
func (h *harness) reprioritize(name string, priority int32) {
	h.t.Helper()
	rec := h.recs[name]
	rec.Priority, rec.PriorityClass = priority, fmt.Sprintf("class-%d", priority)
	h.recs[name] = rec
	h.put(h.wls, workloads.Key(rec.Workload), rec)
}

// release removes a workload's reservation as quota accounting does.
func (h *harness) release(name string) {
	h.t.Helper()
	if _, ok, err := ledger.NewWriter(h.js).Release(h.ctx, h.led, key(name), "finished "+name); err != nil || !ok {
		h.t.Fatalf("Release(%s) = (%v, %v), want (true, nil)", name, ok, err)
	}
}

// finish deletes the record, as the job integration does for a finished
// job, then releases the reservation, as quota accounting does next.
func (h *harness) finish(name string) {
	h.t.Helper()
	if err := h.wls.Delete(h.ctx, workloads.Key(ref(name))); err != nil {
		h.t.Fatalf("delete record %s: %v", name, err)
	}
	h.release(name)
}

// --- observations ---

// reservations reads the whole ledger: workload key → reservation. A
// corrupt reservation, which some tests write, is left out.
func (h *harness) reservations() map[string]ledger.Reservation {
	h.t.Helper()
	snap, err := ledger.Read(h.ctx, h.led)
	if err != nil && !errors.Is(err, ledger.ErrCorrupt) {
		h.t.Fatalf("read ledger: %v", err)
	}
	out := map[string]ledger.Reservation{}
	for wk, r := range snap.Reservations {
		out[wk] = r.Reservation
	}
	return out
}

// reserve books reservations in cq's tree as another replica would, at
// the tree's current revision.
func (h *harness) reserve(res map[string]ledger.Reservation) {
	h.t.Helper()
	if _, err := ledger.NewWriter(h.js).Reserve(h.ctx, "cq/cq", h.revision(ledger.TreeKey("cq/cq")), res); err != nil {
		h.t.Fatalf("reserve %v: %v", names(res), err)
	}
}

// eventsOf decodes the recorded events of one type, in stream order.
func eventsOf[T events.Event](h *harness) []T {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []T
	for _, env := range h.evs {
		var ev T
		if env.Type != ev.Type() {
			continue
		}
		if err := env.As(&ev); err != nil {
			h.t.Errorf("event %s: %v", env.ID, err)
			continue
		}
		out = append(out, ev)
	}
	return out
}

// lastPending is the latest pending event about a workload.
func (h *harness) lastPending(name string) (events.WorkloadPendingV1, bool) {
	var last events.WorkloadPendingV1
	found := false
	for _, ev := range eventsOf[events.WorkloadPendingV1](h) {
		if ev.Workload.Name == name {
			last, found = ev, true
		}
	}
	return last, found
}

// movingClock gives the services started next a clock that stands at now
// until advance moves it.
func (h *harness) movingClock() (advance func(time.Duration)) {
	var mu sync.Mutex
	clock := now
	h.clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	return func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
}

// eventually polls cond until it holds, failing with its last report.
func (h *harness) eventually(what string, cond func() (bool, string)) {
	h.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not within %s; last: %s", what, waitFor, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expected is the reservation the service writes for a workload of the
// harness admitted to cq on flavor default with count pods: where, when,
// and what the workload asks for, so that any reader can account for it.
func (h *harness) expected(name string, count int32) ledger.Reservation {
	rec := h.recs[name]
	r := ledger.Reservation{
		ClusterQueue: "cq",
		PodSets:      []engine.PodSetAssignment{{Name: "main", Count: count, Flavors: map[string]string{"cpu": "default"}}},
		AdmittedAt:   now,
		UID:          rec.Workload.UID,
		Requests:     map[string]map[string]string{},
		LocalQueue:   rec.LocalQueue,
		Priority:     rec.Priority,
		Submitted:    rec.CreationTime,
	}
	for _, ps := range rec.PodSets {
		r.Requests[ps.Name] = ps.Requests
	}
	return r
}

// --- steps ---

type step struct {
	name string
	do   func(h *harness)
}

func submit(name, queue string, priority, count int32, cpu string) step {
	return step{fmt.Sprintf("submit %s (%d×%s cpu, priority %d, queue %s)", name, count, cpu, priority, queue),
		func(h *harness) { h.submit(name, queue, priority, count, cpu) }}
}

func reprioritize(name string, priority int32) step {
	return step{fmt.Sprintf("change %s's priority to %d", name, priority), func(h *harness) { h.reprioritize(name, priority) }}
}

func release(name string) step {
	return step{"release " + name + " (stopped: record kept)", func(h *harness) { h.release(name) }}
}

func finish(name string) step {
	return step{"finish " + name + " (record deleted, reservation released)", func(h *harness) { h.finish(name) }}
}

func putLocalQueue(name string) step {
	return step{"create LocalQueue " + name, func(h *harness) {
		h.put(h.cfg, configstore.Key(configstore.KindLocalQueue, ns, name), localQueue(name, "cq"))
	}}
}

// ledgerIs waits until the ledger holds exactly these reservations
// (workload name → pod count).
func ledgerIs(want map[string]int32) step {
	return step{fmt.Sprintf("ledger holds %v", want), func(h *harness) {
		w := map[string]ledger.Reservation{}
		for name, count := range want {
			w[key(name)] = h.expected(name, count)
		}
		var diff string
		h.eventually("ledger", func() (bool, string) {
			diff = cmp.Diff(w, h.reservations())
			return diff == "", "(-want +got):\n" + diff
		})
	}}
}

// admitted waits for the admitted event of a workload.
func admitted(name string, count int32) step {
	return step{"admitted event for " + name, func(h *harness) {
		want := events.WorkloadAdmittedV1{Workload: ref(name), ClusterQueue: "cq",
			PodSets:   []events.PodSetAssignmentV1{{Name: "main", Count: count, Flavors: map[string]string{"cpu": "default"}}},
			Admission: ledger.Reservation{AdmittedAt: now}.Admission()}
		h.eventually("admitted event for "+name, func() (bool, string) {
			var got []events.WorkloadAdmittedV1
			for _, ev := range eventsOf[events.WorkloadAdmittedV1](h) {
				if ev.Workload.Name == name {
					got = append(got, ev)
				}
			}
			if len(got) == 0 {
				return false, "none"
			}
			d := cmp.Diff(want, got[len(got)-1])
			return d == "", "(-want +got):\n" + d
		})
	}}
}

// pending waits until the latest pending event of a workload says reason.
func pending(name, cq, reason string) step {
	return step{fmt.Sprintf("%s pending: %q", name, reason), func(h *harness) {
		want := events.WorkloadPendingV1{Workload: ref(name), ClusterQueue: cq, Reason: reason}
		h.eventually("pending event for "+name, func() (bool, string) {
			got, ok := h.lastPending(name)
			if !ok {
				return false, "no pending event"
			}
			d := cmp.Diff(want, got)
			return d == "", "(-want +got):\n" + d
		})
	}}
}

// preemptionRequested waits for a request by preemptor naming victims.
func preemptionRequested(preemptor string, victims ...string) step {
	return step{fmt.Sprintf("%s requests preemption of %v", preemptor, victims), func(h *harness) {
		// Each victim is named with the admission it holds, the one chosen.
		held := h.reservations()
		want := events.PreemptionRequestedV1{Preemptor: ref(preemptor), ClusterQueue: "cq"}
		for _, v := range victims {
			want.Victims = append(want.Victims, events.VictimV1{Workload: ref(v), ClusterQueue: "cq", Reason: engine.ReasonInClusterQueue,
				Admission: held[workloads.EngineKey(ref(v))].Admission()})
		}
		h.eventually("preemption request", func() (bool, string) {
			got := eventsOf[events.PreemptionRequestedV1](h)
			if len(got) == 0 {
				return false, "none"
			}
			d := cmp.Diff([]events.PreemptionRequestedV1{want}, got)
			return d == "", "(-want +got):\n" + d
		})
	}}
}

// noPreemption checks that no preemption was requested so far.
func noPreemption() step {
	return step{"no preemption requested", func(h *harness) {
		if got := eventsOf[events.PreemptionRequestedV1](h); len(got) > 0 {
			h.t.Errorf("preemption requested: %+v", got)
		}
	}}
}

// --- scenarios ---

func TestAdmission(t *testing.T) {
	lowerPriority := &v1beta1.ClusterQueuePreemption{WithinClusterQueue: v1beta1.PreemptionLowerPriority}
	cases := []struct {
		name       string
		quota      string
		preemption *v1beta1.ClusterQueuePreemption
		steps      []step
	}{
		{
			name:  "admits into free quota and reserves exactly that",
			quota: "4",
			steps: []step{
				submit("a", "main", 0, 2, "1"),
				submit("b", "main", 0, 1, "2"),
				ledgerIs(map[string]int32{"a": 2, "b": 1}),
				admitted("a", 2),
				admitted("b", 1),
			},
		},
		{
			name:  "a workload that does not fit waits with the engine's reason",
			quota: "4",
			steps: []step{
				submit("a", "main", 0, 3, "1"),
				ledgerIs(map[string]int32{"a": 3}),
				submit("b", "main", 0, 1, "2"),
				pending("b", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1"),
				ledgerIs(map[string]int32{"a": 3}),
			},
		},
		{
			name:  "a workload larger than the queue can ever hold says so",
			quota: "4",
			steps: []step{
				submit("huge", "main", 0, 5, "1"),
				pending("huge", "cq", "pod set main: insufficient quota for cpu in flavor default: requested 5, more than the ClusterQueue can ever use (4)"),
				submit("small", "main", 0, 1, "1"),
				ledgerIs(map[string]int32{"small": 1}),
			},
		},
		{
			name:  "a finished workload's released reservation lets the next in",
			quota: "4",
			steps: []step{
				submit("a", "main", 0, 4, "1"),
				ledgerIs(map[string]int32{"a": 4}),
				submit("b", "main", 0, 2, "1"),
				pending("b", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0"),
				finish("a"),
				ledgerIs(map[string]int32{"b": 2}),
				admitted("b", 2),
			},
		},
		{
			name:  "a stopped workload's released reservation requeues it ahead of newer ones",
			quota: "4",
			steps: []step{
				submit("a", "main", 0, 4, "1"),
				ledgerIs(map[string]int32{"a": 4}),
				submit("b", "main", 0, 2, "1"),
				pending("b", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0"),
				release("a"),
				ledgerIs(map[string]int32{"a": 4}),
				pending("b", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0"),
			},
		},
		{
			name:  "a missing LocalQueue is named, and creating it admits",
			quota: "4",
			steps: []step{
				submit("lost", "elsewhere", 0, 1, "1"),
				pending("lost", "", "LocalQueue team-a/elsewhere does not exist"),
				ledgerIs(map[string]int32{}),
				putLocalQueue("elsewhere"),
				ledgerIs(map[string]int32{"lost": 1}),
				admitted("lost", 1),
			},
		},
		{
			name:       "a higher priority preempts within the ClusterQueue once the victim is gone",
			quota:      "4",
			preemption: lowerPriority,
			steps: []step{
				submit("low", "main", 0, 4, "1"),
				ledgerIs(map[string]int32{"low": 4}),
				submit("high", "main", 100, 4, "1"),
				preemptionRequested("high", "low"),
				pending("high", "cq", "waiting for 1 preempted workload(s) to release quota"),
				ledgerIs(map[string]int32{"low": 4}),
				release("low"),
				ledgerIs(map[string]int32{"high": 4}),
				admitted("high", 4),
				pending("low", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 0"),
			},
		},
		{
			name:  "a priority raised while queued moves the workload ahead",
			quota: "4",
			steps: []step{
				submit("a", "main", 0, 4, "1"),
				ledgerIs(map[string]int32{"a": 4}),
				submit("b", "main", 0, 3, "1"),
				submit("c", "main", 0, 3, "1"),
				pending("c", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 3, available 0"),
				reprioritize("c", 10),
				finish("a"),
				ledgerIs(map[string]int32{"c": 3}),
				admitted("c", 3),
			},
		},
		{
			name:       "a priority raised while admitted protects the workload from preemption",
			quota:      "4",
			preemption: lowerPriority,
			steps: []step{
				submit("low", "main", 0, 4, "1"),
				ledgerIs(map[string]int32{"low": 4}),
				reprioritize("low", 200),
				submit("high", "main", 100, 4, "1"),
				pending("high", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 0"),
				noPreemption(),
			},
		},
		{
			name:  "without a preemption policy a higher priority waits",
			quota: "4",
			steps: []step{
				submit("low", "main", 0, 4, "1"),
				ledgerIs(map[string]int32{"low": 4}),
				submit("high", "main", 100, 4, "1"),
				pending("high", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 0"),
				ledgerIs(map[string]int32{"low": 4}),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.configure(tc.quota, tc.preemption)
			h.start()
			for _, s := range tc.steps {
				t.Logf("step: %s", s.name)
				s.do(h)
			}
			h.checkAdmittedEventsMatchLedger()
		})
	}
}

// checkAdmittedEventsMatchLedger: every reservation in the ledger was
// announced, and nothing was announced twice for one reservation.
func (h *harness) checkAdmittedEventsMatchLedger() {
	h.t.Helper()
	ids := map[string]int{}
	h.mu.Lock()
	for _, env := range h.evs {
		if env.Type == events.TypeWorkloadAdmittedV1 {
			ids[env.ID]++
		}
	}
	h.mu.Unlock()
	for id, n := range ids {
		if n > 1 {
			h.t.Errorf("admitted event %s stored %d times", id, n)
		}
	}
	// The announcement follows the ledger write: wait for it.
	h.eventually("every reservation announced", func() (bool, string) {
		got := map[string]bool{}
		for _, ev := range eventsOf[events.WorkloadAdmittedV1](h) {
			got[workloads.EngineKey(ev.Workload)] = true
		}
		var missing []string
		for wk := range h.reservations() {
			if !got[wk] {
				missing = append(missing, wk)
			}
		}
		sort.Strings(missing)
		return len(missing) == 0, "never announced: " + strings.Join(missing, ", ")
	})
}

// TestRestartRebuildsFromTheBuckets: a new replica finds reservations,
// records and configuration in JetStream, books what the ledger holds and
// admits nothing twice. The watchers deliver the three buckets in no fixed
// order, so the test restarts several times; every restart must leave the
// ledger as it was, announce nothing again, and explain a new workload.
func TestRestartRebuildsFromTheBuckets(t *testing.T) {
	h := newHarness(t)
	h.configure("4", nil)
	h.start()
	for _, s := range []step{
		submit("a", "main", 0, 2, "1"),
		submit("b", "main", 0, 2, "1"),
		ledgerIs(map[string]int32{"a": 2, "b": 2}),
		submit("c", "main", 0, 1, "1"),
		pending("c", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0"),
	} {
		s.do(h)
	}
	before := h.reservations()
	rev := h.revision(ledger.TreeKey("cq/cq"))
	const restarts = 6
	for i := range restarts {
		h.stopF()
		announced := len(eventsOf[events.WorkloadAdmittedV1](h))
		h.start()
		probe := fmt.Sprintf("probe%d", i)
		h.submit(probe, "main", 0, 1, "1")
		h.eventually(probe+" pending or admitted", func() (bool, string) {
			_, p := h.lastPending(probe)
			_, r := h.reservations()[key(probe)]
			return p || r, "neither"
		})
		after := h.reservations()
		if booked := bookedCPU(after, h.recs); booked > 4 {
			t.Errorf("restart %d: over-admission: the ledger books %v cpu of cq's 4: %v", i+1, booked, names(after))
		}
		if d := cmp.Diff(before, after); d != "" {
			t.Errorf("restart %d: ledger changed (-before +after):\n%s", i+1, d)
		}
		if got := h.revision(ledger.TreeKey("cq/cq")); got != rev {
			t.Errorf("restart %d: ledger key rewritten: revision %d → %d", i+1, rev, got)
			rev = got
		}
		if again := eventsOf[events.WorkloadAdmittedV1](h)[announced:]; len(again) > 0 {
			var ns []string
			for _, ev := range again {
				ns = append(ns, ev.Workload.Name)
			}
			t.Errorf("restart %d: admitted announced (again) for %v", i+1, ns)
		}
		if t.Failed() {
			return
		}
	}
	finish("a").do(h)
	ledgerIs(map[string]int32{"b": 2, "c": 1, "probe0": 1}).do(h)
}

// names lists the workloads of reservations, sorted.
func names(rs map[string]ledger.Reservation) []string {
	var out []string
	for wk := range rs {
		out = append(out, wk[strings.LastIndex(wk, "/")+1:])
	}
	sort.Strings(out)
	return out
}

// revision reads the revision of a tree key (0: never written).
func (h *harness) revision(key string) uint64 {
	h.t.Helper()
	snap, err := ledger.Read(h.ctx, h.led)
	if err != nil {
		h.t.Fatal(err)
	}
	return snap.Trees[key]
}

// TestReservationsOfUnknownWorkloadsHoldQuota: the ledger is the authority
// on used quota. A reservation whose workload record the service has not
// seen, or no longer sees, still takes quota: the job integration deletes
// a finished job's record before quota accounting releases its
// reservation, and the workload and ledger watchers deliver independently,
// so a replica can see another replica's reservation before the record.
func TestReservationsOfUnknownWorkloadsHoldQuota(t *testing.T) {
	// ghost holds all of cq's 4 cpu, written as a replica writes it.
	full := func(h *harness) map[string]ledger.Reservation {
		return map[string]ledger.Reservation{key("ghost"): h.expected("ghost", 4)}
	}
	cases := []struct {
		name string
		// before runs before the service starts, after once it runs.
		before, after func(h *harness)
	}{
		{
			name: "record deleted before the release, service restarted in between",
			before: func(h *harness) {
				h.submit("ghost", "main", 0, 4, "1")
				h.reserve(full(h))
				if err := h.wls.Delete(h.ctx, workloads.Key(ref("ghost"))); err != nil {
					h.t.Fatal(err)
				}
			},
		},
		{
			name: "another replica's reservation seen before its record",
			after: func(h *harness) {
				// The other replica admitted ghost from its record; this
				// replica's workload watcher has not delivered it yet.
				h.recs["ghost"] = events.WorkloadSubmittedV1{Workload: ref("ghost"), LocalQueue: "main", CreationTime: now.Add(-time.Hour),
					PodSets: []events.PodSetV1{{Name: "main", Count: 4, Requests: map[string]string{"cpu": "1"}}}}
				h.reserve(full(h))
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.configure("4", nil)
			if tc.before != nil {
				tc.before(h)
			}
			h.start()
			if tc.after != nil {
				tc.after(h)
			}
			h.submit("x", "main", 0, 2, "1")
			h.eventually("x pending or admitted", func() (bool, string) {
				_, p := h.lastPending("x")
				_, r := h.reservations()[key("x")]
				return p || r, "neither"
			})
			if _, r := h.reservations()[key("x")]; r {
				t.Errorf("x (2 cpu) was admitted while the ledger's reservation of ghost holds all 4 cpu of cq: ledger now books %v cpu of 4",
					bookedCPU(h.reservations(), h.recs))
			}
			if p, ok := h.lastPending("x"); ok {
				t.Logf("x pending: %s", p.Reason)
			}
		})
	}
}

// bookedCPU sums the cpu the reservations take, in cores.
func bookedCPU(rs map[string]ledger.Reservation, recs map[string]events.WorkloadSubmittedV1) float64 {
	var milli int64
	for wk, r := range rs {
		name := wk[strings.LastIndex(wk, "/")+1:]
		rec := recs[name]
		for _, psa := range r.PodSets {
			for _, ps := range rec.PodSets {
				if ps.Name == psa.Name {
					q := resource.MustParse(ps.Requests["cpu"])
					milli += q.MilliValue() * int64(psa.Count)
				}
			}
		}
	}
	return float64(milli) / 1000
}

// TestRestartWithReservationsDeliveredBeforeRecords: at start the three
// watchers deliver independently. Here the workload bucket is long (many
// records waiting for a LocalQueue that does not exist yet) and the
// admitted workload's record comes last, so the new replica sees the
// reservation before the record, and both before it has applied any
// configuration. The reservation must still hold its quota, and the
// workload must still be known.
func TestRestartWithReservationsDeliveredBeforeRecords(t *testing.T) {
	h := newHarness(t)
	h.configure("4", nil)
	h.start()
	for _, s := range []step{
		submit("a", "main", 0, 4, "1"),
		ledgerIs(map[string]int32{"a": 4}),
		submit("c", "main", 0, 1, "1"),
		pending("c", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0"),
	} {
		s.do(h)
	}
	h.stopF()
	for i := range 300 {
		h.submit(fmt.Sprintf("filler%03d", i), "later", 0, 1, "1")
	}
	// Write a's record again, unchanged, so it is the bucket's last.
	h.put(h.wls, workloads.Key(ref("a")), h.recs["a"])
	before := h.reservations()

	h.start()
	h.submit("probe", "main", 0, 1, "1")
	h.eventually("probe pending or admitted", func() (bool, string) {
		_, p := h.lastPending("probe")
		_, r := h.reservations()[key("probe")]
		return p || r, "neither"
	})
	after := h.reservations()
	if booked := bookedCPU(after, h.recs); booked > 4 {
		t.Errorf("over-admission after the restart: the ledger books %v cpu of cq's 4: %v", booked, names(after))
	}
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("ledger changed across the restart (-before +after):\n%s", d)
	}
	// a holds its reservation; finishing it must let c in, which shows
	// the new replica still tracks a.
	finish("a").do(h)
	h.eventually("c admitted after a finished", func() (bool, string) {
		_, ok := h.reservations()[key("c")]
		return ok, fmt.Sprint(names(h.reservations()))
	})
}

// within polls cond for up to d and reports whether it held.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cond()
}

// TestFinishedWorkloadIsNotAdmittedAgain follows a finished job the way
// the services see it: the job integration deletes the workload record and
// then publishes finished; quota accounting releases the reservation when
// the finished event arrives. The admission service's ledger and workload
// watchers deliver in no fixed order, so it may see the release before the
// deletion. A finished workload must not be admitted again.
func TestFinishedWorkloadIsNotAdmittedAgain(t *testing.T) {
	h := newHarness(t)
	h.configure("4", nil)
	h.start()
	for _, s := range []step{
		submit("a", "main", 0, 4, "1"),
		ledgerIs(map[string]int32{"a": 4}),
		admitted("a", 4),
		submit("b", "main", 0, 4, "1"),
		pending("b", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 0"),
	} {
		s.do(h)
	}
	first := h.reservations()[key("a")]
	if err := h.wls.Delete(h.ctx, workloads.Key(ref("a"))); err != nil { // the job integration, before publishing
		t.Fatal(err)
	}
	h.release("a") // quota accounting, on the finished event
	readmitted := within(time.Second, func() bool {
		_, ok := h.reservations()[key("a")]
		return ok
	})
	if readmitted {
		n := 0
		for _, ev := range eventsOf[events.WorkloadAdmittedV1](h) {
			if ev.Workload.Name == "a" {
				n++
			}
		}
		t.Errorf("finished workload a was admitted again after its reservation (%s) was released: %d admitted events for a; the ledger now holds %v while b waits",
			first.AdmittedAt.Format(time.RFC3339), n, names(h.reservations()))
		return
	}
	ledgerIs(map[string]int32{"b": 4}).do(h)
}

// failOnce fails the first publish of each event type in types, as a
// JetStream outage would, and publishes everything else.
type failOnce struct {
	inner  events.Publisher
	mu     sync.Mutex
	types  map[string]bool
	failed []string
}

func (f *failOnce) Publish(ctx context.Context, ev events.Event, id string) error {
	f.mu.Lock()
	if f.types[ev.Type()] {
		delete(f.types, ev.Type())
		f.failed = append(f.failed, ev.Type()+" "+ev.CESubject())
		f.mu.Unlock()
		return fmt.Errorf("publish %s: %w", ev.Type(), context.DeadlineExceeded)
	}
	f.mu.Unlock()
	return f.inner.Publish(ctx, ev, id)
}

// TestFailedPublishIsRetried: an event the service could not publish (a
// JetStream hiccup, a restart of NATS) is published later: the admitted
// event announces a reservation already in the ledger, the pending event
// is the stated reason the design promises for every waiting job.
func TestFailedPublishIsRetried(t *testing.T) {
	cases := []struct {
		name  string
		fail  string
		steps []step
	}{
		{
			name: "admitted",
			fail: events.TypeWorkloadAdmittedV1,
			steps: []step{
				submit("a", "main", 0, 2, "1"),
				ledgerIs(map[string]int32{"a": 2}),
				admitted("a", 2),
			},
		},
		{
			name: "pending",
			fail: events.TypeWorkloadPendingV1,
			steps: []step{
				submit("big", "main", 0, 5, "1"),
				pending("big", "cq", "pod set main: insufficient quota for cpu in flavor default: requested 5, more than the ClusterQueue can ever use (4)"),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.configure("4", nil)
			f := &failOnce{types: map[string]bool{tc.fail: true}}
			h.wrap = func(p events.Publisher) events.Publisher { f.inner = p; return f }
			h.start()
			for _, s := range tc.steps {
				s.do(h)
			}
		})
	}
}

// reservedBeforeStart submits one-pod workloads and writes their
// reservations to the ledger, as a replica that stopped before announcing
// them would have left them.
func (h *harness) reservedBeforeStart(names ...string) map[string]ledger.Reservation {
	h.t.Helper()
	r := map[string]ledger.Reservation{}
	for _, n := range names {
		h.submit(n, "main", 0, 1, "1")
		r[key(n)] = h.expected(n, 1)
	}
	h.reserve(r)
	return r
}

// probeAdmitted submits workload probe and waits for the announcement of
// its admission.
func (h *harness) probeAdmitted() {
	h.t.Helper()
	h.submit("probe", "main", 0, 1, "1")
	h.eventually("probe announced", func() (bool, string) {
		return len(eventsOf[events.WorkloadAdmittedV1](h)) == 1, fmt.Sprint(eventsOf[events.WorkloadAdmittedV1](h))
	})
}

// reservedElsewhere books another replica's reservation of a workload
// asking for 1 cpu, before this replica sees its record (else it might
// admit the workload itself), and returns the record, for the test to
// write when it wants.
func (h *harness) reservedElsewhere(name string) events.WorkloadSubmittedV1 {
	h.t.Helper()
	rec := events.WorkloadSubmittedV1{Workload: ref(name), LocalQueue: "main", CreationTime: now.Add(time.Second),
		PodSets: []events.PodSetV1{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "1"}}}}
	h.recs[name] = rec
	h.reserve(map[string]ledger.Reservation{key(name): h.expected(name, 1)})
	return rec
}

// drain stops ClusterQueue cq (4 cpu) with HoldAndDrain: its admissions
// are evicted.
func (h *harness) drain() {
	h.t.Helper()
	cq := clusterQueue("cq", "4", nil)
	cq.Spec.StopPolicy = ptr.To(v1beta1.HoldAndDrain)
	h.put(h.cfg, configstore.Key(configstore.KindClusterQueue, "", "cq"), cq)
}

// TestStartAnnouncesWhatACrashLeftUnannounced: a replica that stopped
// between writing a reservation and announcing it leaves an admission no
// integration will start; the next replica announces it, under the id an
// integration looks for, and announces nothing twice.
func TestStartAnnouncesWhatACrashLeftUnannounced(t *testing.T) {
	h := newHarness(t)
	h.configure("4", nil)
	r := h.reservedBeforeStart("x", "y")
	// y's admission was announced before the crash; x's was not.
	pub := bus.NewPublisher(h.js, events.Source("admission"))
	yEv := events.WorkloadAdmittedV1{Workload: ref("y"), ClusterQueue: "cq",
		PodSets:   []events.PodSetAssignmentV1{{Name: "main", Count: 1, Flavors: map[string]string{"cpu": "default"}}},
		Admission: r[key("y")].Admission()}
	if err := pub.Publish(h.ctx, yEv, workloads.AdmittedID(ref("y"), r[key("y")].Admission())); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.eventually("x announced", func() (bool, string) {
		return len(eventsOf[events.WorkloadAdmittedV1](h)) >= 2, fmt.Sprint(eventsOf[events.WorkloadAdmittedV1](h))
	})
	// A probe through a full cycle: anything announced twice has been by now.
	h.submit("probe", "main", 0, 1, "1")
	h.eventually("probe announced", func() (bool, string) {
		return len(eventsOf[events.WorkloadAdmittedV1](h)) >= 3, fmt.Sprint(eventsOf[events.WorkloadAdmittedV1](h))
	})
	time.Sleep(50 * time.Millisecond) // a repeat would follow at once
	var got []string
	for _, env := range h.envelopes(events.TypeWorkloadAdmittedV1) {
		var ev events.WorkloadAdmittedV1
		if err := env.As(&ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Workload.Name+" "+env.ID)
	}
	want := []string{
		"y " + workloads.AdmittedID(ref("y"), r[key("y")].Admission()),
		"x " + workloads.AdmittedID(ref("x"), r[key("x")].Admission()),
		"probe " + workloads.AdmittedID(ref("probe"), h.reservations()[key("probe")].Admission()),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("admitted events, name and id (-want +got):\n%s", d)
	}
}

// TestAdmissionOfAnEndedJobIsNotAnnounced: a reservation whose workload
// record is gone (its job ended while it was being admitted) is never
// announced, so no admitted event follows a finished one; quota
// reconciliation releases the reservation.
func TestAdmissionOfAnEndedJobIsNotAnnounced(t *testing.T) {
	h := newHarness(t)
	h.configure("4", nil)
	h.reservedBeforeStart("x", "ended")
	if err := h.wls.Delete(h.ctx, workloads.Key(ref("ended"))); err != nil { // the integration, as the job ends
		t.Fatal(err)
	}
	h.start()
	h.submit("probe", "main", 0, 1, "1")
	h.eventually("x and probe announced", func() (bool, string) {
		return len(eventsOf[events.WorkloadAdmittedV1](h)) >= 2, fmt.Sprint(eventsOf[events.WorkloadAdmittedV1](h))
	})
	time.Sleep(50 * time.Millisecond)
	var got []string
	for _, ev := range eventsOf[events.WorkloadAdmittedV1](h) {
		got = append(got, ev.Workload.Name)
	}
	sort.Strings(got)
	if d := cmp.Diff([]string{"probe", "x"}, got); d != "" {
		t.Errorf("admitted workloads (-want +got):\n%s", d)
	}
}

// envelopes are the events seen of one type, in stream order.
func (h *harness) envelopes(eventType string) []events.Envelope {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []events.Envelope
	for _, env := range h.evs {
		if env.Type == eventType {
			out = append(out, env)
		}
	}
	return out
}

// TestPendingReasonsAreCoalesced: a reason of a new kind within the
// pending interval is held back and announced when the interval is over, if
// it still holds; a moved number is never announced.
func TestPendingReasonsAreCoalesced(t *testing.T) {
	h := newHarness(t)
	advance := h.movingClock()
	h.pendingInterval = 10 * time.Second
	h.configure("4", nil)
	h.start()
	insufficient := "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0"
	for _, s := range []step{
		submit("a", "main", 0, 4, "1"),
		ledgerIs(map[string]int32{"a": 4}),
		submit("b", "main", 0, 1, "2"),
		pending("b", "cq", insufficient),
	} {
		s.do(h)
	}
	told := func() []string {
		var out []string
		for _, ev := range eventsOf[events.WorkloadPendingV1](h) {
			if ev.Workload.Name == "b" {
				out = append(out, ev.Reason)
			}
		}
		return out
	}
	// The LocalQueue goes: a reason of another kind, 1 s after the last.
	advance(time.Second)
	if err := h.cfg.Delete(h.ctx, configstore.Key(configstore.KindLocalQueue, ns, "main")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // many cycles
	if d := cmp.Diff([]string{insufficient}, told()); d != "" {
		t.Fatalf("within the interval (-want +got):\n%s", d)
	}
	advance(10 * time.Second)
	lost := "LocalQueue team-a/main does not exist"
	h.eventually("the held-back reason announced", func() (bool, string) {
		got := told()
		return len(got) == 2, fmt.Sprint(got)
	})
	if d := cmp.Diff([]string{insufficient, lost}, told()); d != "" {
		t.Errorf("after the interval (-want +got):\n%s", d)
	}
}

// TestEvictionAnnouncesTheAdmissionFirst: a replica drains a ClusterQueue
// holding an admission another replica reserved but has not announced yet
// (it is slow, or stopped in between): the admitted event is published
// before the evicted one, so no subscriber sees a stop of an admission it
// never saw. The draining replica may also not have seen x's record yet:
// x is known from its reservation alone, and its eviction is announced
// all the same.
func TestEvictionAnnouncesTheAdmissionFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		// recordSeen: x's record arrives before the ClusterQueue is
		// stopped; otherwise only after both are evicted.
		recordSeen bool
	}{
		{name: "its record seen", recordSeen: true},
		{name: "its record not seen yet"},
	} {
		t.Run(tc.name, func(t *testing.T) { evictionAnnouncesTheAdmissionFirst(t, tc.recordSeen) })
	}
}

func evictionAnnouncesTheAdmissionFirst(t *testing.T, recordSeen bool) {
	h := newHarness(t)
	h.configure("4", nil)
	h.start()
	h.probeAdmitted()
	// The other replica's reservation of x, next to the probe's.
	x := h.reservedElsewhere("x")
	rs := h.reservations()
	if recordSeen {
		h.put(h.wls, workloads.Key(x.Workload), x)
		h.eventually("x's record seen", func() (bool, string) {
			seen, err := h.svc.RecordKnown(h.ctx, key("x"))
			return seen, fmt.Sprint(err)
		})
	} else {
		h.eventually("x's reservation booked", func() (bool, string) {
			held, err := h.svc.HoldsAdmission(h.ctx, key("x"))
			return held, fmt.Sprint(err)
		})
	}
	h.drain()
	h.eventually("both evicted", func() (bool, string) {
		return len(eventsOf[events.WorkloadEvictedV1](h)) == 2, fmt.Sprint(eventsOf[events.WorkloadEvictedV1](h))
	})
	if !recordSeen {
		h.put(h.wls, workloads.Key(x.Workload), x)
	}
	var got []string
	h.mu.Lock()
	for _, env := range h.evs {
		if env.Type != events.TypeWorkloadAdmittedV1 && env.Type != events.TypeWorkloadEvictedV1 {
			continue
		}
		var w struct {
			Workload  events.WorkloadRef `json:"workload"`
			Admission string             `json:"admission"`
		}
		if err := json.Unmarshal(env.Data, &w); err != nil {
			t.Fatal(err)
		}
		want := rs[key(w.Workload.Name)].Admission()
		if w.Admission != want {
			t.Errorf("%s of %s names admission %s, want %s", env.Type, w.Workload.Name, w.Admission, want)
		}
		got = append(got, strings.TrimPrefix(env.Type, "dev.sluice.workload.v1.")+" "+w.Workload.Name)
	}
	h.mu.Unlock()
	// The two evictions come in either order; x's admission before its eviction.
	if len(got) != 4 || got[0] != "admitted probe" || slices.Index(got, "admitted x") > slices.Index(got, "evicted x") ||
		!slices.Contains(got, "evicted probe") {
		t.Errorf("events in stream order = %v, want probe admitted, then x admitted before x evicted, and probe evicted", got)
	}
}

// TestEvictionIsNotAnnouncedAfterTheEnd: the job of an admitted workload
// ends between the fence that claims its eviction and the eviction's
// announcement (the integration records the end over the claim and
// announces it): the eviction is dropped, and so is the announcement of
// the admission when the replica that reserved it had not made it yet.
// Nothing about the workload follows its finished event.
func TestEvictionIsNotAnnouncedAfterTheEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		// announced: x's admission is announced before its end (this
		// replica admitted x); otherwise another replica reserved it and
		// has not announced it.
		announced bool
	}{
		{name: "its admission announced", announced: true},
		{name: "its admission not announced yet"},
	} {
		t.Run(tc.name, func(t *testing.T) { evictionIsNotAnnouncedAfterTheEnd(t, tc.announced) })
	}
}

func evictionIsNotAnnouncedAfterTheEnd(t *testing.T, announced bool) {
	h := newHarness(t)
	h.configure("4", nil)
	h.start()
	h.probeAdmitted()
	if announced {
		h.submit("x", "main", 0, 1, "1")
		h.eventually("x announced", func() (bool, string) {
			return len(eventsOf[events.WorkloadAdmittedV1](h)) == 2, fmt.Sprint(eventsOf[events.WorkloadAdmittedV1](h))
		})
	} else {
		x := h.reservedElsewhere("x")
		h.put(h.wls, workloads.Key(x.Workload), x)
		h.eventually("x's record seen and its admission held", func() (bool, string) {
			seen, err := h.svc.RecordKnown(h.ctx, key("x"))
			held, err2 := h.svc.HoldsAdmission(h.ctx, key("x"))
			return seen && held, fmt.Sprint(seen, held, err, err2)
		})
	}
	// The eviction of x claimed in the fence (as an earlier attempt of
	// this replica did), then x's end announced.
	admission := h.reservations()[key("x")].Admission()
	fk, err := bus.OpenKV(h.ctx, h.js, fence.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	evicted := events.ID(events.TypeWorkloadEvictedV1, ref("x").UID, admission)
	if err := fence.Stop(h.ctx, fk, workloads.Key(ref("x")), admission, evicted); err != nil {
		t.Fatal(err)
	}
	fin := events.WorkloadFinishedV1{Workload: ref("x"), ClusterQueue: "cq", Succeeded: true}
	if err := bus.NewPublisher(h.js, events.Source("integration")).Publish(h.ctx, fin, events.ID(fin.Type(), ref("x").UID)); err != nil {
		t.Fatal(err)
	}

	h.drain()
	h.eventually("probe evicted", func() (bool, string) {
		return len(eventsOf[events.WorkloadEvictedV1](h)) >= 1, fmt.Sprint(eventsOf[events.WorkloadEvictedV1](h))
	})
	time.Sleep(100 * time.Millisecond) // many cycles
	var got []string
	h.mu.Lock()
	for _, env := range h.evs {
		if strings.HasSuffix(env.NATSSubject, ".x") {
			got = append(got, strings.TrimPrefix(env.Type, "dev.sluice.workload.v1."))
		}
	}
	h.mu.Unlock()
	if len(got) == 0 || got[len(got)-1] != "finished" {
		t.Errorf("events about x in stream order = %v, want none after finished", got)
	}
}

// TestRestartDoesNotTellPendingReasonsAgain: a replica restarted a minute
// later starts knowing nothing it told. A waiting workload whose last
// event already tells a reason of the kind it waits for gets no second
// pending event; one whose reason changed in kind, or a job recreated
// under the same name (another UID), gets one.
func TestRestartDoesNotTellPendingReasonsAgain(t *testing.T) {
	h := newHarness(t)
	// The clock moves, so an announcement made again has another id,
	// which the stream's duplicate window would not drop.
	advance := h.movingClock()
	h.configure("4", nil)
	h.start()
	insufficient := "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0"
	lostQueue := "LocalQueue team-a/other does not exist"
	for _, s := range []step{
		submit("a", "main", 0, 4, "1"),
		ledgerIs(map[string]int32{"a": 4}),
		submit("b", "main", 0, 1, "2"),
		pending("b", "cq", insufficient),
		submit("c", "other", 0, 1, "1"),
		submit("d", "main", 0, 1, "2"),
	} {
		s.do(h)
	}
	told := func(name string) []events.WorkloadPendingV1 {
		var out []events.WorkloadPendingV1
		for _, ev := range eventsOf[events.WorkloadPendingV1](h) {
			if ev.Workload.Name == name {
				out = append(out, ev)
			}
		}
		return out
	}
	h.eventually("c and d told", func() (bool, string) {
		return len(told("c")) == 1 && len(told("d")) == 1, fmt.Sprint(told("c"), told("d"))
	})
	wantB := told("b")
	h.stopF()
	advance(time.Minute)

	// While no replica runs, d's job is deleted and created again under
	// the same name, and c's LocalQueue comes: c now waits for quota.
	if err := h.wls.Delete(h.ctx, workloads.Key(ref("d"))); err != nil {
		t.Fatal(err)
	}
	h.submit("d", "main", 0, 1, "2", func(r *events.WorkloadSubmittedV1) { r.Workload.UID = "uid-d2" })
	putLocalQueue("other").do(h)
	h.start()
	h.submit("probe", "main", 0, 1, "2")
	h.eventually("the restarted replica decided", func() (bool, string) {
		_, p := h.lastPending("probe")
		return p && len(told("c")) == 2 && len(told("d")) == 2, fmt.Sprint(told("c"), told("d"))
	})
	time.Sleep(100 * time.Millisecond) // many cycles
	if d := cmp.Diff(wantB, told("b")); d != "" {
		t.Errorf("b waits as before the restart; its pending events (-want +got):\n%s", d)
	}
	if got := told("d"); len(got) != 2 || got[1].Workload.UID != "uid-d2" {
		t.Errorf("d's pending events = %+v, want one about each of its two jobs", got)
	}
	if got := told("c"); len(got) != 2 || got[0].Reason != lostQueue || engine.ReasonClass(got[1].Reason) == engine.ReasonClass(lostQueue) {
		t.Errorf("c's pending events = %+v, want %q and then a reason of another kind", got, lostQueue)
	}
}

// TestAReturningWorkloadQueuesOnceTheEarlierLetsGo: a job left its queue
// while its workload held quota, and came back (its label removed and put
// back, or changed): the integration deleted the first record and wrote a
// new one, of the workload UID uid-a_1, with other pod sets. The first
// reservation holds its quota until quota accounting lets it go; then the
// new workload queues as written, not as the first one was. The bucket
// keeps one revision per key, so a watch paging after both writes finds
// the new record in place of the deletion's marker: the case "deletion
// not seen" writes it so (CI saw the earlier code lose the new record).
func TestAReturningWorkloadQueuesOnceTheEarlierLetsGo(t *testing.T) {
	for _, tc := range []struct {
		name         string
		deleteRecord bool
	}{
		{name: "deletion seen", deleteRecord: true},
		{name: "deletion not seen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.configure("4", nil)
			h.start()
			for _, s := range []step{
				submit("a", "main", 0, 4, "1"),
				ledgerIs(map[string]int32{"a": 4}),
				admitted("a", 4),
			} {
				s.do(h)
			}
			if tc.deleteRecord {
				if err := h.wls.Delete(h.ctx, workloads.Key(ref("a"))); err != nil {
					t.Fatal(err)
				}
			}
			h.submit("a", "main", 0, 2, "1", func(rec *events.WorkloadSubmittedV1) { rec.Workload.UID = "uid-a_1" })
			if r := h.reservations()[key("a")]; r.UID != "uid-a" || r.PodSets[0].Count != 4 {
				t.Fatalf("before the release, the ledger holds %+v; want the first workload's 4 pods", r)
			}
			if !tc.deleteRecord {
				// The service has the new record before the release (the
				// order that lost it).
				h.eventually("the new record mirrored", func() (bool, string) {
					uid, err := h.svc.RecordUID(h.ctx, key("a"))
					return err == nil && uid == "uid-a_1", fmt.Sprint(uid, err)
				})
			}
			h.release("a")
			h.eventually("the returning workload admitted as written", func() (bool, string) {
				r, ok := h.reservations()[key("a")]
				return ok && r.UID == "uid-a_1" && r.PodSets[0].Count == 2, fmt.Sprintf("%t %+v", ok, r)
			})
		})
	}
}

// TestUnreadableReservationBlocksItsCohort: a reservation whose value
// cannot be read holds quota of an unknown size. Counted as free, it
// would let the queue admit past its quota; instead nothing is admitted
// into its cohort tree (every tree when not even its queue can be read),
// each pending workload says why, and admission resumes once the key is
// deleted.
func TestUnreadableReservationBlocksItsCohort(t *testing.T) {
	cases := []struct {
		name string
		// value is written over ghost's reservation.
		value string
		// beforeStart: written before the service starts (read at its
		// start), else while it runs, over ghost's booked reservation.
		beforeStart bool
	}{
		{name: "garbage read at start", value: "not json", beforeStart: true},
		{name: "queue still named, read at start", value: `{"clusterQueue":"cq","podSets":"broken"}`, beforeStart: true},
		{name: "booked reservation overwritten with garbage", value: "{"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.configure("4", nil)
			h.submit("ghost", "main", 0, 1, "1")
			corrupt := func() {
				if _, err := h.led.Put(h.ctx, ledger.ReservationKey(key("ghost")), []byte(tc.value)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.beforeStart {
				corrupt()
				h.start()
			} else {
				h.start()
				h.eventually("ghost admitted", func() (bool, string) {
					_, ok := h.reservations()[key("ghost")]
					return ok, "not yet"
				})
				corrupt()
			}
			// The block is in force before x comes (else x may be
			// admitted before the corrupt value is read).
			h.eventually("the block in force", func() (bool, string) {
				ids, err := h.svc.Blocks(h.ctx)
				return err == nil && len(ids) == 1, fmt.Sprint(ids, err)
			})
			h.submit("x", "main", 0, 1, "1")
			h.eventually("x pending for the unreadable reservation", func() (bool, string) {
				p, ok := h.lastPending("x")
				return ok && strings.Contains(p.Reason, "cannot be read"), p.Reason
			})
			if _, r := h.reservations()[key("x")]; r {
				t.Fatalf("x admitted while ghost's reservation cannot be read")
			}
			if err := h.led.Delete(h.ctx, ledger.ReservationKey(key("ghost"))); err != nil {
				t.Fatal(err)
			}
			h.eventually("x admitted once the key is deleted", func() (bool, string) {
				_, ok := h.reservations()[key("x")]
				return ok, "not yet"
			})
		})
	}
}
