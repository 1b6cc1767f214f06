package multicluster

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

func config(mode string, step int32, clusters ...string) *v1beta1.MultiClusterConfig {
	c := &v1beta1.MultiClusterConfig{Spec: v1beta1.MultiClusterConfigSpec{Clusters: clusters}}
	if mode != "" {
		c.Spec.Dispatching = &v1beta1.MultiClusterDispatching{Mode: mode}
		if step > 0 {
			c.Spec.Dispatching.StepSize = ptr.To(step)
		}
	}
	return c
}

func TestSettingsDefaults(t *testing.T) {
	got := settingsOf(config("", 0, "a"))
	if got.incremental || got.step != 3 || got.round != 5*time.Minute || got.lost != 15*time.Minute {
		t.Errorf("defaults: %+v", got)
	}
	c := config(v1beta1.DispatchIncremental, 2, "a")
	c.Spec.WorkerLostTimeout = &metav1.Duration{Duration: 10 * time.Second}
	c.Spec.Dispatching.RoundTimeout = &metav1.Duration{Duration: time.Minute}
	got = settingsOf(c)
	if !got.incremental || got.step != 2 || got.round != time.Minute || got.lost != 10*time.Second {
		t.Errorf("set: %+v", got)
	}
}

func TestNominate(t *testing.T) {
	cases := []struct {
		name    string
		cfg     *v1beta1.MultiClusterConfig
		offered []string
		lost    []string
		want    []string
	}{
		{name: "all at once offers every worker", cfg: config("", 0, "a", "b", "c"), want: []string{"a", "b", "c"}},
		{name: "all at once leaves a lost worker out", cfg: config("", 0, "a", "b", "c"), lost: []string{"b"}, want: []string{"a", "c"}},
		{name: "all lost: every one, to take it up when back", cfg: config("", 0, "a", "b"), lost: []string{"a", "b"}, want: []string{"a", "b"}},
		{name: "incremental takes a step in the listed order", cfg: config(v1beta1.DispatchIncremental, 2, "c", "a", "b"), want: []string{"c", "a"}},
		{name: "incremental next round", cfg: config(v1beta1.DispatchIncremental, 2, "c", "a", "b"), offered: []string{"c", "a"}, want: []string{"b"}},
		{name: "incremental skips lost workers", cfg: config(v1beta1.DispatchIncremental, 1, "a", "b", "c"), lost: []string{"a"}, want: []string{"b"}},
		{name: "nothing left", cfg: config(v1beta1.DispatchIncremental, 1, "a"), offered: []string{"a"}, want: nil},
		{name: "later round: lost workers wait", cfg: config(v1beta1.DispatchIncremental, 1, "a", "b"), offered: []string{"a"}, lost: []string{"b"}, want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			alive := func(w string) bool {
				for _, l := range tc.lost {
					if l == w {
						return false
					}
				}
				return true
			}
			got := settingsOf(tc.cfg).nominate(tc.offered, alive)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("nominate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	offered := func(winner string) *dispatch {
		return &dispatch{Admission: "a1", Offered: []string{"w1", "w2"}, Winner: winner}
	}
	cases := []struct {
		name   string
		d      *dispatch
		worker string
		report Report
		want   verdict
	}{
		{name: "queued: nothing yet", d: offered(""), worker: "w1", report: Report{Admission: "a1", State: Queued}},
		{name: "first admission wins", d: offered(""), worker: "w1", report: Report{Admission: "a1", State: Admitted}, want: verdict{win: true, mirror: true}},
		{name: "finished before anyone won still wins", d: offered(""), worker: "w2", report: Report{Admission: "a1", State: Finished}, want: verdict{win: true, mirror: true}},
		{name: "the winner's status is mirrored", d: offered("w1"), worker: "w1", report: Report{Admission: "a1", State: Admitted}, want: verdict{mirror: true}},
		{name: "the winner's queued copy is not mirrored", d: offered("w1"), worker: "w1", report: Report{Admission: "a1", State: Queued}},
		{name: "a second admission withdraws", d: offered("w1"), worker: "w2", report: Report{Admission: "a1", State: Admitted}, want: verdict{withdraw: true}},
		{name: "a loser still queued withdraws", d: offered("w1"), worker: "w2", report: Report{Admission: "a1", State: Queued}, want: verdict{withdraw: true}},
		{name: "a worker never offered withdraws", d: offered(""), worker: "w3", report: Report{Admission: "a1", State: Admitted}, want: verdict{withdraw: true}},
		{name: "a report about an earlier offer waits", d: offered(""), worker: "w1", report: Report{Admission: "a0", State: Admitted}},
		{name: "the winner's copy gone: retry", d: offered("w1"), worker: "w1", report: Report{Admission: "a1", State: Gone, Message: "deleted"},
			want: verdict{retry: "the copy in worker cluster w1 is gone: deleted"}},
		{name: "an earlier copy of the winner gone: nothing", d: offered("w1"), worker: "w1", report: Report{Admission: "a0", State: Gone}},
		{name: "a loser's copy gone: nothing", d: offered("w1"), worker: "w2", report: Report{Admission: "a1", State: Gone}},
		{name: "the winner's copy stopped in its worker: retry, to dispatch it again", d: offered("w1"), worker: "w1",
			report: Report{Admission: "a1", State: Stopped, Message: "Preempted"}, want: verdict{retry: "the copy in worker cluster w1 was stopped there: Preempted"}},
		{name: "an earlier copy of the winner stopped: nothing", d: offered("w1"), worker: "w1", report: Report{Admission: "a0", State: Stopped}},
		{name: "a loser's copy stopped: withdrawn", d: offered("w1"), worker: "w2", report: Report{Admission: "a1", State: Stopped}, want: verdict{withdraw: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := judge(tc.d, tc.worker, tc.report)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(verdict{})); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllGone(t *testing.T) {
	s := settingsOf(config("", 0, "w1", "w2"))
	if allGone(&dispatch{Given: []string{"w1"}}, s) {
		t.Error("one of two gone counts as all")
	}
	if !allGone(&dispatch{Given: []string{"w2", "w1"}}, s) {
		t.Error("both gone does not count as all")
	}
}

func TestSplitFrom(t *testing.T) {
	for subject, want := range map[string][2]string{
		FromWorker("w1", "u-1"): {"w1", "u-1"},
		Heartbeat("w-2"):        {"w-2", heartbeatToken},
		ToWorker("w1", "u-1"):   {},
		"other.subject":         {},
	} {
		w, u, ok := splitFrom(subject)
		if ok != (want != [2]string{}) || w != want[0] || u != want[1] {
			t.Errorf("splitFrom(%q) = %q, %q, %v", subject, w, u, ok)
		}
	}
}
