package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind of a decision.
type Kind string

// Decision kinds.
const (
	// KindAdmitted: the workload holds quota; PodSets say where. For a
	// workload that was reserved (KindReserved), its checks all passed.
	KindAdmitted Kind = "admitted"
	// KindReserved: the workload holds quota (PodSets say where) and
	// waits for the admission checks in Checks before it is admitted.
	KindReserved Kind = "reserved"
	// KindPreempted: the workload lost its quota to Preemptor.
	KindPreempted Kind = "preempted"
	// KindEvicted: the workload lost its quota for another Reason.
	KindEvicted Kind = "evicted"
	// KindPending: the workload waits, and Reason changed (but for a
	// move from behind one head of its queue to behind another, which
	// changes only what PendingReason says).
	KindPending Kind = "pending"
)

// Decision is one outcome of a cycle.
type Decision struct {
	Kind         Kind
	Key          string
	ClusterQueue string
	PodSets      []PodSetAssignment
	Reason       string
	Preemptor    string
	// Message details Reason (an admission check's message).
	Message string
	// Checks are a reservation's admission checks (KindReserved).
	Checks []CheckStatus
}

// maxRoundsPerCycle bounds a cycle against preemption loops that a broken
// configuration might cause; a healthy cycle ends long before.
const maxRoundsPerCycle = 100000

// entry is a head of a ClusterQueue nominated in a round.
type entry struct {
	ws      *wlState
	a       *assignment
	targets []target
	// reason, when a is nil or fits, says why the workload cannot be
	// nominated at all; otherwise a.reasons says why it does not fit.
	reason string
	// own is the storage a points at, so a round allocates its entries
	// in one slab.
	own assignment
	// stable: a.reasons is not in the round's arena and may be kept.
	stable bool
	// waitingFor: the workload still waits for this many victims it asked
	// to go (see preemptionWait).
	waitingFor int
}

// cycle carries the per-cycle bookkeeping.
type cycle struct {
	e   *Engine
	now time.Time
	out []Decision
	// kept is the quota preemptors wait for, by cohort tree (keepQuota).
	kept    map[*node][]kept
	touched map[*cqState]bool
	// id stamps workloads seen (wlState.seenIn) and preempted
	// (wlState.victimIn) in this cycle. A victim may be admitted again into
	// free quota, but not preempt in turn: otherwise policies that each
	// allow one step can chase each other round a circle.
	id uint64
	// slab and ptrs are the round's entry storage, reused across rounds.
	slab []entry
	ptrs []*entry
	// lastWhy and lastText cache the last rendering of reasons.
	lastWhy  []reason
	lastText string
	// lastReason and lastClass cache the last ReasonClass (quiet only).
	lastReason, lastClass string
	// podsBlocked: waitForPodsReady's blockAdmission holds every
	// admission back this cycle.
	podsBlocked bool
}

// Cycle admits every pending workload that fits, in queue order, preempts
// where policy allows and a preemptor needs room, and drains stopped
// queues. Evictions take effect at once: victims go back to their queues
// and may be admitted again in the same cycle. now stamps admissions.
func (e *Engine) Cycle(now time.Time) []Decision {
	e.cycles++
	c := &cycle{
		id:      e.cycles,
		e:       e,
		now:     now,
		touched: map[*cqState]bool{},
	}
	c.sampleFair()
	c.podsReadyTimeouts()
	c.execTimeouts()
	c.deactivations()
	c.resizes()
	c.admissionChecks()
	c.drain()
	c.nodeFailures()
	c.podsBlocked = c.podsReadyBlock()
	for round := 0; round < maxRoundsPerCycle && !c.podsBlocked; round++ {
		c.reorderQueues()
		heads := c.heads()
		if len(heads) == 0 {
			break
		}
		// Entries of one round die with it: reuse their storage.
		if cap(c.slab) < len(heads) {
			c.slab = make([]entry, len(heads))
			c.ptrs = make([]*entry, len(heads))
		}
		slab := c.slab[:len(heads)]
		clear(slab)
		entries := c.ptrs[:len(heads)]
		c.e.scratch.arena = c.e.scratch.arena[:0]
		for i, ws := range heads {
			entries[i] = c.nominate(ws, &slab[i])
		}
		c.order(entries)
		c.process(entries)
	}
	c.reorderQueues()
	c.sortAtEnd()
	c.explain()
	for cq := range c.touched {
		cq.compact()
	}
	for cq := range c.e.stale {
		cq.compact()
		delete(c.e.stale, cq)
	}
	return c.out
}

// drain evicts admitted workloads of queues stopped with HoldAndDrain.
func (c *cycle) drain() {
	if !c.e.tree.drains {
		return // every cycle would otherwise walk every admitted workload
	}
	for _, cq := range c.e.tree.cqOrder {
		if !ours(cq) {
			continue // another engine decides for its tree
		}
		var victims []*wlState
		var reasons []string
		for _, ws := range cq.admitted {
			switch {
			case cq.StopPolicy == HoldAndDrain:
				victims, reasons = append(victims, ws), append(reasons, ReasonClusterQueueStopped)
			case ws.lq != nil && ws.lq.StopPolicy == HoldAndDrain:
				victims, reasons = append(victims, ws), append(reasons, ReasonLocalQueueStopped)
			}
		}
		for i, ws := range victims {
			if ws.evicting {
				continue // already asked
			}
			ws.charge(c.now)
			if c.e.deferred {
				ws.evicting = true
			} else {
				c.e.evict(ws)
			}
			c.touched[cq] = true
			c.emit(Decision{Kind: KindEvicted, Key: ws.key, ClusterQueue: cq.Name, Reason: reasons[i]})
		}
	}
}

// stopped says why a ClusterQueue admits nothing, or "".
func (e *Engine) stopped(cq *cqState) string {
	if cq.inactive != "" {
		return cq.inactive
	}
	if cq.StopPolicy == Hold || cq.StopPolicy == HoldAndDrain {
		return fmt.Sprintf("ClusterQueue %s is stopped (stopPolicy %s)", cq.Name, cq.StopPolicy)
	}
	return e.blockedReason(cq)
}

func lqStopped(ws *wlState) bool {
	return ws.lq != nil && (ws.lq.StopPolicy == Hold || ws.lq.StopPolicy == HoldAndDrain)
}

// scan returns cq's place in this cycle's walk: from its first workload,
// not blocked, when the cycle has not looked at it yet.
func (c *cycle) scan(cq *cqState) *queueScan {
	if cq.scan.cycle != c.id {
		cq.scan = queueScan{cycle: c.id}
	}
	return &cq.scan
}

// rescan walks cq again from its first workload.
func (c *cycle) rescan(cq *cqState) {
	sc := c.scan(cq)
	sc.cursor, sc.unsettled = 0, false
}

// heads returns the first admissible-looking workload of every queue that
// is not blocked for the rest of this cycle.
func (c *cycle) heads() []*wlState {
	var out []*wlState
	for _, cq := range c.e.tree.cqOrder {
		if !ours(cq) {
			continue // another engine decides for its tree
		}
		if cq.settled {
			continue
		}
		sc := c.scan(cq)
		if sc.blocked || len(cq.pending) == 0 || c.e.stopped(cq) != "" {
			continue
		}
		i := sc.cursor
		for i < len(cq.pending) {
			ws := cq.pending[i]
			if ws.admitted != nil || ws.parked || ws.gone {
				i++
				continue
			}
			if ws.parent != nil && ws.parent.evicting {
				// Its workload is on its way out: no more pods for it.
				sc.unsettled = true
				i++
				continue
			}
			if ws.invalid != "" {
				// Never admitted, and holds no one up; told once.
				c.pend(ws, ws.invalid)
				i++
				continue
			}
			if lqStopped(ws) || c.heldBack(ws) != "" {
				sc.unsettled = true
				i++
				continue
			}
			if c.judgedAlready(ws) {
				i++
				continue
			}
			break
		}
		sc.cursor = i
		if i < len(cq.pending) {
			out = append(out, cq.pending[i])
		} else if !sc.unsettled {
			cq.settled = true
		}
	}
	return out
}

// judgedAlready parks a workload of a BestEffortFIFO queue whose outcome
// the queue's memo holds at the current usage, as a round would after
// nominating it (no fit, its reasons), without a round of its own: after a
// release wakes a tree, each of its waiting workloads would otherwise cost
// a round, and a round costs every queue a look. The one difference is
// that a round re-judges a workload whose tree changed in that same round;
// parked here, it is judged again at the next release in its tree, as a
// workload parked in an earlier round is.
func (c *cycle) judgedAlready(ws *wlState) bool {
	cq := ws.cq
	if cq.QueueingStrategy == StrictFIFO || !ws.selected || !c.memoHit(ws) {
		return false
	}
	if c.waitsForVictims(ws) {
		return false // its own reason
	}
	ws.seenIn = c.id
	c.pendWhy(ws, cq.memo.why, true)
	ws.parked = true
	return true
}

// waitsForVictims: ws is a preemptor whose victims are still stopping,
// and nothing was released in its tree since it asked, so it waits as it
// did.
func (c *cycle) waitsForVictims(ws *wlState) bool {
	w := ws.waiting
	return c.e.deferred && w != nil && len(w.victims) > 0 && w.root == ws.cq.node.root() && w.released == w.root.released
}

// stillWaits: ws is a preemptor whose victims are all still stopping,
// though something else was released in its tree since it asked. If it
// fits now (fits; a is filled in), it goes on; otherwise it keeps
// waiting for the same victims, without a new search: a search would find
// them again (workloads on their way out are taken first), and searching
// again for every waiting preemptor at every release in a busy tree was
// most of the cycle's time at 1,000 queues. Should it need more room by
// the time its victims are gone, it searches then. A workload with
// partial admission searches as before (its count may change).
func (c *cycle) stillWaits(ws *wlState, a *assignment) (waits, fits bool) {
	w := ws.waiting
	if !c.e.deferred || w == nil || len(w.victims) == 0 || w.root != ws.cq.node.root() || !w.victimsStopping() || partialAdmission(ws) {
		return false, false
	}
	if c.e.assign(ws, ws.full, a); a.mode == fit {
		return false, true
	}
	w.released = w.root.released
	return true, false
}

// partialAdmission: some pod set of ws may be admitted with fewer pods.
func partialAdmission(ws *wlState) bool { return slices.ContainsFunc(ws.w.PodSets, PodSet.shrinks) }

// shrinks: the pod set may be admitted with fewer pods than Count
// (partial admission, down to MinCount).
func (ps PodSet) shrinks() bool { return ps.MinCount > 0 && ps.MinCount < ps.Count }

// nominate decides what ws could get now, filling en.
func (c *cycle) nominate(ws *wlState, en *entry) *entry {
	e := c.e
	cq := ws.cq
	en.ws = ws
	if !ws.selected {
		en.reason = fmt.Sprintf("namespace %s is not selected by the namespaceSelector of ClusterQueue %s", ws.w.Namespace, cq.Name)
		return en
	}
	if c.waitsForVictims(ws) {
		en.waitingFor = len(ws.waiting.victims)
		return en
	}
	en.a = &en.own
	if waits, fits := c.stillWaits(ws, en.a); waits {
		en.a = nil
		en.waitingFor = len(ws.waiting.victims)
		return en
	} else if fits {
		return en
	}
	if m := &cq.memo; c.memoHit(ws) {
		en.a.mode, en.a.reasons, en.stable = m.mode, m.why, true
		return en
	}
	e.assign(ws, ws.full, en.a)
	if en.a.mode == fit {
		return en
	}
	searched := false
	if en.a.mode == preemptFit && ws.victimIn != c.id {
		if t := e.preemptionTargets(ws, en.a); len(t) > 0 {
			en.targets = t
			return en
		}
		searched = true
	}
	pe, atMin := c.partial(ws)
	if pe != nil {
		return pe
	}
	if atMin != nil {
		// Partial admission would take it at its minimum once room is
		// made: say what that needs, not what the full count needs
		// (which may be more than the queue can ever hold).
		en.own, en.stable = *atMin, false
		en.a = &en.own
	}
	shapeOnly := en.a.mode == noFit && !en.a.consulted
	byPriority := atMin == nil && !e.tree.fair && cq.Preemption.WithinClusterQueue != LowerOrNewerEqualPriority &&
		((en.a.mode == noFit && en.a.consulted) || (en.a.mode == preemptFit && searched))
	if shapeOnly || byPriority {
		// The round's arena is reused: the memo keeps its own copy, which
		// entries then share read-only.
		en.a.reasons = append([]reason(nil), en.a.reasons...)
		en.stable = true
		m := &cq.memo
		m.epoch, m.rep, m.why, m.mode, m.byPriority = e.judgedAt(cq), ws, en.a.reasons, en.a.mode, !shapeOnly
	}
	return en
}

// memoHit reports whether ws's queue remembers ws's outcome at the current
// usage. A workload that does not fit whatever its priority stands for
// every workload of its shape. One whose outcome depended on preemption
// (no victims to be found) stands for those of its shape and priority:
// with classical preemption and no withinClusterQueue policy that reads
// ages, candidates are chosen by priority alone, so theirs are the same.
func (c *cycle) memoHit(ws *wlState) bool {
	m := &ws.cq.memo
	if m.rep == nil || m.epoch != c.e.judgedAt(ws.cq) || m.rep.shape != ws.shape {
		return false
	}
	return !m.byPriority || m.rep.prio == ws.prio
}

// partial looks for the largest pod counts, between each pod set's
// minCount and count, at which the workload fits or can preempt to fit.
// When none does, it returns the assignment at the minimum counts, whose
// reasons say what waiting at the minimum is for; both are nil for a
// workload without partial admission.
func (c *cycle) partial(ws *wlState) (*entry, *assignment) {
	var span int32
	for _, ps := range ws.w.PodSets {
		if ps.shrinks() {
			span = max(span, ps.Count-ps.MinCount)
		}
	}
	if span == 0 {
		return nil, nil
	}
	var atMin *assignment
	try := func(k int32) *entry {
		counts := make([]int32, len(ws.w.PodSets))
		for i, ps := range ws.w.PodSets {
			counts[i] = ps.Count
			if ps.shrinks() {
				counts[i] = ps.MinCount + int32(int64(ps.Count-ps.MinCount)*int64(k)/int64(span))
			}
		}
		a := c.e.assign(ws, counts, &assignment{})
		if k == 0 {
			atMin = a
		}
		switch a.mode {
		case fit:
			return &entry{ws: ws, a: a}
		case preemptFit:
			if ws.victimIn == c.id {
				break
			}
			if t := c.e.preemptionTargets(ws, a); len(t) > 0 {
				return &entry{ws: ws, a: a, targets: t}
			}
		}
		return nil
	}
	best := try(0)
	if best == nil {
		return nil, atMin
	}
	// Largest k in [0, span) that works; k = span is the full count,
	// which already failed.
	lo, hi := int32(0), span-1
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if en := try(mid); en != nil {
			lo, best = mid, en
		} else {
			hi = mid - 1
		}
	}
	return best, nil
}

// order sorts a round's entries as Kueue does: those that need no
// borrowing first, then lower fair share (when fair sharing is on), then
// higher priority, then earlier submission.
func (c *cycle) order(entries []*entry) {
	t := c.e.tree
	// Only entries that can be admitted or preempt compete; those that do
	// not fit keep queue-name order after them, and are judged again next
	// round if a decision before them changed their cohort tree.
	acting := 0
	for i, en := range entries {
		if en.a != nil && (en.a.mode == fit || len(en.targets) > 0) {
			entries[acting], entries[i] = entries[i], entries[acting]
			acting++
		}
	}
	sortNoFit(entries[acting:])
	entries = entries[:acting]
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		ab, bb := a.a != nil && a.a.borrows, b.a != nil && b.a.borrows
		if ab != bb {
			return !ab
		}
		if t.fair && a.a != nil && b.a != nil {
			sa, sb := t.compareShares(a.ws.cq.node, a.a.usage, b.ws.cq.node, b.a.usage)
			if sa != sb {
				return sa < sb
			}
		}
		return queueLess(a.ws, b.ws)
	})
}

// sortNoFit restores queue-name order, which the partition above may
// have disturbed.
func sortNoFit(entries []*entry) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].ws.cq.Name < entries[j].ws.cq.Name })
}

// compareShares returns the shares to compare two queues' candidates by:
// those of the two distinct subtrees just below their lowest common
// ancestor, with each candidate's usage added.
func (t *tree) compareShares(a *node, ua []frAmount, b *node, ub []frAmount) (int64, int64) {
	pa, pb := a.path(), b.path()
	if pa[0] != pb[0] {
		return t.share(a, ua), t.share(b, ub)
	}
	k := 0
	for k < len(pa) && k < len(pb) && pa[k] == pb[k] {
		k++
	}
	if k >= len(pa) || k >= len(pb) {
		return t.share(a, ua), t.share(b, ub)
	}
	return t.share(pa[k], ua), t.share(pb[k], ub)
}

func (c *cycle) process(entries []*entry) {
	e := c.e
	roots := map[*node]bool{}
	c.keepQuota(entries)
	for _, en := range entries {
		ws, cq := en.ws, en.ws.cq
		if ws.gone {
			continue // its workload lost its admission this round
		}
		ws.seenIn = c.id
		root := cq.node.root()
		switch {
		case en.waitingFor > 0:
			roots[root] = true
			c.pend(ws, waitingForVictims(en.waitingFor))
			c.scan(cq).blocked = true
		case en.a != nil && en.a.mode == fit && len(en.targets) == 0:
			if !e.fits(cq, en.a, true) {
				// Another admission of this round took the room; the
				// next round looks again.
				continue
			}
			if by := c.keptFrom(ws, en.a, c.kept[root]); by != nil {
				c.pend(ws, keptFor(by))
				if cq.QueueingStrategy == StrictFIFO {
					c.scan(cq).blocked = true
				} else {
					ws.parked = true
				}
				continue
			}
			if ws.parent != nil {
				c.grow(ws)
			} else {
				c.admit(ws, en.a)
			}
			roots[root] = true
		case len(en.targets) > 0:
			if roots[root] {
				// The victims were chosen before another decision in
				// this cohort tree changed usage; choose again.
				continue
			}
			roots[root] = true
			if e.deferred {
				c.requestPreemption(ws, en)
				continue
			}
			for _, t := range en.targets {
				vcq := t.ws.admitted.cq
				t.ws.victimIn = c.id
				t.ws.charge(c.now)
				e.evict(t.ws)
				c.requeued(vcq)
				c.emit(Decision{Kind: KindPreempted, Key: t.ws.key, ClusterQueue: vcq.Name, Reason: t.reason, Preemptor: ws.decisionKey()})
			}
			if ws.parent != nil {
				c.grow(ws)
			} else {
				c.admit(ws, en.a)
			}
		default:
			if roots[root] {
				// Quota in this tree changed after this workload was
				// nominated; judge it again next round.
				continue
			}
			if en.a != nil {
				c.pendWhy(ws, en.a.reasons, en.stable)
			} else {
				c.pend(ws, en.reason)
			}
			if cq.QueueingStrategy == StrictFIFO {
				c.scan(cq).blocked = true
			} else {
				ws.parked = true
			}
		}
	}
}

// requestPreemption asks the victims to go and leaves the preemptor at the
// head of its queue, waiting for their quota, for the rest of the cycle.
func (c *cycle) requestPreemption(ws *wlState, en *entry) {
	victims := make([]*wlState, len(en.targets))
	for i, t := range en.targets {
		victims[i] = t.ws
		if t.ws.evicting {
			continue // asked already, by this preemptor or another
		}
		t.ws.evicting = true
		t.ws.victimIn = c.id
		t.ws.charge(c.now)
		// Workloads on their way out are tried first as victims: a
		// search judged before may now end otherwise.
		c.e.changed(t.ws.admitted.cq.node.root())
		c.emit(Decision{Kind: KindPreempted, Key: t.ws.key, ClusterQueue: t.ws.admitted.cq.Name, Reason: t.reason, Preemptor: ws.decisionKey()})
	}
	c.pend(ws, waitingForVictims(len(victims)))
	c.scan(ws.cq).blocked = true
	root := ws.cq.node.root()
	ws.waiting = &preemptionWait{root: root, released: root.released, usage: slices.Clone(en.a.usage), victims: victims}
}

// kept is quota a preemptor waits to use, once its victims are gone.
type kept struct {
	ws    *wlState
	usage []frAmount
}

// keepQuota adds to the cycle's kept quota, by cohort tree, what the
// round's preemptors need. While victims stop (deferred preemption), the
// quota each releases is the preemptor's: a workload that would fit in it
// must not take it, in this round or a later one of the cycle, or the
// preemptor preempts again, and again (Kueue reserves the preemptor's
// resources in its cohort for the cycle the same way).
func (c *cycle) keepQuota(entries []*entry) {
	if !c.e.deferred {
		return // victims go at once: nothing to keep
	}
	for _, en := range entries {
		var u []frAmount
		switch {
		case en.waitingFor > 0:
			u = en.ws.waiting.usage
		case len(en.targets) > 0:
			u = en.a.usage
		}
		if len(u) == 0 {
			continue
		}
		if c.kept == nil {
			c.kept = map[*node][]kept{}
		}
		root := en.ws.cq.node.root()
		c.kept[root] = append(c.kept[root], kept{ws: en.ws, usage: u})
	}
}

// keptFrom returns the preemptor whose kept quota a would take, if any:
// a fits with the kept quota counted as used.
func (c *cycle) keptFrom(ws *wlState, a *assignment, ks []kept) *wlState {
	var by *wlState
	for _, k := range ks {
		if k.ws == ws {
			continue
		}
		if by == nil {
			by = k.ws
		}
		for _, u := range k.usage {
			k.ws.cq.node.addUsage(u.fr, u.v)
		}
	}
	if by == nil {
		return nil
	}
	fits := c.e.fits(ws.cq, a, true)
	for _, k := range ks {
		if k.ws == ws {
			continue
		}
		for _, u := range k.usage {
			k.ws.cq.node.addUsage(u.fr, -u.v)
		}
	}
	if fits {
		return nil
	}
	return by
}

// keptFor is the pending reason of a workload that would fit in quota kept
// for a preemptor.
func keptFor(preemptor *wlState) string {
	return fmt.Sprintf("%s%s, which waits for %s", quotaKeptFor, preemptor.key, waitingForRelease)
}

func waitingForVictims(n int) string {
	return fmt.Sprintf("waiting for %d %s", n, waitingForRelease)
}

// requeued notes that a queue's pending list changed under the cycle.
func (c *cycle) requeued(cq *cqState) {
	c.rescan(cq)
	c.touched[cq] = true
	// Released quota may let parked workloads in the tree fit.
	for _, m := range c.e.tree.members[cq.node.root()] {
		c.rescan(m)
	}
}

func (c *cycle) admit(ws *wlState, a *assignment) {
	cq := ws.cq
	podSets := a.admission(cq, ws)
	ws.admitted = &admitted{cq: cq, usage: a.usage, podSets: podSets, at: c.now, since: c.now}
	ws.admittedNow()
	c.e.hold(ws)
	c.penalize(ws)
	ws.reason, ws.class, ws.why = "", "", nil
	ws.parked = false
	c.touched[cq] = true
	if checks := requiredChecks(cq, podSets, nil); len(checks) > 0 {
		// Quota reserved: admitted once every check is ready.
		ws.admitted.checks, ws.admitted.awaiting = checks, true
		c.emit(Decision{Kind: KindReserved, Key: ws.key, ClusterQueue: cq.Name, PodSets: podSets, Checks: cloneChecks(checks)})
		return
	}
	c.emit(Decision{Kind: KindAdmitted, Key: ws.key, ClusterQueue: cq.Name, PodSets: podSets})
}

// emit appends a decision, doubling the slice when full: append's own
// growth for large slices (1.25×) copies a cycle's 100,000 pending
// decisions several times over. It starts small: most cycles decide one
// or two things, and at full scale there are hundreds of cycles a second.
func (c *cycle) emit(d Decision) {
	if len(c.out) == cap(c.out) {
		grown := make([]Decision, len(c.out), max(4, 2*cap(c.out)))
		copy(grown, c.out)
		c.out = grown
	}
	c.out = append(c.out, d)
}

// pendWhy records reasons from flavor assignment, rendering them only if
// they changed.
func (c *cycle) pendWhy(ws *wlState, why []reason, stable bool) {
	if !c.e.topologyWaiting {
		c.e.topologyWaiting = waitsFor(why, reasonTopology)
	}
	if ws.why != nil && sameReasons(ws.why, why) {
		return
	}
	// Many waiting workloads share one set of reasons: render it once.
	if c.lastText == "" || !sameReasons(c.lastWhy, why) {
		c.lastText = render(why)
		c.lastWhy = append(c.lastWhy[:0], why...)
	}
	c.pend(ws, c.lastText)
	if !stable {
		// why lives in the round's scratch arena: keep a copy.
		why = append([]reason(nil), why...)
	}
	ws.why = why
}

func (c *cycle) pend(ws *wlState, reason string) {
	ws.why, ws.behind = nil, nil
	if ws.reason == reason {
		return
	}
	ws.reason = reason
	if ws.parent != nil {
		// A scale-up's reason is for the pending API; its workload is
		// admitted, and no decision says it waits.
		return
	}
	if c.e.quiet {
		if reason != c.lastReason {
			c.lastReason, c.lastClass = reason, ReasonClass(reason)
		}
		class, news := Retold(ws.class, c.lastClass)
		ws.class = class
		if !news {
			return
		}
	}
	cq := ""
	if ws.cq != nil {
		cq = ws.cq.Name
	}
	c.emit(Decision{Kind: KindPending, Key: ws.key, ClusterQueue: cq, Reason: reason})
}

// explain gives every pending workload that has none a reason: those in
// stopped queues, and those not looked at this cycle.
func (c *cycle) explain() {
	e := c.e
	for _, cq := range e.tree.cqOrder {
		if !ours(cq) {
			continue // another engine decides for its tree
		}
		if cq.settled && !c.podsBlocked {
			continue // each of its workloads has its reason
		}
		stop := e.stopped(cq)
		var head *wlState
		var behind, in string // rendered once per queue
		for _, ws := range cq.pending {
			if ws.admitted != nil || ws.gone {
				continue
			}
			switch {
			case ws.invalid != "":
				c.pend(ws, ws.invalid)
				continue // never admitted: not a head others wait behind
			case stop != "":
				c.pend(ws, stop)
			case lqStopped(ws):
				c.pend(ws, fmt.Sprintf("LocalQueue %s/%s is stopped (stopPolicy %s)", ws.lq.Namespace, ws.lq.Name, ws.lq.StopPolicy))
			case c.heldBack(ws) != "":
				c.pend(ws, c.heldBack(ws))
				continue // not a head others wait behind
			case c.podsBlocked:
				c.pend(ws, waitingForPodsReady)
			case (ws.seenIn == c.id || ws.parked) && ws.reason != "":
				// Judged this cycle or earlier; its reason stands.
			case head != nil:
				if ws.behind != head || ws.reason == "" {
					if behind == "" {
						in = " in ClusterQueue " + cq.Name
						behind = waitingBehind + head.key + in
					}
					if ws.behind != nil && ws.reason != "" && strings.HasSuffix(ws.reason, in) {
						// Behind another head of the same queue: the same
						// wait. The reason is kept current for the pending
						// API, but no decision says it: each admission
						// would otherwise re-announce everyone behind.
						ws.reason = behind
					} else {
						c.pend(ws, behind)
					}
					ws.behind = head
				}
			default:
				c.pend(ws, waitingIn+cq.Name)
			}
			if head == nil && stop == "" && !lqStopped(ws) {
				head = ws
			}
		}
	}
	if !e.tellsUnresolved {
		return
	}
	for _, ws := range e.sortedUnresolved() {
		c.pend(ws, ws.unresolved)
	}
}

// compact drops admitted workloads from the pending list.
func (cq *cqState) compact() {
	kept := cq.pending[:0]
	for _, ws := range cq.pending {
		if ws.admitted == nil && !ws.gone {
			kept = append(kept, ws)
		} else {
			ws.queued = false
		}
	}
	for i := len(kept); i < len(cq.pending); i++ {
		cq.pending[i] = nil
	}
	cq.pending = kept
}
