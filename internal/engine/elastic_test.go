package engine

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func (b *wlBuilder) elastic() *wlBuilder { b.w.Elastic = true; return b }

// resizeOf lists the resize and preemption decisions of a cycle, each as
// "kind key reason counts".
func resizeOf(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		switch d.Kind {
		case KindResized:
			var counts []string
			for _, ps := range d.PodSets {
				counts = append(counts, ps.Name+"="+strconv.Itoa(int(ps.Count)))
			}
			out = append(out, "resized "+d.Key+" "+d.Reason+" "+strings.Join(counts, ","))
		case KindPreempted:
			out = append(out, "preempted "+d.Key+" by "+d.Preemptor)
		case KindAdmitted:
			out = append(out, "admitted "+d.Key)
		}
	}
	return out
}

func TestElasticResize(t *testing.T) {
	cases := []struct {
		name string
		cqs  []ClusterQueue
		wls  []Workload
		// resize is applied to ns/w before the first cycle.
		resize []int32
		// then runs before the second cycle, if set.
		then func(t *testing.T, e *Engine)
		want []string
		// wantThen are the second cycle's decisions.
		wantThen []string
		// wantWaits is the reason the scale-up waits with after the first
		// cycle ("" when none waits).
		wantWaits string
	}{
		{
			name:   "a scale-up that fits grows the admission in place",
			cqs:    []ClusterQueue{newCQ("cq").quota("default", "cpu", 4000).obj()},
			wls:    []Workload{newWL("ns", "w").elastic().pods("main", 2, "cpu", 1000).admittedIn("cq", "default", 0).obj()},
			resize: []int32{3},
			want:   []string{"resized ns/w ScaledUp main=3"},
		},
		{
			name: "a scale-up waits for quota, and grows once another workload ends",
			cqs:  []ClusterQueue{newCQ("cq").quota("default", "cpu", 4000).obj()},
			wls: []Workload{
				newWL("ns", "w").elastic().pods("main", 2, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
				newWL("ns", "other").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
			},
			resize:    []int32{4},
			wantWaits: "insufficient unused quota for cpu in flavor default: requested 2, available 1",
			then: func(t *testing.T, e *Engine) {
				if err := e.Remove("ns/other"); err != nil {
					t.Fatal(err)
				}
			},
			wantThen: []string{"resized ns/w ScaledUp main=4"},
		},
		{
			name: "a scale-down gives quota back in the same cycle",
			cqs:  []ClusterQueue{newCQ("cq").quota("default", "cpu", 3000).obj()},
			wls: []Workload{
				newWL("ns", "w").elastic().pods("main", 3, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
				newWL("ns", "next").pods("main", 2, "cpu", 1000).at(time.Minute).obj(),
			},
			resize: []int32{1},
			want:   []string{"resized ns/w ScaledDown main=1", "admitted ns/next"},
		},
		{
			name: "a scale-up stays on the flavor its pod set was admitted on",
			cqs:  []ClusterQueue{newCQ("cq").quota("small", "cpu", 2000).quota("big", "cpu", 10000).obj()},
			wls: []Workload{
				newWL("ns", "w").elastic().pods("main", 2, "cpu", 1000).admittedIn("cq", "small", 0).obj(),
			},
			resize:    []int32{3},
			wantWaits: "flavor big is not flavor small",
		},
		{
			name: "a scale-up queues behind an older workload of higher priority in a StrictFIFO queue",
			cqs:  []ClusterQueue{newCQ("cq").strict().quota("default", "cpu", 4000).obj()},
			wls: []Workload{
				newWL("ns", "w").elastic().pods("main", 2, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
				newWL("ns", "big").prio(10).pods("main", 3, "cpu", 1000).obj(),
			},
			resize:    []int32{3},
			wantWaits: "waiting behind ns/big",
		},
		{
			name: "in a BestEffortFIFO queue a scale-up that fits goes past a head that does not",
			cqs:  []ClusterQueue{newCQ("cq").quota("default", "cpu", 4000).obj()},
			wls: []Workload{
				newWL("ns", "w").elastic().pods("main", 2, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
				newWL("ns", "big").prio(10).pods("main", 3, "cpu", 1000).obj(),
			},
			resize: []int32{3},
			want:   []string{"resized ns/w ScaledUp main=3"},
		},
		{
			name: "a scale-up preempts a workload of lower priority",
			cqs:  []ClusterQueue{newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 3000).obj()},
			wls: []Workload{
				newWL("ns", "w").elastic().prio(10).pods("main", 2, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
				newWL("ns", "low").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
			},
			resize: []int32{3},
			want:   []string{"preempted ns/low by ns/w", "resized ns/w ScaledUp main=3"},
		},
		{
			name: "a scale-up never preempts its own admission",
			cqs:  []ClusterQueue{newCQ("cq").preemption(LowerOrNewerEqualPriority, Never).quota("default", "cpu", 2000).obj()},
			wls: []Workload{
				newWL("ns", "w").elastic().pods("main", 2, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
			},
			resize:    []int32{3},
			wantWaits: "insufficient unused quota",
		},
		{
			name: "an evicted workload queues whole, and its scale-up is withdrawn",
			cqs:  []ClusterQueue{newCQ("cq").quota("default", "cpu", 3000).obj()},
			wls: []Workload{
				newWL("ns", "w").elastic().pods("main", 2, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
				newWL("ns", "other").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", 0).obj(),
			},
			resize:    []int32{3},
			wantWaits: "insufficient unused quota",
			then: func(t *testing.T, e *Engine) {
				if err := e.Evict("ns/w"); err != nil {
					t.Fatal(err)
				}
				if err := e.Remove("ns/other"); err != nil {
					t.Fatal(err)
				}
			},
			wantThen: []string{"admitted ns/w"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{Flavors: flavors("default", "small", "big"), ClusterQueues: tc.cqs, LocalQueues: lqs("ns", "cq")})
			for _, w := range tc.wls {
				if err := e.Submit(w); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.Resize("ns/w", tc.resize, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			got := resizeOf(e.Cycle(t0.Add(time.Hour)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("first cycle (-want +got):\n%s", diff)
			}
			page, _ := e.PendingInClusterQueue("cq", 0, 0)
			var waits string
			for _, it := range page.Items {
				if it.ScaleUp {
					if it.Key != "ns/w" {
						t.Errorf("scale-up item key %q, want ns/w", it.Key)
					}
					waits = it.Reason
				}
			}
			if tc.wantWaits == "" && waits != "" {
				t.Errorf("a scale-up waits: %q", waits)
			}
			if !strings.Contains(waits, tc.wantWaits) {
				t.Errorf("the scale-up waits with %q, want it to say %q", waits, tc.wantWaits)
			}
			if tc.then == nil {
				return
			}
			tc.then(t, e)
			got = resizeOf(e.Cycle(t0.Add(2 * time.Hour)))
			if diff := cmp.Diff(tc.wantThen, got); diff != "" {
				page, _ := e.PendingInClusterQueue("cq", 0, 0)
				t.Errorf("second cycle (-want +got):\n%s\npending: %+v", diff, page.Items)
			}
		})
	}
}

// TestElasticHeldFollowsTheLedger: Resized applies counts decided
// elsewhere; an admission read back larger than the workload asks for
// (its shrink not written yet) is booked as is and shrunk by the next
// cycle; a workload that is not elastic cannot be resized.
func TestElasticHeldFollowsTheLedger(t *testing.T) {
	e := New(Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 8000).obj()}, LocalQueues: lqs("ns", "cq")})
	w := newWL("ns", "w").elastic().pods("main", 2, "cpu", 1000).obj()
	w.Admission = &Admission{ClusterQueue: "cq", At: t0, PodSets: []PodSetAssignment{{Name: "main", Count: 5, Flavors: map[string]string{"cpu": "default"}}}}
	if err := e.Submit(w); err != nil {
		t.Fatalf("an elastic admission larger than asked for was refused: %v", err)
	}
	if diff := cmp.Diff([]string{"resized ns/w ScaledDown main=2"}, resizeOf(e.Cycle(t0))); diff != "" {
		t.Errorf("shrink (-want +got):\n%s", diff)
	}
	if err := e.Resize("ns/w", []int32{4}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Another engine admitted the scale-up: the ledger says 4.
	if err := e.Resized("ns/w", []PodSetAssignment{{Name: "main", Count: 4, Flavors: map[string]string{"cpu": "default"}}}); err != nil {
		t.Fatal(err)
	}
	if got := resizeOf(e.Cycle(t0.Add(time.Minute))); len(got) != 0 {
		t.Errorf("decisions after the ledger's resize: %v, want none", got)
	}
	page, _ := e.PendingInClusterQueue("cq", 0, 0)
	if len(page.Items) != 0 {
		t.Errorf("still pending: %+v", page.Items)
	}
	// 4 of 8 held: another workload of 4 fits, one of 5 does not.
	if err := e.Submit(newWL("ns", "x").pods("main", 5, "cpu", 1000).obj()); err != nil {
		t.Fatal(err)
	}
	if got := resizeOf(e.Cycle(t0.Add(2 * time.Minute))); len(got) != 0 {
		t.Errorf("admitted past the resized admission: %v", got)
	}
	if err := e.Resized("ns/w", []PodSetAssignment{{Name: "main", Count: 4, Flavors: map[string]string{"cpu": "other"}}}); !errors.Is(err, ErrBadAdmission) {
		t.Errorf("Resized onto another flavor: %v, want ErrBadAdmission", err)
	}
	if err := e.Submit(newWL("ns", "fixed").pods("main", 1, "cpu", 1000).obj()); err != nil {
		t.Fatal(err)
	}
	if err := e.Resize("ns/fixed", []int32{2}, t0); !errors.Is(err, ErrBadResize) {
		t.Errorf("Resize of a workload that is not elastic: %v, want ErrBadResize", err)
	}
	if err := e.Resize("ns/w", []int32{1, 2}, t0); !errors.Is(err, ErrBadResize) {
		t.Errorf("Resize with a count too many: %v, want ErrBadResize", err)
	}
}
