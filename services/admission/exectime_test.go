package admission_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
)

// limitExec gives a record a maximum execution time.
func limitExec(seconds int32) func(*events.WorkloadSubmittedV1) {
	return func(r *events.WorkloadSubmittedV1) { r.MaximumExecutionTimeSeconds = seconds }
}

// exceedsAt moves the clock to one second before a's maximum execution
// time runs out, checks that it still runs, then to the moment it runs
// out, and waits for its eviction.
func (h *harness) exceedsAt(clk *fakeClock, left time.Duration) {
	h.t.Helper()
	clk.advance(left - time.Second)
	time.Sleep(50 * time.Millisecond)
	if got := h.evictions("a"); len(got) != 0 {
		h.t.Fatalf("evicted before its maximum execution time: %v", got)
	}
	clk.advance(time.Second)
	h.eventually("evicted for its maximum execution time", func() (bool, string) {
		got := h.evictions("a")
		want := []string{engine.ReasonMaxExecTimeExceeded}
		return cmp.Equal(got, want), cmp.Diff(want, got)
	})
}

// admittedWithLimit starts admission on a moved clock and has workload
// "a", with a maximum execution time of 60 s, admitted.
func admittedWithLimit(t *testing.T) (*harness, *fakeClock) {
	t.Helper()
	h := newHarness(t)
	clk := &fakeClock{t: now}
	h.clock = clk.now
	h.configure("4", nil)
	h.start()
	h.submit("a", "main", 0, 4, "1", limitExec(60))
	admitted("a", 4).do(h)
	return h, clk
}

func TestMaxExecutionTime(t *testing.T) {
	t.Run("admitted past its maximum: evicted and deactivated, and a new replica keeps it so", func(t *testing.T) {
		h, clk := admittedWithLimit(t)
		if r := h.reservations()[key("a")]; r.MaxExecution != time.Minute || r.PastExecution != 0 {
			t.Errorf("reservation keeps max %s, past %s; want 1m0s, 0s", r.MaxExecution, r.PastExecution)
		}
		h.exceedsAt(clk, time.Minute)
		var msg string
		for _, ev := range eventsOf[events.WorkloadEvictedV1](h) {
			msg = ev.Message
		}
		if want := "exceeding the maximum execution time (1m0s)"; msg != want {
			t.Errorf("eviction message = %q, want %q", msg, want)
		}
		if rq := h.fenceOf("a").Requeue; rq == nil || rq.Deactivated == "" {
			t.Errorf("fence requeue = %+v, want the deactivation kept", rq)
		}

		h.release("a")
		h.stopF()
		h.start()
		pending("a", "cq", "deactivated: exceeding the maximum execution time").do(h)
	})

	t.Run("time counts over admissions: a stopped admission's run is kept", func(t *testing.T) {
		h, clk := admittedWithLimit(t)
		// Suspended from outside after 40 s: quota accounting releases
		// the reservation, and the workload is admitted again.
		clk.advance(40 * time.Second)
		h.release("a")
		h.eventually("admitted again, with 40s already run", func() (bool, string) {
			r, ok := h.reservations()[key("a")]
			return ok && r.PastExecution == 40*time.Second, cmp.Diff(40*time.Second, r.PastExecution)
		})
		// 20 s left of its 60.
		h.exceedsAt(clk, 20*time.Second)
	})
}
