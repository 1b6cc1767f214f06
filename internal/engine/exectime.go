package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Maximum execution time is Kueue's maximumExecutionTimeSeconds: a
// workload may stay admitted for at most Workload.MaxExecution in total,
// summed over its admissions. Time counts from admission (its admission
// checks passed) until the engine decides to take the admission away or
// the caller reports it stopped (Stop). Once the total reaches the limit
// the workload is evicted and deactivated, and its count starts over, as
// in Kueue.

// ReasonMaxExecTimeExceeded: evicted and deactivated because the
// workload ran longer than its maximum execution time.
const ReasonMaxExecTimeExceeded = "DeactivatedDueToMaximumExecutionTimeExceeded"

// deactivatedPastExecTime is the pending reason of a workload deactivated
// by its maximum execution time.
const deactivatedPastExecTime = "deactivated: exceeding the maximum execution time"

// charge adds the time the workload's current admission ran until now to
// what it ran before, once per admission. A reservation still waiting for
// its admission checks has not run. Only workloads with a maximum
// execution time keep count.
func (ws *wlState) charge(now time.Time) {
	a := ws.admitted
	if ws.w.MaxExecution <= 0 || a == nil || a.awaiting || a.charged {
		return
	}
	a.charged = true
	if d := now.Sub(a.since); d > 0 {
		ws.pods.executed += d
	}
}

// execDeadline is when an admitted workload reaches its maximum execution
// time, if it has one and is running against it.
func (ws *wlState) execDeadline() (time.Time, bool) {
	a := ws.admitted
	if ws.w.MaxExecution <= 0 || a == nil || a.awaiting || a.charged || ws.evicting {
		return time.Time{}, false
	}
	return a.since.Add(ws.w.MaxExecution - ws.pods.executed), true
}

// execTimeouts evicts and deactivates admitted workloads that reached
// their maximum execution time.
func (c *cycle) execTimeouts() {
	if c.e.timed == 0 {
		return
	}
	for _, cq := range c.e.tree.cqOrder {
		if !ours(cq) {
			continue // another engine decides for its tree
		}
		var late []*wlState
		for _, ws := range cq.admitted {
			if at, ok := ws.execDeadline(); ok && !c.now.Before(at) {
				late = append(late, ws)
			}
		}
		for _, ws := range late {
			ws.admitted.charged = true
			ws.pods.executed = 0
			ws.pods.deactivated = deactivatedPastExecTime
			c.evictFor(cq, ws, ReasonMaxExecTimeExceeded, fmt.Sprintf("exceeding the maximum execution time (%s)", ws.w.MaxExecution))
		}
	}
}

// deactivations evicts the admitted workloads deactivated from outside
// (SetRequeues) since the last cycle, with reason Deactivated.
func (c *cycle) deactivations() {
	if len(c.e.deactivating) == 0 {
		return
	}
	list := slices.SortedFunc(maps.Keys(c.e.deactivating), func(a, b *wlState) int { return strings.Compare(a.key, b.key) })
	clear(c.e.deactivating)
	for _, ws := range list {
		if ws.admitted == nil || ws.evicting || ws.pods.deactivated == "" || !ours(ws.admitted.cq) {
			continue
		}
		c.evictFor(ws.admitted.cq, ws, ReasonDeactivated, strings.TrimPrefix(ws.pods.deactivated, "deactivated: "))
	}
}

// Stop reports that a workload's admission ended at a moment the engine
// did not decide (its job was stopped or suspended from outside, or its
// preemption or eviction took effect): the time it ran until at counts
// toward its maximum execution time, and its quota is taken away as by
// Evict.
func (e *Engine) Stop(key string, at time.Time) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("stop %s: %w", key, ErrUnknownWorkload)
	}
	ws.charge(at)
	e.evict(ws)
	return nil
}
