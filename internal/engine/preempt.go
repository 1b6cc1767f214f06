package engine

import (
	"cmp"
	"slices"
	"strings"
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
	if !e.tree.fair {
		return e.classicalTargets(ws, a)
	}
	cq := ws.cq
	candidates := e.candidates(ws, a)
	if len(candidates) == 0 {
		return nil
	}
	sameQueue := 0
	for _, c := range candidates {
		if c.admitted.cq == cq {
			sameQueue++
		}
	}
	if sameQueue == len(candidates) {
		return e.minimalSet(ws, a, candidates)
	}
	var threshold *int32
	if cq.Preemption.BorrowWithinCohort == LowerPriority {
		t := ws.w.Priority
		if m := cq.Preemption.MaxPriorityThreshold; m != nil && *m < t {
			t = *m + 1
		}
		threshold = &t
	}
	return e.fairSet(ws, a, candidates, threshold)
}

// variant is the ground on which a candidate may be preempted, after
// Kueue's classical preemption.
type variant uint8

const (
	// withinCQ: a workload of the preemptor's own ClusterQueue, by its
	// withinClusterQueue policy.
	withinCQ variant = iota
	// hierarchyReclaim: the candidate uses quota of a subtree whose quota
	// would hold the preemptor, so the preemptor has the better claim to
	// it whatever their priorities.
	hierarchyReclaim
	// reclaimNoBorrow: preemptible only if the preemptor's queue does not
	// borrow once it is admitted.
	reclaimNoBorrow
	// reclaimBorrowing: preemptible even while the preemptor's queue
	// borrows (borrowWithinCohort, below maxPriorityThreshold).
	reclaimBorrowing
)

func (v variant) reason() string {
	switch v {
	case withinCQ:
		return ReasonInClusterQueue
	case reclaimBorrowing:
		return ReasonInCohortReclaimWhileBorrowing
	default:
		return ReasonInCohortReclamation
	}
}

// candidate is an admitted workload ws may preempt, with the lowest cohort
// its queue shares with ws's queue (nil in the same queue).
type candidate struct {
	ws  *wlState
	lca *node
	v   variant
}

// classicalTargets chooses victims as Kueue's classical preemption does in
// a cohort tree of any depth. Candidates come from the preemptor's own
// queue and from queues whose subtrees exceed their quota, walking up from
// the preemptor's queue one cohort at a time. Once the preemptor's
// requests fit in the quota of the subtree reached so far, it has a
// hierarchical claim on everything borrowed from that subtree, whatever
// the priorities; otherwise other queues' workloads are candidates by
// priority, under reclaimWithinCohort and borrowWithinCohort. Victims are
// taken in order until ws fits, with or without borrowing as the policy
// allows, and those not needed are put back.
func (e *Engine) classicalTargets(ws *wlState, a *assignment) []target {
	cq := ws.cq
	hier, other, same := e.classicalCandidates(ws, a, false)
	if len(hier)+len(other)+len(same) == 0 {
		return nil
	}
	// The lists live in scratch until the next search (victimOrder
	// copies them).
	defer func() { e.scratch.hier, e.scratch.other, e.scratch.same = hier[:0], other[:0], same[:0] }()
	noBorrowWithin := cq.Preemption.BorrowWithinCohort != LowerPriority
	var attempts []bool // allowBorrowing, in the order tried
	switch {
	case len(hier)+len(other) == 0 || (noBorrowWithin && !e.underNominal(cq, a)):
		attempts = []bool{true}
	case noBorrowWithin && len(hier) == 0:
		attempts = []bool{false, true}
	default:
		attempts = []bool{true, false}
	}
	attempts = slices.DeleteFunc(attempts, func(allowBorrowing bool) bool {
		return !e.roomAtAll(cq, a, allowBorrowing, hier, other, same)
	})
	if len(attempts) == 0 {
		return nil
	}
	// Workloads already on their way out go first, as they cost nothing
	// more; within each part the groups keep their order.
	order := e.victimOrder(cq, hier, other, same)
	// A search that fails may have taken thousands of victims before
	// giving up; its list is scratch, and only a success's is copied.
	targets := e.scratch.targets[:0]
	defer func() { e.scratch.targets = targets[:0] }()
	for _, allowBorrowing := range attempts {
		targets = targets[:0]
		for i := 0; ; i++ {
			c, ok := order.at(i)
			if !ok {
				break
			}
			if !e.stillPreemptible(cq, c, a, allowBorrowing) {
				continue
			}
			e.take(c.ws)
			targets = append(targets, target{ws: c.ws, reason: c.v.reason()})
			if e.fits(cq, a, allowBorrowing) {
				targets = e.fillBack(ws, a, targets, allowBorrowing)
				for _, t := range targets {
					e.putBack(t.ws)
				}
				return slices.Clone(targets)
			}
		}
		for _, t := range targets {
			e.putBack(t.ws)
		}
	}
	return nil
}

// victimOrder yields a search's candidates in the order it takes them:
// those already on their way out first, then by group (hierarchical
// claims, other queues, the own queue), then as Kueue orders them
// (victimCompare: other queues' first, lower priority first, most recently
// admitted first). It sorts only as far as the search reads: a search in a busy
// cohort has thousands of candidates and usually stops after a few, so
// a heap built in linear time and popped a few times costs a fraction of
// a full sort.
type victimOrder struct {
	cq *cqState
	// cands are the candidates as given, never moved; keys their places
	// in the order, side by side. The heap and the yielded list hold
	// indexes into both, so that ordering moves small values without
	// pointers (which the collector would otherwise have to see moved).
	cands []candidate
	keys  []victimKey
	heap  []int32 // not yielded yet, a min-heap
	out   []int32 // yielded, in order
}

// victimKey carries a candidate's place in the order as numbers, compared
// without reaching into the workload: rank is (not evicting, group,
// priority), then the most recently admitted first (later), then the key.
type victimKey struct {
	rank uint64
	// used is minus the Admission Fair Sharing score of a candidate's
	// LocalQueue when it is in the preemptor's ClusterQueue (the queue
	// that used more gives first), compared after rank's evicting and
	// group bits and before its priority.
	used  float64
	later int64
}

func (e *Engine) victimOrder(cq *cqState, groups ...[]candidate) *victimOrder {
	o := &e.scratch.victims
	o.cq, o.cands, o.keys, o.heap, o.out = cq, o.cands[:0], o.keys[:0], o.heap[:0], o.out[:0]
	for g, l := range groups {
		for _, c := range l {
			rank := uint64(g)<<32 | uint64(uint32(c.ws.w.Priority)^1<<31)
			if !c.ws.evicting {
				rank |= 1 << 34
			}
			o.heap = append(o.heap, int32(len(o.cands)))
			o.cands = append(o.cands, c)
			k := victimKey{rank: rank, later: -c.ws.admitted.at.UnixNano()}
			if f := c.ws.admitted.fair; f != nil && c.ws.admitted.cq == cq {
				k.used = -f.score
			}
			o.keys = append(o.keys, k)
		}
	}
	for i := len(o.heap)/2 - 1; i >= 0; i-- {
		o.down(i)
	}
	return o
}

// less is victimCompare within a group (whose queues are all others' or
// all the preemptor's own), of the heap's entries i and j.
func (o *victimOrder) less(i, j int) bool {
	ci, cj := o.heap[i], o.heap[j]
	a, b := &o.keys[ci], &o.keys[cj]
	if ah, bh := a.rank>>32, b.rank>>32; ah != bh {
		return ah < bh
	}
	if a.used != b.used {
		return a.used < b.used
	}
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	if a.later != b.later {
		return a.later < b.later
	}
	return o.cands[ci].ws.key < o.cands[cj].ws.key
}

func (o *victimOrder) down(i int) {
	n := len(o.heap)
	for {
		m := i
		if l := 2*i + 1; l < n && o.less(l, m) {
			m = l
		}
		if r := 2*i + 2; r < n && o.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		o.heap[i], o.heap[m] = o.heap[m], o.heap[i]
		i = m
	}
}

// at returns the i-th candidate in order, or false past the last.
func (o *victimOrder) at(i int) (candidate, bool) {
	for len(o.out) <= i {
		n := len(o.heap)
		if n == 0 {
			return candidate{}, false
		}
		o.out = append(o.out, o.heap[0])
		o.heap[0] = o.heap[n-1]
		o.heap = o.heap[:n-1]
		o.down(0)
	}
	return o.cands[o.out[i]], true
}

// roomAtAll reports whether freeing at once every candidate an attempt
// (allowBorrowing or not) could take would make room for a. An attempt
// takes candidates in order only while they stay preemptible, so it frees
// at most that much: if even that is not enough, no order is, and the
// attempt is not worth sorting the candidates for. In a busy cohort most
// searches end so, and the candidates are many (every admitted workload of
// the queues that borrow).
func (e *Engine) roomAtAll(cq *cqState, a *assignment, allowBorrowing bool, lists ...[]candidate) bool {
	eligible := func(c candidate) bool {
		return c.ws.admitted.cq == cq || !allowBorrowing || c.v != reclaimNoBorrow
	}
	if len(a.plans) > 0 {
		// Placement in a topology needs each victim's pods off its nodes.
		for _, l := range lists {
			for _, c := range l {
				if eligible(c) {
					e.take(c.ws)
				}
			}
		}
		room := e.fits(cq, a, allowBorrowing)
		for _, l := range lists {
			for _, c := range l {
				if eligible(c) {
					e.putBack(c.ws)
				}
			}
		}
		return room
	}
	// Quota alone: what each queue frees is summed first and taken off
	// once (taking off the sum leaves the tree's usage as taking off each
	// part in turn would), as the candidates come queue by queue.
	freed := e.scratch.freed[:0]
	for _, l := range lists {
		for _, c := range l {
			if !eligible(c) {
				continue
			}
			n := c.ws.admitted.cq.node
		usage:
			for _, u := range c.ws.admitted.usage {
				for i := len(freed) - 1; i >= 0 && freed[i].n == n; i-- {
					if freed[i].fr == u.fr {
						freed[i].v += u.v
						continue usage
					}
				}
				freed = append(freed, nodeAmount{n: n, frAmount: u})
			}
		}
	}
	for _, f := range freed {
		f.n.addUsage(f.fr, -f.v)
	}
	room := e.fits(cq, a, allowBorrowing)
	for _, f := range freed {
		f.n.addUsage(f.fr, f.v)
	}
	e.scratch.freed = freed[:0]
	return room
}

// nodeAmount is an amount of a flavor-resource at a node of the tree.
type nodeAmount struct {
	n *node
	frAmount
}

// classicalCandidates lists the workloads ws may preempt for a, in three
// groups: those of other queues it has a hierarchical claim over, those of
// other queues it may take by priority, and its own queue's. With first
// set it stops at the first one found.
func (e *Engine) classicalCandidates(ws *wlState, a *assignment, first bool) (hier, other, same []candidate) {
	cq := ws.cq
	hier, other, same = e.scratch.hier[:0], e.scratch.other[:0], e.scratch.same[:0]
	p := cq.Preemption
	frs := a.preemptFRs
	if p.WithinClusterQueue != Never && p.WithinClusterQueue != "" {
		for _, c := range cq.admitted {
			if c != ws && c != ws.parent && usesAny(c, frs) && withinAllows(p.WithinClusterQueue, c, ws) {
				same = append(same, candidate{ws: c, v: withinCQ})
				if first {
					return
				}
			}
		}
	}
	if cq.node.parent == nil || p.ReclaimWithinCohort == Never || p.ReclaimWithinCohort == "" {
		return
	}
	var threshold *int32
	if p.BorrowWithinCohort == LowerPriority {
		threshold = p.MaxPriorityThreshold
	}
	classify := func(c *wlState, claim bool) (variant, bool) {
		if !usesAny(c, frs) || (p.ReclaimWithinCohort == LowerPriority && c.w.Priority >= ws.w.Priority) {
			return 0, false
		}
		switch {
		case claim:
			return hierarchyReclaim, true
		case p.BorrowWithinCohort != LowerPriority,
			c.w.Priority >= ws.w.Priority,
			threshold != nil && c.w.Priority > *threshold:
			return reclaimNoBorrow, true
		}
		return reclaimBorrowing, true
	}
	// walk visits the subtree under n except skip, descending only into
	// cohorts and queues that exceed their quota in frs.
	var walk func(n, lca, skip *node, claim bool) bool
	walk = func(n, lca, skip *node, claim bool) bool {
		for _, ch := range n.children {
			if ch == skip || !ch.borrowingAny(frs) {
				continue
			}
			if ch.cq == nil {
				if walk(ch, lca, skip, claim) {
					return true
				}
				continue
			}
			for _, c := range ch.cq.admitted {
				v, ok := classify(c, claim)
				if !ok {
					continue
				}
				if claim {
					hier = append(hier, candidate{ws: c, lca: lca, v: v})
				} else {
					other = append(other, candidate{ws: c, lca: lca, v: v})
				}
				if first {
					return true
				}
			}
		}
		return false
	}
	claim, rest := cq.node.fitsQuota(a.usage)
	prev := cq.node
	for anc := cq.node.parent; anc != nil; anc = anc.parent {
		if walk(anc, anc, prev, claim) {
			return
		}
		var fits bool
		fits, rest = anc.fitsQuota(rest)
		claim = claim || fits
		prev = anc
	}
	return
}

// stillPreemptible reports whether candidate c may still go, given the
// victims taken so far: a victim from another queue must be one the
// attempt allows, and its queue and every cohort up to the one it shares
// with the preemptor must still exceed their quota.
func (e *Engine) stillPreemptible(cq *cqState, c candidate, a *assignment, allowBorrowing bool) bool {
	q := c.ws.admitted.cq
	if q == cq {
		return true
	}
	if allowBorrowing && c.v == reclaimNoBorrow {
		return false
	}
	for n := q.node; n != nil && n != c.lca; n = n.parent {
		if !n.borrowingAny(a.preemptFRs) {
			return false
		}
	}
	return true
}

// usesAny reports whether admitted workload c uses any of frs.
func usesAny(c *wlState, frs map[int]bool) bool {
	for _, u := range c.admitted.usage {
		if frs[u.fr] && u.v > 0 {
			return true
		}
	}
	return false
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
	slices.SortFunc(out, func(a, b *wlState) int { return victimCompare(cq, a, b) })
	return out
}

// collectCandidates lists, unsorted, the admitted workloads that use any of
// frs and that ws's queue policy allows it to preempt. With first set it
// stops at the first one found.
func (e *Engine) collectCandidates(ws *wlState, frs map[int]bool, first bool) []*wlState {
	cq := ws.cq
	p := cq.Preemption
	var out []*wlState
	if p.WithinClusterQueue != Never && p.WithinClusterQueue != "" {
		for _, c := range cq.admitted {
			if c != ws && c != ws.parent && usesAny(c, frs) && withinAllows(p.WithinClusterQueue, c, ws) {
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
			if other == cq || other.node.root() != root || !other.node.borrowingAny(frs) {
				continue
			}
			for _, c := range other.admitted {
				if !usesAny(c, frs) {
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

// victimCompare orders preemption candidates for a preemptor of queue cq.
//
// It is a total order (the key breaks ties), so the sort's result never
// depends on the input's order; it is a comparison (not a less-than) for
// slices.SortFunc, which a cycle calls for every preemptor it nominates.
func victimCompare(cq *cqState, a, b *wlState) int {
	// Workloads already on their way out cost nothing more.
	if a.evicting != b.evicting {
		return first(a.evicting)
	}
	aOther, bOther := a.admitted.cq != cq, b.admitted.cq != cq
	if aOther != bOther {
		return first(aOther)
	}
	// With Admission Fair Sharing, within one ClusterQueue the workloads
	// of the LocalQueue that used more go first (as in Kueue).
	if fa, fb := a.admitted.fair, b.admitted.fair; a.admitted.cq == b.admitted.cq && fa != fb && fa != nil && fb != nil && fa.score != fb.score {
		return cmp.Compare(fb.score, fa.score)
	}
	if a.w.Priority != b.w.Priority {
		return cmp.Compare(a.w.Priority, b.w.Priority)
	}
	if c := b.admitted.at.Compare(a.admitted.at); c != 0 {
		return c // the most recently admitted first
	}
	return strings.Compare(a.key, b.key)
}

// first is the comparison of two items of which the first one has a
// property (aHas) and the other not, or the other way round.
func first(aHas bool) int {
	if aHas {
		return -1
	}
	return 1
}

// withinAllows reports whether a withinClusterQueue policy lets ws preempt
// c of its own queue.
func withinAllows(p PreemptionPolicy, c, ws *wlState) bool {
	return c.w.Priority < ws.w.Priority ||
		(p == LowerOrNewerEqualPriority && c.w.Priority == ws.w.Priority && newer(c, ws))
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
	return len(a.plans) == 0 || e.replan(a)
}

// take and putBack try a victim's quota as free during a search for
// targets. Every search puts back all it took before it returns, so they
// leave the epoch alone: usage is the same after as before, and what was
// judged at it still holds.
func (e *Engine) take(ws *wlState) {
	for _, u := range ws.admitted.usage {
		ws.admitted.cq.node.addUsage(u.fr, -u.v)
	}
	e.bookTAS(ws.admitted.tas, -1)
}

func (e *Engine) putBack(ws *wlState) {
	for _, u := range ws.admitted.usage {
		ws.admitted.cq.node.addUsage(u.fr, u.v)
	}
	e.bookTAS(ws.admitted.tas, 1)
}

// minimalSet takes the preemptor's own queue's candidates in order until
// ws fits, borrowing allowed, then puts back every one that turns out not
// to be needed.
func (e *Engine) minimalSet(ws *wlState, a *assignment, candidates []*wlState) []target {
	cq := ws.cq
	var targets []target
	found := false
	for _, c := range candidates {
		e.take(c)
		targets = append(targets, target{ws: c, reason: ReasonInClusterQueue})
		if e.fits(cq, a, true) {
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
	targets = e.fillBack(ws, a, targets, true)
	for _, t := range targets {
		e.putBack(t.ws)
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
			var passes bool
			if e.cfg.FairStrategies.firstIsInitialShare() {
				passes = preemptor < e.tree.share(q.node, nil)
			} else {
				passes = preemptor <= e.tree.share(q.node, without)
			}
			if below || passes {
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
	if !found && len(retry) > 0 && e.cfg.FairStrategies.hasSecond() {
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
