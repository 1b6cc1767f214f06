package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDeactivatedFromOutside: a requeue state that deactivates an
// admitted workload (its user deactivated it) evicts it at the next
// cycle with reason Deactivated, and it is not admitted again; a state
// that reactivates it lets it in.
func TestDeactivatedFromOutside(t *testing.T) {
	e := New(Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 2000).obj()}, LocalQueues: lqs("ns", "cq")})
	if err := e.Submit(newWL("ns", "w").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Minute).obj()); err != nil {
		t.Fatal(err)
	}
	why := "deactivated: by its user"
	if err := e.SetRequeues("ns/w", RequeueState{Deactivated: why}); err != nil {
		t.Fatal(err)
	}
	var got []Decision
	for _, d := range e.Cycle(t0) {
		if d.Kind == KindEvicted {
			got = append(got, d)
		}
	}
	want := []Decision{{Kind: KindEvicted, Key: "ns/w", ClusterQueue: "cq", Reason: ReasonDeactivated, Message: "by its user"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("evictions (-want +got):\n%s", diff)
	}
	if e.IsAdmitted("ns/w") {
		t.Fatal("still admitted")
	}
	if ds := admittedIn(e.Cycle(t0.Add(time.Second))); len(ds) != 0 {
		t.Fatalf("a deactivated workload was admitted: %v", ds)
	}
	if err := e.SetRequeues("ns/w", RequeueState{Reactivations: 1, Reactivation: "now"}); err != nil {
		t.Fatal(err)
	}
	if ds := admittedIn(e.Cycle(t0.Add(2 * time.Second))); len(ds) != 1 {
		t.Fatalf("admitted after reactivation: %v, want ns/w", ds)
	}
}
