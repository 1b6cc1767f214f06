package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// pendingFixture: cq holds 1 CPU, taken by "holder"; five workloads wait,
// in two LocalQueues, with priorities that reorder them.
func pendingFixture(t *testing.T) *Engine {
	t.Helper()
	e := New(Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 1000).obj()},
		LocalQueues: []LocalQueue{{Namespace: "a", Name: "lq", ClusterQueue: "cq"}, {Namespace: "b", Name: "lq", ClusterQueue: "cq"}}})
	wls := []Workload{
		newWL("a", "holder").queue("lq").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
		newWL("a", "low-old").queue("lq").prio(1).at(1*time.Second).pods("main", 1, "cpu", 1000).obj(),
		newWL("b", "high").queue("lq").prio(9).at(2*time.Second).pods("main", 1, "cpu", 1000).obj(),
		newWL("a", "low-new").queue("lq").prio(1).at(3*time.Second).pods("main", 1, "cpu", 1000).obj(),
		newWL("b", "mid").queue("lq").prio(5).at(4*time.Second).pods("main", 1, "cpu", 1000).obj(),
		newWL("a", "top").queue("lq").prio(9).at(5*time.Second).pods("main", 1, "cpu", 1000).obj(),
	}
	for _, w := range wls {
		if err := e.Submit(w); err != nil {
			t.Fatal(err)
		}
	}
	e.Cycle(t0.Add(10 * time.Second))
	return e
}

// line renders items as "ns/name@cqPos/lqPos".
func line(p PendingPage) []string {
	var out []string
	for _, it := range p.Items {
		out = append(out, fmt.Sprintf("%s/%s@%d/%d", it.Namespace, it.Name, it.PositionInClusterQueue, it.PositionInLocalQueue))
	}
	return out
}

func TestPendingPages(t *testing.T) {
	e := pendingFixture(t)
	cases := []struct {
		name          string
		lq            string // namespace of LocalQueue "lq"; "" for the ClusterQueue
		offset, limit int
		want          []string
		wantTotal     int
	}{
		{name: "the whole ClusterQueue in admission order", want: []string{"b/high@0/0", "a/top@1/0", "b/mid@2/1", "a/low-old@3/1", "a/low-new@4/2"}, wantTotal: 5},
		{name: "an offset keeps absolute positions", offset: 2, limit: 2, want: []string{"b/mid@2/1", "a/low-old@3/1"}, wantTotal: 5},
		{name: "one LocalQueue, positions in both queues", lq: "a", want: []string{"a/top@1/0", "a/low-old@3/1", "a/low-new@4/2"}, wantTotal: 3},
		{name: "one LocalQueue, a page of it", lq: "a", offset: 1, limit: 1, want: []string{"a/low-old@3/1"}, wantTotal: 3},
		{name: "an offset past the end", lq: "b", offset: 5, wantTotal: 2},
	}
	// A view taken now answers alike, and keeps answering alike after
	// the engine moved on.
	view := e.PendingView()
	if err := e.Submit(newWL("a", "later").queue("lq").prio(9).at(6*time.Second).pods("main", 1, "cpu", 1000).obj()); err != nil {
		t.Fatal(err)
	}
	e.Cycle(t0.Add(11 * time.Second))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p PendingPage
			var ok bool
			if tc.lq == "" {
				p, ok = view.InClusterQueue("cq", tc.offset, tc.limit)
			} else {
				p, ok = view.InLocalQueue(tc.lq, "lq", tc.offset, tc.limit)
			}
			if !ok {
				t.Fatal("queue not found")
			}
			if d := cmp.Diff(tc.want, line(p)); d != "" {
				t.Errorf("items (-want +got):\n%s", d)
			}
			if p.Total != tc.wantTotal {
				t.Errorf("total %d, want %d", p.Total, tc.wantTotal)
			}
		})
	}
	e = pendingFixture(t)
	for _, tc := range cases {
		var p PendingPage
		if tc.lq == "" {
			p, _ = e.PendingInClusterQueue("cq", tc.offset, tc.limit)
		} else {
			p, _ = e.PendingInLocalQueue(tc.lq, "lq", tc.offset, tc.limit)
		}
		if d := cmp.Diff(tc.want, line(p)); d != "" || p.Total != tc.wantTotal {
			t.Errorf("%s, read from the engine: total %d (want %d), items (-want +got):\n%s", tc.name, p.Total, tc.wantTotal, d)
		}
	}
	if _, ok := view.InClusterQueue("nope", 0, 0); ok {
		t.Error("a missing ClusterQueue was found in the view")
	}
	if _, ok := view.InLocalQueue("a", "nope", 0, 0); ok {
		t.Error("a missing LocalQueue was found in the view")
	}
	p, _ := e.PendingInClusterQueue("cq", 0, 1)
	want := PendingItem{Key: "a/top", Namespace: "a", Name: "top", LocalQueue: "lq", ClusterQueue: "cq", Priority: 9,
		PositionInClusterQueue: 1, PositionInLocalQueue: 0, Submitted: t0.Add(5 * time.Second),
		Reason: "pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0"}
	if p2, _ := e.PendingInClusterQueue("cq", 1, 1); len(p2.Items) != 1 || cmp.Diff(want, p2.Items[0]) != "" {
		t.Errorf("item (-want +got):\n%s", cmp.Diff(want, p2.Items))
	}
	if len(p.Items) != 1 {
		t.Errorf("limit 1 gave %d items", len(p.Items))
	}
	if _, ok := e.PendingInClusterQueue("nope", 0, 0); ok {
		t.Error("a missing ClusterQueue was found")
	}
	if _, ok := e.PendingInLocalQueue("a", "nope", 0, 0); ok {
		t.Error("a missing LocalQueue was found")
	}
}

func TestStats(t *testing.T) {
	e := pendingFixture(t)
	got := e.Stats(t0.Add(10 * time.Second))
	want := []QueueStats{{ClusterQueue: "cq", Running: true, Inadmissible: 5,
		Resources: []ResourceStats{{Flavor: "default", Resource: "cpu", Reserved: 1000, Nominal: 1000}}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Stats (-want +got):\n%s", d)
	}
}

func TestBorrowing(t *testing.T) {
	e := New(Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{
		newCQ("a").cohort("c").quota("default", "cpu", 1000).obj(),
		newCQ("b").cohort("c").quota("default", "cpu", 2000).obj(),
	}, LocalQueues: []LocalQueue{{Namespace: "ns", Name: "a", ClusterQueue: "a"}}})
	for _, w := range []Workload{
		newWL("ns", "within").queue("a").at(1*time.Second).pods("main", 1, "cpu", 1000).obj(),
		newWL("ns", "borrows").queue("a").at(2*time.Second).pods("main", 1, "cpu", 1000).obj(),
	} {
		if err := e.Submit(w); err != nil {
			t.Fatal(err)
		}
	}
	e.Cycle(t0.Add(10 * time.Second))
	got := map[string]bool{}
	for _, k := range []string{"ns/within", "ns/borrows", "ns/unknown"} {
		got[k] = e.Borrowing(k)
	}
	// Both run in a queue now above its nominal quota.
	want := map[string]bool{"ns/within": true, "ns/borrows": true, "ns/unknown": false}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("borrowing (-want +got):\n%s", d)
	}
}

// TestLocalQueueAndCohortStats: what each LocalQueue waits for and holds,
// and what each cohort's subtree holds, for metrics.
func TestLocalQueueAndCohortStats(t *testing.T) {
	e := New(Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{
		newCQ("a").cohort("child").quota("default", "cpu", 1000).obj(),
		newCQ("b").cohort("child").quota("default", "cpu", 2000).obj(),
	}, Cohorts: []Cohort{{Name: "child", Parent: "root"}, {Name: "root"}},
		LocalQueues: []LocalQueue{{Namespace: "ns", Name: "a", ClusterQueue: "a"}, {Namespace: "ns", Name: "b", ClusterQueue: "b"},
			{Namespace: "ns", Name: "orphan", ClusterQueue: "missing"}}})
	for _, w := range []Workload{
		newWL("ns", "a1").queue("a").at(1*time.Second).pods("main", 1, "cpu", 1000).obj(),
		newWL("ns", "a2").queue("a").at(2*time.Second).pods("main", 2, "cpu", 1000).obj(),
		newWL("ns", "b1").queue("b").at(3*time.Second).pods("main", 1, "cpu", 500).obj(),
		newWL("ns", "big").queue("b").at(4*time.Second).pods("main", 1, "cpu", 9000).obj(),
	} {
		if err := e.Submit(w); err != nil {
			t.Fatal(err)
		}
	}
	e.Cycle(t0.Add(10 * time.Second))
	gotLQ := e.LocalQueueStats(t0.Add(10 * time.Second))
	wantLQ := []LocalQueueStats{
		// a2 would borrow 2,000 where b lends only the 1,500 b1 leaves.
		{Namespace: "ns", Name: "a", ClusterQueue: "a", Running: true, Inadmissible: 1, Reserving: 1, Admitted: 1,
			Resources: []LocalQueueResource{{Flavor: "default", Resource: "cpu", Reserved: 1000, Used: 1000}}},
		{Namespace: "ns", Name: "b", ClusterQueue: "b", Running: true, Inadmissible: 1, Reserving: 1, Admitted: 1,
			Resources: []LocalQueueResource{{Flavor: "default", Resource: "cpu", Reserved: 500, Used: 500}}},
		// Its ClusterQueue is missing: listed, not running.
		{Namespace: "ns", Name: "orphan", ClusterQueue: "missing"},
	}
	if d := cmp.Diff(wantLQ, gotLQ); d != "" {
		t.Errorf("LocalQueueStats (-want +got):\n%s", d)
	}
	wantCohorts := []CohortStats{
		{Cohort: "child", Parent: "root", Root: "root", Admitted: 2,
			Resources: []ResourceStats{{Flavor: "default", Resource: "cpu", Reserved: 1500, Nominal: 3000}}},
		{Cohort: "root", Root: "root", Admitted: 2,
			Resources: []ResourceStats{{Flavor: "default", Resource: "cpu", Reserved: 1500, Nominal: 3000}}},
	}
	if d := cmp.Diff(wantCohorts, e.CohortStats()); d != "" {
		t.Errorf("CohortStats (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"child", "root"}, e.Cohorts("a")); d != "" {
		t.Errorf("Cohorts(a) (-want +got):\n%s", d)
	}
}
