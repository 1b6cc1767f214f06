package engine

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCycleAdmissionFairSharing measures one Cycle of a ClusterQueue
// shared by 100 LocalQueues with 100 pending 1-CPU workloads each (10,000
// in all) and room for 1,000: with admissionScope UsageBasedAdmission
// every admission's entry penalty reorders the queue before the next, as
// against the same queue ordered by priority and age alone. The engine is
// rebuilt outside the timer.
func BenchmarkCycleAdmissionFairSharing(b *testing.B) {
	for _, usageBased := range []bool{false, true} {
		b.Run(fmt.Sprintf("usageBased=%t", usageBased), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				cq := newCQ("cq").quota("default", "cpu", 1_000_000).obj()
				cq.UsageBasedAdmission = usageBased
				cfg := Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{cq},
					AdmissionFairSharing: &AdmissionFairSharing{HalfLife: time.Hour, SamplingInterval: 5 * time.Minute}}
				for q := range 100 {
					cfg.LocalQueues = append(cfg.LocalQueues, LocalQueue{Namespace: "ns", Name: fmt.Sprintf("lq-%03d", q), ClusterQueue: "cq", StopPolicy: StopNone})
				}
				e := New(cfg)
				for q := range 100 {
					for i := range 100 {
						w := newWL("ns", fmt.Sprintf("w-%03d-%03d", q, i)).queue(fmt.Sprintf("lq-%03d", q)).at(time.Duration(q*100+i)*time.Millisecond).pods("main", 1, "cpu", 1000).obj()
						if err := e.Submit(w); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StartTimer()
				ds := e.Cycle(t0)
				b.StopTimer()
				if n := len(admittedIn(ds)); n != 1000 {
					b.Fatalf("admitted %d, want 1000", n)
				}
				b.StartTimer()
			}
		})
	}
}
