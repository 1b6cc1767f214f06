package engine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestQueueActivity: Kueue's Active condition of each ClusterQueue and
// LocalQueue, with Kueue's reasons.
func TestQueueActivity(t *testing.T) {
	lq := func(ns, name, cq string, p StopPolicy) LocalQueue {
		return LocalQueue{Namespace: ns, Name: name, ClusterQueue: cq, StopPolicy: p}
	}
	cfg := Config{
		Flavors: flavors("on-demand"),
		ClusterQueues: []ClusterQueue{
			newCQ("ready").quota("on-demand", "cpu", 1000).obj(),
			newCQ("no-flavor").quota("ghost", "cpu", 1000).obj(),
			newCQ("no-check").quota("on-demand", "cpu", 1000).checks(AdmissionCheckRule{Name: "missing"}).obj(),
			newCQ("idle-check").quota("on-demand", "cpu", 1000).checks(AdmissionCheckRule{Name: "idle"}).obj(),
			newCQ("held").quota("on-demand", "cpu", 1000).stop(HoldAndDrain).obj(),
		},
		AdmissionChecks: []AdmissionCheck{{Name: "idle", Active: false}},
		LocalQueues: []LocalQueue{
			lq("ns", "ok", "ready", StopNone),
			lq("ns", "held", "ready", Hold),
			lq("ns", "orphan", "nowhere", StopNone),
			lq("ns", "behind-held", "held", StopNone),
			lq("ns", "behind-inactive", "no-flavor", StopNone),
		},
	}
	e := New(cfg)
	wantCQ := map[string]Activity{
		"ready":      {Active: true, Reason: "Ready", Message: "Can admit new workloads"},
		"no-flavor":  {Reason: "FlavorNotFound", Message: "ClusterQueue no-flavor is inactive: ResourceFlavor ghost does not exist"},
		"no-check":   {Reason: "AdmissionCheckNotFound", Message: "ClusterQueue no-check is inactive: AdmissionCheck missing does not exist"},
		"idle-check": {Reason: "AdmissionCheckInactive", Message: "ClusterQueue idle-check is inactive: AdmissionCheck idle is not active (its controller does not run)"},
		"held":       {Reason: "Stopped", Message: "ClusterQueue held is stopped (stopPolicy HoldAndDrain)"},
	}
	// activities asks get about every queue want names.
	activities := func(want map[string]Activity, get func(string) (Activity, bool)) map[string]Activity {
		got := map[string]Activity{}
		for name := range want {
			a, ok := get(name)
			if !ok {
				t.Fatalf("queue %s unknown", name)
			}
			got[name] = a
		}
		return got
	}
	if d := cmp.Diff(wantCQ, activities(wantCQ, e.ClusterQueueActivity)); d != "" {
		t.Errorf("ClusterQueue activity (-want +got):\n%s", d)
	}
	wantLQ := map[string]Activity{
		"ok":              {Active: true, Reason: "Ready", Message: "Can submit new workloads to its ClusterQueue"},
		"held":            {Reason: "Stopped", Message: "LocalQueue ns/held is stopped (stopPolicy Hold)"},
		"orphan":          {Reason: "ClusterQueueDoesNotExist", Message: "ClusterQueue nowhere does not exist"},
		"behind-held":     {Reason: "ClusterQueueIsInactive", Message: "ClusterQueue held is stopped (stopPolicy HoldAndDrain)"},
		"behind-inactive": {Reason: "ClusterQueueIsInactive", Message: "ClusterQueue no-flavor is inactive: ResourceFlavor ghost does not exist"},
	}
	inNS := func(name string) (Activity, bool) { return e.LocalQueueActivity("ns", name) }
	if d := cmp.Diff(wantLQ, activities(wantLQ, inNS)); d != "" {
		t.Errorf("LocalQueue activity (-want +got):\n%s", d)
	}
	if _, ok := e.ClusterQueueActivity("nowhere"); ok {
		t.Error("an unknown ClusterQueue has an activity")
	}
	if _, ok := e.LocalQueueActivity("ns", "nowhere"); ok {
		t.Error("an unknown LocalQueue has an activity")
	}
}

// TestDeactivatedLeavesTheLine: a deactivated workload has no place in its
// queue's pending list, nor in its counts (Kueue takes it out of the
// queue); those behind it move up.
func TestDeactivatedLeavesTheLine(t *testing.T) {
	e := New(Config{
		Flavors:       flavors("on-demand"),
		ClusterQueues: []ClusterQueue{newCQ("cq").quota("on-demand", "cpu", 0).obj()},
		LocalQueues:   lqs("ns", "cq"),
	})
	for i, name := range []string{"a", "b", "c"} {
		if err := e.Submit(newWL("ns", name).at(time.Duration(i)).pods("main", 1, "cpu", 1000).obj()); err != nil {
			t.Fatal(err)
		}
	}
	e.Cycle(time.Unix(10, 0))
	if err := e.SetRequeues("ns/a", RequeueState{Deactivated: "deactivated: exceeding the maximum number of re-queuing retries"}); err != nil {
		t.Fatal(err)
	}
	type pos struct {
		key        string
		inCQ, inLQ int
	}
	positions := func(p PendingPage) []pos {
		var out []pos
		for _, it := range p.Items {
			out = append(out, pos{it.Key, it.PositionInClusterQueue, it.PositionInLocalQueue})
		}
		return out
	}
	want := []pos{{"ns/b", 0, 0}, {"ns/c", 1, 1}}
	cqPage, _ := e.PendingInClusterQueue("cq", 0, 0)
	lqPage, _ := e.PendingInLocalQueue("ns", "lq", 0, 0)
	for name, p := range map[string]PendingPage{"ClusterQueue": cqPage, "LocalQueue": lqPage} {
		if d := cmp.Diff(want, positions(p), cmp.AllowUnexported(pos{})); d != "" {
			t.Errorf("%s page (-want +got):\n%s", name, d)
		}
		if p.Total != 2 {
			t.Errorf("%s page total %d, want 2", name, p.Total)
		}
	}
	second, _ := e.PendingInClusterQueue("cq", 1, 1)
	if d := cmp.Diff([]pos{{"ns/c", 1, 1}}, positions(second), cmp.AllowUnexported(pos{})); d != "" {
		t.Errorf("page at offset 1 (-want +got):\n%s", d)
	}
	st := e.Stats(time.Unix(10, 0))
	if len(st) != 1 || st[0].Active+st[0].Inadmissible != 2 {
		t.Errorf("stats %+v: want 2 waiting, the deactivated one in neither count", st)
	}
}
