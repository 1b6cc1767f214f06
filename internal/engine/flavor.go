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

// resReq is one resource request of a pod set, resolved against a queue.
type resReq struct {
	resource string
	perPod   int64
}

// podSetAssign is the flavor choice for one pod set.
type podSetAssign struct {
	name    string
	count   int32
	flavors map[string]string // resource → flavor
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
	reasons    []string
}

func (a *assignment) reason() string { return strings.Join(a.reasons, "; ") }

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

func (a *assignment) admission(cq string) []PodSetAssignment {
	out := make([]PodSetAssignment, len(a.podSets))
	for i, ps := range a.podSets {
		out[i] = PodSetAssignment{Name: ps.name, Count: ps.count, Flavors: ps.flavors}
	}
	return out
}

// flavorOutcome is how one flavor serves one resource group of a pod set.
type flavorOutcome struct {
	mode    mode
	borrows bool
	preempt []int
	reasons []string
}

// better ranks flavor outcomes: fit over preempt over no fit, and within a
// mode, not borrowing over borrowing.
func (o flavorOutcome) better(than flavorOutcome) bool {
	if o.mode != than.mode {
		return o.mode > than.mode
	}
	return !o.borrows && than.borrows
}

// assign chooses flavors for every pod set of w in its ClusterQueue, with
// the given counts, against the tree's current usage.
func (e *Engine) assign(ws *wlState, counts []int32) *assignment {
	cq := ws.cq
	a := &assignment{mode: fit}
	for pi, ps := range ws.w.PodSets {
		count := counts[pi]
		psa := podSetAssign{name: ps.Name, count: count, flavors: map[string]string{}}
		// Requests of this pod set, grouped by resource group.
		byGroup := map[int][]resReq{}
		var groups []int
		for _, rr := range ws.requests[pi] {
			gi, ok := cq.groupOf[rr.resource]
			if !ok {
				a.mode = noFit
				a.reasons = append(a.reasons, fmt.Sprintf("pod set %s: resource %s is not covered by any resource group of ClusterQueue %s", ps.Name, rr.resource, cq.Name))
				continue
			}
			if _, seen := byGroup[gi]; !seen {
				groups = append(groups, gi)
			}
			byGroup[gi] = append(byGroup[gi], rr)
		}
		sort.Ints(groups)
		for _, gi := range groups {
			g := &cq.groups[gi]
			best := -1
			var bestOut flavorOutcome
			var why []string
			for fi := range g.flavors {
				gf := &g.flavors[fi]
				out := e.tryFlavor(cq, a, g, gf, &ps, byGroup[gi], int64(count))
				if out.mode == preemptFit && !e.canPreemptIn(ws, out.preempt) {
					// Nobody could be preempted here: for choosing a
					// flavor this is no better than not fitting.
					out.mode = noFit
				}
				why = append(why, out.reasons...)
				if best < 0 || out.better(bestOut) {
					best, bestOut = fi, out
				}
				if stopSearch(out, cq) {
					break
				}
			}
			if best < 0 || bestOut.mode == noFit {
				a.mode = noFit
				a.reasons = append(a.reasons, fmt.Sprintf("pod set %s: %s", ps.Name, strings.Join(why, "; ")))
				continue
			}
			gf := &g.flavors[best]
			for _, rr := range byGroup[gi] {
				psa.flavors[rr.resource] = gf.name
				a.addUsage(gf.fr[rr.resource], rr.perPod*int64(count))
			}
			if bestOut.mode < a.mode {
				a.mode = bestOut.mode
			}
			if bestOut.mode == preemptFit {
				if a.preemptFRs == nil {
					a.preemptFRs = map[int]bool{}
				}
				for _, i := range bestOut.preempt {
					a.preemptFRs[i] = true
				}
				a.reasons = append(a.reasons, fmt.Sprintf("pod set %s: %s", ps.Name, strings.Join(bestOut.reasons, "; ")))
			}
			a.borrows = a.borrows || bestOut.borrows
		}
		a.podSets = append(a.podSets, psa)
	}
	if a.mode == fit {
		a.reasons = nil
	}
	return a
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

func (e *Engine) tryFlavor(cq *cqState, a *assignment, g *group, gf *groupFlavor, ps *PodSet, reqs []resReq, count int64) flavorOutcome {
	if why := e.ineligible(g, gf.name, ps); why != "" {
		return flavorOutcome{mode: noFit, reasons: []string{why}}
	}
	out := flavorOutcome{mode: fit}
	n := cq.node
	for _, rr := range reqs {
		i := gf.fr[rr.resource]
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
		canPreempt := val <= pot && (val <= n.nominal[i] || cq.Preemption.BorrowWithinCohort == LowerPriority || e.tree.fair)
		if canPreempt {
			out.reasons = append(out.reasons, fmt.Sprintf("insufficient unused quota for %s in flavor %s: requested %s, available %s",
				rr.resource, gf.name, Format(rr.resource, val), Format(rr.resource, avail)))
			out.preempt = append(out.preempt, i)
			if out.mode > preemptFit {
				out.mode = preemptFit
			}
			if val > n.nominal[i] {
				out.borrows = true
			}
			continue
		}
		if val > pot {
			out.reasons = append(out.reasons, fmt.Sprintf("insufficient quota for %s in flavor %s: requested %s, more than the ClusterQueue can ever use (%s)",
				rr.resource, gf.name, Format(rr.resource, val), Format(rr.resource, pot)))
		} else {
			out.reasons = append(out.reasons, fmt.Sprintf("insufficient unused quota for %s in flavor %s: requested %s, available %s",
				rr.resource, gf.name, Format(rr.resource, val), Format(rr.resource, avail)))
		}
		out.mode = noFit
	}
	return out
}

// ineligible says why a pod set cannot land on a flavor's nodes, or "".
func (e *Engine) ineligible(g *group, flavor string, ps *PodSet) string {
	f := e.tree.flavors[flavor]
	for ti := range f.NodeTaints {
		t := &f.NodeTaints[ti]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerated(t, ps.Tolerations) && !tolerated(t, f.Tolerations) {
			return fmt.Sprintf("flavor %s has taint %s=%s:%s that pod set %s does not tolerate", flavor, t.Key, t.Value, t.Effect, ps.Name)
		}
	}
	keys := make([]string, 0, len(ps.NodeSelector))
	for k := range ps.NodeSelector {
		if g.labelKeys[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got, ok := f.NodeLabels[k]; !ok || got != ps.NodeSelector[k] {
			return fmt.Sprintf("flavor %s does not match nodeSelector %s=%s of pod set %s", flavor, k, ps.NodeSelector[k], ps.Name)
		}
	}
	return ""
}

func tolerated(t *corev1.Taint, tols []corev1.Toleration) bool {
	for i := range tols {
		if tols[i].ToleratesTaint(t) {
			return true
		}
	}
	return false
}
