package catalog_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/catalog"
)

// BenchmarkCatalog: the stream of Kueue's baseline at full scale, 15,000
// workloads in 15 namespaces, each submitted, pending, admitted, started
// and (two in three) finished, applied to a catalog; then one list of
// every namespace. Reports the events applied per second, the heap the
// catalog holds, and the time of the list.
func BenchmarkCatalog(b *testing.B) {
	const n = 15000
	var evs []events.Event
	for i := range n {
		r := events.WorkloadRef{Kind: "job", Namespace: fmt.Sprintf("ns-%d", i%15), Name: fmt.Sprintf("job-%d", i), UID: fmt.Sprintf("u-%d", i)}
		evs = append(evs,
			events.WorkloadSubmittedV1{Workload: r, LocalQueue: "lq", Priority: 1, CreationTime: t0, PodSets: []events.PodSetV1{{Name: "main", Count: 1}}},
			events.WorkloadPendingV1{Workload: r, ClusterQueue: "cq", Reason: "insufficient unused quota for cpu in flavor default"},
			events.WorkloadAdmittedV1{Workload: r, ClusterQueue: "cq", Admission: "a1",
				PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1, Flavors: map[string]string{"cpu": "default"}}}},
			events.WorkloadStartedV1{Workload: r, ClusterQueue: "cq"})
		if i%3 != 0 {
			evs = append(evs, events.WorkloadFinishedV1{Workload: r, ClusterQueue: "cq", Succeeded: true})
		}
	}
	var heap, listTime float64
	for b.Loop() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		cat := catalog.New()
		for i, ev := range evs {
			cat.Apply(uint64(i+1), events.Envelope{Type: ev.Type(), Time: t0.Add(time.Duration(i) * time.Millisecond)}, ev)
		}
		start := time.Now()
		all, _ := cat.List("", t0.Add(time.Minute))
		listTime = time.Since(start).Seconds()
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		if len(all) != n {
			b.Fatalf("listed %d of %d", len(all), n)
		}
		runtime.KeepAlive(cat)
	}
	b.ReportMetric(float64(len(evs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(heap/(1<<20), "heap-MB")
	b.ReportMetric(listTime*1000, "list-ms")
}
