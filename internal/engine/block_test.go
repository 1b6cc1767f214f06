package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestBlockFailsClosed: a block stops admission into the cohort tree of
// the queue it names (every tree when the queue is unknown), says why in
// each pending reason and the queue's activity, and admission resumes
// once it is lifted.
func TestBlockFailsClosed(t *testing.T) {
	cfg := Config{
		Flavors: flavors("on-demand"),
		ClusterQueues: []ClusterQueue{
			newCQ("a").cohort("team").quota("on-demand", "cpu", 1000).obj(),
			newCQ("b").cohort("team").quota("on-demand", "cpu", 1000).obj(),
			newCQ("lone").quota("on-demand", "cpu", 1000).obj(),
		},
		LocalQueues: lqs("ns-a", "a", "ns-b", "b", "ns-lone", "lone"),
	}
	const why = "the reservation of ns/lost cannot be read"
	cases := []struct {
		name         string
		blockQueue   string
		wantAdmitted []string
		wantPending  map[string]string
		wantActivity map[string]Activity
	}{
		{
			name:         "a queue's cohort tree is blocked, other trees admit",
			blockQueue:   "a",
			wantAdmitted: []string{"ns-lone/in"},
			wantPending:  map[string]string{"ns-a/in": why, "ns-b/in": why},
			wantActivity: map[string]Activity{
				"a":    {Reason: "StateUnreadable", Message: why},
				"b":    {Reason: "StateUnreadable", Message: why},
				"lone": {Active: true, Reason: "Ready", Message: "Can admit new workloads"},
			},
		},
		{
			name:        "an unknown queue blocks every tree",
			blockQueue:  "",
			wantPending: map[string]string{"ns-a/in": why, "ns-b/in": why, "ns-lone/in": why},
			wantActivity: map[string]Activity{
				"a":    {Reason: "StateUnreadable", Message: why},
				"b":    {Reason: "StateUnreadable", Message: why},
				"lone": {Reason: "StateUnreadable", Message: why},
			},
		},
		{
			name:        "a queue no longer configured blocks every tree",
			blockQueue:  "gone",
			wantPending: map[string]string{"ns-a/in": why, "ns-b/in": why, "ns-lone/in": why},
			wantActivity: map[string]Activity{
				"a":    {Reason: "StateUnreadable", Message: why},
				"b":    {Reason: "StateUnreadable", Message: why},
				"lone": {Reason: "StateUnreadable", Message: why},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(cfg, WithDeferredEviction())
			now := time.Unix(0, 0)
			// A cycle before the block parks everything that does not
			// fit: the block must reach parked workloads too.
			for _, q := range []string{"a", "b", "lone"} {
				mustSubmit(t, e, newWL("ns-"+q, "big").pods("main", 1, "cpu", 5000).obj())
			}
			e.Cycle(now)
			e.Block("ns/lost", tc.blockQueue, why)
			for _, q := range []string{"a", "b", "lone"} {
				mustSubmit(t, e, newWL("ns-"+q, "in").pods("main", 1, "cpu", 500).at(time.Second).obj())
			}
			var admitted []string
			pending := map[string]string{}
			for _, d := range e.Cycle(now) {
				switch d.Kind {
				case KindReserved, KindAdmitted:
					admitted = append(admitted, d.Key)
				}
			}
			for _, k := range []string{"ns-a/in", "ns-b/in", "ns-lone/in"} {
				if r := e.PendingReason(k); r == why {
					pending[k] = r
				}
			}
			if d := cmp.Diff(tc.wantAdmitted, admitted); d != "" {
				t.Errorf("admitted while blocked (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantPending, pending); d != "" {
				t.Errorf("pending for the block (-want +got):\n%s", d)
			}
			act := map[string]Activity{}
			for q := range tc.wantActivity {
				act[q], _ = e.ClusterQueueActivity(q)
			}
			if d := cmp.Diff(tc.wantActivity, act); d != "" {
				t.Errorf("activity (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]string{"ns/lost"}, e.Blocked()); d != "" {
				t.Errorf("blocks (-want +got):\n%s", d)
			}
			e.Unblock("ns/lost")
			admitted = nil
			for _, d := range e.Cycle(now) {
				if d.Kind == KindReserved || d.Kind == KindAdmitted {
					admitted = append(admitted, d.Key)
				}
			}
			want := []string{"ns-a/in", "ns-b/in", "ns-lone/in"}
			for _, k := range tc.wantAdmitted {
				want = removeKey(want, k)
			}
			if d := cmp.Diff(want, admitted); d != "" {
				t.Errorf("admitted once unblocked (-want +got):\n%s", d)
			}
		})
	}
}

func removeKey(keys []string, k string) []string {
	out := keys[:0:0]
	for _, x := range keys {
		if x != k {
			out = append(out, x)
		}
	}
	return out
}

func mustSubmit(t *testing.T, e *Engine, w Workload) {
	t.Helper()
	if err := e.Submit(w); err != nil {
		t.Fatalf("submit %s/%s: %v", w.Namespace, w.Name, err)
	}
}
