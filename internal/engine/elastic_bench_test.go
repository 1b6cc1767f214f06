package engine

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCycleElasticScaleUps measures the cycle that follows 1,000
// elastic workloads (10 in each of 100 ClusterQueues of one cohort, 2
// pods each) asking for one more pod each, with room for all of them,
// against the same cycle when 1,000 new one-pod workloads are submitted
// instead; 10,000 others wait in every case, none of which fits. The
// engine is rebuilt outside the timer.
func BenchmarkCycleElasticScaleUps(b *testing.B) {
	for _, scaleUps := range []bool{false, true} {
		b.Run(fmt.Sprintf("scaleUps=%t", scaleUps), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				var cfg Config
				cfg.Flavors = flavors("default")
				for q := range 100 {
					cq := fmt.Sprintf("cq-%03d", q)
					cfg.ClusterQueues = append(cfg.ClusterQueues, newCQ(cq).cohort("all").quota("default", "cpu", 30_000).obj())
					cfg.LocalQueues = append(cfg.LocalQueues, LocalQueue{Namespace: cq, Name: "lq", ClusterQueue: cq, StopPolicy: StopNone})
				}
				e := New(cfg)
				for q := range 100 {
					ns := fmt.Sprintf("cq-%03d", q)
					for i := range 10 {
						w := newWL(ns, fmt.Sprintf("e-%d", i)).elastic().pods("main", 2, "cpu", 1000).admittedIn(ns, "default", 0).obj()
						if err := e.Submit(w); err != nil {
							b.Fatal(err)
						}
					}
					for i := range 100 {
						if err := e.Submit(newWL(ns, fmt.Sprintf("big-%d", i)).at(time.Second).pods("main", 1, "cpu", 10_000_000).obj()); err != nil {
							b.Fatal(err)
						}
					}
				}
				e.Cycle(t0)
				for q := range 100 {
					ns := fmt.Sprintf("cq-%03d", q)
					for i := range 10 {
						var err error
						if scaleUps {
							err = e.Resize(fmt.Sprintf("%s/e-%d", ns, i), []int32{3}, t0.Add(time.Minute))
						} else {
							err = e.Submit(newWL(ns, fmt.Sprintf("new-%d", i)).at(time.Minute).pods("main", 1, "cpu", 1000).obj())
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StartTimer()
				ds := e.Cycle(t0.Add(time.Minute))
				b.StopTimer()
				n := 0
				for _, d := range ds {
					if d.Kind == KindAdmitted || d.Kind == KindResized {
						n++
					}
				}
				if n != 1000 {
					b.Fatalf("%d admitted or resized, want 1000", n)
				}
				b.StartTimer()
			}
		})
	}
}
