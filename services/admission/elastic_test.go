package admission_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// resize changes the pod count of an elastic workload's record, as the
// job integration does when the job's parallelism changes.
func (h *harness) resize(name string, count int32) {
	h.t.Helper()
	rec := h.recs[name]
	rec.PodSets = append([]events.PodSetV1(nil), rec.PodSets...)
	rec.PodSets[0].Count = count
	rec.ResizedAt = time.Now().UTC()
	h.recs[name] = rec
	h.put(h.wls, workloads.Key(rec.Workload), rec)
}

func elastic(rec *events.WorkloadSubmittedV1) { rec.Elastic = true }

// heldCount is how many pods of a workload's reservation hold quota (-1:
// none).
func (h *harness) heldCount(name string) int32 {
	r, ok := h.reservations()[key(name)]
	if !ok {
		return -1
	}
	return r.PodSets[0].Count
}

// TestElasticWorkloadResizes: an admitted elastic workload whose record
// asks for more pods has its reservation rewritten in place when the
// scale-up fits (same admission, a resized event), waits while it does
// not, and gives quota back at once when it asks for fewer, which lets a
// waiting workload in.
func TestElasticWorkloadResizes(t *testing.T) {
	h := newHarness(t)
	h.configure("6", nil)
	h.submit("a", "main", 0, 2, "1", elastic)
	h.start()
	h.eventually("a admitted with 2 pods", func() (bool, string) {
		return h.heldCount("a") == 2, fmt.Sprint(h.heldCount("a"))
	})
	admission := h.reservations()[key("a")].Admission()
	h.resize("a", 5)
	h.eventually("a grows to 5", func() (bool, string) {
		return h.heldCount("a") == 5, fmt.Sprint(h.heldCount("a"))
	})
	if got := h.reservations()[key("a")].Admission(); got != admission {
		t.Errorf("the admission changed from %s to %s: a scale-up keeps it", admission, got)
	}
	// b needs 3 of the 1 left: it waits until a shrinks.
	h.submit("b", "main", 0, 3, "1")
	h.eventually("b pending", func() (bool, string) {
		p, ok := h.lastPending("b")
		return ok, p.Reason
	})
	h.resize("a", 7)
	h.resize("a", 3)
	h.eventually("a shrinks to 3 and b is admitted", func() (bool, string) {
		return h.heldCount("a") == 3 && h.heldCount("b") == 3, fmt.Sprint(h.heldCount("a"), " ", h.heldCount("b"))
	})
	h.eventually("two resized events", func() (bool, string) {
		n := len(h.envelopes(events.TypeWorkloadResizedV1))
		return n >= 2, fmt.Sprint(n)
	})
	var reasons []string
	for _, env := range h.envelopes(events.TypeWorkloadResizedV1) {
		var ev events.WorkloadResizedV1
		if err := json.Unmarshal(env.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Admission != admission {
			t.Errorf("resized event names admission %s, want %s", ev.Admission, admission)
		}
		reasons = append(reasons, fmt.Sprintf("%s %d", ev.Reason, ev.PodSets[0].Count))
	}
	if diff := cmp.Diff([]string{"ScaledUp 5", "ScaledDown 3"}, reasons); diff != "" {
		t.Errorf("resized events (-want +got):\n%s", diff)
	}
}
