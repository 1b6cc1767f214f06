package engine

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// outcome summarises a cycle: where each admitted workload went (as
// "cq flavor,flavor"), which were preempted and why, and the reasons of
// those left pending.
type outcome struct {
	admitted  map[string]string
	preempted map[string]string
	pending   map[string]string
}

func run(t *testing.T, cfg Config, wls []Workload) outcome {
	t.Helper()
	e := New(cfg)
	for _, w := range wls {
		if err := e.Submit(w); err != nil {
			t.Fatalf("Submit(%s): %v", w.Key(), err)
		}
	}
	ds := e.Cycle(t0)
	got := outcome{admitted: map[string]string{}, preempted: map[string]string{}, pending: map[string]string{}}
	for _, d := range ds {
		switch d.Kind {
		case KindAdmitted:
			got.admitted[d.Key] = describe(d)
		case KindPreempted:
			got.preempted[d.Key] = d.Reason + " by " + d.Preemptor
		}
	}
	for _, w := range wls {
		k := w.Key()
		if !e.IsAdmitted(k) {
			delete(got.admitted, k)
			got.pending[k] = e.PendingReason(k)
		}
	}
	return got
}

// describe renders an admission as "cq main=2:cpu=flavor".
func describe(d Decision) string {
	var parts []string
	for _, ps := range d.PodSets {
		var fl []string
		for r, f := range ps.Flavors {
			fl = append(fl, r+"="+f)
		}
		sort.Strings(fl)
		parts = append(parts, fmt.Sprintf("%s=%d:%s", ps.Name, ps.Count, strings.Join(fl, ",")))
	}
	return d.ClusterQueue + " " + strings.Join(parts, " ")
}

type cycleCase struct {
	name          string
	cfg           Config
	workloads     []Workload
	wantAdmitted  map[string]string
	wantPreempted map[string]string
	wantPending   map[string]string
}

func runCases(t *testing.T, cases []cycleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := run(t, tc.cfg, tc.workloads)
			opt := cmpopts.EquateEmpty()
			if d := cmp.Diff(tc.wantAdmitted, got.admitted, opt); d != "" {
				t.Errorf("admitted (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantPreempted, got.preempted, opt); d != "" {
				t.Errorf("preempted (-want +got):\n%s", d)
			}
			if tc.wantPending != nil {
				if d := cmp.Diff(tc.wantPending, got.pending, opt); d != "" {
					t.Errorf("pending (-want +got):\n%s", d)
				}
			} else if len(got.pending) > 0 {
				t.Errorf("unexpected pending workloads: %v", got.pending)
			}
		})
	}
}

func TestCycleBasics(t *testing.T) {
	runCases(t, []cycleCase{
		{
			name: "admits everything that fits in one cycle",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 10000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "a").pods("main", 2, "cpu", 2000).obj(),
				newWL("ns", "b").pods("main", 3, "cpu", 2000).obj(),
			},
			wantAdmitted: map[string]string{
				"ns/a": "cq main=2:cpu=default",
				"ns/b": "cq main=3:cpu=default",
			},
		},
		{
			name: "names the shortage when quota is full",
			cfg: Config{
				Flavors:       flavors("on-demand"),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("on-demand", "cpu", 10000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "a").pods("main", 1, "cpu", 7000).obj(),
				newWL("ns", "b").at(1).pods("main", 1, "cpu", 8000).obj(),
			},
			wantAdmitted: map[string]string{"ns/a": "cq main=1:cpu=on-demand"},
			wantPending: map[string]string{
				"ns/b": "pod set main: insufficient unused quota for cpu in flavor on-demand: requested 8, available 3",
			},
		},
		{
			name: "a pod set short of quota says what it asks for and what earlier pod sets take",
			cfg: Config{
				Flavors:       flavors("on-demand"),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("on-demand", "cpu", 10000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "a").pods("main", 1, "cpu", 8500).obj(),
				newWL("ns", "b").at(1).pods("master", 1, "cpu", 1000).pods("worker", 1, "cpu", 1000).obj(),
			},
			wantAdmitted: map[string]string{"ns/a": "cq main=1:cpu=on-demand"},
			wantPending: map[string]string{
				"ns/b": "pod set worker: insufficient unused quota for cpu in flavor on-demand: requested 1 (2 with the workload's earlier pod sets), available 1500m",
			},
		},
		{
			name: "StrictFIFO blocks behind its head, BestEffortFIFO does not",
			cfg: Config{
				Flavors: flavors("default"),
				ClusterQueues: []ClusterQueue{
					newCQ("strict").strict().quota("default", "cpu", 4000).obj(),
					newCQ("besteffort").quota("default", "cpu", 4000).obj(),
				},
				LocalQueues: lqs("s", "strict", "b", "besteffort"),
			},
			workloads: []Workload{
				newWL("s", "big").pods("main", 1, "cpu", 5000).obj(),
				newWL("s", "small").at(1).pods("main", 1, "cpu", 1000).obj(),
				newWL("b", "big").pods("main", 1, "cpu", 5000).obj(),
				newWL("b", "small").at(1).pods("main", 1, "cpu", 1000).obj(),
			},
			wantAdmitted: map[string]string{"b/small": "besteffort main=1:cpu=default"},
			wantPending: map[string]string{
				"s/big":   "pod set main: insufficient quota for cpu in flavor default: requested 5, more than the ClusterQueue can ever use (4)",
				"s/small": "waiting behind s/big in ClusterQueue strict",
				"b/big":   "pod set main: insufficient quota for cpu in flavor default: requested 5, more than the ClusterQueue can ever use (4)",
			},
		},
		{
			name: "higher priority goes first, then earlier submission",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").strict().quota("default", "cpu", 2000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "old-low").prio(1).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "new-high").prio(5).at(10).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "newer-high").prio(5).at(20).pods("main", 1, "cpu", 1000).obj(),
			},
			wantAdmitted: map[string]string{
				"ns/new-high":   "cq main=1:cpu=default",
				"ns/newer-high": "cq main=1:cpu=default",
			},
			wantPending: map[string]string{
				"ns/old-low": "pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0",
			},
		},
	})
}
