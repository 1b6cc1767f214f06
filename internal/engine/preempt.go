package engine

import (
	"sort"
)

// target is a workload chosen for preemption and why.
type target struct {
	ws     *wlState
	reason string
}

// preemptionTargets finds the smallest set of admitted workloads whose
// eviction lets ws fit with assignment a, following the ClusterQueue's
// preemption policy. It returns nil if no such set exists.
func (e *Engine) preemptionTargets(ws *wlState, a *assignment) []target {
	cq := ws.cq
	candidates := e.candidates(ws, a)
	if len(candidates) == 0 {
		return nil
	}
	var sameQueue []*wlState
	for _, c := range candidates {
		if c.admitted.cq == cq {
			sameQueue = append(sameQueue, c)
		}
	}
	if len(sameQueue) == len(candidates) {
		return e.minimalSet(ws, a, candidates, true, nil)
	}
	borrowWithinCohort := cq.Preemption.BorrowWithinCohort == LowerPriority
	var threshold *int32
	if borrowWithinCohort {
		t := ws.w.Priority
		if m := cq.Preemption.MaxPriorityThreshold; m != nil && *m < t {
			t = *m + 1
		}
		threshold = &t
	}
	if e.tree.fair {
		return e.fairSet(ws, a, candidates, threshold)
	}
	if borrowWithinCohort {
		if !e.underNominal(cq, a) {
			// Borrowing while preempting: only other queues' workloads below
			// the threshold may go.
			var keep []*wlState
			for _, c := range candidates {
				if c.admitted.cq == cq || c.w.Priority < *threshold {
					keep = append(keep, c)
				}
			}
			candidates = keep
		}
		return e.minimalSet(ws, a, candidates, true, threshold)
	}
	if e.underNominal(cq, a) {
		if t := e.minimalSet(ws, a, candidates, false, nil); len(t) > 0 {
			return t
		}
	}
	return e.minimalSet(ws, a, sameQueue, true, nil)
}

// underNominal reports whether the queue currently uses less than its
// nominal quota in every flavor-resource that needs preemption.
func (e *Engine) underNominal(cq *cqState, a *assignment) bool {
	n := cq.node
	for i := range a.preemptFRs {
		if n.usage[i] >= n.nominal[i] {
			return false
		}
	}
	return true
}

// candidates lists the admitted workloads ws may preempt under its queue's
// policy, best victims first: other queues' borrowers before the own queue,
// lower priority first, most recently admitted first.
func (e *Engine) candidates(ws *wlState, a *assignment) []*wlState {
	out := e.collectCandidates(ws, a.preemptFRs, false)
	cq := ws.cq
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		// Workloads already on their way out cost nothing more.
		if a.evicting != b.evicting {
			return a.evicting
		}
		aOther, bOther := a.admitted.cq != cq, b.admitted.cq != cq
		if aOther != bOther {
			return aOther
		}
		if a.w.Priority != b.w.Priority {
			return a.w.Priority < b.w.Priority
		}
		if !a.admitted.at.Equal(b.admitted.at) {
			return a.admitted.at.After(b.admitted.at)
		}
		return a.key < b.key
	})
	return out
}

// collectCandidates lists, unsorted, the admitted workloads that use any of
// frs and that ws's queue policy allows it to preempt. With first set it
// stops at the first one found.
func (e *Engine) collectCandidates(ws *wlState, frs map[int]bool, first bool) []*wlState {
	cq := ws.cq
	p := cq.Preemption
	var out []*wlState
	uses := func(c *wlState) bool {
		for _, u := range c.admitted.usage {
			if frs[u.fr] && u.v > 0 {
				return true
			}
		}
		return false
	}
	borrowingIn := func(q *cqState) bool {
		for i := range frs {
			if q.node.borrowing(i) {
				return true
			}
		}
		return false
	}
	if p.WithinClusterQueue != Never && p.WithinClusterQueue != "" {
		for _, c := range cq.admitted {
			if c == ws || !uses(c) {
				continue
			}
			if c.w.Priority < ws.w.Priority ||
				(p.WithinClusterQueue == LowerOrNewerEqualPriority && c.w.Priority == ws.w.Priority && newer(c, ws)) {
				out = append(out, c)
				if first {
					return out
				}
			}
		}
	}
	if cq.node.parent != nil && p.ReclaimWithinCohort != Never && p.ReclaimWithinCohort != "" {
		root := cq.node.root()
		for _, other := range e.tree.members[root] {
			if other == cq || other.node.root() != root || !borrowingIn(other) {
				continue
			}
			for _, c := range other.admitted {
				if !uses(c) {
					continue
				}
				if p.ReclaimWithinCohort == Any || c.w.Priority < ws.w.Priority {
					out = append(out, c)
					if first {
						return out
					}
				}
			}
		}
	}
	return out
}

// newer reports whether c was submitted after w.
func newer(c, w *wlState) bool {
	if !c.w.Submitted.Equal(w.w.Submitted) {
		return c.w.Submitted.After(w.w.Submitted)
	}
	return c.key > w.key
}

// borrowingIn reports whether a queue uses more than its quota in any
// flavor-resource the preemptor needs.
func (e *Engine) borrowingIn(cq *cqState, a *assignment) bool {
	for i := range a.preemptFRs {
		if cq.node.borrowing(i) {
			return true
		}
	}
	return false
}

// fits reports whether usage a fits in the queue now; without borrowing
// it must also stay within nominal quota.
func (e *Engine) fits(cq *cqState, a *assignment, allowBorrowing bool) bool {
	n := cq.node
	for _, u := range a.usage {
		if !allowBorrowing && n.usage[u.fr]+u.v > n.nominal[u.fr] {
			return false
		}
		if u.v > n.available(u.fr) {
			return false
		}
	}
	return true
}

func (e *Engine) take(ws *wlState) {
	for _, u := range ws.admitted.usage {
		ws.admitted.cq.node.addUsage(u.fr, -u.v)
		e.epoch++
	}
}

func (e *Engine) putBack(ws *wlState) {
	for _, u := range ws.admitted.usage {
		ws.admitted.cq.node.addUsage(u.fr, u.v)
		e.epoch++
	}
}

func reasonFor(preemptor *cqState, victim *wlState, allowBorrowing bool) string {
	switch {
	case victim.admitted.cq == preemptor:
		return ReasonInClusterQueue
	case allowBorrowing:
		return ReasonInCohortReclaimWhileBorrowing
	default:
		return ReasonInCohortReclamation
	}
}

// minimalSet removes candidates in order until ws fits, then puts back
// every one that turns out not to be needed.
func (e *Engine) minimalSet(ws *wlState, a *assignment, candidates []*wlState, allowBorrowing bool, threshold *int32) []target {
	cq := ws.cq
	var targets []target
	found := false
	for _, c := range candidates {
		if c.admitted.cq != cq && !e.borrowingIn(c.admitted.cq, a) {
			continue
		}
		if c.admitted.cq != cq && threshold != nil && c.w.Priority >= *threshold {
			allowBorrowing = false
		}
		e.take(c)
		targets = append(targets, target{ws: c})
		if e.fits(cq, a, allowBorrowing) {
			found = true
			break
		}
	}
	if !found {
		for _, t := range targets {
			e.putBack(t.ws)
		}
		return nil
	}
	targets = e.fillBack(ws, a, targets, allowBorrowing)
	for _, t := range targets {
		e.putBack(t.ws)
	}
	for i := range targets {
		if targets[i].reason == "" {
			targets[i].reason = reasonFor(cq, targets[i].ws, allowBorrowing)
		}
	}
	return targets
}

// fillBack restores targets, last-but-one first, that are not needed for
// ws to fit. The last target is always needed.
func (e *Engine) fillBack(ws *wlState, a *assignment, targets []target, allowBorrowing bool) []target {
	for i := len(targets) - 2; i >= 0; i-- {
		e.putBack(targets[i].ws)
		if e.fits(ws.cq, a, allowBorrowing) {
			targets = append(targets[:i], targets[i+1:]...)
			continue
		}
		e.take(targets[i].ws)
	}
	return targets
}

// fairSet chooses victims by fair sharing: take from the queue with the
// largest share first, while the preemptor's share after admission stays at
// or below the victim queue's share after the preemption; then, one per
// queue, from queues whose share before preemption exceeds the preemptor's.
func (e *Engine) fairSet(ws *wlState, a *assignment, candidates []*wlState, threshold *int32) []target {
	cq := ws.cq
	byCQ := map[*cqState][]*wlState{}
	var order []*cqState
	for _, c := range candidates {
		if _, ok := byCQ[c.admitted.cq]; !ok {
			order = append(order, c.admitted.cq)
		}
		byCQ[c.admitted.cq] = append(byCQ[c.admitted.cq], c)
	}
	var targets []target
	found := false
	myShare := func() int64 { return e.tree.share(cq.node, a.usage) }
	// pickLargest walks down the cohort tree from the root, at each level
	// into the child with the largest share among those holding
	// candidates, as a tournament; in a flat cohort that is simply the
	// queue with the largest share.
	pickLargest := func(pool map[*cqState][]*wlState) *cqState {
		eligible := map[*node]bool{}
		for _, q := range order {
			if len(pool[q]) == 0 || (q != cq && !e.borrowingIn(q, a)) {
				continue
			}
			for n := q.node; n != nil && !eligible[n]; n = n.parent {
				eligible[n] = true
			}
		}
		n := cq.node.root()
		if !eligible[n] {
			return nil
		}
		for n.cq == nil {
			var best *node
			var bestShare int64
			for _, c := range n.children {
				if !eligible[c] {
					continue
				}
				if s := e.tree.share(c, nil); best == nil || s > bestShare {
					best, bestShare = c, s
				}
			}
			n = best
		}
		return n.cq
	}
	var retry []*wlState
	for !found {
		q := pickLargest(byCQ)
		if q == nil {
			break
		}
		if q == cq {
			c := byCQ[q][0]
			byCQ[q] = byCQ[q][1:]
			e.take(c)
			targets = append(targets, target{ws: c, reason: ReasonInClusterQueue})
			found = e.fits(cq, a, true)
			continue
		}
		preemptor := myShare()
		took := false
		for i, c := range byCQ[q] {
			below := threshold != nil && c.w.Priority < *threshold
			var without []frAmount
			for _, u := range c.admitted.usage {
				without = append(without, frAmount{u.fr, -u.v})
			}
			after := e.tree.share(q.node, without)
			if below || preemptor <= after {
				e.take(c)
				reason := ReasonInCohortFairSharing
				if below {
					reason = ReasonInCohortReclaimWhileBorrowing
				}
				targets = append(targets, target{ws: c, reason: reason})
				byCQ[q] = byCQ[q][i+1:]
				found = e.fits(cq, a, true)
				took = true
				break
			}
			retry = append(retry, c)
		}
		if !took {
			byCQ[q] = nil
		}
	}
	if !found && len(retry) > 0 {
		// Second strategy: one workload per queue, from queues whose share
		// before preemption is above the preemptor's share after admission.
		used := map[*cqState]bool{}
		for _, c := range retry {
			if found {
				break
			}
			q := c.admitted.cq
			if used[q] || !e.borrowingIn(q, a) {
				continue
			}
			if e.tree.share(cq.node, a.usage) < e.tree.share(q.node, nil) {
				used[q] = true
				e.take(c)
				targets = append(targets, target{ws: c, reason: ReasonInCohortFairSharing})
				found = e.fits(cq, a, true)
			}
		}
	}
	if !found {
		for _, t := range targets {
			e.putBack(t.ws)
		}
		return nil
	}
	targets = e.fillBack(ws, a, targets, true)
	for _, t := range targets {
		e.putBack(t.ws)
	}
	return targets
}
