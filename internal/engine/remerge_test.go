package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRemergeKeepsQueueOrder: after some LocalQueues' usage changes,
// remerge leaves the part of a pending list after the cursor in queue
// order (what a full sort gives), whether the changed ones form a block
// that moves or must be merged among ties.
func TestRemergeKeepsQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		e := New(Config{})
		cq := &cqState{}
		fairs := make([]*lqFair, 1+rng.IntN(6))
		for i := range fairs {
			fairs[i] = &lqFair{key: fmt.Sprint("lq-", i), score: float64(rng.IntN(3))}
		}
		for i := range 1 + rng.IntN(60) {
			cq.pending = append(cq.pending, &wlState{key: fmt.Sprintf("w-%03d", i), fair: fairs[rng.IntN(len(fairs))],
				w: &Workload{Priority: int32(rng.IntN(2))}, orderAt: t0.Add(time.Duration(rng.IntN(5)) * time.Second)})
		}
		cq.sortPending()
		from := rng.IntN(len(cq.pending) + 1)
		head := slices.Clone(cq.pending[:from])
		for _, f := range fairs {
			if rng.IntN(2) == 0 {
				f.score += float64(rng.IntN(3))
				cq.changed = append(cq.changed, f)
			}
		}
		if len(cq.changed) == 0 {
			continue
		}
		e.remerge(cq, from)
		if !slices.Equal(head, cq.pending[:from]) {
			t.Fatalf("round %d: the part before the cursor moved", round)
		}
		want := slices.Clone(cq.pending[from:])
		slices.SortStableFunc(want, queueCompare)
		if !slices.Equal(want, cq.pending[from:]) {
			t.Fatalf("round %d: after the cursor %v, want %v", round, keysOf(cq.pending[from:]), keysOf(want))
		}
		cq.changed = cq.changed[:0]
	}
}

func keysOf(ws []*wlState) []string {
	var out []string
	for _, w := range ws {
		out = append(out, fmt.Sprintf("%s(%s %g p%d)", w.key, w.fair.key, w.fair.score, w.w.Priority))
	}
	return out
}
