package admission_test

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// TestReactivatedWorkloadQueuesAgain: a workload whose fence says it is
// deactivated is never admitted, with the deactivation as its reason;
// once its job is reactivated (the integration starts the fence's requeue
// state over, fence.Reactivate), it is admitted.
func TestReactivatedWorkloadQueuesAgain(t *testing.T) {
	h := newHarness(t)
	h.configure("4", nil)
	kv, err := bus.OpenKV(h.ctx, h.js, fence.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	fk := workloads.Key(ref("a"))
	why := "deactivated: exceeding the maximum number of re-queuing retries"
	if err := fence.Stop(h.ctx, kv, fk, "earlier", "stop-1", fence.WithRequeue(fence.Requeue{Count: 6, Deactivated: why})); err != nil {
		t.Fatal(err)
	}
	h.submit("a", "main", 0, 1, "1")
	h.start()
	h.eventually("a pending as deactivated", func() (bool, string) {
		p, ok := h.lastPending("a")
		return ok && p.Reason == why, p.Reason
	})
	if _, ok := h.reservations()[key("a")]; ok {
		t.Fatal("a deactivated workload was admitted")
	}
	done, err := fence.Reactivate(h.ctx, kv, fk, "2026-12-06T00:00:00Z")
	if err != nil || !done {
		t.Fatalf("Reactivate = %t, %v", done, err)
	}
	h.eventually("a admitted once reactivated", func() (bool, string) {
		_, ok := h.reservations()[key("a")]
		return ok, fmt.Sprint(h.fenceOf("a").Requeue)
	})
}
