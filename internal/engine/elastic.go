package engine

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Elastic workloads (Kueue's workload slices). An elastic workload's pod
// counts may change while it is admitted. Fewer pods give their quota
// back at once: the admission shrinks in place and the next cycle says so
// (KindResized, ReasonScaledDown). More pods are a scale-up: a pending
// entry of its own in the workload's ClusterQueue that asks for the
// difference, on the flavors the admission has, queued by the workload's
// priority and the time of the change like a workload submitted then. It
// fits, borrows and preempts as any workload would (never its own
// admission); once admitted, the admission grows in place (KindResized,
// ReasonScaledUp) without stopping what runs. Quota-wise this is Kueue's
// new slice replacing the old one: the new total fits exactly when the
// difference does beside the old admission. A scale-up does not wait for
// admission checks, and an admission on a topology-aware flavor does not
// change size.

// KindResized: an elastic workload's admission holds other pod counts
// now (PodSets, on the same flavors); it keeps running. Reason says which
// way.
const KindResized Kind = "resized"

// Reasons of a KindResized decision.
const (
	ReasonScaledUp   = "ScaledUp"
	ReasonScaledDown = "ScaledDown"
)

// ErrBadResize: a resize that does not match the workload.
var ErrBadResize = errors.New("resize does not match the workload")

// Resize sets an elastic workload's pod counts, by pod set in order, as
// its job asks now (at is when it changed). A pending workload just asks
// for the new counts. An admitted one shrinks at once where it asks for
// fewer, and queues a scale-up where it asks for more.
func (e *Engine) Resize(key string, counts []int32, at time.Time) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("resize %s: %w", key, ErrUnknownWorkload)
	}
	if !ws.w.Elastic {
		return fmt.Errorf("resize %s: it is not elastic: %w", key, ErrBadResize)
	}
	if len(counts) != len(ws.w.PodSets) {
		return fmt.Errorf("resize %s: %d counts for %d pod sets: %w", key, len(counts), len(ws.w.PodSets), ErrBadResize)
	}
	same := true
	for i, n := range counts {
		if n < 0 {
			return fmt.Errorf("resize %s: pod set %s: count %d is negative: %w", key, ws.w.PodSets[i].Name, n, ErrBadResize)
		}
		same = same && n == ws.w.PodSets[i].Count
	}
	if same {
		return nil
	}
	w := *ws.w
	w.PodSets = slices.Clone(w.PodSets)
	for i := range w.PodSets {
		w.PodSets[i].Count = counts[i]
		w.PodSets[i].MinCount = 0
	}
	if why := validate(&w); why != "" {
		return fmt.Errorf("resize %s: %s: %w", key, why, ErrBadResize)
	}
	w.ResizedAt = at
	queued := ws.admitted == nil && ws.queued && ws.cq != nil
	if queued {
		ws.cq.removePending(ws)
	}
	ws.w = &w
	ws.shape = 0
	e.resolve(ws)
	ws.parked, ws.why = false, nil
	if queued {
		ws.cq.insertPending(ws)
	}
	e.fitSize(ws)
	return nil
}

// Resized records that an elastic workload's admission holds podSets
// now, as the ledger says: a resize this or another engine decided, read
// back. Names and flavors are those it holds; counts may differ.
func (e *Engine) Resized(key string, podSets []PodSetAssignment) error {
	ws, err := e.holding("resized", key)
	if err != nil {
		return err
	}
	held := ws.admitted.podSets
	if !samePlaces(held, podSets) {
		return fmt.Errorf("resized %s: the pod sets or flavors differ from those it holds: %w", key, ErrBadAdmission)
	}
	same := slices.EqualFunc(held, podSets, func(a, b PodSetAssignment) bool { return a.Count == b.Count })
	if same {
		delete(e.resizing, key) // what it holds is written
		return nil
	}
	if err := e.rebook(ws, slices.Clone(podSets)); err != nil {
		return fmt.Errorf("resized %s: %w", key, err)
	}
	delete(e.resizing, key)
	e.fitSize(ws)
	return nil
}

// rebook makes an admitted workload hold podSets instead of what it held
// (same flavors, other counts). Quota given back wakes its tree.
func (e *Engine) rebook(ws *wlState, podSets []PodSetAssignment) error {
	a := ws.admitted
	usage, err := e.usageOf(a.cq, ws, podSets)
	if err != nil {
		return err
	}
	shrinks := false
	for i := range podSets {
		if i < len(a.podSets) && podSets[i].Count < a.podSets[i].Count {
			shrinks = true
		}
	}
	for _, u := range a.usage {
		a.cq.node.addUsage(u.fr, -u.v)
	}
	e.holdFair(ws, -1)
	a.usage, a.podSets = usage, podSets
	for _, u := range a.usage {
		a.cq.node.addUsage(u.fr, u.v)
	}
	e.holdFair(ws, 1)
	root := a.cq.node.root()
	e.changed(root)
	if shrinks {
		root.released++
		e.unpark(root)
	}
	return nil
}

// fitSize brings an admitted elastic workload's admission in line with
// the counts it asks for: down at once, up by a scale-up that queues.
func (e *Engine) fitSize(ws *wlState) {
	if ws.admitted == nil || !ws.w.Elastic || len(ws.admitted.tas) > 0 {
		e.dropGrow(ws)
		return
	}
	want := map[string]int32{}
	for _, ps := range ws.w.PodSets {
		want[ps.Name] = ps.Count
	}
	kept := slices.Clone(ws.admitted.podSets)
	shrinks := false
	for i := range kept {
		if n, ok := want[kept[i].Name]; ok && kept[i].Count > n {
			kept[i].Count, shrinks = n, true
		}
	}
	if shrinks && e.rebook(ws, kept) == nil {
		e.resizing[ws.key] = true
	}
	delta := make([]int32, len(ws.w.PodSets))
	grows := false
	for i, ps := range ws.w.PodSets {
		for _, psa := range ws.admitted.podSets {
			if psa.Name == ps.Name && ps.Count > psa.Count {
				delta[i], grows = ps.Count-psa.Count, true
			}
		}
	}
	if !grows {
		e.dropGrow(ws)
		return
	}
	e.ensureGrow(ws, delta)
}

// ensureGrow queues ws's scale-up by delta pods per pod set, replacing
// one that asked for other counts.
func (e *Engine) ensureGrow(ws *wlState, delta []int32) {
	if g := ws.grow; g != nil {
		if slices.Equal(g.full, delta) && g.prio == ws.prio {
			return
		}
		e.dropGrow(ws)
	}
	at := ws.w.ResizedAt
	if at.IsZero() {
		at = ws.admitted.at
	}
	w := *ws.w
	w.Admission, w.Submitted, w.MaxExecution = nil, at, 0
	w.PodSets = make([]PodSet, len(ws.w.PodSets))
	for i, ps := range ws.w.PodSets {
		ps.Count, ps.MinCount, ps.pinned = delta[i], 0, nil
		for _, psa := range ws.admitted.podSets {
			if psa.Name == ps.Name {
				ps.pinned = psa.Flavors
			}
		}
		w.PodSets[i] = ps
	}
	g := &wlState{w: &w, prio: w.Priority, key: ws.key + ScaleUpSuffix, orderAt: at, parent: ws, invalid: validate(&w)}
	e.resolve(g)
	delete(e.unresolved, g.key)
	if g.cq != ws.admitted.cq {
		// Its LocalQueue points elsewhere now: more pods can only join
		// the admission where it is.
		return
	}
	g.cq.insertPending(g)
	ws.grow = g
}

// ScaleUpSuffix ends the key of a scale-up's pending entry (Kubernetes
// names never hold '#').
const ScaleUpSuffix = "#scale-up"

// dropGrow withdraws ws's scale-up. Its entry stays in its queue's list,
// marked gone, until the list is next compacted: a cycle may be walking
// the list.
func (e *Engine) dropGrow(ws *wlState) {
	g := ws.grow
	if g == nil {
		return
	}
	ws.grow = nil
	g.gone = true
	if g.cq != nil {
		e.stale[g.cq] = true
	}
}

// grow admits a scale-up: its workload's admission takes the new pods.
func (c *cycle) grow(g *wlState) {
	p := g.parent
	podSets := slices.Clone(p.admitted.podSets)
	for i := range podSets {
		for _, ps := range g.w.PodSets {
			if ps.Name == podSets[i].Name {
				podSets[i].Count += ps.Count
			}
		}
	}
	if err := c.e.rebook(p, podSets); err != nil {
		c.pend(g, err.Error())
		g.parked = true
		return
	}
	p.grow, g.gone, g.reason = nil, true, ""
	c.touched[g.cq] = true
	delete(c.e.resizing, p.key)
	c.emit(Decision{Kind: KindResized, Key: p.key, ClusterQueue: p.admitted.cq.Name, PodSets: slices.Clone(podSets), Reason: ReasonScaledUp})
}

// resizes tells the shrinks made since the last cycle, in the trees this
// engine decides for.
func (c *cycle) resizes() {
	if len(c.e.resizing) == 0 {
		return
	}
	keys := make([]string, 0, len(c.e.resizing))
	for k := range c.e.resizing {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ws := c.e.workloads[k]
		if ws == nil || ws.admitted == nil {
			delete(c.e.resizing, k)
			continue
		}
		if !ours(ws.admitted.cq) {
			continue // its owner tells it
		}
		delete(c.e.resizing, k)
		c.emit(Decision{Kind: KindResized, Key: k, ClusterQueue: ws.admitted.cq.Name, PodSets: slices.Clone(ws.admitted.podSets), Reason: ReasonScaledDown})
	}
}

// decisionKey is the key decisions about ws name: a scale-up's are its
// workload's.
func (ws *wlState) decisionKey() string {
	if ws.parent != nil {
		return ws.parent.key
	}
	return ws.key
}

// HeldPodSets returns what an admitted workload's admission holds (nil
// when it holds nothing); the caller must not change it.
func (e *Engine) HeldPodSets(key string) []PodSetAssignment {
	if ws, ok := e.workloads[key]; ok && ws.admitted != nil {
		return ws.admitted.podSets
	}
	return nil
}
