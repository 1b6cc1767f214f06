package admission_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/services/admission"
)

// configureChecks is configure with ClusterQueue cq running the admission
// check prov, whose controller is active or not.
func (h *harness) configureChecks(cpu string, active bool) {
	h.configure(cpu, nil)
	cq := clusterQueue("cq", cpu, nil)
	cq.Spec.AdmissionChecks = []string{"prov"}
	h.put(h.cfg, configstore.Key(configstore.KindClusterQueue, "", "cq"), cq)
	ac := v1beta1.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "prov"}, Spec: v1beta1.AdmissionCheckSpec{ControllerName: "example.com/prov"}}
	if active {
		ac.Status.Conditions = []metav1.Condition{{Type: v1beta1.AdmissionCheckActive, Status: metav1.ConditionTrue}}
	}
	h.put(h.cfg, configstore.Key(configstore.KindAdmissionCheck, "", "prov"), ac)
}

// answer publishes the check controller's answer about a reservation.
func (h *harness) answer(name, state string, requeueAfter *int32) {
	h.t.Helper()
	h.answerWith(name, state, requeueAfter, nil)
}

// answerWith is answer, with what the check adds to the pods.
func (h *harness) answerWith(name, state string, requeueAfter *int32, updates []events.PodSetUpdateV1) {
	h.t.Helper()
	r, ok := h.reservations()[key(name)]
	if !ok {
		h.t.Fatalf("answer about %s: it holds no reservation", name)
	}
	ev := events.CheckUpdatedV1{Workload: ref(name), Admission: r.Admission(), Check: "prov", Controller: "example.com/prov", State: state, Message: "said " + state,
		RequeueAfterSeconds: requeueAfter, PodSetUpdates: updates}
	if err := bus.NewPublisher(h.js, events.Source("prov")).Publish(h.ctx, ev, events.ID(ev.Type(), ev.Workload.UID, ev.Admission, state)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) checksOf(name string) ([]engine.CheckStatus, bool, bool) {
	r, ok := h.reservations()[key(name)]
	return r.Checks, r.AwaitingChecks, ok
}

func TestAdmissionChecksReserveThenAdmit(t *testing.T) {
	h := newHarness(t)
	h.configureChecks("1", true)
	h.submit("a", "main", 0, 1, "1")
	h.submit("b", "main", 0, 1, "1")
	h.start()

	h.eventually("a reserved, waiting for prov", func() (bool, string) {
		checks, awaiting, ok := h.checksOf("a")
		return ok && awaiting && cmp.Equal(checks, []engine.CheckStatus{{Name: "prov", State: engine.CheckPending}}), fmt.Sprint(checks, awaiting, ok)
	})
	h.eventually("the reservation announced as reserved", func() (bool, string) {
		rs := eventsOf[events.WorkloadReservedV1](h)
		return len(rs) == 1 && rs[0].Workload.Name == "a" && cmp.Equal(rs[0].Checks, []string{"prov"}), fmt.Sprint(rs)
	})
	if ad := eventsOf[events.WorkloadAdmittedV1](h); len(ad) != 0 {
		t.Fatalf("admitted before its check passed: %+v", ad)
	}

	updates := []events.PodSetUpdateV1{{Name: "main", Annotations: map[string]string{"autoscaling.x-k8s.io/consume-provisioning-request": "a-1"},
		NodeSelector: map[string]string{"pool": "p1"}}}
	h.answerWith("a", events.CheckReady, nil, updates)
	h.eventually("a admitted once prov is ready", func() (bool, string) {
		checks, awaiting, _ := h.checksOf("a")
		ad := eventsOf[events.WorkloadAdmittedV1](h)
		return !awaiting && len(checks) == 1 && checks[0].State == engine.CheckReady && len(ad) == 1 && ad[0].Workload.Name == "a",
			fmt.Sprint(checks, awaiting, ad)
	})
	// What the check adds to the pods is kept in the reservation, for the
	// integration to apply when it starts the workload.
	if diff := cmp.Diff(map[string][]events.PodSetUpdateV1{"prov": updates}, h.reservations()[key("a")].PodSetUpdates); diff != "" {
		t.Errorf("reservation's podSetUpdates mismatch (-want +got):\n%s", diff)
	}
	rs := eventsOf[events.WorkloadReservedV1](h)
	if ad := eventsOf[events.WorkloadAdmittedV1](h); ad[0].Admission != rs[0].Admission {
		t.Errorf("admitted names admission %q, reserved %q", ad[0].Admission, rs[0].Admission)
	}
	// b waits for a's quota all along.
	if _, _, held := h.checksOf("b"); held {
		t.Error("b holds a reservation beyond the quota")
	}
}

func TestAdmissionCheckRetryAndRejected(t *testing.T) {
	h := newHarness(t)
	h.configureChecks("2", true)
	h.submit("retried", "main", 0, 1, "1")
	h.submit("rejected", "main", 0, 1, "1")
	h.start()
	h.eventually("both reserved", func() (bool, string) {
		_, a, okA := h.checksOf("retried")
		_, b, okB := h.checksOf("rejected")
		return okA && okB && a && b, fmt.Sprint(okA, okB)
	})
	h.answer("retried", events.CheckRetry, ptr.To[int32](3600))
	h.answer("rejected", events.CheckRejected, nil)
	h.eventually("both evicted with their reasons", func() (bool, string) {
		got := map[string]string{}
		for _, e := range eventsOf[events.WorkloadEvictedV1](h) {
			got[e.Workload.Name] = e.Reason + ": " + e.Message
		}
		want := map[string]string{
			"retried":  engine.ReasonAdmissionCheck + ": admission check prov asked to retry: said Retry",
			"rejected": engine.ReasonDeactivated + ": admission check prov rejected the workload: said Rejected",
		}
		return cmp.Equal(got, want), fmt.Sprint(got)
	})
	// The integration stops them and quota accounting releases them; then
	// they wait: one backs off, the other is deactivated.
	h.release("retried")
	h.release("rejected")
	h.eventually("their pending reasons", func() (bool, string) {
		a, _ := h.lastPending("retried")
		b, _ := h.lastPending("rejected")
		return a.Reason == "admission check prov asked to retry: backing off until 2025-06-07T09:09:10Z" &&
			b.Reason == "deactivated: admission check prov rejected the workload: said Rejected", a.Reason + " | " + b.Reason
	})
	if res := h.reservations(); len(res) != 0 {
		t.Errorf("reserved again: %v", res)
	}
}

func TestAdmissionCheckNotActiveStopsTheQueue(t *testing.T) {
	h := newHarness(t)
	h.configureChecks("1", false)
	h.submit("a", "main", 0, 1, "1")
	h.start()
	h.eventually("a waits for the inactive queue", func() (bool, string) {
		p, _ := h.lastPending("a")
		return p.Reason == "ClusterQueue cq is inactive: AdmissionCheck prov is not active (its controller does not run)", p.Reason
	})
	if len(h.reservations()) != 0 {
		t.Error("admitted through an inactive check")
	}
}

// TestAnswerAboutAnotherReservationIsIgnored: an answer naming an older
// admission, a check the reservation does not run, or coming from another
// controller than the check's changes nothing.
func TestAnswerAboutAnotherReservationIsIgnored(t *testing.T) {
	h := newHarness(t)
	h.configureChecks("1", true)
	h.submit("a", "main", 0, 1, "1")
	h.start()
	h.eventually("a reserved", func() (bool, string) { _, aw, ok := h.checksOf("a"); return ok && aw, "" })
	pub := bus.NewPublisher(h.js, events.Source("prov"))
	for i, ev := range []events.CheckUpdatedV1{
		{Workload: ref("a"), Admission: "2001-01-01T00:00:00Z", Check: "prov", Controller: "example.com/prov", State: events.CheckReady},
		{Workload: ref("a"), Admission: h.reservations()[key("a")].Admission(), Check: "other", Controller: "example.com/prov", State: events.CheckReady},
		// An answer to prov from another controller than prov's.
		{Workload: ref("a"), Admission: h.reservations()[key("a")].Admission(), Check: "prov", Controller: "example.com/impostor", State: events.CheckReady},
	} {
		if err := pub.Publish(h.ctx, ev, fmt.Sprint("stray-", i)); err != nil {
			t.Fatal(err)
		}
	}
	h.submit("b", "main", 0, 1, "1") // a marker: handled after the answers
	h.answer("a", events.CheckPending, nil)
	h.eventually("the answers consumed", func() (bool, string) {
		checks, awaiting, _ := h.checksOf("a")
		return awaiting && cmp.Equal(checks, []engine.CheckStatus{{Name: "prov", State: engine.CheckPending, Message: "said Pending"}}), fmt.Sprint(checks)
	})
	if ad := eventsOf[events.WorkloadAdmittedV1](h); len(ad) != 0 {
		t.Errorf("admitted by a stray answer: %+v", ad)
	}
	// The impostor's answer is dead-lettered, not merely outweighed.
	dlq, err := h.js.Stream(h.ctx, bus.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	h.eventually("the impostor's answer dead-lettered", func() (bool, string) {
		m, err := dlq.GetLastMsgForSubject(h.ctx, events.DLQSubject(admission.ChecksConsumer().Durable))
		if err != nil {
			return false, err.Error()
		}
		return m.Header.Get(bus.HeaderDLQReason) == bus.DLQReasonPoison && strings.Contains(m.Header.Get(bus.HeaderDLQError), "impostor"),
			m.Header.Get(bus.HeaderDLQError)
	})
}

// TestTwoReplicasAdmitAReservationOnce: with two admission replicas, the
// one that did not record the checks' passing sees it in the ledger and
// books nothing again: the reservation keeps its admission, announced once.
func TestTwoReplicasAdmitAReservationOnce(t *testing.T) {
	h := newHarness(t)
	h.clock = time.Now
	h.configureChecks("1", true)
	h.submit("a", "main", 0, 1, "1")
	h.start()
	h.start()
	h.eventually("a reserved", func() (bool, string) { _, aw, ok := h.checksOf("a"); return ok && aw, "" })
	reserved := h.reservations()[key("a")].Admission()
	h.answer("a", events.CheckReady, nil)
	h.eventually("a admitted", func() (bool, string) {
		ad := eventsOf[events.WorkloadAdmittedV1](h)
		return len(ad) >= 1, fmt.Sprint(ad)
	})
	time.Sleep(300 * time.Millisecond) // both replicas have run cycles since
	r := h.reservations()[key("a")]
	if r.Admission() != reserved || r.AwaitingChecks {
		t.Errorf("reservation now %s (awaiting %v), want the reserved admission %s, admitted", r.Admission(), r.AwaitingChecks, reserved)
	}
	ad := eventsOf[events.WorkloadAdmittedV1](h)
	if len(ad) != 1 || ad[0].Admission != reserved {
		t.Errorf("admitted events %+v, want one naming %s", ad, reserved)
	}
}

// TestARejectedWorkloadStaysDeactivatedAfterARestart: the deactivation an
// admission check's Rejected caused is kept in the workload's fence, and a
// replica started later takes it from there instead of reserving again.
func TestARejectedWorkloadStaysDeactivatedAfterARestart(t *testing.T) {
	h := newHarness(t)
	h.configureChecks("1", true)
	h.submit("rejected", "main", 0, 1, "1")
	h.start()
	h.eventually("reserved", func() (bool, string) { _, aw, ok := h.checksOf("rejected"); return ok && aw, "" })
	h.answer("rejected", events.CheckRejected, nil)
	h.eventually("evicted", func() (bool, string) { return len(eventsOf[events.WorkloadEvictedV1](h)) == 1, "" })
	h.release("rejected")
	h.eventually("deactivated", func() (bool, string) {
		p, _ := h.lastPending("rejected")
		return p.Reason == "deactivated: admission check prov rejected the workload: said Rejected", p.Reason
	})
	h.stopF()
	h.start()
	time.Sleep(500 * time.Millisecond) // the new replica has loaded and run cycles
	if _, _, held := h.checksOf("rejected"); held {
		t.Error("a replica started later reserved the deactivated workload again")
	}
}

// TestDispatchedWorkloadRetriedAfterAdmission: a multicluster check's
// Ready names the worker cluster, kept in the reservation for the
// integration; the same check asking to retry after the admission (its
// worker was lost) evicts the workload, to be reserved and dispatched
// again.
func TestDispatchedWorkloadRetriedAfterAdmission(t *testing.T) {
	h := newHarness(t)
	h.configureChecks("1", true)
	h.submit("a", "main", 0, 1, "1")
	h.start()
	h.eventually("a reserved", func() (bool, string) { _, aw, ok := h.checksOf("a"); return ok && aw, "" })
	pub := bus.NewPublisher(h.js, events.Source("prov"))
	adm := h.reservations()[key("a")].Admission()
	ready := events.CheckUpdatedV1{Workload: ref("a"), Admission: adm, Check: "prov", Controller: "example.com/prov", State: events.CheckReady, Cluster: "worker1", Message: "admitted by worker1"}
	if err := pub.Publish(h.ctx, ready, "ready"); err != nil {
		t.Fatal(err)
	}
	h.eventually("a admitted, dispatched to worker1", func() (bool, string) {
		r := h.reservations()[key("a")]
		ad := eventsOf[events.WorkloadAdmittedV1](h)
		return !r.AwaitingChecks && r.DispatchedTo == "worker1" && r.DispatchedBy == "prov" && len(ad) == 1, fmt.Sprint(r.DispatchedTo, ad)
	})
	retry := events.CheckUpdatedV1{Workload: ref("a"), Admission: adm, Check: "prov", Controller: "example.com/prov", State: events.CheckRetry, Message: "worker cluster worker1 lost"}
	if err := pub.Publish(h.ctx, retry, "retry"); err != nil {
		t.Fatal(err)
	}
	h.eventually("a evicted for the check", func() (bool, string) {
		ev := eventsOf[events.WorkloadEvictedV1](h)
		return len(ev) == 1 && ev[0].Reason == engine.ReasonAdmissionCheck &&
			ev[0].Message == "admission check prov asked to retry: worker cluster worker1 lost", fmt.Sprint(ev)
	})
}
