package engine

import (
	"fmt"
	"sync"
	"time"
)

// PendingItem is a waiting workload and its place in line.
type PendingItem struct {
	Key                   string
	Kind, Namespace, Name string
	LocalQueue            string
	ClusterQueue          string
	Priority              int32
	// Positions count from 0 in the order the engine would admit now,
	// over the whole ClusterQueue and over the workload's LocalQueue; a
	// page's offset does not renumber them.
	PositionInClusterQueue int
	PositionInLocalQueue   int
	Reason                 string
	Submitted              time.Time
	// Elsewhere: another engine decides for the workload's tree
	// (SetOwner), so Reason is only what this one last knew.
	Elsewhere bool
	// ScaleUp: this is the scale-up of an admitted elastic workload (Key
	// names the workload); Submitted is when it asked for more pods.
	ScaleUp bool
}

// PendingPage is one page of a queue's waiting workloads and how many
// wait in all.
type PendingPage struct {
	Items []PendingItem
	Total int
}

// PendingInClusterQueue returns a ClusterQueue's waiting workloads in the
// order the engine would admit them now (priority, then submission or
// requeue time), from offset on, at most limit of them (limit ≤ 0: all).
// ok is false when the ClusterQueue does not exist.
func (e *Engine) PendingInClusterQueue(name string, offset, limit int) (PendingPage, bool) {
	cq, ok := e.tree.cqs[name]
	if !ok {
		return PendingPage{}, false
	}
	return e.pageOf(cq, "", "", offset, limit), true
}

// PendingInLocalQueue is PendingInClusterQueue for the workloads of one
// LocalQueue; ok is false when the LocalQueue does not exist.
func (e *Engine) PendingInLocalQueue(namespace, name string, offset, limit int) (PendingPage, bool) {
	lq, ok := e.tree.lqs[namespace+"/"+name]
	if !ok {
		return PendingPage{}, false
	}
	cq, ok := e.tree.cqs[lq.ClusterQueue]
	if !ok {
		return PendingPage{}, true // its ClusterQueue is missing: nothing waits in it
	}
	return e.pageOf(cq, namespace, name, offset, limit), true
}

// PendingView is every queue's waiting workloads as the engine held them
// when it was taken: it answers the same questions as
// PendingInClusterQueue and PendingInLocalQueue, from any goroutine, while
// the engine moves on.
type PendingView struct {
	byCQ map[string][]PendingItem
	// lqs maps namespace/name to its ClusterQueue ("" when missing).
	lqs map[string]string
	// byKey indexes the items by workload key, built at the first Find.
	index sync.Once
	byKey map[string]*PendingItem
}

// Find is the waiting workload of an engine key (kind/namespace/name) as
// of the view: its place in line and its reason. A scale-up is not found
// by its workload's key.
func (v *PendingView) Find(key string) (PendingItem, bool) {
	v.index.Do(func() {
		v.byKey = map[string]*PendingItem{}
		for _, items := range v.byCQ {
			for i := range items {
				if !items[i].ScaleUp {
					v.byKey[items[i].Key] = &items[i]
				}
			}
		}
	})
	if it := v.byKey[key]; it != nil {
		return *it, true
	}
	return PendingItem{}, false
}

// PendingView takes a view of every queue's waiting workloads.
func (e *Engine) PendingView() *PendingView {
	v := &PendingView{byCQ: make(map[string][]PendingItem, len(e.tree.cqs)), lqs: make(map[string]string, len(e.tree.lqs))}
	for name, cq := range e.tree.cqs {
		items := make([]PendingItem, 0, len(cq.pending))
		e.walkPending(cq, func(ws *wlState, cqPos, lqPos int) { items = append(items, itemOf(ws, cq, cqPos, lqPos)) })
		v.byCQ[name] = items
	}
	for key, lq := range e.tree.lqs {
		if _, ok := e.tree.cqs[lq.ClusterQueue]; ok {
			v.lqs[key] = lq.ClusterQueue
		} else {
			v.lqs[key] = ""
		}
	}
	return v
}

// InClusterQueue is PendingInClusterQueue as of the view.
func (v *PendingView) InClusterQueue(name string, offset, limit int) (PendingPage, bool) {
	items, ok := v.byCQ[name]
	if !ok {
		return PendingPage{}, false
	}
	return pageOfItems(items, "", "", offset, limit), true
}

// InLocalQueue is PendingInLocalQueue as of the view.
func (v *PendingView) InLocalQueue(namespace, name string, offset, limit int) (PendingPage, bool) {
	cq, ok := v.lqs[namespace+"/"+name]
	if !ok {
		return PendingPage{}, false
	}
	return pageOfItems(v.byCQ[cq], namespace, name, offset, limit), true
}

// walkPending visits cq's waiting workloads in line, each with its place
// over the ClusterQueue and over its LocalQueue. Between cycles the list
// holds waiting workloads only (admitted ones are compacted away at the
// end of the cycle that admits them). A deactivated workload is no longer
// in line (Kueue takes it out of its queue): it has no place and is not
// visited.
func (e *Engine) walkPending(cq *cqState, visit func(ws *wlState, cqPos, lqPos int)) {
	inLQ := map[*LocalQueue]int{}
	cqPos := 0
	for _, ws := range cq.pending {
		if ws.pods.deactivated != "" || ws.gone || ws.admitted != nil {
			continue
		}
		lqPos := inLQ[ws.lq]
		inLQ[ws.lq]++
		visit(ws, cqPos, lqPos)
		cqPos++
	}
}

func itemOf(ws *wlState, cq *cqState, cqPos, lqPos int) PendingItem {
	return PendingItem{
		Key: ws.decisionKey(), ScaleUp: ws.parent != nil, Kind: ws.w.Kind, Namespace: ws.w.Namespace, Name: ws.w.Name,
		LocalQueue: ws.w.Queue, ClusterQueue: cq.Name, Priority: ws.w.Priority,
		PositionInClusterQueue: cqPos, PositionInLocalQueue: lqPos,
		Reason: ws.reason, Submitted: ws.w.Submitted, Elsewhere: cq.node.root().foreign,
	}
}

// pager gathers one page: the workloads of LocalQueue namespace/name (all
// when name is ""), from offset on in that queue's order, at most limit
// (limit ≤ 0: all), and counts them. Only the page's items are made.
type pager struct {
	namespace, name string
	offset, limit   int
	page            PendingPage
}

func (pg *pager) add(namespace, queue string, cqPos, lqPos int, item func() PendingItem) {
	idx := cqPos
	if pg.name != "" {
		if namespace != pg.namespace || queue != pg.name {
			return
		}
		idx = lqPos
	}
	pg.page.Total++
	if idx < pg.offset || (pg.limit > 0 && len(pg.page.Items) >= pg.limit) {
		return
	}
	pg.page.Items = append(pg.page.Items, item())
}

// pageOf is a page of cq, read from the engine.
func (e *Engine) pageOf(cq *cqState, namespace, name string, offset, limit int) PendingPage {
	pg := pager{namespace: namespace, name: name, offset: offset, limit: limit}
	e.walkPending(cq, func(ws *wlState, cqPos, lqPos int) {
		pg.add(ws.w.Namespace, ws.w.Queue, cqPos, lqPos, func() PendingItem { return itemOf(ws, cq, cqPos, lqPos) })
	})
	return pg.page
}

// pageOfItems is a page of a ClusterQueue's items, read from a view.
func pageOfItems(items []PendingItem, namespace, name string, offset, limit int) PendingPage {
	pg := pager{namespace: namespace, name: name, offset: offset, limit: limit}
	for _, it := range items {
		pg.add(it.Namespace, it.LocalQueue, it.PositionInClusterQueue, it.PositionInLocalQueue, func() PendingItem { return it })
	}
	return pg.page
}

// QueueStats is what a ClusterQueue holds and what waits in it.
type QueueStats struct {
	ClusterQueue string
	Cohort       string
	// Running: it can admit (its Active condition).
	Running bool
	// Active waiting workloads may be admitted at the next cycle;
	// inadmissible ones wait for quota to be released (parked) or for a
	// backoff. Deactivated workloads wait for nothing and are in neither.
	Active, Inadmissible int
	Resources            []ResourceStats
}

// ResourceStats is one flavor-resource of a ClusterQueue, in the engine's
// units (see Canonical).
type ResourceStats struct {
	Flavor, Resource string
	Reserved         int64
	Nominal          int64
}

// Stats reports every ClusterQueue, by name, for metrics; now decides
// whether a backoff still holds.
func (e *Engine) Stats(now time.Time) []QueueStats {
	out := make([]QueueStats, 0, len(e.tree.cqOrder))
	for _, cq := range e.tree.cqOrder {
		a, _ := e.ClusterQueueActivity(cq.Name)
		st := QueueStats{ClusterQueue: cq.Name, Cohort: cq.Cohort, Running: a.Active}
		for _, ws := range cq.pending {
			switch {
			case ws.admitted != nil, ws.pods.deactivated != "", ws.gone:
			case ws.parked || ws.invalid != "" || now.Before(ws.pods.requeueAt):
				st.Inadmissible++
			default:
				st.Active++
			}
		}
		for _, g := range cq.groups {
			for _, f := range g.flavors {
				for _, r := range g.resources {
					i := f.fr[r]
					st.Resources = append(st.Resources, ResourceStats{Flavor: f.name, Resource: r,
						Reserved: cq.node.usage[i], Nominal: cq.node.nominal[i]})
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// Borrowing reports whether the ClusterQueue a workload is admitted to
// uses more than its nominal quota of some flavor and resource, that is,
// borrows from its cohort.
func (e *Engine) Borrowing(key string) bool {
	ws, ok := e.workloads[key]
	if !ok || ws.admitted == nil {
		return false
	}
	n := ws.admitted.cq.node
	for i := range n.usage {
		if n.usage[i] > n.nominal[i] {
			return true
		}
	}
	return false
}

// BaseUnits turns a canonical value into the resource's base unit, as
// Kubernetes quantities count: cores for cpu (canonical: millicores),
// units (bytes, devices) otherwise.
func BaseUnits(resource string, v int64) float64 {
	if resource == "cpu" {
		return float64(v) / 1000
	}
	return float64(v)
}

// Activity is whether a queue accepts work now: Kueue's Active condition
// of a ClusterQueue or LocalQueue, with its reason (Kueue's names) and a
// message.
type Activity struct {
	Active          bool
	Reason, Message string
}

// ClusterQueueActivity reports whether a ClusterQueue can admit: not when a
// flavor or admission check it names is missing or inactive, its cohort
// tree has a cycle, or its stopPolicy holds it. ok is false for an unknown
// ClusterQueue.
func (e *Engine) ClusterQueueActivity(name string) (a Activity, ok bool) {
	cq, ok := e.tree.cqs[name]
	if !ok {
		return Activity{}, false
	}
	switch {
	case cq.inactive != "":
		return Activity{Reason: cq.inactiveReason, Message: cq.inactive}, true
	case cq.StopPolicy == Hold || cq.StopPolicy == HoldAndDrain:
		return Activity{Reason: "Stopped", Message: e.stopped(cq)}, true
	case e.blockedReason(cq) != "":
		return Activity{Reason: "StateUnreadable", Message: e.blockedReason(cq)}, true
	}
	return Activity{Active: true, Reason: "Ready", Message: "Can admit new workloads"}, true
}

// LocalQueueActivity reports whether workloads submitted to a LocalQueue
// can be admitted: not when its ClusterQueue is missing or inactive, or
// its stopPolicy holds it. ok is false for an unknown LocalQueue.
func (e *Engine) LocalQueueActivity(namespace, name string) (a Activity, ok bool) {
	lq, ok := e.tree.lqs[namespace+"/"+name]
	if !ok {
		return Activity{}, false
	}
	if lq.StopPolicy == Hold || lq.StopPolicy == HoldAndDrain {
		return Activity{Reason: "Stopped", Message: fmt.Sprintf("LocalQueue %s/%s is stopped (stopPolicy %s)", namespace, name, lq.StopPolicy)}, true
	}
	cqa, exists := e.ClusterQueueActivity(lq.ClusterQueue)
	switch {
	case !exists:
		return Activity{Reason: "ClusterQueueDoesNotExist", Message: fmt.Sprintf("ClusterQueue %s does not exist", lq.ClusterQueue)}, true
	case !cqa.Active:
		return Activity{Reason: "ClusterQueueIsInactive", Message: cqa.Message}, true
	}
	return Activity{Active: true, Reason: "Ready", Message: "Can submit new workloads to its ClusterQueue"}, true
}
