package engine

import (
	"fmt"
	"time"
)

// WaitForPodsReady is Kueue's waitForPodsReady: an admitted workload must
// report all its pods ready within Timeout of its admission, or it is
// evicted (reason PodsReadyTimeout) and requeued after a backoff.
type WaitForPodsReady struct {
	// Timeout counts from admission until the pods are first ready.
	Timeout time.Duration
	// RecoveryTimeout counts from the moment pods that were ready stop
	// being ready (a pod failed and its replacement waits). Zero turns
	// the check off; callers default it to Timeout, as Kueue does.
	RecoveryTimeout time.Duration
	// BlockAdmission admits nothing, in any ClusterQueue, while an
	// admitted workload waits for its pods to be ready.
	BlockAdmission bool
	// RequeueByCreation orders a requeued workload by its submission
	// (Kueue's timestamp Creation) rather than by its eviction (Eviction,
	// the default).
	RequeueByCreation bool
	// BackoffLimitCount, when set, deactivates a workload instead of
	// requeuing it once it has been requeued this many times.
	BackoffLimitCount *int32
	// BackoffBase and BackoffMax bound the requeue delay: Base×2^(n-1)
	// after the n-th timeout, at most Max.
	BackoffBase time.Duration
	BackoffMax  time.Duration
}

// Reasons of waitForPodsReady.
const (
	// ReasonPodsReadyTimeout: evicted because its pods were not ready in
	// time; it is requeued after a backoff.
	ReasonPodsReadyTimeout = "PodsReadyTimeout"
	// ReasonRequeuingLimitExceeded: evicted and deactivated because it
	// timed out once more after BackoffLimitCount requeues.
	ReasonRequeuingLimitExceeded = "DeactivatedDueToRequeuingLimitExceeded"
)

// Pending reasons of waitForPodsReady.
const (
	// waitingForPodsReady: held back by BlockAdmission.
	waitingForPodsReady = "waiting for all admitted workloads to be in PodsReady condition"
	// deactivatedPastLimit: timed out once more after BackoffLimitCount
	// requeues.
	deactivatedPastLimit = "deactivated: exceeding the maximum number of re-queuing retries"
)

// readiness is what the engine knows of an admitted workload's pods, and
// of the requeues they caused.
type readiness struct {
	// deactivated, when set, is why the workload is never admitted again
	// (until reactivated).
	deactivated string
	// reactivations and reactivation are RequeueState's.
	reactivations int32
	reactivation  string
	// requeueAt holds the workload back until then; requeues counts
	// PodsReadyTimeout evictions.
	requeueAt time.Time
	requeues  int32
	// requeueWhy says what holds it back until requeueAt, when it was not
	// a PodsReadyTimeout (an admission check asked to retry).
	requeueWhy string
	// ready: all pods are ready now; once: they have been, in this
	// admission; lostAt: when they stopped being ready after that.
	ready, once bool
	lostAt      time.Time
	// executed is how long its earlier admissions ran, toward its
	// maximum execution time (see charge).
	executed time.Duration
}

// SetPodsReady records whether all pods of an admitted workload are ready,
// as the job integration observes it; at is when that became so. It is
// ignored for a workload that holds no admission.
func (e *Engine) SetPodsReady(key string, ready bool, at time.Time) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("set pods ready of %s: %w", key, ErrUnknownWorkload)
	}
	if ws.admitted == nil {
		return nil
	}
	r := &ws.pods
	switch {
	case ready:
		r.ready, r.once, r.lostAt = true, true, time.Time{}
	case r.ready:
		r.ready, r.lostAt = false, at
	}
	return nil
}

// PodsReady reports whether an admitted workload's pods are all ready.
func (e *Engine) PodsReady(key string) bool {
	ws, ok := e.workloads[key]
	return ok && ws.admitted != nil && ws.pods.ready
}

// RequeueState is what waitForPodsReady remembers of a workload across
// its admissions: how often it was requeued after a PodsReadyTimeout, until
// when it is held back, and whether it was deactivated.
type RequeueState struct {
	Count       int32
	At          time.Time
	Deactivated string
	// Why says what held it back until At when it was not a
	// PodsReadyTimeout (an admission check asked to retry).
	Why string
	// Executed is how long its ended admissions ran, toward its maximum
	// execution time.
	Executed time.Duration
	// Reactivations and Reactivation are a user's reactivations of the
	// workload, kept for the caller (fence.Requeue).
	Reactivations int32
	Reactivation  string
}

// Requeues reports a workload's RequeueState.
func (e *Engine) Requeues(key string) RequeueState {
	ws, ok := e.workloads[key]
	if !ok {
		return RequeueState{}
	}
	return RequeueState{Count: ws.pods.requeues, At: ws.pods.requeueAt, Deactivated: ws.pods.deactivated, Why: ws.pods.requeueWhy, Executed: ws.pods.executed,
		Reactivations: ws.pods.reactivations, Reactivation: ws.pods.reactivation}
}

// SetRequeues restores what Requeues reported, for a workload submitted
// again after a restart.
func (e *Engine) SetRequeues(key string, rs RequeueState) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("set requeues of %s: %w", key, ErrUnknownWorkload)
	}
	if rs.Deactivated != "" && ws.pods.deactivated == "" && ws.admitted != nil && !ws.evicting {
		// Deactivated from outside while admitted (by its user): the
		// next cycle evicts it.
		e.deactivating[ws] = true
	}
	ws.pods.requeues, ws.pods.requeueAt, ws.pods.deactivated, ws.pods.requeueWhy = rs.Count, rs.At, rs.Deactivated, rs.Why
	ws.pods.executed = rs.Executed
	ws.pods.reactivations, ws.pods.reactivation = rs.Reactivations, rs.Reactivation
	if ws.cq != nil {
		// A reactivated workload may be admitted again.
		ws.cq.settled = false
	}
	return nil
}

// admittedNow starts a new admission's wait for ready pods.
func (ws *wlState) admittedNow() {
	ws.pods.ready, ws.pods.once, ws.pods.lostAt = false, false, time.Time{}
}

// deadline is when an admitted workload times out, if it can.
func (w *WaitForPodsReady) deadline(ws *wlState) (time.Time, bool) {
	r := &ws.pods
	switch {
	case ws.admitted == nil || ws.evicting || r.ready || ws.admitted.awaiting:
		// Pods start only once admitted: a reservation waiting for its
		// admission checks has none to wait for.
		return time.Time{}, false
	case !r.once:
		return ws.admitted.since.Add(w.Timeout), true
	case w.RecoveryTimeout > 0:
		return r.lostAt.Add(w.RecoveryTimeout), true
	}
	return time.Time{}, false
}

// backoff is the requeue delay after the n-th timeout.
func (w *WaitForPodsReady) backoff(n int32) time.Duration {
	d := w.BackoffBase
	for i := int32(1); i < n && d < w.BackoffMax; i++ {
		d *= 2
	}
	return min(d, w.BackoffMax)
}

// podsReadyTimeouts evicts admitted workloads whose pods were not ready in
// time: requeued after a backoff, or deactivated past the limit.
func (c *cycle) podsReadyTimeouts() {
	w := c.e.cfg.WaitForPodsReady
	if w == nil {
		return
	}
	for _, cq := range c.e.tree.cqOrder {
		if !ours(cq) {
			continue // another engine decides for its tree
		}
		var late []*wlState
		for _, ws := range cq.admitted {
			if at, ok := w.deadline(ws); ok && !c.now.Before(at) {
				late = append(late, ws)
			}
		}
		for _, ws := range late {
			ws.charge(c.now)
			r := &ws.pods
			reason := ReasonPodsReadyTimeout
			if lim := w.BackoffLimitCount; lim != nil && r.requeues+1 > *lim {
				reason = ReasonRequeuingLimitExceeded
				r.deactivated = deactivatedPastLimit
			} else {
				r.requeues++
				r.requeueAt = c.now.Add(w.backoff(r.requeues))
				r.requeueWhy = ""
				if !w.RequeueByCreation {
					// Back in line by the time of its eviction.
					ws.orderAt = c.now
				}
			}
			if c.e.deferred {
				ws.evicting = true
			} else {
				c.e.evict(ws)
			}
			c.touched[cq] = true
			c.emit(Decision{Kind: KindEvicted, Key: ws.key, ClusterQueue: cq.Name, Reason: reason})
		}
	}
}

// podsReadyBlock reports whether BlockAdmission holds every admission
// back: some admitted workload still waits for its pods.
func (c *cycle) podsReadyBlock() bool {
	w := c.e.cfg.WaitForPodsReady
	if w == nil || !w.BlockAdmission {
		return false
	}
	for _, cq := range c.e.tree.cqOrder {
		for _, ws := range cq.admitted {
			if !ws.evicting && !ws.pods.ready && !ws.admitted.awaiting {
				return true
			}
		}
	}
	return false
}

// heldBack says why a pending workload is kept out of this cycle by
// waitForPodsReady, or "".
func (c *cycle) heldBack(ws *wlState) string {
	r := &ws.pods
	switch {
	case r.deactivated != "":
		return r.deactivated
	case c.now.Before(r.requeueAt) && r.requeueWhy != "":
		return fmt.Sprintf("%s: backing off until %s", r.requeueWhy, r.requeueAt.UTC().Format(time.RFC3339))
	case c.now.Before(r.requeueAt):
		return fmt.Sprintf("requeued after PodsReadyTimeout: backing off until %s", r.requeueAt.UTC().Format(time.RFC3339))
	}
	return ""
}

// NextTimer returns the earliest moment after now at which a cycle would
// decide something because time passed: a pods-ready timeout, the end
// of a requeue backoff (after a timeout, or an admission check's Retry),
// or a maximum execution time reached. ok is false when nothing waits on
// time.
func (e *Engine) NextTimer(now time.Time) (next time.Time, ok bool) {
	w := e.cfg.WaitForPodsReady
	consider := func(t time.Time) {
		if t.After(now) && (!ok || t.Before(next)) {
			next, ok = t, true
		}
	}
	if w == nil && !e.tree.checks && e.timed == 0 {
		return next, ok
	}
	for _, ws := range e.workloads {
		if w == nil {
			// Only admission checks' backoffs.
		} else if at, due := w.deadline(ws); due {
			consider(at)
		}
		if ws.admitted == nil && ws.pods.deactivated == "" {
			consider(ws.pods.requeueAt)
		}
		if at, due := ws.execDeadline(); due {
			consider(at)
		}
	}
	return next, ok
}
