package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// execStep is one moment of a maximum execution time scenario: stops and
// check answers at At, then (with cycle) a cycle at At.
type execStep struct {
	at      time.Duration
	submit  []Workload
	stop    []string // keys whose admission ended from outside (Stop)
	remove  []string // keys that finished
	answers []checkAnswer
	cycle   bool
}

func TestMaxExecutionTime(t *testing.T) {
	oneCQ := func(cq *cqBuilder) Config {
		return Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{cq.obj()}, LocalQueues: lqs("ns", "cq"), AdmissionChecks: activeChecks("prov")}
	}
	cases := []struct {
		name     string
		cfg      Config
		deferred bool
		wls      []Workload
		steps    []execStep
		// want lists every decision, as "at kind key reason".
		want []string
	}{
		{
			name: "admitted past its maximum execution time: evicted, deactivated, and its quota goes to the next",
			cfg:  oneCQ(newCQ("cq").quota("default", "cpu", 1000)),
			wls: []Workload{
				newWL("ns", "a").pods("main", 1, "cpu", 1000).maxExec(time.Minute).obj(),
				newWL("ns", "b").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			steps: []execStep{{at: 0, cycle: true}, {at: 59 * time.Second, cycle: true}, {at: time.Minute, cycle: true}, {at: time.Hour, cycle: true}},
			want: []string{
				"0s admitted ns/a",
				"0s pending ns/b pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0",
				"1m0s evicted ns/a DeactivatedDueToMaximumExecutionTimeExceeded",
				"1m0s admitted ns/b",
				"1m0s pending ns/a deactivated: exceeding the maximum execution time",
			},
		},
		{
			name:  "without a maximum execution time a workload runs on",
			cfg:   oneCQ(newCQ("cq").quota("default", "cpu", 1000)),
			wls:   []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()},
			steps: []execStep{{at: 0, cycle: true}, {at: 1000 * time.Hour, cycle: true}},
			want:  []string{"0s admitted ns/a"},
		},
		{
			name: "time counts over every admission: stopped after 40s, admitted again, evicted 20s later",
			cfg:  oneCQ(newCQ("cq").quota("default", "cpu", 1000)),
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).maxExec(time.Minute).obj()},
			steps: []execStep{
				{at: 0, cycle: true},
				{at: 40 * time.Second, stop: []string{"ns/a"}},
				{at: 50 * time.Second, cycle: true},
				{at: 69 * time.Second, cycle: true},
				{at: 70 * time.Second, cycle: true},
			},
			want: []string{
				"0s admitted ns/a",
				"50s admitted ns/a",
				"1m10s evicted ns/a DeactivatedDueToMaximumExecutionTimeExceeded",
				"1m10s pending ns/a deactivated: exceeding the maximum execution time",
			},
		},
		{
			name: "a preempted admission's time counts up to its preemption",
			cfg:  oneCQ(newCQ("cq").quota("default", "cpu", 1000).preemption(LowerPriority, Never)),
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).maxExec(time.Minute).obj()},
			steps: []execStep{
				{at: 0, cycle: true},
				{at: 30 * time.Second, submit: []Workload{newWL("ns", "high").at(30*time.Second).prio(10).pods("main", 1, "cpu", 1000).obj()}, cycle: true},
				{at: 45 * time.Second, remove: []string{"ns/high"}, cycle: true},
				{at: 74 * time.Second, cycle: true},
				{at: 75 * time.Second, cycle: true},
			},
			want: []string{
				"0s admitted ns/a",
				"30s preempted ns/a InClusterQueue",
				"30s admitted ns/high",
				"30s pending ns/a pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0",
				"45s admitted ns/a",
				"1m15s evicted ns/a DeactivatedDueToMaximumExecutionTimeExceeded",
				"1m15s pending ns/a deactivated: exceeding the maximum execution time",
			},
		},
		{
			name: "time waiting for admission checks does not count",
			cfg:  oneCQ(newCQ("cq").quota("default", "cpu", 1000).checks(AdmissionCheckRule{Name: "prov"})),
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).maxExec(time.Minute).obj()},
			steps: []execStep{
				{at: 0, cycle: true},
				{at: 30 * time.Second, answers: []checkAnswer{answer("ns/a", "prov", CheckReady, "")}, cycle: true},
				{at: 89 * time.Second, cycle: true},
				{at: 90 * time.Second, cycle: true},
			},
			want: []string{
				"0s reserved ns/a",
				"30s admitted ns/a",
				"1m30s evicted ns/a DeactivatedDueToMaximumExecutionTimeExceeded",
				"1m30s pending ns/a deactivated: exceeding the maximum execution time",
			},
		},
		{
			name:  "an admission booked after a restart keeps the time its earlier admissions ran",
			cfg:   oneCQ(newCQ("cq").quota("default", "cpu", 1000)),
			wls:   []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", 0).ranBefore(50 * time.Second).maxExec(time.Minute).obj()},
			steps: []execStep{{at: 9 * time.Second, cycle: true}, {at: 10 * time.Second, cycle: true}},
			want: []string{
				"10s evicted ns/a DeactivatedDueToMaximumExecutionTimeExceeded",
				"10s pending ns/a deactivated: exceeding the maximum execution time",
			},
		},
		{
			name:     "deferred eviction: the quota is held until the job stops, and the workload is never admitted again",
			cfg:      oneCQ(newCQ("cq").quota("default", "cpu", 1000)),
			deferred: true,
			wls: []Workload{
				newWL("ns", "a").pods("main", 1, "cpu", 1000).maxExec(time.Minute).obj(),
				newWL("ns", "b").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			steps: []execStep{
				{at: 0, cycle: true},
				{at: time.Minute, cycle: true},
				{at: 61 * time.Second, stop: []string{"ns/a"}, cycle: true},
				{at: time.Hour, cycle: true},
			},
			want: []string{
				"0s admitted ns/a",
				"0s pending ns/b pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0",
				"1m0s evicted ns/a DeactivatedDueToMaximumExecutionTimeExceeded",
				"1m1s admitted ns/b",
				"1m1s pending ns/a deactivated: exceeding the maximum execution time",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []Option
			if tc.deferred {
				opts = append(opts, WithDeferredEviction())
			}
			e := New(tc.cfg, opts...)
			for _, w := range tc.wls {
				if err := e.Submit(w); err != nil {
					t.Fatalf("Submit(%s): %v", w.Key(), err)
				}
			}
			var got []string
			for _, s := range tc.steps {
				now := t0.Add(s.at)
				for _, w := range s.submit {
					if err := e.Submit(w); err != nil {
						t.Fatalf("Submit(%s): %v", w.Key(), err)
					}
				}
				for _, k := range s.stop {
					if err := e.Stop(k, now); err != nil {
						t.Fatal(err)
					}
				}
				for _, k := range s.remove {
					if err := e.Remove(k); err != nil {
						t.Fatal(err)
					}
				}
				for _, a := range s.answers {
					if err := e.SetCheck(a.key, a.st); err != nil {
						t.Fatal(err)
					}
				}
				if !s.cycle {
					continue
				}
				for _, d := range e.Cycle(now) {
					got = append(got, strings.TrimSpace(fmt.Sprintf("%s %s %s %s", s.at, d.Kind, d.Key, d.Reason)))
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
		})
	}
}

func TestMaxExecutionTimeTimerAndState(t *testing.T) {
	e := New(Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 1000).obj()}, LocalQueues: lqs("ns", "cq")})
	if err := e.Submit(newWL("ns", "a").pods("main", 1, "cpu", 1000).maxExec(time.Minute).obj()); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.NextTimer(t0); ok {
		t.Errorf("NextTimer before admission: a pending workload's maximum execution time waits on nothing")
	}
	e.Cycle(t0.Add(10 * time.Second))
	if got, ok := e.NextTimer(t0.Add(20 * time.Second)); !ok || !got.Equal(t0.Add(70*time.Second)) {
		t.Errorf("NextTimer = %s, %v; want 1m10s, true", got.Sub(t0), ok)
	}
	if err := e.Stop("ns/a", t0.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := e.Requeues("ns/a").Executed; got != 20*time.Second {
		t.Errorf("Requeues().Executed after the stop = %s, want 20s", got)
	}
	e.Cycle(t0.Add(40 * time.Second))
	if got, ok := e.NextTimer(t0.Add(40 * time.Second)); !ok || !got.Equal(t0.Add(80*time.Second)) {
		t.Errorf("NextTimer after a second admission = %s, %v; want 1m20s, true", got.Sub(t0), ok)
	}
	e.Cycle(t0.Add(80 * time.Second))
	rs := e.Requeues("ns/a")
	if diff := cmp.Diff(RequeueState{Deactivated: deactivatedPastExecTime}, rs); diff != "" {
		t.Errorf("Requeues after the limit (-want +got):\n%s", diff)
	}
	if _, ok := e.NextTimer(t0.Add(80 * time.Second)); ok {
		t.Errorf("NextTimer after deactivation: nothing should wait on time")
	}
	if err := e.Remove("ns/a"); err != nil {
		t.Fatal(err)
	}
	if e.timed != 0 {
		t.Errorf("timed = %d after the only timed workload left, want 0", e.timed)
	}
}
