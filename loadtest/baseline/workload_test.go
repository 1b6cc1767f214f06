package baseline

import (
	"testing"
	"time"
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
	items := Plan(1, 5, 6)
	if len(items) != 15000 {
		t.Fatalf("%d items at scale 1, want 15000", len(items))
	}
	if n := len(Plan(0.3, 5, 6)); n != 4500 {
		t.Errorf("%d items at scale 0.3, want 4500", n)
	}
	// Sorted by time; per queue and class, Job i at i×Every.
	type key struct{ c, q, k int }
	next := map[key]int{}
	seen := map[string]bool{}
	n := names{prefix: "bl", namespace: "baseline"}
	for i, it := range items {
		if i > 0 && it.At < items[i-1].At {
			t.Fatalf("item %d at %s before item %d at %s", i, it.At, i-1, items[i-1].At)
		}
		k := key{it.Cohort, it.Queue, it.Class}
		if it.Index != next[k] {
			t.Fatalf("item %d: %+v, want index %d", i, it, next[k])
		}
		next[k]++
		if want := time.Duration(it.Index) * Classes[it.Class].Every; it.At != want {
			t.Fatalf("item %+v at %s, want %s", it, it.At, want)
		}
		name := n.job(it)
		if seen[name] {
			t.Fatalf("duplicate Job name %s", name)
		}
		seen[name] = true
	}
	for k, got := range next {
		if want := Classes[k.k].Count; got != want {
			t.Errorf("queue %d/%d class %s: %d Jobs, want %d", k.c, k.q, Classes[k.k].Name, got, want)
		}
	}
	if len(next) != 5*6*3 {
		t.Errorf("%d queue×class streams, want 90", len(next))
	}
	// The last small Job of a queue comes at 34.9 s, the last medium at
	// 49.5 s and the last large at 58.8 s.
	if last := items[len(items)-1].At; last != 58800*time.Millisecond {
		t.Errorf("last creation at %s, want 58.8s", last)
	}
	// Ties keep cohort, queue, class order.
	if f := items[:3]; f[0] != (Item{0, 0, 0, 0, 0}) || f[1] != (Item{0, 0, 0, 1, 0}) || f[2] != (Item{0, 0, 0, 2, 0}) {
		t.Errorf("first items %+v", f)
	}
}

func TestCapacityBound(t *testing.T) {
	for _, tt := range []struct {
		scale           float64
		cohorts, queues int
		want            time.Duration
	}{
		{1, 5, 6, 66 * time.Second},
		// 35×0.2 + 10×5×0.5 + 5×20 = 132 CPU-seconds per queue over 20 CPUs.
		{0.1, 5, 6, 6600 * time.Millisecond},
		{0.1, 1, 1, 6600 * time.Millisecond},
		{1, 2, 3, 66 * time.Second},
		// At least one Job per class: 0.2 + 2.5 + 20 = 22.7 CPU-seconds.
		{0.001, 1, 2, 1135 * time.Millisecond},
	} {
		got := CapacityBound(Plan(tt.scale, tt.cohorts, tt.queues), tt.queues)
		if d := got - tt.want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("CapacityBound(scale %g, %d×%d) = %s, want %s", tt.scale, tt.cohorts, tt.queues, got, tt.want)
		}
	}
	if got := CapacityBound(nil, 6); got != 0 {
		t.Errorf("empty plan: %s", got)
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

// TestTopologyClassesAreKueues: the topology run's sets add up to Kueue's
// 15,000 workloads in 30 queues, each size with the baseline's CPU per
// Job, so its capacity bound is the baseline's.
func TestTopologyClassesAreKueues(t *testing.T) {
	plan := PlanOf(TopologyClasses, 1, 5, 6)
	if len(plan) != 15000 {
		t.Errorf("%d Jobs, want 15000", len(plan))
	}
	if got, want := CapacityBoundOf(TopologyClasses, plan, 6), CapacityBound(Plan(1, 5, 6), 6); got != want {
		t.Errorf("capacity bound %s, want the baseline's %s", got, want)
	}
	n := names{prefix: "tas", namespace: "ns", classes: TopologyClasses}
	for k, cl := range TopologyClasses {
		j := n.jobObject("j", "q", k, cl.CPU)
		per := j.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
		if int64(*j.Spec.Parallelism)*per != cl.CPU*1000 || len(j.Spec.Template.Annotations) == 0 {
			t.Errorf("%s: %d pods of %dm, annotations %v; want %d CPUs in all and a topology request", cl.Name, *j.Spec.Parallelism, per, j.Spec.Template.Annotations, cl.CPU)
		}
	}
}
