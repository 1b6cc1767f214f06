package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSetPriority(t *testing.T) {
	oneCQ := func(cq *cqBuilder) Config {
		return Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{cq.obj()}, LocalQueues: lqs("ns", "cq")}
	}
	type change struct {
		key      string
		priority int32
	}
	cases := []struct {
		name string
		cfg  Config
		wls  []Workload
		// before runs a first cycle, then changes priorities, then (with
		// release) removes a workload before the second cycle.
		before        bool
		changes       []change
		release       string
		wantAdmitted  []string
		wantPreempted map[string]string
	}{
		{
			name: "a raised priority moves a pending workload to the head of its queue",
			cfg:  oneCQ(newCQ("cq").strict().quota("default", "cpu", 1000)),
			wls: []Workload{
				newWL("ns", "holder").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "first").prio(1).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "second").prio(1).at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			before:       true,
			changes:      []change{{"ns/second", 10}},
			release:      "ns/holder",
			wantAdmitted: []string{"ns/second"},
		},
		{
			name: "an admitted workload whose priority is raised is no longer a victim",
			cfg:  oneCQ(newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 4000)),
			wls: []Workload{
				newWL("ns", "running").prio(1).pods("main", 1, "cpu", 4000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "urgent").prio(5).pods("main", 1, "cpu", 4000).obj(),
			},
			changes:      []change{{"ns/running", 10}},
			wantAdmitted: []string{"ns/running"},
		},
		{
			name: "an admitted workload whose priority is lowered can be preempted",
			cfg:  oneCQ(newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 4000)),
			wls: []Workload{
				newWL("ns", "running").prio(10).pods("main", 1, "cpu", 4000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "urgent").prio(5).pods("main", 1, "cpu", 4000).obj(),
			},
			changes:       []change{{"ns/running", 1}},
			wantAdmitted:  []string{"ns/urgent"},
			wantPreempted: map[string]string{"ns/running": "InClusterQueue by ns/urgent"},
		},
		{
			// The first cycle finds no victim for either waiting workload,
			// remembers that for their shape and priority, and parks them
			// both: neither may stand for b once its priority changes.
			name: "a parked workload whose priority is raised preempts though one of its shape found no victim",
			cfg:  oneCQ(newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 4000)),
			wls: []Workload{
				newWL("ns", "running").prio(10).pods("main", 1, "cpu", 4000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "a").prio(5).pods("main", 1, "cpu", 4000).obj(),
				newWL("ns", "b").prio(5).at(time.Second).pods("main", 1, "cpu", 4000).obj(),
			},
			before:        true,
			changes:       []change{{"ns/b", 20}},
			wantAdmitted:  []string{"ns/b"},
			wantPreempted: map[string]string{"ns/running": "InClusterQueue by ns/b"},
		},
		{
			name: "a workload parked for want of victims preempts one whose priority is lowered later",
			cfg:  oneCQ(newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 4000)),
			wls: []Workload{
				newWL("ns", "running").prio(10).pods("main", 1, "cpu", 4000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "urgent").prio(5).pods("main", 1, "cpu", 4000).obj(),
			},
			before:        true,
			changes:       []change{{"ns/running", 1}},
			wantAdmitted:  []string{"ns/urgent"},
			wantPreempted: map[string]string{"ns/running": "InClusterQueue by ns/urgent"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(tc.cfg)
			for _, w := range tc.wls {
				if err := e.Submit(w); err != nil {
					t.Fatalf("Submit(%s): %v", w.Key(), err)
				}
			}
			if tc.before {
				e.Cycle(t0)
			}
			for _, c := range tc.changes {
				if err := e.SetPriority(c.key, c.priority); err != nil {
					t.Fatalf("SetPriority(%s): %v", c.key, err)
				}
			}
			if tc.release != "" {
				if err := e.Remove(tc.release); err != nil {
					t.Fatalf("Remove(%s): %v", tc.release, err)
				}
			}
			var admitted []string
			preempted := map[string]string{}
			for _, d := range e.Cycle(t0.Add(time.Minute)) {
				if d.Kind == KindPreempted {
					preempted[d.Key] = d.Reason + " by " + d.Preemptor
				}
			}
			for _, w := range tc.wls {
				if w.Key() != tc.release && e.IsAdmitted(w.Key()) {
					admitted = append(admitted, w.Key())
				}
			}
			if d := cmp.Diff(tc.wantAdmitted, admitted, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("admitted after the change (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantPreempted, preempted, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("preempted (-want +got):\n%s", d)
			}
		})
	}
	t.Run("an unknown workload is refused by name", func(t *testing.T) {
		e := New(oneCQ(newCQ("cq").quota("default", "cpu", 1000)))
		err := e.SetPriority("ns/nobody", 3)
		if !errors.Is(err, ErrUnknownWorkload) || err.Error() != "set priority of ns/nobody: "+ErrUnknownWorkload.Error() {
			t.Errorf("SetPriority = %v, want ErrUnknownWorkload naming ns/nobody", err)
		}
	})
}
