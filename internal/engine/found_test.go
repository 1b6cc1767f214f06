package engine

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Reproducers for invariant violations that TestPropertyInvariants found in
// the engine, each reduced by hand from a failing seed. All of them failed
// at commit 4b9ab8b and pass since 1aa657d; they stay as regression tests.
// The comments describe the behavior before the fix.

// foundOutcome collects what must stay empty over a run of steps.
type foundOutcome struct {
	// RepeatedPreemptions lists "victim by preemptor ×n" for a pair that
	// occurs more than once in one Cycle: preemption went round in a circle.
	RepeatedPreemptions []string
	// WithoutReason lists workloads left neither admitted nor with a
	// pending reason after the last Cycle.
	WithoutReason []string
	// ForRemoved lists decisions about workloads already removed.
	ForRemoved []string
	// Admitted lists the workloads holding quota after the last step, for
	// cases that say which ones should.
	Admitted []string
}

func TestFoundViolations(t *testing.T) {
	cases := []struct {
		name      string
		cfg       Config
		workloads []Workload
		// steps are "cycle" or "remove <key>".
		steps []string
		// wantAdmitted, if set, is who should hold quota at the end.
		wantAdmitted []string
	}{
		{
			// Each preemption is allowed on its own: newer reclaims its
			// nominal cpu from high (reclaimWithinCohort Any, cq-a borrows
			// cpu); older preempts the newer workload of equal priority in
			// cq-b (LowerOrNewerEqualPriority); high preempts older, which
			// borrows gpu, under borrowWithinCohort LowerPriority. Victims
			// went back to their queues within the cycle, so the three
			// chased each other until maxRoundsPerCycle: one Cycle returned
			// 224,998 decisions and took 2.1 to 5.4 seconds here.
			name: "preemptions chase each other round a circle until the round limit",
			cfg: Config{
				Flavors: flavors("default"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq-a").cohort("all").preemption(Never, LowerPriority).borrowWithinCohort(nil).
						quota("default", "cpu", 1000).quota("default", "gpu", 3).obj(),
					newCQ("cq-b").cohort("all").preemption(LowerOrNewerEqualPriority, Any).
						quota("default", "cpu", 3000).quota("default", "gpu", 1).obj(),
				},
				LocalQueues: lqs("a", "cq-a", "b", "cq-b"),
			},
			workloads: []Workload{
				newWL("a", "high").prio(3).pods("main", 1, "cpu", 1500, "gpu", 3).obj(),
				newWL("b", "older").prio(2).at(time.Second).pods("main", 1, "cpu", 2000, "gpu", 2).obj(),
				newWL("b", "newer").prio(2).at(2*time.Second).pods("main", 1, "cpu", 3000).obj(),
			},
			steps: []string{"cycle"},
		},
		{
			// With fair sharing, low preempts high because cq-a (weight 0)
			// has an unbounded share while it borrows; high preempts low
			// back under borrowWithinCohort LowerPriority. The two swapped
			// places until maxRoundsPerCycle: 199,999 decisions.
			name: "fair sharing and borrowWithinCohort preempt each other round a circle",
			cfg: Config{
				Flavors:     flavors("default"),
				FairSharing: true,
				ClusterQueues: []ClusterQueue{
					newCQ("cq-a").cohort("all").weight(0).preemption(Never, Any).borrowWithinCohort(nil).
						quota("default", "cpu", 1000).obj(),
					newCQ("cq-b").cohort("all").preemption(Never, Any).quota("default", "cpu", 1000).obj(),
				},
				LocalQueues: lqs("a", "cq-a", "b", "cq-b"),
			},
			workloads: []Workload{
				newWL("a", "high").prio(2).pods("main", 1, "cpu", 2000).obj(),
				newWL("b", "low").at(time.Second).pods("main", 1, "cpu", 2000).obj(),
			},
			steps: []string{"cycle"},
		},
		{
			// v is admitted in round 1 by borrowing, h then blocks the
			// StrictFIFO queue, and p reclaims its quota from v in round 2.
			// evict cleared v's reason, and explain skipped v because it was
			// seen this cycle, so v ended pending with no reason.
			name: "a victim in a StrictFIFO queue blocked earlier in the cycle is left without a reason",
			cfg: Config{
				Flavors: flavors("default"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq-a").cohort("all").strict().quota("default", "cpu", 0).obj(),
					newCQ("cq-b").cohort("all").preemption(Never, Any).quota("default", "cpu", 4000).obj(),
				},
				LocalQueues: lqs("a", "cq-a", "b", "cq-b"),
			},
			workloads: []Workload{
				newWL("a", "v").prio(1).pods("main", 1, "cpu", 3000).obj(),
				newWL("a", "h").pods("main", 1, "cpu", 3000).obj(),
				newWL("b", "b1").pods("main", 1, "cpu", 1000).obj(),
				newWL("b", "p").at(time.Second).pods("main", 1, "cpu", 3000).obj(),
			},
			steps: []string{"cycle"},
		},
		{
			// v is admitted in round 1 and preempted by p in round 2. Its
			// first entry is still in cq-a's pending list (compact runs at
			// the end of the cycle) when evict inserted it again, so it was
			// queued twice. Remove took out one entry; after p finished,
			// the next Cycle admitted the removed v, which then held 3 CPUs
			// that nothing could release (Remove said it was not known).
			name: "a workload admitted and preempted in one cycle is queued twice and outlives Remove",
			cfg: Config{
				Flavors: flavors("default"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq-a").cohort("all").quota("default", "cpu", 0).obj(),
					newCQ("cq-b").cohort("all").preemption(Never, Any).quota("default", "cpu", 4000).obj(),
				},
				LocalQueues: lqs("a", "cq-a", "b", "cq-b"),
			},
			workloads: []Workload{
				newWL("a", "v").pods("main", 1, "cpu", 3000).obj(),
				newWL("b", "b1").pods("main", 1, "cpu", 1000).obj(),
				newWL("b", "p").at(time.Second).pods("main", 1, "cpu", 3000).obj(),
			},
			steps: []string{"cycle", "remove a/v", "remove b/p", "cycle"},
		},
		{
			// All heads of a round are nominated before any is processed.
			// p's preemption of v released 3 CPUs and unparked the cohort;
			// then w's entry, nominated when only 1 CPU was free, was
			// processed and parked w. Nothing unparked it again, so w waited
			// cycle after cycle ("available 1") while 2 CPUs were unused.
			name: "a workload parked on a nomination older than a release in the same round stays parked",
			cfg: Config{
				Flavors: flavors("default"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq-a").cohort("all").quota("default", "cpu", 0).obj(),
					newCQ("cq-b").cohort("all").preemption(Never, Any).quota("default", "cpu", 4000).obj(),
					newCQ("cq-c").cohort("all").quota("default", "cpu", 0).obj(),
				},
				LocalQueues: lqs("a", "cq-a", "b", "cq-b", "c", "cq-c"),
			},
			workloads: []Workload{
				newWL("a", "v").pods("main", 1, "cpu", 3000).admittedIn("cq-a", "default", 0).obj(),
				newWL("b", "p").prio(1).pods("main", 1, "cpu", 2000).obj(),
				newWL("c", "w").pods("main", 1, "cpu", 2000).obj(),
			},
			steps:        []string{"cycle", "cycle", "cycle"},
			wantAdmitted: []string{"b/p", "c/w"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(tc.cfg)
			known := map[string]bool{}
			for _, w := range tc.workloads {
				if err := e.Submit(w); err != nil {
					t.Fatalf("Submit(%s): %v", w.Key(), err)
				}
				known[w.Key()] = true
			}
			var got foundOutcome
			now := t0
			for _, step := range tc.steps {
				if key, ok := strings.CutPrefix(step, "remove "); ok {
					if err := e.Remove(key); err != nil {
						t.Fatalf("Remove(%s): %v", key, err)
					}
					delete(known, key)
					continue
				}
				now = now.Add(time.Second)
				decisions := e.Cycle(now)
				pairs := map[string]int{}
				for _, d := range decisions {
					if !known[d.Key] {
						got.ForRemoved = append(got.ForRemoved, string(d.Kind)+" "+d.Key)
					}
					if d.Kind == KindPreempted {
						pairs[d.Key+" by "+d.Preemptor]++
					}
				}
				for pair, n := range pairs {
					if n > 1 {
						got.RepeatedPreemptions = append(got.RepeatedPreemptions, fmt.Sprintf("%s ×%d (%d decisions in one cycle)", pair, n, len(decisions)))
					}
				}
			}
			for key := range known {
				admitted := e.IsAdmitted(key)
				if !admitted && e.PendingReason(key) == "" {
					got.WithoutReason = append(got.WithoutReason, key)
				}
				if admitted && tc.wantAdmitted != nil {
					got.Admitted = append(got.Admitted, key)
				}
			}
			sort.Strings(got.RepeatedPreemptions)
			sort.Strings(got.WithoutReason)
			sort.Strings(got.Admitted)
			want := foundOutcome{Admitted: tc.wantAdmitted}
			if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("invariants broken (-want +got):\n%s", d)
			}
		})
	}
}
