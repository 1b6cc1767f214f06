package admission_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// startedFence moves a workload's fence to started for its held admission,
// as the job integration does when it starts the job, and returns the
// fence key and the admission.
func (h *harness) startedFence(name string) (string, string) {
	h.t.Helper()
	kv, err := bus.OpenKV(h.ctx, h.js, fence.Bucket)
	if err != nil {
		h.t.Fatal(err)
	}
	adm := h.reservations()[key(name)].Admission()
	fk := workloads.Key(ref(name))
	if _, err := fence.BeginStart(h.ctx, kv, fk, adm, ""); err != nil {
		h.t.Fatal(err)
	}
	if err := fence.EndStart(h.ctx, kv, fk, adm); err != nil {
		h.t.Fatal(err)
	}
	return fk, adm
}

func (h *harness) fenceOf(name string) fence.State {
	h.t.Helper()
	kv, err := bus.OpenKV(h.ctx, h.js, fence.Bucket)
	if err != nil {
		h.t.Fatal(err)
	}
	st, err := fence.Get(h.ctx, kv, workloads.Key(ref(name)))
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *harness) evictions(name string) []string {
	var out []string
	for _, ev := range eventsOf[events.WorkloadEvictedV1](h) {
		if ev.Workload.Name == name {
			out = append(out, ev.Reason)
		}
	}
	return out
}

// admittedWithPodsReady starts admission with waitForPodsReady on a moved
// clock, and has workload "a" admitted with 4 CPUs of 4.
func admittedWithPodsReady(t *testing.T, w *engine.WaitForPodsReady) (*harness, *fakeClock) {
	t.Helper()
	h := newHarness(t)
	clk := &fakeClock{t: now}
	h.clock, h.podsReady = clk.now, w
	h.configure("4", nil)
	h.start()
	h.submit("a", "main", 0, 4, "1")
	ledgerIs(map[string]int32{"a": 4}).do(h)
	return h, clk
}

func TestWaitForPodsReady(t *testing.T) {
	wfpr := &engine.WaitForPodsReady{Timeout: time.Minute, RecoveryTimeout: time.Minute, BackoffBase: 10 * time.Second, BackoffMax: time.Minute}

	t.Run("pods not ready in time: evicted, with the requeue kept in the fence", func(t *testing.T) {
		h, clk := admittedWithPodsReady(t, wfpr)
		admitted("a", 4).do(h)
		_, adm := h.startedFence("a")
		clk.advance(59 * time.Second)
		time.Sleep(50 * time.Millisecond)
		if got := h.evictions("a"); len(got) != 0 {
			t.Fatalf("evicted before the timeout: %v", got)
		}
		clk.advance(time.Second)
		h.eventually("PodsReadyTimeout eviction", func() (bool, string) {
			got := h.evictions("a")
			return cmp.Equal(got, []string{engine.ReasonPodsReadyTimeout}), "evictions: " + cmp.Diff([]string{engine.ReasonPodsReadyTimeout}, got)
		})
		want := fence.State{Admission: adm, Phase: fence.Stopping, StopID: events.ID(events.TypeWorkloadEvictedV1, ref("a").UID, adm),
			Requeue: &fence.Requeue{Count: 1, At: now.Add(70 * time.Second)}, EverStarted: true}
		if d := cmp.Diff(want, h.fenceOf("a")); d != "" {
			t.Errorf("fence (-want +got):\n%s", d)
		}

		// Quota accounting releases the reservation once the job is
		// stopped; a new replica started now still holds the workload
		// back for the rest of its backoff.
		h.release("a")
		h.stopF()
		h.start()
		pending("a", "cq", "requeued after PodsReadyTimeout: backing off until 2025-06-07T08:10:20Z").do(h)
		clk.advance(10 * time.Second)
		h.eventually("admitted again after the backoff", func() (bool, string) {
			r, ok := h.reservations()[key("a")]
			return ok && r.AdmittedAt.Equal(now.Add(70*time.Second)), cmp.Diff(now.Add(70*time.Second), r.AdmittedAt)
		})
	})

	t.Run("a fence seen before its record: its backoff applies when the record arrives", func(t *testing.T) {
		h, _ := admittedWithPodsReady(t, wfpr)
		kv, err := bus.OpenKV(h.ctx, h.js, fence.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		h.put(kv, workloads.Key(ref("b")), fence.State{Requeue: &fence.Requeue{Count: 2, At: now.Add(5 * time.Minute)}})
		// Cycles run meanwhile (a's release wakes one); b is unknown to them.
		h.release("a")
		time.Sleep(100 * time.Millisecond)
		h.submit("b", "main", 0, 1, "1")
		pending("b", "cq", "requeued after PodsReadyTimeout: backing off until 2025-06-07T08:14:10Z").do(h)
	})

	t.Run("pods ready in time: kept", func(t *testing.T) {
		h, clk := admittedWithPodsReady(t, wfpr)
		fk, adm := h.startedFence("a")
		kv, err := bus.OpenKV(h.ctx, h.js, fence.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		if err := fence.SetReady(h.ctx, kv, fk, adm, true, now.Add(30*time.Second)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		clk.advance(10 * time.Minute)
		time.Sleep(100 * time.Millisecond)
		if got := h.evictions("a"); len(got) != 0 {
			t.Errorf("evicted though its pods were ready: %v", got)
		}
	})
}
