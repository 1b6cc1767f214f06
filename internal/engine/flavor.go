package engine

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// mode is how a workload fits: its worst pod set decides.
type mode int

const (
	noFit mode = iota
	preemptFit
	fit
)

// resReq is one resource request of a pod set.
type resReq struct {
	resource string
	perPod   int64
	// slot is the resource's index in its group's coveredResources.
	slot int
}

// groupReqs are the requests of one pod set that one resource group serves.
type groupReqs struct {
	group int
	reqs  []resReq
}

// podSetReqs is a pod set's requests split by the resource groups of the
// workload's ClusterQueue, computed once when the workload is resolved.
type podSetReqs struct {
	groups     []groupReqs
	notCovered []string
}

// choice is the flavor picked for one resource group of a pod set.
type choice struct{ group, flavor int }

// podSetAssign is the flavor choice for one pod set.
type podSetAssign struct {
	name    string
	count   int32
	choices []choice
}

// reasonKind says which sentence a reason renders as.
type reasonKind uint8

const (
	reasonNotCovered reasonKind = iota
	reasonTaint
	reasonSelector
	reasonInsufficient
	reasonNeverFits
	// reasonTopology: the pods do not fit in the domains of a
	// topology-aware flavor; detail says how.
	reasonTopology
	// reasonPinned: a scale-up's pods go on the flavor their pod set was
	// admitted on (value), not this one.
	reasonPinned
)

// reason is one structured cause of not fitting. Reasons are compared
// as values, and rendered as text only when a workload's reason changes,
// so a cycle over many waiting workloads formats almost nothing.
type reason struct {
	kind      reasonKind
	podSet    string
	flavor    string
	resource  string
	requested int64
	// prior is what earlier pod sets of the workload already take of the
	// flavor-resource; requested includes it.
	prior     int64
	available int64
	key       string
	value     string
	effect    corev1.TaintEffect
	cq        string
	detail    string
}

func (r reason) text() string {
	switch r.kind {
	case reasonNotCovered:
		return fmt.Sprintf("resource %s is not covered by any resource group of ClusterQueue %s", r.resource, r.cq)
	case reasonTaint:
		return fmt.Sprintf("flavor %s has taint %s=%s:%s that pod set %s does not tolerate", r.flavor, r.key, r.value, r.effect, r.podSet)
	case reasonSelector:
		return fmt.Sprintf("flavor %s does not match nodeSelector %s=%s of pod set %s", r.flavor, r.key, r.value, r.podSet)
	case reasonTopology:
		return r.detail
	case reasonPinned:
		return fmt.Sprintf("flavor %s is not flavor %s, which pod set %s was admitted on for %s; a scale-up stays on it", r.flavor, r.value, r.podSet, r.resource)
	case reasonInsufficient:
		if r.prior > 0 {
			return fmt.Sprintf("%s%s in flavor %s: requested %s (%s with the workload's earlier pod sets), available %s", insufficientQuota,
				r.resource, r.flavor, Format(r.resource, r.requested-r.prior), Format(r.resource, r.requested), Format(r.resource, r.available))
		}
		return fmt.Sprintf("%s%s in flavor %s: requested %s, available %s", insufficientQuota,
			r.resource, r.flavor, Format(r.resource, r.requested), Format(r.resource, r.available))
	default:
		return fmt.Sprintf("insufficient quota for %s in flavor %s: requested %s, more than the ClusterQueue can ever use (%s)",
			r.resource, r.flavor, Format(r.resource, r.requested), Format(r.resource, r.available))
	}
}

// render joins reasons, one "pod set NAME:" prefix per run of reasons of
// the same pod set.
func render(rs []reason) string {
	var b strings.Builder
	for i, r := range rs {
		if i == 0 || rs[i-1].podSet != r.podSet {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString("pod set ")
			b.WriteString(r.podSet)
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(r.text())
	}
	return b.String()
}

func sameReasons(a, b []reason) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true // one memo's reasons, shared by the workloads it stands for
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// assignment is the outcome of flavor assignment for a whole workload.
type assignment struct {
	mode    mode
	borrows bool
	podSets []podSetAssign
	// usage aggregated per flavor-resource over all pod sets.
	usage []frAmount
	// preemptFRs are the flavor-resources that need preemption to fit.
	preemptFRs map[int]bool
	reasons    []reason
	// consulted: some flavor needed preemption, so the outcome depends on
	// the workload's priority and age, not only on its shape.
	consulted bool
	// plans place the pod sets assigned topology-aware flavors, of the
	// workload ws.
	plans []*tasPlan
	ws    *wlState
}

func (a *assignment) addUsage(i int, v int64) {
	for k := range a.usage {
		if a.usage[k].fr == i {
			a.usage[k].v += v
			return
		}
	}
	a.usage = append(a.usage, frAmount{i, v})
}

func (a *assignment) usageOf(i int) int64 {
	for _, u := range a.usage {
		if u.fr == i {
			return u.v
		}
	}
	return 0
}

// admission renders the choice as resource → flavor per pod set.
func (a *assignment) admission(cq *cqState, ws *wlState) []PodSetAssignment {
	out := make([]PodSetAssignment, len(a.podSets))
	for i, ps := range a.podSets {
		fl := map[string]string{}
		for _, ch := range ps.choices {
			g := &cq.groups[ch.group]
			for _, gr := range ws.split[i].groups {
				if gr.group != ch.group {
					continue
				}
				for _, rr := range gr.reqs {
					fl[rr.resource] = g.flavors[ch.flavor].name
				}
			}
		}
		out[i] = PodSetAssignment{Name: ps.name, Count: ps.count, Flavors: fl}
		for _, p := range a.plans {
			if ws.w.PodSets[p.podSet].Name == ps.name {
				out[i].Topology = p.assignment()
			}
		}
	}
	return out
}

// grade ranks how a flavor can take a request, worst first, as Kueue's
// flavor assigner does.
type grade uint8

const (
	gradeNoFit grade = iota
	// gradeNoCandidates: preemption would be needed, but nobody can be
	// preempted.
	gradeNoCandidates
	// gradePreempt: preemption needed, some victim in the preemptor's own
	// ClusterQueue.
	gradePreempt
	// gradeReclaim: preemption needed, every victim in other queues, taking
	// back quota lent to them.
	gradeReclaim
	gradeFit
)

func (g grade) mode() mode {
	switch g {
	case gradeFit:
		return fit
	case gradePreempt, gradeReclaim:
		return preemptFit
	}
	return noFit
}

// flavorOutcome is how one flavor serves one resource group of a pod set.
type flavorOutcome struct {
	grade grade
	// borrow is the borrowing level (node.borrowLevel): 0 without
	// borrowing, higher when quota comes from farther up the tree.
	borrow int
}

// better reports whether o is preferred to than. A flavor that fits in
// neither way loses; one where nobody can be preempted loses to any that
// can admit. Then, by default (BorrowingOverPreemption), the better grade
// wins and the more local borrowing breaks ties; PreemptionOverBorrowing
// compares borrowing first.
func (o flavorOutcome) better(than flavorOutcome, pref FlavorPreference) bool {
	if o.grade == gradeNoFit {
		return false
	}
	if than.grade == gradeNoFit {
		return true
	}
	if (o.grade == gradeNoCandidates) != (than.grade == gradeNoCandidates) {
		return than.grade == gradeNoCandidates
	}
	if pref == PreemptionOverBorrowing && o.borrow != than.borrow {
		return o.borrow < than.borrow
	}
	if o.grade != than.grade {
		return o.grade > than.grade
	}
	return o.borrow < than.borrow
}

// assign chooses flavors for every pod set of ws in its ClusterQueue, with
// the given counts, against the tree's current usage.
func (e *Engine) assign(ws *wlState, counts []int32, a *assignment) *assignment {
	cq := ws.cq
	a.mode = fit
	// why collects the reasons of every flavor of one group; preempt holds
	// the flavor-resources the flavor being tried needs preemption for.
	// Both are scratch space reused across calls.
	sc := &e.scratch
	why, preempt, bestPreempt := sc.why[:0], sc.preempt[:0], sc.bestPreempt[:0]
	defer func() { sc.why, sc.preempt, sc.bestPreempt = why[:0], preempt[:0], bestPreempt[:0] }()
	// Reasons go to the round's arena rather than a fresh slice each.
	arenaStart := len(sc.arena)
	// Pod sets placed on topology-aware flavors hold their domains while
	// the later ones are placed.
	defer func() {
		for _, p := range a.plans {
			e.bookTAS(p.uses(), -1)
		}
	}()
	for pi := range ws.w.PodSets {
		ps := &ws.w.PodSets[pi]
		count := int64(counts[pi])
		psa := podSetAssign{name: ps.Name, count: counts[pi]}
		for _, r := range ws.split[pi].notCovered {
			a.mode = noFit
			sc.arena = append(sc.arena, reason{kind: reasonNotCovered, podSet: ps.Name, resource: r, cq: cq.Name})
		}
		for _, gr := range ws.split[pi].groups {
			g := &cq.groups[gr.group]
			best := -1
			var bestOut flavorOutcome
			var bestReasons []reason
			why = why[:0]
			var bestPlan *tasPlan
			for fi := range g.flavors {
				start := len(why)
				preempt = preempt[:0]
				sc.plan = nil
				out := e.tryFlavor(ws, a, &g.flavors[fi], pi, gr.reqs, count, len(g.flavors) > 1, &why, &preempt)
				if out.grade == gradePreempt || out.grade == gradeReclaim || out.grade == gradeNoCandidates {
					a.consulted = true
				}
				if out.grade == gradePreempt && len(g.flavors) == 1 && !e.canPreemptIn(ws, preempt) {
					// With one flavor there is no choice to rank, so
					// tryFlavor only graded preemption as possible; this
					// is the cheap check that somebody could go.
					out.grade = gradeNoCandidates
				}
				if best < 0 || out.better(bestOut, cq.FlavorPreference) {
					best, bestOut = fi, out
					bestReasons = why[start:len(why):len(why)]
					bestPreempt = append(bestPreempt[:0], preempt...)
					bestPlan = sc.plan
				}
				if stopSearch(out, cq) {
					break
				}
			}
			if bestOut.grade.mode() == noFit {
				a.mode = noFit
				sc.arena = append(sc.arena, why...)
				continue
			}
			psa.choices = append(psa.choices, choice{gr.group, best})
			if bestPlan != nil && !a.planned(pi) {
				a.plans, a.ws = append(a.plans, bestPlan), ws
				e.bookTAS(bestPlan.uses(), 1)
			}
			gf := &g.flavors[best]
			for _, rr := range gr.reqs {
				a.addUsage(gf.frs[rr.slot], rr.perPod*count)
			}
			if m := bestOut.grade.mode(); m < a.mode {
				a.mode = m
			}
			if bestOut.grade.mode() == preemptFit {
				if a.preemptFRs == nil {
					a.preemptFRs = map[int]bool{}
				}
				for _, i := range bestPreempt {
					a.preemptFRs[i] = true
				}
				sc.arena = append(sc.arena, bestReasons...)
			}
			a.borrows = a.borrows || bestOut.borrow > 0
		}
		if a.mode != noFit {
			a.podSets = append(a.podSets, psa)
		}
	}
	if a.mode != fit {
		a.reasons = sc.arena[arenaStart:len(sc.arena):len(sc.arena)]
	}
	return a
}

// mayPreempt reports whether the queue's policy lets its workloads preempt
// anyone at all.
func (cq *cqState) mayPreempt() bool {
	p := cq.Preemption
	within := p.WithinClusterQueue != Never && p.WithinClusterQueue != ""
	reclaim := cq.node.parent != nil && p.ReclaimWithinCohort != Never && p.ReclaimWithinCohort != ""
	return within || reclaim
}

// stopSearch applies flavorFungibility: whether to settle for this flavor
// rather than look at the next one. A flavor that cannot admit never
// stops the search; one that needs preemption stops it only with
// whenCanPreempt Preempt (MayStopSearch), and one that borrows only with
// whenCanBorrow Borrow (MayStopSearch).
func stopSearch(o flavorOutcome, cq *cqState) bool {
	if o.grade.mode() == noFit {
		return false
	}
	if o.grade.mode() == preemptFit && cq.WhenCanPreempt != Preempt {
		return false
	}
	return o.borrow == 0 || cq.WhenCanBorrow != TryNextFlavor
}

// tryFlavor checks one flavor for one group's requests of a pod set,
// appending why it falls short to why and the flavor-resources that need
// preemption to preempt. The flavor's grade is the worst over its
// resources. With rank set (the group has several flavors to choose
// from), a resource that needs preemption is graded by simulating it:
// reclaiming from other queues ranks above preempting in one's own.
func (e *Engine) tryFlavor(ws *wlState, a *assignment, gf *groupFlavor, pi int, reqs []resReq, count int64, rank bool, why *[]reason, preempt *[]int) flavorOutcome {
	cq := ws.cq
	ps := &ws.w.PodSets[pi]
	if r, bad := ineligible(gf, ps); bad {
		*why = append(*why, r)
		return flavorOutcome{grade: gradeNoFit}
	}
	out := flavorOutcome{grade: gradeFit}
	worst := func(o flavorOutcome) {
		if out.better(o, cq.FlavorPreference) {
			out = o
		}
	}
	n := cq.node
	for _, rr := range reqs {
		i := gf.frs[rr.slot]
		// Earlier pod sets of the same workload may already use this
		// flavor-resource.
		val := rr.perPod*count + a.usageOf(i)
		avail := n.available(i)
		level, below := n.borrowLevel(i, val)
		if val <= avail {
			worst(flavorOutcome{grade: gradeFit, borrow: level})
			continue
		}
		pot := n.potential(i)
		r := reason{kind: reasonInsufficient, podSet: ps.Name, flavor: gf.name, resource: rr.resource, requested: val, prior: val - rr.perPod*count, available: avail}
		canPreempt := val <= pot && cq.mayPreempt() &&
			(val <= n.nominal[i] || below || cq.Preemption.BorrowWithinCohort == LowerPriority || e.tree.fair)
		if !canPreempt {
			if val > pot {
				r.kind, r.available = reasonNeverFits, pot
			}
			*why = append(*why, r)
			out = flavorOutcome{grade: gradeNoFit}
			continue
		}
		*why = append(*why, r)
		*preempt = append(*preempt, i)
		if !rank {
			// Not simulated: borrowing is judged against nominal quota,
			// as if the own queue's victims were gone.
			if val <= n.nominal[i] {
				level = 0
			}
			worst(flavorOutcome{grade: gradePreempt, borrow: level})
			continue
		}
		worst(e.gradePreemption(ws, i, val))
	}
	if out.grade == gradeNoFit || e.tas == nil {
		return out
	}
	if f, ok := e.tas.flavors[gf.name]; ok && !a.planned(pi) {
		plan, r, could := e.placeGroup(ws, a.plans, pi, f, int32(count))
		if plan != nil {
			e.scratch.plan = plan
			return out
		}
		*why = append(*why, r)
		if !could || !cq.mayPreempt() {
			return flavorOutcome{grade: gradeNoFit}
		}
		// Not placed yet: the search for victims places it (replan).
		e.scratch.plan = &tasPlan{podSet: pi, f: f, count: int32(count)}
		// Room could be made in the domains: by preempting workloads
		// that use this flavor.
		for _, rr := range reqs {
			*preempt = append(*preempt, gf.frs[rr.slot])
		}
		worst(flavorOutcome{grade: gradePreempt})
	}
	return out
}

// gradePreemption simulates preempting for val of flavor-resource i alone,
// as Kueue's preemption oracle does, and grades the outcome.
func (e *Engine) gradePreemption(ws *wlState, i int, val int64) flavorOutcome {
	probe := assignment{usage: []frAmount{{i, val}}, preemptFRs: map[int]bool{i: true}}
	targets := e.preemptionTargets(ws, &probe)
	n := ws.cq.node
	if len(targets) == 0 {
		level, _ := n.borrowLevel(i, val)
		return flavorOutcome{grade: gradeNoCandidates, borrow: level}
	}
	g := gradeReclaim
	for _, t := range targets {
		e.take(t.ws)
		if t.ws.admitted.cq == ws.cq {
			g = gradePreempt
		}
	}
	level, _ := n.borrowLevel(i, val)
	for _, t := range targets {
		e.putBack(t.ws)
	}
	return flavorOutcome{grade: g, borrow: level}
}

// ineligible says why a pod set cannot land on a flavor's nodes.
func ineligible(gf *groupFlavor, ps *PodSet) (reason, bool) {
	f, flavor := gf.flavor, gf.name
	for r := range gf.fr {
		if p, ok := ps.pinned[r]; ok && p != flavor {
			return reason{kind: reasonPinned, podSet: ps.Name, flavor: flavor, resource: r, value: p}, true
		}
	}
	for ti := range f.NodeTaints {
		t := &f.NodeTaints[ti]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerated(t, ps.Tolerations) && !tolerated(t, f.Tolerations) {
			return reason{kind: reasonTaint, podSet: ps.Name, flavor: flavor, key: t.Key, value: t.Value, effect: t.Effect}, true
		}
	}
	if len(ps.NodeSelector) == 0 {
		return reason{}, false
	}
	// Only the keys this flavor's own nodeLabels define are compared, as in
	// Kueue: a key the flavor does not set says nothing about its nodes, so
	// a flavor without nodeLabels matches any selector.
	var bad []string
	for k, v := range ps.NodeSelector {
		if got, ok := f.NodeLabels[k]; ok && got != v {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return reason{}, false
	}
	sort.Strings(bad)
	k := bad[0]
	return reason{kind: reasonSelector, podSet: ps.Name, flavor: flavor, key: k, value: ps.NodeSelector[k]}, true
}

// canPreemptIn reports whether any admitted workload that ws's queue may
// preempt uses one of the flavor-resources.
func (e *Engine) canPreemptIn(ws *wlState, frs []int) bool {
	set := make(map[int]bool, len(frs))
	for _, i := range frs {
		set[i] = true
	}
	if e.tree.fair {
		return len(e.collectCandidates(ws, set, true)) > 0
	}
	hier, other, same := e.classicalCandidates(ws, &assignment{preemptFRs: set}, true)
	return len(hier)+len(other)+len(same) > 0
}

func tolerated(t *corev1.Taint, tols []corev1.Toleration) bool {
	for i := range tols {
		if tols[i].ToleratesTaint(t) {
			return true
		}
	}
	return false
}
