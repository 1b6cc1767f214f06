package engine

import (
	"testing"
	"time"
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
