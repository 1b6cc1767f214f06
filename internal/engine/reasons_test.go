package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestReasonKinds: the reasons a cycle writes are told apart by kind.
func TestReasonKinds(t *testing.T) {
	e := New(Config{
		Flavors:       flavors("default"),
		ClusterQueues: []ClusterQueue{newCQ("cq").strict().quota("default", "cpu", 2000).obj()},
		LocalQueues:   lqs("ns", "cq"),
	}, WithDeferredEviction())
	for _, w := range []Workload{
		newWL("ns", "running").pods("main", 1, "cpu", 2000).admittedIn("cq", "default", -time.Minute).obj(),
		newWL("ns", "head").pods("main", 1, "cpu", 2000).obj(),
		newWL("ns", "next").pods("main", 1, "cpu", 1000).at(time.Second).obj(),
	} {
		if err := e.Submit(w); err != nil {
			t.Fatal(err)
		}
	}
	e.Cycle(t0)
	cases := []struct {
		key                                 string
		wantQueue                           string
		wantPosition, wantShort, wantAwaits bool
	}{
		{key: "ns/head", wantShort: true, wantAwaits: true},
		{key: "ns/next", wantPosition: true, wantQueue: "cq", wantAwaits: true},
	}
	for _, tc := range cases {
		r := e.PendingReason(tc.key)
		q, pos := PositionQueue(r)
		if pos != tc.wantPosition || q != tc.wantQueue || ShortOfQuota(r) != tc.wantShort || AwaitsQuota(r) != tc.wantAwaits {
			t.Errorf("%s: reason %q: position %v in %q, short of quota %v, awaits quota %v; want %v in %q, %v, %v",
				tc.key, r, pos, q, ShortOfQuota(r), AwaitsQuota(r), tc.wantPosition, tc.wantQueue, tc.wantShort, tc.wantAwaits)
		}
	}
	for _, r := range []string{waitingForVictims(2), keptFor(&wlState{key: "ns/urgent"})} {
		if !AwaitsQuota(r) {
			t.Errorf("%q is not a wait for quota", r)
		}
	}
	if AwaitsQuota("LocalQueue ns/lq is stopped (stopPolicy Hold)") {
		t.Error("a stopped LocalQueue counts as a wait for quota")
	}
}

// TestPendingDecisionsWhenTheHeadChanges: when the head of a StrictFIFO
// queue leaves, the next one becomes head (a decision: it now lacks quota)
// and those behind it move behind the new head without a decision, while
// PendingReason says whom they wait behind.
func TestPendingDecisionsWhenTheHeadChanges(t *testing.T) {
	cases := []struct {
		name string
		// leave is the workload removed between the two cycles.
		leave           string
		wantSecond      map[string]string // pending decisions of the second cycle
		wantReasonAfter map[string]string
	}{
		{
			name:            "the head leaves",
			leave:           "ns/b",
			wantSecond:      map[string]string{"ns/c": "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1"},
			wantReasonAfter: map[string]string{"ns/d": "waiting behind ns/c in ClusterQueue cq", "ns/e": "waiting behind ns/c in ClusterQueue cq"},
		},
		{
			name:            "one behind the head leaves",
			leave:           "ns/d",
			wantSecond:      map[string]string{},
			wantReasonAfter: map[string]string{"ns/c": "waiting behind ns/b in ClusterQueue cq", "ns/e": "waiting behind ns/b in ClusterQueue cq"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").strict().quota("default", "cpu", 3000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			})
			for i, name := range []string{"a", "b", "c", "d", "e"} {
				if err := e.Submit(newWL("ns", name).at(time.Duration(i)).pods("main", 1, "cpu", 2000).obj()); err != nil {
					t.Fatal(err)
				}
			}
			first := pendingDecisions(e.Cycle(t0))
			if want := 4; len(first) != want {
				t.Fatalf("first cycle: %d pending decisions, want %d: %v", len(first), want, first)
			}
			if err := e.Remove(tc.leave); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.wantSecond, pendingDecisions(e.Cycle(t0.Add(time.Second)))); d != "" {
				t.Errorf("second cycle's pending decisions (-want +got):\n%s", d)
			}
			for key, want := range tc.wantReasonAfter {
				if got := e.PendingReason(key); got != want {
					t.Errorf("PendingReason(%s) = %q, want %q", key, got, want)
				}
			}
		})
	}
}

func pendingDecisions(ds []Decision) map[string]string {
	out := map[string]string{}
	for _, d := range ds {
		if d.Kind == KindPending {
			out[d.Key] = d.Reason
		}
	}
	return out
}

// TestQuietPending: with WithQuietPending, a reason that changed only in a
// number is not a decision, though PendingReason says it; a reason of
// another kind is.
func TestQuietPending(t *testing.T) {
	config := func(stop StopPolicy) Config {
		return Config{
			Flavors:       flavors("default"),
			ClusterQueues: []ClusterQueue{newCQ("cq").strict().stop(stop).preemption(LowerPriority, Never).quota("default", "cpu", 4000).obj()},
			LocalQueues:   lqs("ns", "cq"),
		}
	}
	const short = "pod set main: insufficient unused quota for cpu in flavor default: requested 3, available "
	cases := []struct {
		name  string
		quiet bool
		// change happens between the two cycles.
		change          func(*Engine) error
		wantSecond      map[string]string
		wantReasonAfter string
	}{
		{
			name:            "a number moved, quiet",
			quiet:           true,
			change:          func(e *Engine) error { return e.Remove("ns/r1") },
			wantSecond:      map[string]string{},
			wantReasonAfter: short + "2",
		},
		{
			name:            "a number moved, every change decided",
			change:          func(e *Engine) error { return e.Remove("ns/r1") },
			wantSecond:      map[string]string{"ns/w": short + "2"},
			wantReasonAfter: short + "2",
		},
		{
			name:  "behind a preemptor, then short of quota again, quiet",
			quiet: true,
			change: func(e *Engine) error {
				// An urgent workload comes ahead of w and preempts;
				// once its victim is gone and it runs, w lacks quota
				// again.
				if err := e.Submit(newWL("ns", "urgent").prio(10).pods("main", 1, "cpu", 2000).obj()); err != nil {
					return err
				}
				ds := e.Cycle(t0.Add(time.Second / 2))
				if pd := pendingDecisions(ds); pd["ns/w"] != "" {
					return fmt.Errorf("w decided behind the preemptor: %q", pd["ns/w"])
				}
				if got := e.PendingReason("ns/w"); got != "waiting behind ns/urgent in ClusterQueue cq" {
					return fmt.Errorf("w waits for %q, want it behind the preemptor", got)
				}
				for _, d := range ds {
					if d.Kind == KindPreempted {
						return e.Remove(d.Key)
					}
				}
				return fmt.Errorf("urgent preempted nothing: %+v", ds)
			},
			wantSecond:      map[string]string{},
			wantReasonAfter: short + "0",
		},
		{
			name:  "another kind of reason, quiet",
			quiet: true,
			change: func(e *Engine) error {
				e.SetConfig(config(Hold))
				return nil
			},
			wantSecond:      map[string]string{"ns/w": "ClusterQueue cq is stopped (stopPolicy Hold)"},
			wantReasonAfter: "ClusterQueue cq is stopped (stopPolicy Hold)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := []Option{WithDeferredEviction()}
			if tc.quiet {
				opts = append(opts, WithQuietPending())
			}
			e := New(config(""), opts...)
			for _, w := range []Workload{
				newWL("ns", "r1").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "r2").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "r3").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "w").pods("main", 1, "cpu", 3000).obj(),
			} {
				if err := e.Submit(w); err != nil {
					t.Fatal(err)
				}
			}
			if d := cmp.Diff(map[string]string{"ns/w": short + "1"}, pendingDecisions(e.Cycle(t0))); d != "" {
				t.Fatalf("first cycle's pending decisions (-want +got):\n%s", d)
			}
			if err := tc.change(e); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.wantSecond, pendingDecisions(e.Cycle(t0.Add(time.Second)))); d != "" {
				t.Errorf("second cycle's pending decisions (-want +got):\n%s", d)
			}
			if got := e.PendingReason("ns/w"); got != tc.wantReasonAfter {
				t.Errorf("PendingReason = %q, want %q", got, tc.wantReasonAfter)
			}
		})
	}
}

// TestNews: which changes of a pending reason are worth telling.
func TestNews(t *testing.T) {
	cases := []struct {
		name, a, b string
		wantSame   bool
	}{
		{"another place in line is no news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "waiting behind job/team-a/w7 in ClusterQueue cq", true},
		{"another number is no news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0", true},
		{"another resource is news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"pod set main: insufficient unused quota for memory in flavor default: requested 2, available 1", false},
		{"waiting for preemption after quota is news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"waiting for 1 preempted workload(s) to release quota", false},
		{"someone getting ahead is no news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"waiting behind job/team-a/w1 in ClusterQueue cq", true},
		{"reaching the head of the queue short of quota is no news",
			"waiting behind job/team-a/w1 in ClusterQueue cq",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1", true},
		{"first in an empty queue after waiting behind is no news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "waiting in ClusterQueue cq", true},
		{"someone getting ahead while preemption frees quota is no news",
			"waiting for 2 preempted workload(s) to release quota", "waiting behind job/team-a/w1 in ClusterQueue cq", true},
		{"reaching the head to wait for preemption is news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "waiting for 1 preempted workload(s) to release quota", false},
		{"more than the queue can ever use is news",
			"waiting behind job/team-a/w1 in ClusterQueue cq",
			"pod set main: insufficient quota for cpu in flavor default: requested 200, more than the ClusterQueue can ever use (64)", false},
		{"a stopped queue is news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "LocalQueue team-a/q is stopped (stopPolicy Hold)", false},
		{"leaving a stopped queue is news",
			"LocalQueue team-a/q is stopped (stopPolicy Hold)", "waiting behind job/team-a/w1 in ClusterQueue cq", false},
		{"the quota it fits in kept for a preemptor after lacking quota is no news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota", true},
		{"lacking quota again once the preemptor runs is no news",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0", true},
		{"another preemptor keeping the quota is no news",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota",
			"the quota it fits in is kept for job/team-c/huge, which waits for preempted workload(s) to release quota", true},
		{"reaching the head to find the quota kept for a preemptor is no news",
			"waiting behind job/team-a/w1 in ClusterQueue cq",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota", true},
		{"waiting for its own victims after the quota was kept for another is news",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota",
			"waiting for 1 preempted workload(s) to release quota", false},
		{"another queue is news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "waiting behind job/team-a/w1 in ClusterQueue other", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := !News(ReasonClass(tc.a), ReasonClass(tc.b)); got != tc.wantSame {
				t.Errorf("News(%q, %q) = %v, want %v", tc.a, tc.b, !got, !tc.wantSame)
			}
		})
	}
}

// TestQuietPendingAfterRequeue: with WithQuietPending, the first reason
// of a workload back in its queue after an admission is decided, even of
// the kind it had before it was admitted: the admission service tells a
// requeued workload's wait afresh.
func TestQuietPendingAfterRequeue(t *testing.T) {
	const short = "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0"
	e := New(Config{
		Flavors:       flavors("default"),
		ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 2000).obj()},
		LocalQueues:   lqs("ns", "cq"),
	}, WithDeferredEviction(), WithQuietPending())
	for _, w := range []Workload{
		newWL("ns", "r").pods("main", 1, "cpu", 2000).admittedIn("cq", "default", -time.Minute).obj(),
		newWL("ns", "w").pods("main", 1, "cpu", 2000).obj(),
	} {
		if err := e.Submit(w); err != nil {
			t.Fatal(err)
		}
	}
	if d := cmp.Diff(map[string]string{"ns/w": short}, pendingDecisions(e.Cycle(t0))); d != "" {
		t.Fatalf("first cycle (-want +got):\n%s", d)
	}
	if err := e.Remove("ns/r"); err != nil {
		t.Fatal(err)
	}
	e.Cycle(t0.Add(time.Second))
	if !e.IsAdmitted("ns/w") {
		t.Fatal("w not admitted into the freed quota")
	}
	// w is stopped from outside while x takes the quota elsewhere.
	if err := e.Evict("ns/w"); err != nil {
		t.Fatal(err)
	}
	if err := e.Submit(newWL("ns", "x").pods("main", 1, "cpu", 2000).admittedIn("cq", "default", 0).obj()); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"ns/w": short}, pendingDecisions(e.Cycle(t0.Add(2*time.Second)))); d != "" {
		t.Errorf("after the requeue (-want +got):\n%s", d)
	}
}

// TestRetold: what the next reason is judged against after each change.
func TestRetold(t *testing.T) {
	const (
		behind = "waiting behind * in ClusterQueue cq"
		short  = "pod set main: insufficient unused quota for cpu in flavor default: requested #, available #"
		victim = "waiting for # preempted workload(s) to release quota"
	)
	cases := []struct {
		name, prev, next string
		wantClass        string
		wantNews         bool
	}{
		{name: "a first reason", next: short, wantClass: short, wantNews: true},
		{name: "the same", prev: short, next: short, wantClass: short},
		{name: "behind others after lacking quota keeps the quota it lacks", prev: short, next: behind, wantClass: short},
		{name: "lacking quota after a place in line says more", prev: behind, next: short, wantClass: short},
		{name: "waiting for its victims", prev: short, next: victim, wantClass: victim, wantNews: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			class, news := Retold(tc.prev, tc.next)
			if class != tc.wantClass || news != tc.wantNews {
				t.Errorf("Retold(%q, %q) = %q, %v; want %q, %v", tc.prev, tc.next, class, news, tc.wantClass, tc.wantNews)
			}
		})
	}
}
