package engine

import (
	"fmt"
	"slices"
	"time"
)

// Admission checks, as in Kueue: a ClusterQueue may name checks that an
// admission must pass. The cycle that fits a workload reserves its quota
// (KindReserved) with every check Pending; the checks' controllers answer
// through SetCheck; a later cycle then
//   - admits it (KindAdmitted) once every check is Ready;
//   - evicts it (KindEvicted, ReasonAdmissionCheck) when a check says
//     Retry: it queues again, by its eviction time, no sooner than the
//     longest RequeueAfter of its checks;
//   - evicts and deactivates it (KindEvicted, ReasonDeactivated) when a
//     check says Rejected.
//
// A workload already admitted is evicted the same way if a check later
// says Retry or Rejected, but a check added to its ClusterQueue afterwards
// does not concern it.

// Eviction reasons of admission checks, as Kueue names them.
const (
	// ReasonAdmissionCheck: a check said Retry.
	ReasonAdmissionCheck = "AdmissionCheck"
	// ReasonDeactivated: a check said Rejected; the workload is
	// deactivated.
	ReasonDeactivated = "Deactivated"
)

// requiredChecks lists, all Pending, the checks of cq that apply to an
// admission with the given pod sets: a rule without flavors always
// applies, one with flavors when any pod set uses one of them. States in
// prev are kept for checks still required.
func requiredChecks(cq *cqState, podSets []PodSetAssignment, prev []CheckStatus) []CheckStatus {
	var out []CheckStatus
	for _, rule := range cq.AdmissionChecks {
		if !appliesTo(rule, podSets) {
			continue
		}
		st := CheckStatus{Name: rule.Name, State: CheckPending}
		if i := slices.IndexFunc(prev, func(p CheckStatus) bool { return p.Name == rule.Name }); i >= 0 {
			st = prev[i]
		}
		out = append(out, st)
	}
	return out
}

func appliesTo(rule AdmissionCheckRule, podSets []PodSetAssignment) bool {
	if len(rule.OnFlavors) == 0 {
		return true
	}
	for _, ps := range podSets {
		for _, f := range ps.Flavors {
			if slices.Contains(rule.OnFlavors, f) {
				return true
			}
		}
	}
	return false
}

func cloneChecks(cs []CheckStatus) []CheckStatus {
	if cs == nil {
		return nil
	}
	return slices.Clone(cs)
}

// booked builds the hold of an admission made elsewhere (or before a
// restart): its checks as recorded, or none.
func (e *Engine) booked(cq *cqState, usage []frAmount, a Admission) *admitted {
	ad := &admitted{cq: cq, usage: usage, podSets: a.PodSets, at: a.At, since: a.At,
		checks: cloneChecks(a.Checks), awaiting: a.AwaitingChecks && len(a.Checks) > 0}
	return ad
}

// SetCheck records an admission check's answer for the reservation a
// workload holds now. It is ignored for a workload that holds none, or
// whose reservation does not run that check; the caller makes sure the
// answer is about this reservation.
func (e *Engine) SetCheck(key string, st CheckStatus) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("set admission check %s of %s: %w", st.Name, key, ErrUnknownWorkload)
	}
	if !st.State.Valid() {
		return fmt.Errorf("set admission check %s of %s: state %q is not Pending, Ready, Retry or Rejected: %w", st.Name, key, st.State, ErrBadAdmission)
	}
	if ws.admitted == nil {
		return nil
	}
	for i := range ws.admitted.checks {
		if ws.admitted.checks[i].Name == st.Name {
			ws.admitted.checks[i] = st
		}
	}
	return nil
}

// Checks reports the admission checks of the reservation a workload
// holds, and whether it still waits for them.
func (e *Engine) Checks(key string) (checks []CheckStatus, awaiting bool) {
	ws, ok := e.workloads[key]
	if !ok || ws.admitted == nil {
		return nil, false
	}
	return cloneChecks(ws.admitted.checks), ws.admitted.awaiting
}

// syncChecks keeps the checks of a reservation still waiting for them in
// step with its ClusterQueue: a check added is Pending, one removed is no
// longer waited for. An admitted workload keeps its list.
func (ws *wlState) syncChecks() {
	a := ws.admitted
	if a == nil || !a.awaiting {
		return
	}
	a.checks = requiredChecks(a.cq, a.podSets, a.checks)
}

// admissionChecks acts on the checks' answers: admits reservations whose
// checks are all ready, evicts those a check asks to retry or rejects.
func (c *cycle) admissionChecks() {
	if !c.e.tree.checks {
		return
	}
	for _, cq := range c.e.tree.cqOrder {
		if !ours(cq) {
			continue // another engine decides for its tree
		}
		var acted []*wlState
		for _, ws := range cq.admitted {
			if len(ws.admitted.checks) > 0 && !ws.evicting {
				acted = append(acted, ws)
			}
		}
		for _, ws := range acted {
			c.settleChecks(cq, ws)
		}
	}
}

func (c *cycle) settleChecks(cq *cqState, ws *wlState) {
	a := ws.admitted
	var rejected, retry *CheckStatus
	var delay time.Duration
	ready := true
	for i := range a.checks {
		st := &a.checks[i]
		switch st.State {
		case CheckRejected:
			if rejected == nil {
				rejected = st
			}
		case CheckRetry:
			if retry == nil {
				retry = st
			}
			delay = max(delay, st.RequeueAfter)
		}
		ready = ready && st.State == CheckReady
	}
	switch {
	case rejected != nil:
		ws.pods.deactivated = fmt.Sprintf("deactivated: admission check %s rejected the workload%s", rejected.Name, colonMessage(rejected.Message))
		c.evictFor(cq, ws, ReasonDeactivated, fmt.Sprintf("admission check %s rejected the workload%s", rejected.Name, colonMessage(rejected.Message)))
	case retry != nil:
		ws.pods.requeueAt = c.now.Add(delay)
		ws.pods.requeueWhy = fmt.Sprintf("admission check %s asked to retry", retry.Name)
		// Back in line by the time of its eviction, as in Kueue.
		ws.orderAt = c.now
		c.evictFor(cq, ws, ReasonAdmissionCheck, fmt.Sprintf("admission check %s asked to retry%s", retry.Name, colonMessage(retry.Message)))
	case ready && a.awaiting:
		a.awaiting = false
		a.since = c.now
		ws.admittedNow()
		c.touched[cq] = true
		c.emit(Decision{Kind: KindAdmitted, Key: ws.key, ClusterQueue: cq.Name, PodSets: a.podSets, Checks: cloneChecks(a.checks)})
	}
}

// evictFor takes an admitted workload's quota away for reason (at once, or
// by asking, with deferred eviction) and says so.
func (c *cycle) evictFor(cq *cqState, ws *wlState, reason, message string) {
	ws.charge(c.now)
	if c.e.deferred {
		ws.evicting = true
	} else {
		c.e.evict(ws)
		c.requeued(cq)
	}
	c.touched[cq] = true
	c.emit(Decision{Kind: KindEvicted, Key: ws.key, ClusterQueue: cq.Name, Reason: reason, Message: message})
}

func colonMessage(m string) string {
	if m == "" {
		return ""
	}
	return ": " + m
}
