package engine

import "sort"

// queueLess orders a ClusterQueue's pending workloads: with Admission
// Fair Sharing, the LocalQueue with the lower usage first; then higher
// priority, then earlier submission (or requeue, see orderAt), then key.
func queueLess(a, b *wlState) bool {
	if a.fair != b.fair && a.fair != nil && b.fair != nil && a.fair.score != b.fair.score {
		return a.fair.score < b.fair.score
	}
	if a.w.Priority != b.w.Priority {
		return a.w.Priority > b.w.Priority
	}
	if !a.orderAt.Equal(b.orderAt) {
		return a.orderAt.Before(b.orderAt)
	}
	return a.key < b.key
}

// queueCompare is queueLess as a comparison, for slices' sorts.
func queueCompare(a, b *wlState) int {
	switch {
	case queueLess(a, b):
		return -1
	case queueLess(b, a):
		return 1
	}
	return 0
}

func (cq *cqState) sortPending() {
	sort.Slice(cq.pending, func(i, j int) bool { return queueLess(cq.pending[i], cq.pending[j]) })
}

func (cq *cqState) insertPending(ws *wlState) {
	cq.settled = false
	if ws.queued {
		// Admitted and evicted within one cycle: its old entry is still
		// in place, since lists are compacted at the end of a cycle.
		return
	}
	ws.queued = true
	i := sort.Search(len(cq.pending), func(i int) bool { return queueLess(ws, cq.pending[i]) })
	cq.pending = append(cq.pending, nil)
	copy(cq.pending[i+1:], cq.pending[i:])
	cq.pending[i] = ws
}

func (cq *cqState) removePending(ws *wlState) {
	cq.settled = false
	ws.queued = false
	i := sort.Search(len(cq.pending), func(i int) bool { return !queueLess(cq.pending[i], ws) })
	if i < len(cq.pending) && cq.pending[i] == ws {
		cq.pending = append(cq.pending[:i], cq.pending[i+1:]...)
		return
	}
	for i, p := range cq.pending {
		if p == ws {
			cq.pending = append(cq.pending[:i], cq.pending[i+1:]...)
			return
		}
	}
}
