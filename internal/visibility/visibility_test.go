package visibility_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/visibility"
)

// engineSource answers from an engine in the caller's goroutine.
type engineSource struct{ e *engine.Engine }

func (s engineSource) PendingInClusterQueue(_ context.Context, name string, offset, limit int) (engine.PendingPage, bool, error) {
	p, ok := s.e.PendingInClusterQueue(name, offset, limit)
	return p, ok, nil
}

func (s engineSource) PendingInLocalQueue(_ context.Context, ns, name string, offset, limit int) (engine.PendingPage, bool, error) {
	p, ok := s.e.PendingInLocalQueue(ns, name, offset, limit)
	return p, ok, nil
}

var start = time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)

// queueOf builds an engine whose one ClusterQueue (1 CPU, taken) has n
// workloads waiting, spread over ten LocalQueues.
func queueOf(b testing.TB, n int) *engine.Engine {
	b.Helper()
	cfg := engine.Config{
		Flavors: []engine.Flavor{{Name: "default"}},
		ClusterQueues: []engine.ClusterQueue{{Name: "cq", QueueingStrategy: engine.BestEffortFIFO, NamespaceSelector: labels.Everything(),
			ResourceGroups: []engine.ResourceGroup{{CoveredResources: []string{"cpu"},
				Flavors: []engine.FlavorQuotas{{Name: "default", Resources: []engine.Quota{{Resource: "cpu", Nominal: 1000}}}}}}}},
	}
	for i := range 10 {
		cfg.LocalQueues = append(cfg.LocalQueues, engine.LocalQueue{Namespace: fmt.Sprintf("ns-%d", i), Name: "lq", ClusterQueue: "cq"})
	}
	e := engine.New(cfg)
	one := []engine.PodSet{{Name: "main", Count: 1, Requests: map[string]int64{"cpu": 1000}}}
	if err := e.Submit(engine.Workload{Kind: "job", Namespace: "ns-0", Name: "holder", Queue: "lq", Submitted: start, PodSets: one,
		Admission: &engine.Admission{ClusterQueue: "cq", At: start, PodSets: []engine.PodSetAssignment{{Name: "main", Count: 1, Flavors: map[string]string{"cpu": "default"}}}}}); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if err := e.Submit(engine.Workload{Kind: "job", Namespace: fmt.Sprintf("ns-%d", i%10), Name: fmt.Sprintf("w-%06d", i), Queue: "lq",
			Priority: int32(i % 7), Submitted: start.Add(time.Duration(i) * time.Millisecond), PodSets: one}); err != nil {
			b.Fatal(err)
		}
	}
	e.Cycle(start.Add(time.Hour))
	return e
}

func BenchmarkPendingPage(b *testing.B) {
	e := queueOf(b, 100000)
	mux := http.NewServeMux()
	visibility.Register(mux, engineSource{e}, func() time.Time { return start.Add(time.Hour) })
	for _, path := range []string{
		"/clusterqueues/cq/pendingworkloads?offset=50000&limit=1000",
		"/namespaces/ns-3/localqueues/lq/pendingworkloads?offset=5000&limit=1000",
	} {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, visibility.Prefix+path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("%d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
