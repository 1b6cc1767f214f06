package ledger_test

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/internal/ledger"
)

// BenchmarkReserve books reservations into one tree, one atomic batch per
// booking, as the admission service books each tree once per cycle, on an
// embedded file-backed server as `sluice dev` runs one. On a
// one-replica file-backed stream the server stages every batch in a file
// store of its own (docs/performance.md, stop 32).
func BenchmarkReserve(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("%d reservations a batch", n), func(b *testing.B) {
			ctx, _, w := open(b)
			var rev uint64
			b.ResetTimer()
			for i := range b.N {
				res := make(map[string]ledger.Reservation, n)
				for j := range n {
					res[fmt.Sprintf("job/ns/w-%d-%d", i, j)] = reservation("cq", 1)
				}
				booked, err := w.Reserve(ctx, "cohort/bench", rev, res)
				if err != nil {
					b.Fatal(err)
				}
				rev = booked.Tree
			}
		})
	}
}

// BenchmarkKeyCompareAndSet is one compare-and-set of one key in the same
// bucket, without a batch: what booking a lone reservation would cost if
// one message could carry the tree's check.
func BenchmarkKeyCompareAndSet(b *testing.B) {
	ctx, kv, _ := open(b)
	val := []byte(`{"clusterQueue":"cq"}`)
	rev, err := kv.Create(ctx, "bench", val)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if rev, err = kv.Update(ctx, "bench", val, rev); err != nil {
			b.Fatal(err)
		}
	}
}
