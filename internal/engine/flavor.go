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
	available int64
	key       string
	value     string
	effect    corev1.TaintEffect
	cq        string
}

func (r reason) text() string {
	switch r.kind {
	case reasonNotCovered:
		return fmt.Sprintf("resource %s is not covered by any resource group of ClusterQueue %s", r.resource, r.cq)
	case reasonTaint:
		return fmt.Sprintf("flavor %s has taint %s=%s:%s that pod set %s does not tolerate", r.flavor, r.key, r.value, r.effect, r.podSet)
	case reasonSelector:
		return fmt.Sprintf("flavor %s does not match nodeSelector %s=%s of pod set %s", r.flavor, r.key, r.value, r.podSet)
	case reasonInsufficient:
		return fmt.Sprintf("insufficient unused quota for %s in flavor %s: requested %s, available %s",
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
	}
	return out
}

// flavorOutcome is how one flavor serves one resource group of a pod set.
type flavorOutcome struct {
	mode    mode
	borrows bool
}

// better ranks flavor outcomes: fit over preempt over no fit, and within a
// mode, not borrowing over borrowing.
func (o flavorOutcome) better(than flavorOutcome) bool {
	if o.mode != than.mode {
		return o.mode > than.mode
	}
	return !o.borrows && than.borrows
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
			for fi := range g.flavors {
				start := len(why)
				preempt = preempt[:0]
				out := e.tryFlavor(cq, a, g, &g.flavors[fi], ps, gr.reqs, count, &why, &preempt)
				if out.mode == preemptFit {
					a.consulted = true
				}
				if out.mode == preemptFit && !e.canPreemptIn(ws, preempt) {
					// Nobody could be preempted here: for choosing a
					// flavor this is no better than not fitting.
					out.mode = noFit
				}
				if best < 0 || out.better(bestOut) {
					best, bestOut = fi, out
					bestReasons = why[start:len(why):len(why)]
					bestPreempt = append(bestPreempt[:0], preempt...)
				}
				if stopSearch(out, cq) {
					break
				}
			}
			if bestOut.mode == noFit {
				a.mode = noFit
				sc.arena = append(sc.arena, why...)
				continue
			}
			psa.choices = append(psa.choices, choice{gr.group, best})
			gf := &g.flavors[best]
			for _, rr := range gr.reqs {
				a.addUsage(gf.frs[rr.slot], rr.perPod*count)
			}
			if bestOut.mode < a.mode {
				a.mode = bestOut.mode
			}
			if bestOut.mode == preemptFit {
				if a.preemptFRs == nil {
					a.preemptFRs = map[int]bool{}
				}
				for _, i := range bestPreempt {
					a.preemptFRs[i] = true
				}
				sc.arena = append(sc.arena, bestReasons...)
			}
			a.borrows = a.borrows || bestOut.borrows
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
// rather than look at the next one.
func stopSearch(o flavorOutcome, cq *cqState) bool {
	switch o.mode {
	case fit:
		return !o.borrows || cq.WhenCanBorrow != TryNextFlavor
	case preemptFit:
		return cq.WhenCanPreempt == Preempt
	}
	return false
}

// tryFlavor checks one flavor for one group's requests of a pod set,
// appending why it falls short to why and the flavor-resources that need
// preemption to preempt.
func (e *Engine) tryFlavor(cq *cqState, a *assignment, g *group, gf *groupFlavor, ps *PodSet, reqs []resReq, count int64, why *[]reason, preempt *[]int) flavorOutcome {
	if r, bad := ineligible(gf, ps); bad {
		*why = append(*why, r)
		return flavorOutcome{mode: noFit}
	}
	out := flavorOutcome{mode: fit}
	n := cq.node
	for _, rr := range reqs {
		i := gf.frs[rr.slot]
		// Earlier pod sets of the same workload may already use this
		// flavor-resource.
		val := rr.perPod*count + a.usageOf(i)
		avail := n.available(i)
		if val <= avail {
			if n.usage[i]+val > n.subtree[i] {
				out.borrows = true
			}
			continue
		}
		pot := n.potential(i)
		r := reason{kind: reasonInsufficient, podSet: ps.Name, flavor: gf.name, resource: rr.resource, requested: val, available: avail}
		canPreempt := val <= pot && cq.mayPreempt() &&
			(val <= n.nominal[i] || cq.Preemption.BorrowWithinCohort == LowerPriority || e.tree.fair)
		if canPreempt {
			*why = append(*why, r)
			*preempt = append(*preempt, i)
			if out.mode > preemptFit {
				out.mode = preemptFit
			}
			if val > n.nominal[i] {
				out.borrows = true
			}
			continue
		}
		if val > pot {
			r.kind, r.available = reasonNeverFits, pot
		}
		*why = append(*why, r)
		out.mode = noFit
	}
	return out
}

// ineligible says why a pod set cannot land on a flavor's nodes.
func ineligible(gf *groupFlavor, ps *PodSet) (reason, bool) {
	f, flavor := gf.flavor, gf.name
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
	return len(e.collectCandidates(ws, set, true)) > 0
}

func tolerated(t *corev1.Taint, tols []corev1.Toleration) bool {
	for i := range tols {
		if tols[i].ToleratesTaint(t) {
			return true
		}
	}
	return false
}
