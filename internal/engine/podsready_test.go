package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// readyStep is one moment of a waitForPodsReady scenario: pods reported
// ready or not ready at At, then (with cycle) a cycle at At.
type readyStep struct {
	at       time.Duration
	ready    []string // keys whose pods became ready
	notReady []string // keys whose pods stopped being ready
	cycle    bool
}

func TestWaitForPodsReady(t *testing.T) {
	limit := func(n int32) *int32 { return &n }
	base := WaitForPodsReady{Timeout: time.Minute, RecoveryTimeout: time.Minute, BackoffBase: 10 * time.Second, BackoffMax: 25 * time.Second}
	with := func(f func(w *WaitForPodsReady)) *WaitForPodsReady {
		w := base
		f(&w)
		return &w
	}
	oneCQ := func(cq *cqBuilder, w *WaitForPodsReady) Config {
		return Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{cq.obj()}, LocalQueues: lqs("ns", "cq"), WaitForPodsReady: w}
	}
	cases := []struct {
		name  string
		cfg   Config
		wls   []Workload
		steps []readyStep
		// want lists every decision, as "at kind key reason".
		want []string
	}{
		{
			name: "pods not ready within the timeout: evicted, requeued after the backoff, doubling up to the maximum",
			cfg:  oneCQ(newCQ("cq").quota("default", "cpu", 1000), &base),
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()},
			steps: []readyStep{
				{at: 0, cycle: true},
				{at: 59 * time.Second, cycle: true},
				{at: 60 * time.Second, cycle: true},
				{at: 69 * time.Second, cycle: true},
				{at: 70 * time.Second, cycle: true},
				{at: 130 * time.Second, cycle: true},
				{at: 150 * time.Second, cycle: true},
				{at: 210 * time.Second, cycle: true},
				{at: 235 * time.Second, cycle: true},
			},
			want: []string{
				"0s admitted ns/a",
				"1m0s evicted ns/a PodsReadyTimeout",
				"1m0s pending ns/a requeued after PodsReadyTimeout: backing off until 2000-01-01T00:01:10Z",
				"1m10s admitted ns/a",
				"2m10s evicted ns/a PodsReadyTimeout",
				"2m10s pending ns/a requeued after PodsReadyTimeout: backing off until 2000-01-01T00:02:30Z",
				"2m30s admitted ns/a",
				"3m30s evicted ns/a PodsReadyTimeout",
				"3m30s pending ns/a requeued after PodsReadyTimeout: backing off until 2000-01-01T00:03:55Z",
				"3m55s admitted ns/a",
			},
		},
		{
			name: "pods ready in time: the workload keeps running",
			cfg:  oneCQ(newCQ("cq").quota("default", "cpu", 1000), &base),
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()},
			steps: []readyStep{
				{at: 0, cycle: true},
				{at: 30 * time.Second, ready: []string{"ns/a"}},
				{at: 10 * time.Minute, cycle: true},
			},
			want: []string{"0s admitted ns/a"},
		},
		{
			name: "pods that stop being ready must recover within the recovery timeout",
			cfg:  oneCQ(newCQ("cq").quota("default", "cpu", 1000), with(func(w *WaitForPodsReady) { w.RecoveryTimeout = 30 * time.Second })),
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()},
			steps: []readyStep{
				{at: 0, cycle: true},
				{at: 10 * time.Second, ready: []string{"ns/a"}},
				{at: 5 * time.Minute, notReady: []string{"ns/a"}, cycle: true},
				{at: 5*time.Minute + 29*time.Second, cycle: true},
				{at: 5*time.Minute + 30*time.Second, cycle: true},
			},
			want: []string{
				"0s admitted ns/a",
				"5m30s evicted ns/a PodsReadyTimeout",
				"5m30s pending ns/a requeued after PodsReadyTimeout: backing off until 2000-01-01T00:05:40Z",
			},
		},
		{
			name: "past backoffLimitCount requeues the workload is deactivated",
			cfg:  oneCQ(newCQ("cq").quota("default", "cpu", 1000), with(func(w *WaitForPodsReady) { w.BackoffLimitCount = limit(1) })),
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()},
			steps: []readyStep{
				{at: 0, cycle: true},
				{at: 60 * time.Second, cycle: true},
				{at: 70 * time.Second, cycle: true},
				{at: 130 * time.Second, cycle: true},
				{at: time.Hour, cycle: true},
			},
			want: []string{
				"0s admitted ns/a",
				"1m0s evicted ns/a PodsReadyTimeout",
				"1m0s pending ns/a requeued after PodsReadyTimeout: backing off until 2000-01-01T00:01:10Z",
				"1m10s admitted ns/a",
				"2m10s evicted ns/a DeactivatedDueToRequeuingLimitExceeded",
				"2m10s pending ns/a deactivated: exceeding the maximum number of re-queuing retries",
			},
		},
		{
			name: "blockAdmission admits nothing anywhere while a workload waits for its pods",
			cfg: Config{
				Flavors:          flavors("default"),
				ClusterQueues:    []ClusterQueue{newCQ("cq-a").quota("default", "cpu", 1000).obj(), newCQ("cq-b").quota("default", "cpu", 1000).obj()},
				LocalQueues:      lqs("a", "cq-a", "b", "cq-b"),
				WaitForPodsReady: with(func(w *WaitForPodsReady) { w.BlockAdmission = true }),
			},
			wls: []Workload{
				newWL("a", "first").pods("main", 1, "cpu", 1000).admittedIn("cq-a", "default", 0).obj(),
				newWL("b", "second").pods("main", 1, "cpu", 1000).obj(),
			},
			steps: []readyStep{
				{at: 0, cycle: true},
				{at: 20 * time.Second, ready: []string{"a/first"}, cycle: true},
			},
			want: []string{
				"0s pending b/second waiting for all admitted workloads to be in PodsReady condition",
				"20s admitted b/second",
			},
		},
		{
			name: "requeuingStrategy Eviction puts the requeued workload behind those submitted before its eviction",
			cfg: oneCQ(newCQ("cq").strict().quota("default", "cpu", 1000), with(func(w *WaitForPodsReady) {
				w.BackoffBase, w.BackoffMax = 0, 0
			})),
			wls: []Workload{
				newWL("ns", "old").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "newer").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			steps: []readyStep{{at: 0, cycle: true}, {at: time.Minute, cycle: true}},
			want: []string{
				"0s admitted ns/old",
				"0s pending ns/newer pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0",
				"1m0s evicted ns/old PodsReadyTimeout",
				"1m0s admitted ns/newer",
				"1m0s pending ns/old pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0",
			},
		},
		{
			name: "requeuingStrategy Creation keeps the requeued workload's place",
			cfg: oneCQ(newCQ("cq").strict().quota("default", "cpu", 1000), with(func(w *WaitForPodsReady) {
				w.BackoffBase, w.BackoffMax, w.RequeueByCreation = 0, 0, true
			})),
			wls: []Workload{
				newWL("ns", "old").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "newer").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			steps: []readyStep{{at: 0, cycle: true}, {at: time.Minute, cycle: true}},
			want: []string{
				"0s admitted ns/old",
				"0s pending ns/newer pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0",
				"1m0s evicted ns/old PodsReadyTimeout",
				"1m0s admitted ns/old",
			},
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
			var got []string
			for _, s := range tc.steps {
				now := t0.Add(s.at)
				for _, k := range s.ready {
					if err := e.SetPodsReady(k, true, now); err != nil {
						t.Fatal(err)
					}
				}
				for _, k := range s.notReady {
					if err := e.SetPodsReady(k, false, now); err != nil {
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

func TestNextTimer(t *testing.T) {
	w := &WaitForPodsReady{Timeout: time.Minute, RecoveryTimeout: time.Minute, BackoffBase: 10 * time.Second, BackoffMax: time.Minute}
	e := New(Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 1000).obj()},
		LocalQueues: lqs("ns", "cq"), WaitForPodsReady: w})
	if err := e.Submit(newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()); err != nil {
		t.Fatal(err)
	}
	e.Cycle(t0)
	check := func(now time.Time, want time.Time, wantOK bool) {
		t.Helper()
		got, ok := e.NextTimer(now)
		if ok != wantOK || !got.Equal(want) {
			t.Errorf("NextTimer(%s) = %s, %v; want %s, %v", now.Sub(t0), got.Sub(t0), ok, want.Sub(t0), wantOK)
		}
	}
	check(t0, t0.Add(time.Minute), true) // the admission's timeout
	e.Cycle(t0.Add(time.Minute))
	check(t0.Add(time.Minute), t0.Add(70*time.Second), true) // the backoff's end
	e.Cycle(t0.Add(70 * time.Second))
	if err := e.SetPodsReady("ns/a", true, t0.Add(75*time.Second)); err != nil {
		t.Fatal(err)
	}
	check(t0.Add(75*time.Second), time.Time{}, false) // ready: nothing waits on time
	if err := e.SetPodsReady("ns/a", false, t0.Add(80*time.Second)); err != nil {
		t.Fatal(err)
	}
	check(t0.Add(80*time.Second), t0.Add(140*time.Second), true) // the recovery timeout
}
