package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Node replacement. When a node under an admitted workload's placement
// fails (it is gone, or not Ready), the workload keeps its quota and its
// admission if its pods there fit elsewhere within what its pod sets ask
// for; only they move. A pod set asks to stay within the domain of its
// required level, of its slice level when slices span more than a node,
// and of its group's level: the narrowest of these that holds the failed
// node is where its lost pods go (an exhausted domain means no
// replacement). Slices of one node move whole, each to another node of
// the pod set's required domain. Pods asked only to be close (preferred)
// go to the failed node's domain of that level if they fit, else as close
// as the rest of the flavor allows; unconstrained ones go anywhere. A pod
// set with no pod left on healthy nodes is placed anew. When a pod set's
// lost pods fit nowhere, the workload is evicted (ReasonNodeFailure).

// KindReplaced: nodes under an admitted workload's placement failed and
// the pods there were given other domains (Message says which). It keeps
// its quota and its admission; PodSets are its placement now.
const KindReplaced Kind = "replaced"

// ReasonNodeReplaced is the Reason of a KindReplaced decision.
const ReasonNodeReplaced = "NodeReplaced"

// healthyLeaf is the leaf of a recorded domain of f, if it still holds a
// node that is Ready.
func (e *Engine) healthyLeaf(f *tasFlavor, d TopologyDomain) (int, bool) {
	if len(d.Values) == 0 {
		return 0, false
	}
	li, ok := f.leafOf[strings.Join(d.Values, "/")]
	if !ok {
		return 0, false
	}
	for _, ni := range f.leaves[li].nodes {
		if !e.nodes[ni].NotReady {
			return li, true
		}
	}
	return 0, false
}

// replaceFailed finds new domains for the pods of ws's placement that are
// on failed nodes. On success it returns the placement with them moved
// and says what moved; ws's booking is not changed either way.
func (e *Engine) replaceFailed(ws *wlState) ([]PodSetAssignment, string, bool) {
	old := ws.admitted.tas
	e.bookTAS(old, -1)
	var booked [][]tasUse
	undo := func() {
		for _, u := range booked {
			e.bookTAS(u, -1)
		}
		e.bookTAS(old, 1)
	}
	out := slices.Clone(ws.admitted.podSets)
	// First what stays where it is, every pod set's: the lost pods of one
	// pod set must not be placed where another's pods still are.
	type failed struct {
		i    int
		f    *tasFlavor
		ps   *PodSet
		req  []int64
		kept []leafCount
		lost []TopologyDomain
	}
	var moving []failed
	for i := range out {
		psa := out[i]
		if psa.Topology == nil {
			continue
		}
		f := e.tasFlavorOf(psa)
		ps := podSetNamed(ws.w, psa.Name)
		if f == nil || f.missing != "" || ps == nil {
			undo()
			return nil, "", false // its flavor's nodes are gone: nowhere to move to
		}
		req, missing := f.perPod(ps)
		if missing != "" {
			undo()
			return nil, "", false
		}
		fd := failed{i: i, f: f, ps: ps, req: req}
		for _, d := range psa.Topology.Domains {
			if li, ok := e.healthyLeaf(f, d); ok {
				fd.kept = append(fd.kept, leafCount{leaf: li, count: int64(d.Count)})
			} else if len(d.Values) > 0 {
				fd.lost = append(fd.lost, d)
			}
		}
		keptPlan := &tasPlan{f: f, leaves: fd.kept, req: req}
		booked = append(booked, keptPlan.uses())
		e.bookTAS(booked[len(booked)-1], 1)
		if len(fd.lost) > 0 {
			moving = append(moving, fd)
		}
	}
	var moved []string
	for _, fd := range moving {
		psa, f := out[fd.i], fd.f
		var got []leafCount
		if len(fd.kept) == 0 && fd.ps.Topology.Group == "" {
			// Nothing left where it was: placed anew, as at admission (a
			// group's member stays with its group: below).
			plan, _, _ := e.placeOn(ws, ws.podSetIndex(psa.Name), f, psa.Count, f.all())
			if plan == nil {
				undo()
				return nil, "", false
			}
			got = plan.leaves
			booked = append(booked, plan.uses())
			e.bookTAS(booked[len(booked)-1], 1)
		} else {
			for _, d := range fd.lost {
				lc, ok := e.placeLost(f, fd.ps, psa.Count, fd.req, d)
				if !ok {
					undo()
					return nil, "", false
				}
				p := &tasPlan{f: f, leaves: lc, req: fd.req}
				booked = append(booked, p.uses())
				e.bookTAS(booked[len(booked)-1], 1)
				got = append(got, lc...)
			}
		}
		moved = append(moved, movedText(psa.Name, fd.lost, f, got))
		out[fd.i].Topology = mergeLeaves(f, append(fd.kept, got...))
	}
	for _, u := range booked {
		e.bookTAS(u, -1)
	}
	e.bookTAS(old, 1)
	if len(moved) == 0 {
		return nil, "", false
	}
	return out, strings.Join(moved, "; "), true
}

// placeLost places the pods a pod set had in failed domain d (see the
// comment at the top of this file for where they may go).
func (e *Engine) placeLost(f *tasFlavor, ps *PodSet, count int32, req []int64, d TopologyDomain) ([]leafCount, bool) {
	whole, why := f.request(ps, count)
	if why != "" {
		return nil, false
	}
	last := len(f.levels) - 1
	n := int64(d.Count)
	// Levels whose domain the pods must stay in.
	bound := -1
	if whole.mode == placeRequired {
		bound = whole.level
	}
	if ps.Topology.Group != "" {
		bound = max(bound, f.groupLevel(ps))
	}
	r := placeReq{mode: placeRequired, unitLevel: last, size: 1, units: n}
	switch {
	case whole.size > 1 && whole.unitLevel == last:
		// Slices of one node: whole slices to other nodes.
		if n%whole.size != 0 {
			return nil, false
		}
		r.size, r.units = whole.size, n/whole.size
	case whole.size > 1:
		bound = max(bound, whole.unitLevel)
	}
	within := f.all()
	if bound >= 0 {
		sp, ok := f.spanOfValues(bound, d.Values)
		if !ok {
			return nil, false
		}
		within, r.level = sp, bound
		p := &placement{f: f, t: f.table(e.nodes, ps, req, true), r: r}
		if !p.run(within) {
			return nil, false
		}
		return p.out, true
	}
	// Only asked to be close, or not at all.
	t := f.table(e.nodes, ps, req, true)
	if whole.mode == placePreferred {
		if sp, ok := f.spanOfValues(whole.level, d.Values); ok {
			r.level = whole.level
			if p := (&placement{f: f, t: t, r: r}); p.run(sp) {
				return p.out, true
			}
		}
		r.mode, r.level = placePreferred, whole.level
	} else {
		r.mode, r.level = placeUnconstrained, last
	}
	p := &placement{f: f, t: t, r: r}
	if !p.run(within) {
		return nil, false
	}
	return p.out, true
}

// spanOfValues is the domain of level k whose values start as values do,
// if any of its nodes is still there.
func (f *tasFlavor) spanOfValues(k int, values []string) (span, bool) {
	if k >= len(values) || k >= len(f.levels) {
		return span{}, false
	}
	prefix := values[:k+1]
	i := sort.Search(len(f.leaves), func(i int) bool { return slices.Compare(f.leaves[i].values[:k+1], prefix) >= 0 })
	if i == len(f.leaves) || !slices.Equal(f.leaves[i].values[:k+1], prefix) {
		return span{}, false
	}
	return f.spans[k][f.spanOf[k][i]], true
}

// mergeLeaves is the topology assignment of leaf counts, in leaf order,
// counts on one leaf added up.
func mergeLeaves(f *tasFlavor, lcs []leafCount) *TopologyAssignment {
	sum := map[int]int64{}
	for _, lc := range lcs {
		sum[lc.leaf] += lc.count
	}
	leaves := make([]int, 0, len(sum))
	for li, n := range sum {
		if n > 0 {
			leaves = append(leaves, li)
		}
	}
	sort.Ints(leaves)
	t := &TopologyAssignment{Levels: f.levels}
	for _, li := range leaves {
		t.Domains = append(t.Domains, TopologyDomain{Values: f.leaves[li].values, Count: int32(sum[li])})
	}
	return t
}

// movedText says where a pod set's pods on failed nodes went.
func movedText(podSet string, lost []TopologyDomain, f *tasFlavor, got []leafCount) string {
	from := make([]string, len(lost))
	n := int32(0)
	for i, d := range lost {
		from[i] = d.Values[len(d.Values)-1]
		n += d.Count
	}
	to := make([]string, 0, len(got))
	for _, lc := range got {
		v := f.leaves[lc.leaf].values
		to = append(to, fmt.Sprintf("%s:%d", v[len(v)-1], lc.count))
	}
	return fmt.Sprintf("pod set %s: %d pods from %s to %s", podSet, n, strings.Join(from, ","), strings.Join(to, ","))
}

// podSetIndex is the index of the workload's pod set named name, or -1.
func (ws *wlState) podSetIndex(name string) int {
	for i := range ws.w.PodSets {
		if ws.w.PodSets[i].Name == name {
			return i
		}
	}
	return -1
}

// replace moves ws to the placement replaceFailed found.
func (e *Engine) replace(ws *wlState, podSets []PodSetAssignment) {
	e.bookTAS(ws.admitted.tas, -1)
	ws.admitted.podSets = podSets
	ws.admitted.tas = e.tasUsage(ws, podSets)
	e.bookTAS(ws.admitted.tas, 1)
	e.changed(nil)
}

// Move records that an admitted workload's pods are placed as podSets say
// now: a node replacement (KindReplaced) this or another replica decided,
// read back from the ledger. The flavors and counts are the ones it holds;
// only topology assignments differ.
func (e *Engine) Move(key string, podSets []PodSetAssignment) error {
	ws, err := e.holding("move", key)
	if err != nil {
		return err
	}
	held := ws.admitted.podSets
	if !samePlaces(held, podSets) || !slices.EqualFunc(held, podSets, func(a, b PodSetAssignment) bool { return a.Count == b.Count }) {
		return fmt.Errorf("move %s: the pod sets, counts or flavors differ from those it holds: %w", key, ErrBadAdmission)
	}
	if slices.EqualFunc(held, podSets, func(a, b PodSetAssignment) bool { return a.Topology.Equal(b.Topology) }) {
		return nil
	}
	e.replace(ws, podSets)
	// Its old domains have room now.
	e.topologyWaiting = true
	e.unparkTopologyWaiters()
	return nil
}

// holding is the admitted workload of key, for op's errors.
func (e *Engine) holding(op, key string) (*wlState, error) {
	ws, ok := e.workloads[key]
	if !ok {
		return nil, fmt.Errorf("%s %s: %w", op, key, ErrUnknownWorkload)
	}
	if ws.admitted == nil {
		return nil, fmt.Errorf("%s %s: it holds no quota: %w", op, key, ErrBadAdmission)
	}
	return ws, nil
}

// samePlaces: two admissions name the same pod sets, in order, on the
// same flavors (counts and topology aside).
func samePlaces(a, b []PodSetAssignment) bool {
	return slices.EqualFunc(a, b, func(x, y PodSetAssignment) bool { return x.Name == y.Name && maps.Equal(x.Flavors, y.Flavors) })
}

// Equal reports whether two topology assignments place the same pods in
// the same domains (nil is no assignment).
func (t *TopologyAssignment) Equal(o *TopologyAssignment) bool {
	if t == nil || o == nil {
		return t == o
	}
	return slices.Equal(t.Levels, o.Levels) && slices.EqualFunc(t.Domains, o.Domains, func(a, b TopologyDomain) bool {
		return a.Count == b.Count && slices.Equal(a.Values, b.Values)
	})
}
