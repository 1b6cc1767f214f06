package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// waitQueue is a Config of one queue "cq" of the given milli-CPUs whose
// workloads preempt lower priorities.
func waitQueue(milliCPU int64) Config {
	return Config{
		Flavors:       flavors("default"),
		ClusterQueues: []ClusterQueue{newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", milliCPU).obj()},
		LocalQueues:   lqs("ns", "cq"),
	}
}

// kinds summarises decisions as "kind key" lines.
func kinds(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Kind)+" "+d.Key)
	}
	return out
}

// reclaimCfg: queue a lends its 4 CPUs to b, where two workloads borrow
// them; a reclaims them for one workload, and b has another waiting.
var (
	reclaimCfg = Config{
		Flavors: flavors("default"),
		ClusterQueues: []ClusterQueue{
			newCQ("a").cohort("co").preemption(Never, Any).quota("default", "cpu", 4000).obj(),
			newCQ("b").cohort("co").quota("default", "cpu", 0).obj(),
		},
		LocalQueues: lqs("ns-a", "a", "ns-b", "b"),
	}
	// waitCfg: one queue of 4 CPUs, full; high needs 3 of them, so both
	// low ones must go (other ranks above them).
	waitCfg = waitQueue(4000)
	waitWls = []Workload{
		newWL("ns", "low-1").pods("main", 1, "cpu", 2000).admittedIn("cq", "default", -2*time.Minute).obj(),
		newWL("ns", "low-2").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Minute).obj(),
		newWL("ns", "other").prio(5).pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Minute).obj(),
		newWL("ns", "high").prio(10).pods("main", 1, "cpu", 3000).obj(),
	}
	reclaimWls = []Workload{
		newWL("ns-b", "b1").pods("main", 1, "cpu", 2000).admittedIn("b", "default", -2*time.Minute).obj(),
		newWL("ns-b", "b2").pods("main", 1, "cpu", 2000).admittedIn("b", "default", -time.Minute).obj(),
		newWL("ns-a", "reclaim").pods("main", 1, "cpu", 4000).obj(),
		newWL("ns-b", "next").pods("main", 1, "cpu", 2000).at(time.Second).obj(),
	}
)

func TestDeferredEviction(t *testing.T) {
	drain := HoldAndDrain
	cases := []struct {
		name string
		cfg  Config
		wls  []Workload
		// steps: "cycle", "evict KEY" (a victim gone) or "remove KEY" (a
		// workload finished); wantCycles lists each cycle's
		// decisions in order.
		steps      []string
		wantCycles [][]string
		wantReason map[string]string
	}{
		{
			name: "the preemptor waits for its victim, then is admitted",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 4000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			wls: []Workload{
				newWL("ns", "low").pods("main", 1, "cpu", 4000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 4000).obj(),
			},
			steps: []string{"cycle", "cycle", "evict ns/low", "cycle"},
			wantCycles: [][]string{
				{"preempted ns/low", "pending ns/high"},
				nil,
				{"admitted ns/high", "pending ns/low"},
			},
			wantReason: map[string]string{"ns/low": "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 0"},
		},
		{
			name:  "quota a victim releases is kept for its preemptor, not taken by a borrower",
			cfg:   reclaimCfg,
			wls:   reclaimWls,
			steps: []string{"cycle", "evict ns-b/b2", "cycle"},
			wantCycles: [][]string{
				{"preempted ns-b/b2", "preempted ns-b/b1", "pending ns-a/reclaim", "pending ns-b/next"},
				// b2 is back in its queue, first; neither it nor next
				// takes what b2 gave up.
				{"pending ns-a/reclaim", "pending ns-b/b2", "pending ns-b/next"},
			},
			wantReason: map[string]string{
				"ns-a/reclaim": "waiting for 1 preempted workload(s) to release quota",
				"ns-b/b2":      "the quota it fits in is kept for ns-a/reclaim, which waits for preempted workload(s) to release quota",
			},
		},
		{
			name:  "the preemptor gets the kept quota once its last victim is gone",
			cfg:   reclaimCfg,
			wls:   reclaimWls,
			steps: []string{"cycle", "evict ns-b/b2", "cycle", "evict ns-b/b1", "cycle"},
			wantCycles: [][]string{
				{"preempted ns-b/b2", "preempted ns-b/b1", "pending ns-a/reclaim", "pending ns-b/next"},
				{"pending ns-a/reclaim", "pending ns-b/b2", "pending ns-b/next"},
				{"admitted ns-a/reclaim", "pending ns-b/b1", "pending ns-b/b2", "pending ns-b/next"},
			},
			wantReason: map[string]string{
				"ns-b/b2": "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0",
			},
		},
		{
			// Searching again would find the same two (on their way out,
			// they come first): it waits for them without a search, and
			// goes once it fits.
			name:  "a release that is not its victims' leaves the preemptor waiting for them",
			cfg:   waitCfg,
			wls:   waitWls,
			steps: []string{"cycle", "remove ns/other", "cycle", "evict ns/low-1", "cycle"},
			wantCycles: [][]string{
				{"preempted ns/low-2", "preempted ns/low-1", "pending ns/high"},
				nil,
				{"admitted ns/high", "pending ns/low-1"},
			},
			wantReason: map[string]string{"ns/low-2": ""},
		},
		{
			name:  "a release that makes room admits the preemptor before its victims are gone",
			cfg:   waitQueue(7000),
			wls:   append(slices.Clone(waitWls), newWL("ns", "big").prio(5).pods("main", 1, "cpu", 3000).admittedIn("cq", "default", -3*time.Minute).obj()),
			steps: []string{"cycle", "remove ns/big", "cycle"},
			wantCycles: [][]string{
				{"preempted ns/low-2", "preempted ns/low-1", "pending ns/high"},
				{"admitted ns/high"},
			},
		},
		{
			name: "HoldAndDrain asks once and keeps the quota until told",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").stop(drain).quota("default", "cpu", 4000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			wls: []Workload{
				newWL("ns", "running").pods("main", 1, "cpu", 4000).admittedIn("cq", "default", -time.Minute).obj(),
			},
			steps:      []string{"cycle", "cycle", "evict ns/running", "cycle"},
			wantCycles: [][]string{{"evicted ns/running"}, nil, {"pending ns/running"}},
			wantReason: map[string]string{"ns/running": "ClusterQueue cq is stopped (stopPolicy HoldAndDrain)"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(tc.cfg, WithDeferredEviction())
			for _, w := range tc.wls {
				if err := e.Submit(w); err != nil {
					t.Fatal(err)
				}
			}
			var got [][]string
			for _, s := range tc.steps {
				if s == "cycle" {
					got = append(got, kinds(e.Cycle(t0)))
					continue
				}
				if k, ok := strings.CutPrefix(s, "remove "); ok {
					if err := e.Remove(k); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := e.Evict(s[len("evict "):]); err != nil {
					t.Fatal(err)
				}
			}
			if d := cmp.Diff(tc.wantCycles, got); d != "" {
				t.Errorf("decisions per cycle (-want +got):\n%s", d)
			}
			for k, want := range tc.wantReason {
				if r := e.PendingReason(k); r != want {
					t.Errorf("reason of %s = %q, want %q", k, r, want)
				}
			}
		})
	}
}
