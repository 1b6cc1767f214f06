package admission_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// limitExec gives a submitted workload's record a maximum execution time.
func (h *harness) limitExec(name string, seconds int32) {
	h.t.Helper()
	rec := h.recs[name]
	rec.MaximumExecutionTimeSeconds = seconds
	h.recs[name] = rec
	h.put(h.wls, workloads.Key(rec.Workload), rec)
}

func TestMaxExecutionTime(t *testing.T) {
	t.Run("admitted past its maximum: evicted and deactivated, and a new replica keeps it so", func(t *testing.T) {
		h := newHarness(t)
		clk := &fakeClock{t: now}
		h.clock = clk.now
		h.configure("4", nil)
		h.start()
		h.submit("a", "main", 0, 4, "1")
		h.limitExec("a", 60)
		admitted("a", 4).do(h)
		if r := h.reservations()[key("a")]; r.MaxExecution != time.Minute || r.PastExecution != 0 {
			t.Errorf("reservation keeps max %s, past %s; want 1m0s, 0s", r.MaxExecution, r.PastExecution)
		}
		clk.advance(59 * time.Second)
		time.Sleep(50 * time.Millisecond)
		if got := h.evictions("a"); len(got) != 0 {
			t.Fatalf("evicted before its maximum execution time: %v", got)
		}
		clk.advance(time.Second)
		h.eventually("evicted for its maximum execution time", func() (bool, string) {
			got := h.evictions("a")
			want := []string{engine.ReasonMaxExecTimeExceeded}
			return cmp.Equal(got, want), cmp.Diff(want, got)
		})
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
		h := newHarness(t)
		clk := &fakeClock{t: now}
		h.clock = clk.now
		h.configure("4", nil)
		h.start()
		h.submit("a", "main", 0, 4, "1")
		h.limitExec("a", 60)
		admitted("a", 4).do(h)
		// Suspended from outside after 40 s: quota accounting releases
		// the reservation, and the workload is admitted again.
		clk.advance(40 * time.Second)
		h.release("a")
		h.eventually("admitted again, with 40s already run", func() (bool, string) {
			r, ok := h.reservations()[key("a")]
			return ok && r.PastExecution == 40*time.Second, cmp.Diff(40*time.Second, r.PastExecution)
		})
		clk.advance(19 * time.Second)
		time.Sleep(50 * time.Millisecond)
		if got := h.evictions("a"); len(got) != 0 {
			t.Fatalf("evicted before 60s of runs in total: %v", got)
		}
		clk.advance(time.Second)
		h.eventually("evicted 20s into its second admission", func() (bool, string) {
			got := h.evictions("a")
			want := []string{engine.ReasonMaxExecTimeExceeded}
			return cmp.Equal(got, want), cmp.Diff(want, got)
		})
	})
}
