package engine

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// afsConfig is one ClusterQueue "cq" with cpu quota, ordering by usage
// when usageBased, and LocalQueues ns/a and ns/b (weights, when given,
// by LocalQueue name).
func afsConfig(cpu int64, usageBased bool, afs AdmissionFairSharing, weights map[string]float64) Config {
	cq := newCQ("cq").quota("default", "cpu", cpu).quota("default", "memory", 1<<40).obj()
	cq.UsageBasedAdmission = usageBased
	var queues []LocalQueue
	for _, name := range []string{"a", "b"} {
		lq := LocalQueue{Namespace: "ns", Name: name, ClusterQueue: "cq", StopPolicy: StopNone}
		if w, ok := weights[name]; ok {
			lq.FairWeight = &w
		}
		queues = append(queues, lq)
	}
	return Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{cq}, LocalQueues: queues, AdmissionFairSharing: &afs}
}

var hourly = AdmissionFairSharing{HalfLife: time.Hour, SamplingInterval: 5 * time.Minute}

func TestAdmissionFairSharingOrder(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		// history is each LocalQueue's usage as stored at t0 (cpu, and
		// memory in bytes).
		history map[string]LocalQueueUsage
		// running are admitted before the first cycle.
		running []Workload
		wls     []Workload
		// after, when set, runs a first cycle at t0 with nothing pending,
		// then submits wls and cycles at t0+after.
		after time.Duration
		// wantOrder is the order of admission decisions of the cycle.
		wantOrder []string
	}{
		{
			name:    "the LocalQueue that used less goes first, whatever the priorities",
			cfg:     afsConfig(1000, true, hourly, nil),
			history: map[string]LocalQueueUsage{"a": cpuUsed(10)},
			wls: []Workload{
				newWL("ns", "a-high").queue("a").prio(100).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b-low").queue("b").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			wantOrder: []string{"ns/b-low"},
		},
		{
			name:    "without admissionScope the usage does not count",
			cfg:     afsConfig(1000, false, hourly, nil),
			history: map[string]LocalQueueUsage{"a": cpuUsed(10)},
			wls: []Workload{
				newWL("ns", "a-high").queue("a").prio(100).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b-low").queue("b").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			wantOrder: []string{"ns/a-high"},
		},
		{
			name:    "equal usage falls back to priority, then submission",
			cfg:     afsConfig(2000, true, hourly, nil),
			history: map[string]LocalQueueUsage{"a": cpuUsed(3), "b": cpuUsed(3)},
			wls: []Workload{
				newWL("ns", "b-first").queue("b").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "a-urgent").queue("a").prio(5).at(time.Second).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "a-later").queue("a").at(2*time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			// a-urgent's admission charges a's queue: b goes next.
			wantOrder: []string{"ns/a-urgent", "ns/b-first"},
		},
		{
			name:    "the weight divides the usage",
			cfg:     afsConfig(1000, true, hourly, map[string]float64{"a": 4}),
			history: map[string]LocalQueueUsage{"a": cpuUsed(10), "b": cpuUsed(5)},
			wls: []Workload{
				newWL("ns", "a").queue("a").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b").queue("b").pods("main", 1, "cpu", 1000).obj(),
			},
			wantOrder: []string{"ns/a"},
		},
		{
			name:    "a LocalQueue of weight 0 goes last",
			cfg:     afsConfig(1000, true, hourly, map[string]float64{"b": 0}),
			history: map[string]LocalQueueUsage{"a": cpuUsed(1000)},
			wls: []Workload{
				newWL("ns", "a").queue("a").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b").queue("b").pods("main", 1, "cpu", 1000).obj(),
			},
			wantOrder: []string{"ns/a"},
		},
		{
			name: "resource weights scale each resource's usage",
			cfg:  afsConfig(1000, true, AdmissionFairSharing{HalfLife: time.Hour, SamplingInterval: 5 * time.Minute, ResourceWeights: map[string]float64{"memory": 1e-9}}, nil),
			history: map[string]LocalQueueUsage{
				"a": cpuUsed(2),
				"b": {Consumed: map[string]float64{"memory": 1e9}, LastUpdate: t0},
			},
			wls: []Workload{
				newWL("ns", "a").queue("a").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b").queue("b").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			// b's gigabyte weighs 1, a's two cores 2.
			wantOrder: []string{"ns/b"},
		},
		{
			name: "the entry penalty takes turns between LocalQueues within one cycle",
			cfg:  afsConfig(4000, true, hourly, nil),
			wls: []Workload{
				newWL("ns", "a1").queue("a").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "a2").queue("a").at(1*time.Second).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "a3").queue("a").at(2*time.Second).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b1").queue("b").at(3*time.Second).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b2").queue("b").at(4*time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			wantOrder: []string{"ns/a1", "ns/b1", "ns/a2", "ns/b2"},
		},
		{
			name:    "usage decays toward what a LocalQueue holds",
			cfg:     afsConfig(5000, true, hourly, nil),
			history: map[string]LocalQueueUsage{"a": cpuUsed(8), "b": cpuUsed(3)},
			running: []Workload{newWL("ns", "b-running").queue("b").pods("main", 1, "cpu", 4000).admittedIn("cq", "default", -time.Hour).obj()},
			wls: []Workload{
				newWL("ns", "a").queue("a").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b").queue("b").pods("main", 1, "cpu", 1000).obj(),
			},
			// Five half-lives on: a's 8 is 0.25; b's nears the 4 it holds.
			after:     5 * time.Hour,
			wantOrder: []string{"ns/a"},
		},
		{
			name:    "before the decay, the same history puts b first",
			cfg:     afsConfig(5000, true, hourly, nil),
			history: map[string]LocalQueueUsage{"a": cpuUsed(8), "b": cpuUsed(3)},
			running: []Workload{newWL("ns", "b-running").queue("b").pods("main", 1, "cpu", 4000).admittedIn("cq", "default", -time.Hour).obj()},
			wls: []Workload{
				newWL("ns", "a").queue("a").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b").queue("b").pods("main", 1, "cpu", 1000).obj(),
			},
			wantOrder: []string{"ns/b"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(tc.cfg)
			for lq, u := range tc.history {
				e.SetLocalQueueUsage("ns", lq, u)
			}
			for _, w := range tc.running {
				if err := e.Submit(w); err != nil {
					t.Fatal(err)
				}
			}
			now := t0
			if tc.after > 0 {
				if got := admittedIn(e.Cycle(t0)); len(got) > 0 {
					t.Fatalf("first cycle admitted %v with nothing pending", got)
				}
				now = t0.Add(tc.after)
			}
			for _, w := range tc.wls {
				if err := e.Submit(w); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.wantOrder, admittedIn(e.Cycle(now))); diff != "" {
				t.Errorf("admission order (-want +got):\n%s", diff)
			}
		})
	}
}

func cpuUsed(cores float64) LocalQueueUsage {
	return LocalQueueUsage{Consumed: map[string]float64{"cpu": cores}, LastUpdate: t0}
}

func admittedIn(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		if d.Kind == KindAdmitted {
			out = append(out, d.Key)
		}
	}
	return out
}

// TestLocalQueueUsage follows one LocalQueue's consumed usage over
// virtual time: it moves halfway to what the queue holds every half-life,
// each admission adds its entry penalty (one sampling interval's worth),
// and only changed queues are handed out to be stored.
func TestLocalQueueUsage(t *testing.T) {
	afs := AdmissionFairSharing{HalfLife: time.Hour, SamplingInterval: time.Hour}
	e := New(afsConfig(8000, true, afs, nil))
	if err := e.Submit(newWL("ns", "held").queue("a").pods("main", 1, "cpu", 4000).admittedIn("cq", "default", 0).obj()); err != nil {
		t.Fatal(err)
	}
	type step struct {
		at        time.Duration
		submit    *Workload
		wantCPU   float64
		wantSaved []string
	}
	penalized := newWL("ns", "new").queue("a").pods("main", 1, "cpu", 2000).obj()
	for i, s := range []step{
		{at: 0, wantCPU: 0, wantSaved: []string{"ns/a", "ns/b"}},
		{at: 30 * time.Minute, wantCPU: 0},
		{at: time.Hour, wantCPU: 2, wantSaved: []string{"ns/a", "ns/b"}},
		{at: 2 * time.Hour, wantCPU: 3, wantSaved: []string{"ns/a", "ns/b"}},
		// Admitted at 2h30: decayed over 30 minutes toward the 6 cores
		// now held, then half of the new 2 (one sampling interval's
		// worth): 3/√2 + 6(1−1/√2) + 1.
		{at: 150 * time.Minute, submit: &penalized, wantCPU: 7 - 3/math.Sqrt2, wantSaved: []string{"ns/a"}},
	} {
		if s.submit != nil {
			if err := e.Submit(*s.submit); err != nil {
				t.Fatal(err)
			}
		}
		e.Cycle(t0.Add(s.at))
		u, ok := e.LocalQueueUsage("ns", "a")
		if !ok {
			t.Fatalf("step %d: no usage for ns/a", i)
		}
		if diff := cmp.Diff(s.wantCPU, u.Consumed["cpu"], cmpopts.EquateApprox(0, 1e-9)); diff != "" {
			t.Errorf("step %d (at %v): consumed cpu (-want +got):\n%s", i, s.at, diff)
		}
		var saved []string
		for k := range e.ChangedLocalQueueUsage() {
			saved = append(saved, k)
		}
		if diff := cmp.Diff(s.wantSaved, saved, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
			t.Errorf("step %d (at %v): changed LocalQueues (-want +got):\n%s", i, s.at, diff)
		}
	}
}

// TestAdmissionFairSharingVictims: within one ClusterQueue, preemption
// takes first from the LocalQueue that used more.
func TestAdmissionFairSharingVictims(t *testing.T) {
	for _, tc := range []struct {
		name       string
		history    map[string]LocalQueueUsage
		wantVictim string
	}{
		{name: "a used more", history: map[string]LocalQueueUsage{"a": cpuUsed(9), "b": cpuUsed(1)}, wantVictim: "ns/a-running"},
		{name: "b used more", history: map[string]LocalQueueUsage{"a": cpuUsed(1), "b": cpuUsed(9)}, wantVictim: "ns/b-running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := afsConfig(2000, true, hourly, nil)
			cfg.ClusterQueues[0].Preemption.WithinClusterQueue = LowerPriority
			e := New(cfg)
			for lq, u := range tc.history {
				e.SetLocalQueueUsage("ns", lq, u)
			}
			for _, w := range []Workload{
				// a's was admitted later: without usage it would go first.
				newWL("ns", "a-running").queue("a").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "b-running").queue("b").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Hour).obj(),
				newWL("ns", "urgent").queue("a").prio(10).pods("main", 1, "cpu", 1000).obj(),
			} {
				if err := e.Submit(w); err != nil {
					t.Fatal(err)
				}
			}
			var victims []string
			for _, d := range e.Cycle(t0) {
				if d.Kind == KindPreempted {
					victims = append(victims, d.Key)
				}
			}
			if diff := cmp.Diff([]string{tc.wantVictim}, victims); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUndoTakesThePenaltyBack: an admission the caller could not book
// charges its LocalQueue nothing.
func TestUndoTakesThePenaltyBack(t *testing.T) {
	e := New(afsConfig(4000, true, hourly, nil))
	e.SetLocalQueueUsage("ns", "a", cpuUsed(1))
	if err := e.Submit(newWL("ns", "w").queue("a").pods("main", 1, "cpu", 2000).obj()); err != nil {
		t.Fatal(err)
	}
	if got := admittedIn(e.Cycle(t0)); len(got) != 1 {
		t.Fatalf("admitted %v, want ns/w", got)
	}
	charged, _ := e.LocalQueueUsage("ns", "a")
	if err := e.Undo("ns/w"); err != nil {
		t.Fatal(err)
	}
	after, _ := e.LocalQueueUsage("ns", "a")
	if charged.Consumed["cpu"] <= 1 || after.Consumed["cpu"] != 1 {
		t.Errorf("consumed cpu %v after the admission, %v after Undo; want more than 1, then 1", charged.Consumed["cpu"], after.Consumed["cpu"])
	}
	if e.IsAdmitted("ns/w") {
		t.Errorf("ns/w still admitted after Undo")
	}
}

// TestNextSample: a sample is due one interval after the last while a
// LocalQueue holds quota or its ClusterQueue has workloads waiting, and
// not otherwise.
func TestNextSample(t *testing.T) {
	e := New(afsConfig(4000, true, hourly, nil))
	e.Cycle(t0)
	if next, ok := e.NextSample(); ok {
		t.Errorf("NextSample with nothing held or waiting = %v, want none", next)
	}
	if err := e.Submit(newWL("ns", "w").queue("a").pods("main", 1, "cpu", 1000).obj()); err != nil {
		t.Fatal(err)
	}
	e.Cycle(t0.Add(time.Minute))
	if next, ok := e.NextSample(); !ok || !next.Equal(t0.Add(6*time.Minute)) {
		t.Errorf("NextSample while ns/w holds quota = %v, %t; want %v", next, ok, t0.Add(6*time.Minute))
	}
	if err := e.Remove("ns/w"); err != nil {
		t.Fatal(err)
	}
	if next, ok := e.NextSample(); ok {
		t.Errorf("NextSample after ns/w left = %v, want none", next)
	}
}
