package baseline

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/invariant"
)

func TestScaled(t *testing.T) {
	for _, tt := range []struct {
		count int
		scale float64
		want  int
	}{
		{350, 1, 350}, {350, 0.1, 35}, {50, 0.3, 15}, {50, 0.01, 1}, {100, 0.005, 1}, {100, 0, 0}, {100, 0.125, 13},
	} {
		if got := Scaled(tt.count, tt.scale); got != tt.want {
			t.Errorf("Scaled(%d, %g) = %d, want %d", tt.count, tt.scale, got, tt.want)
		}
	}
}

func TestPlan(t *testing.T) {
	p := MustProfile("baseline")
	items := p.Plan(1)
	if len(items) != 15000 {
		t.Fatalf("%d items at scale 1, want 15000", len(items))
	}
	if n := len(p.Plan(0.3)); n != 4500 {
		t.Errorf("%d items at scale 0.3, want 4500", n)
	}
	// Sorted by time; per queue and class, Job i at (i+1)×interval.
	every := map[string]time.Duration{"small": 100 * time.Millisecond, "medium": 500 * time.Millisecond, "large": 1200 * time.Millisecond}
	type key struct{ q, k int }
	next := map[key]int{}
	seen := map[string]bool{}
	n := names{prefix: "bl", namespace: "baseline", p: p}
	for i, it := range items {
		if i > 0 && it.At < items[i-1].At {
			t.Fatalf("item %d at %s before item %d at %s", i, it.At, i-1, items[i-1].At)
		}
		k := key{it.Queue, it.Class}
		if it.Index != next[k] {
			t.Fatalf("item %d: %+v, want index %d", i, it, next[k])
		}
		next[k]++
		if want := time.Duration(it.Index+1) * every[p.Classes[it.Class].Name]; it.At != want {
			t.Fatalf("item %+v at %s, want %s", it, it.At, want)
		}
		name := n.job(it)
		if seen[name] {
			t.Fatalf("duplicate Job name %s", name)
		}
		seen[name] = true
	}
	count := map[string]int{"small": 350, "medium": 100, "large": 50}
	for k, got := range next {
		if want := count[p.Classes[k.k].Name]; got != want {
			t.Errorf("queue %d class %s: %d Jobs, want %d", k.q, p.Classes[k.k].Name, got, want)
		}
	}
	if len(next) != 5*6*3 {
		t.Errorf("%d queue×class streams, want 90", len(next))
	}
	// The last small Job of a queue comes at 35 s, the last medium at 50 s
	// and the last large at 60 s.
	if last := items[len(items)-1].At; last != 60*time.Second {
		t.Errorf("last creation at %s, want 60s", last)
	}
	// Ties keep queue, class order.
	if f := items[:2]; f[0] != (Item{100 * time.Millisecond, 0, 0, 0}) || f[1] != (Item{100 * time.Millisecond, 1, 0, 0}) {
		t.Errorf("first items %+v", f)
	}
}

func TestCapacityBound(t *testing.T) {
	base := MustProfile("baseline")
	for _, tt := range []struct {
		p     *Profile
		scale float64
		want  time.Duration
	}{
		{base, 1, 66 * time.Second},
		// 35×0.2 + 10×5×0.5 + 5×20 = 132 CPU-seconds per queue over 20 CPUs.
		{base, 0.1, 6600 * time.Millisecond},
		// At least one Job per class: 0.2 + 2.5 + 20 = 22.7 CPU-seconds.
		{base, 0.001, 1135 * time.Millisecond},
		// 35×1×0.15 + 11×5×0.35 + 4×20×0.7 = 80.5 CPU-seconds per queue.
		{MustProfile("large-scale"), 1, 4025 * time.Millisecond},
		// The topology sets have the baseline's CPU per Job.
		{MustProfile("tas"), 1, 66 * time.Second},
	} {
		got := tt.p.CapacityBound(tt.p.Plan(tt.scale))
		if d := got - tt.want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("CapacityBound(%s at scale %g) = %s, want %s", tt.p.Name, tt.scale, got, tt.want)
		}
	}
	if got := base.CapacityBound(nil); got != 0 {
		t.Errorf("empty plan: %s", got)
	}
}

// TestProfiles: the built-in profiles are Kueue's configurations, counted.
func TestProfiles(t *testing.T) {
	type shape struct {
		Cohorts, Queues, Jobs int
		Classes               []string
		Nominal, Borrowing    int64
		Reclaim, Within       string
	}
	got := map[string]shape{}
	for _, name := range BuiltinProfiles() {
		p := MustProfile(name)
		s := shape{Cohorts: p.Cohorts, Queues: len(p.Queues), Jobs: len(p.Plan(1)), Nominal: p.Queues[0].NominalMilli,
			Borrowing: p.Queues[0].BorrowingMilli, Reclaim: p.Queues[0].ReclaimWithinCohort, Within: p.Queues[0].WithinCQueue}
		for _, c := range p.Classes {
			s.Classes = append(s.Classes, c.Name)
		}
		got[name] = s
	}
	want := map[string]shape{
		"baseline":    {5, 30, 15000, []string{"small", "medium", "large"}, 20000, 100000, "Any", "LowerPriority"},
		"large-scale": {10, 1000, 50000, []string{"small", "medium", "large"}, 20000, 100000, "Any", "LowerPriority"},
		"tas": {5, 30, 15000, []string{"small-required-rack", "small-preferred-rack", "small-balanced-rack", "medium-required-rack",
			"medium-preferred-rack", "medium-balanced-rack", "large-required-rack", "large-preferred-rack", "large-balanced-rack"},
			20000, 100000, "Any", "LowerPriority"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("profiles (-want +got):\n%s", d)
	}
	tas := MustProfile("tas")
	n := names{prefix: "tas", namespace: "ns", p: tas}
	for k, cl := range tas.Classes {
		j := n.jobObject("j", "q", k, cl.MilliCPU())
		per := j.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
		if per != cl.PodMilliCPU || *j.Spec.Parallelism != cl.Pods || len(j.Spec.Template.Annotations) == 0 {
			t.Errorf("%s: %d pods of %dm, annotations %v; want %d of %dm and a topology request", cl.Name, *j.Spec.Parallelism, per,
				j.Spec.Template.Annotations, cl.Pods, cl.PodMilliCPU)
		}
	}
	if want := map[string]string{"sluice.dev/podset-slice-required-topology": "cloud.provider.com/topology-rack", "sluice.dev/podset-slice-size": "4"}; !maps.Equal(tas.Classes[8].Annotations, want) {
		t.Errorf("large-balanced-rack annotations %v, want %v", tas.Classes[8].Annotations, want)
	}
}

// TestParseProfile: a generator file with queue sets and workload sets of
// its own, and what is refused, by where it is.
func TestParseProfile(t *testing.T) {
	p, err := ParseProfile("two.yaml", []byte(`
cohorts:
- className: c
  count: 2
  queuesSets:
  - className: gold
    count: 1
    nominalQuota: "1500m"
    workloadsSets:
    - count: 2
      creationIntervalMs: 10
      workloads:
      - {className: a, runtimeMs: 5, priority: 1, request: 500m}
      - {className: b, runtimeMs: 5, priority: 2, request: 1, podCount: 3}
  - className: bronze
    count: 2
    nominalQuota: 2
    borrowingLimit: 0
    withinClusterQueue: Never
    workloadsSets:
    - count: 1
      creationIntervalMs: 100
      workloads:
      - {className: a, runtimeMs: 5, priority: 1, request: 500m}
`))
	if err != nil {
		t.Fatal(err)
	}
	var queues []string
	for _, q := range p.Queues {
		queues = append(queues, fmt.Sprintf("%d/%d %s %d %d %s", q.Cohort, q.Index, q.Class, q.NominalMilli, q.BorrowingMilli, q.WithinCQueue))
	}
	wantQueues := []string{"0/0 gold 1500 -1 ", "0/1 bronze 2000 0 Never", "0/2 bronze 2000 0 Never",
		"1/0 gold 1500 -1 ", "1/1 bronze 2000 0 Never", "1/2 bronze 2000 0 Never"}
	if d := cmp.Diff(wantQueues, queues); d != "" {
		t.Errorf("queues (-want +got):\n%s", d)
	}
	plan := p.Plan(1)
	var first []string
	for _, it := range plan {
		if it.Queue == 0 {
			first = append(first, fmt.Sprintf("%s %s#%d", it.At, p.Classes[it.Class].Name, it.Index))
		}
	}
	// Each round creates every workload of the set in turn, one interval
	// apart.
	if d := cmp.Diff([]string{"10ms a#0", "20ms b#0", "30ms a#1", "40ms b#1"}, first); d != "" {
		t.Errorf("queue 0's plan (-want +got):\n%s", d)
	}
	if len(plan) != 2*(4+2) || p.Classes[1].MilliCPU() != 3000 {
		t.Errorf("%d Jobs, class b %dm; want 12 and 3000m", len(plan), p.Classes[1].MilliCPU())
	}
	for text, want := range map[string]string{
		"cohorts: []": "cohorts: at least one cohort set",
		"cohorts: [{count: 1, queuesSets: [{count: 1, nominalQuota: 0}]}]":                                                                                                                "cohorts[0].queuesSets[0].nominalQuota 0: want a positive CPU quantity",
		"cohorts: [{count: 1, queuesSets: [{count: 1, nominalQuota: 1, reclaimWithinCohort: Sometimes}]}]":                                                                                `preemption policies "Sometimes"`,
		"cohorts: [{count: 1, queuesSets: [{count: 1, nominalQuota: 1, workloadsSets: [{count: 1, workloads: [{className: a, request: 0}]}]}]}]":                                          "cohorts[0].queuesSets[0].workloadsSets[0].workloads[0].request 0",
		"cohorts: [{count: 1, queuesSets: [{count: 1, nominalQuota: 1, workloadsSets: [{count: 1, workloads: [{className: a, request: 1, tasLevel: rack, tasConstraint: required}]}]}]}]": "tasLevel rack: the file has no topology",
		"cohorts: [{count: 1, queuesSets: [{count: 1, nominalQuota: 1, workloadsSets: [{count: 1, workloads: [{className: a, request: 1}, {className: a, request: 2}]}]}]}]":              "class a is defined twice, differently",
		"cohorts: [{count: 1, queuesSets: [{count: 1, nominalQuota: 1, nominalquota: 2}]}]":                                                                                               "nominalquota",
		"cohort: []": `unknown field "cohort"`,
		"topology: {levels: [{name: a, count: 1, nodeLabel: lx}, {name: b, count: 2, nodeLabel: ly}]}\ncohorts: [{count: 1, queuesSets: [{count: 1, nominalQuota: 1}]}]": "resourceFlavor.nodeLabel: required",
	} {
		if _, err := ParseProfile("bad.yaml", []byte(text)); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "bad.yaml: ") {
			t.Errorf("ParseProfile(%q) = %v, want an error naming bad.yaml with %q", text, err, want)
		}
	}
}

func TestStatsOf(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := StatsOf(ds)
	want := Stats{N: 100, Mean: 50500 * time.Microsecond, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("StatsOf sorted its input")
	}
	if (StatsOf(nil) != Stats{}) {
		t.Error("empty input")
	}
	if one := StatsOf([]time.Duration{time.Second}); one.P50 != time.Second || one.P99 != time.Second {
		t.Errorf("one: %+v", one)
	}
}

// TestUnqueuedJobHasNoQueue: an unqueued run's Jobs carry no queue label,
// so that no queueing system takes them; queued ones name their queue.
func TestUnqueuedJobHasNoQueue(t *testing.T) {
	n := names{prefix: "bl", namespace: "ns", p: MustProfile("baseline")}
	for _, c := range []struct {
		queue     string
		wantLabel bool
	}{{"", false}, {"bl-cq-0", true}} {
		j := n.jobObject("j", c.queue, 0, 1000)
		got, ok := j.Labels[v1beta1.QueueNameLabel]
		if ok != c.wantLabel || got != c.queue {
			t.Errorf("queue %q: label %q (set %v), want set %v", c.queue, got, ok, c.wantLabel)
		}
		if j.Labels[RunLabel] != "bl" || !*j.Spec.Suspend {
			t.Errorf("queue %q: labels %v, suspend %v: want the run's label and created suspended", c.queue, j.Labels, *j.Spec.Suspend)
		}
	}
}

// TestUnqueuedReport: an unqueued run's report says no quota was checked
// and shows no share of quota, which no queue held.
func TestUnqueuedReport(t *testing.T) {
	for _, unqueued := range []bool{false, true} {
		r := &Result{Options: Options{Unqueued: unqueued, Scale: 1}, Profile: MustProfile("baseline"), Classes: Classes,
			Usage: map[string]float64{"cq": 40}, Quota: &invariant.Report{}}
		var b strings.Builder
		r.Print(&b)
		out := b.String()
		if got := strings.Contains(out, "usage       ClusterQueue class cq"); got == unqueued {
			t.Errorf("unqueued %v: usage shown %v:\n%s", unqueued, got, out)
		}
		if got := strings.Contains(out, "quota check not run: unqueued"); got != unqueued {
			t.Errorf("unqueued %v: quota check said not run %v:\n%s", unqueued, got, out)
		}
	}
}
