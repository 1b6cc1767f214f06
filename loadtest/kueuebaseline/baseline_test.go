package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/simulate"
	"github.com/sluice-dev/sluice/loadtest/baseline"
)

// load generates the scenario and parses it as `sluice simulate` does.
func load(tb testing.TB) *simulate.Scenario { return loadScenario(tb, false) }

// loadScenario generates the baseline, or the topology configuration, and
// parses it as `sluice simulate` does.
func loadScenario(tb testing.TB, topology bool) *simulate.Scenario {
	tb.Helper()
	var buf bytes.Buffer
	if err := writeScenario(&buf, topology); err != nil {
		tb.Fatal(err)
	}
	sc, err := simulate.Load([]simulate.Source{{Name: "kueuebaseline", R: &buf}})
	if err != nil {
		tb.Fatal(err)
	}
	return sc
}

// capacityBound is the shortest possible makespan: all CPU-seconds of work
// spread over all nominal CPU, in seconds.
func capacityBound(sc *simulate.Scenario) float64 {
	var work, capacity float64
	for _, w := range sc.Workloads {
		for _, ps := range w.Spec.PodSets {
			cpu := float64(engine.Canonical("cpu", ps.Requests["cpu"])) / 1000
			work += cpu * float64(ps.Count) * w.Spec.Runtime.Seconds()
		}
	}
	for _, cq := range sc.Config.ClusterQueues {
		for _, g := range cq.Spec.ResourceGroups {
			for _, f := range g.Flavors {
				for _, q := range f.Resources {
					if q.Name == "cpu" {
						capacity += float64(q.NominalQuota.MilliValue()) / 1000
					}
				}
			}
		}
	}
	return work / capacity
}

// classOf reads the class from a workload name such as cohort-0-cq-1-small-007.
func classOf(name string) string {
	for _, cl := range classes {
		if strings.Contains(name, "-"+cl.name+"-") {
			return cl.name
		}
	}
	return ""
}

// result is what one simulated run tells about the baseline.
type result struct {
	makespan float64            // virtual seconds until the last finish
	meanWait map[string]float64 // mean seconds from submission to first admission, per class
	finished int
	preempts int
}

func summarize(tb testing.TB, records []simulate.Record) result {
	tb.Helper()
	sum, ok := records[len(records)-1].Data.(simulate.Summary)
	if !ok {
		tb.Fatalf("last record is %T, want the summary", records[len(records)-1].Data)
	}
	r := result{makespan: sum.ElapsedSeconds, meanWait: map[string]float64{}, finished: sum.FinishedCount, preempts: sum.PreemptionCount}
	counts := map[string]int{}
	for _, w := range sum.Workloads {
		if w.WaitSeconds == nil {
			continue
		}
		c := classOf(w.Name)
		r.meanWait[c] += *w.WaitSeconds
		counts[c]++
	}
	for c, n := range counts {
		r.meanWait[c] /= float64(n)
	}
	return r
}

func TestScenarioShape(t *testing.T) {
	sc := load(t)
	got := map[string]int{
		"ClusterQueues": len(sc.Config.ClusterQueues),
		"LocalQueues":   len(sc.Config.LocalQueues),
		"Workloads":     len(sc.Workloads),
	}
	for _, w := range sc.Workloads {
		got[classOf(w.Name)]++
	}
	want := map[string]int{"ClusterQueues": 30, "LocalQueues": 30, "Workloads": 15000, "small": 10500, "medium": 3000, "large": 1500}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("scenario (-want +got):\n%s", d)
	}
	// 30 × (350×1×0.2 + 100×5×0.5 + 50×20×1) CPU-seconds over 30 × 20 CPUs.
	if b := capacityBound(sc); math.Abs(b-66) > 1e-9 {
		t.Errorf("capacity bound = %gs, want 66s", b)
	}
}

// TestTopologyScenarioShape: the topology configuration has the baseline's
// queues, workload counts and capacity bound, each size split three ways,
// and Kueue's data center of 640 nodes.
func TestTopologyScenarioShape(t *testing.T) {
	sc := loadScenario(t, true)
	got := map[string]int{
		"ClusterQueues": len(sc.Config.ClusterQueues),
		"LocalQueues":   len(sc.Config.LocalQueues),
		"Workloads":     len(sc.Workloads),
		"Nodes":         len(sc.Nodes),
		"Topologies":    len(sc.Config.Topologies),
	}
	for _, w := range sc.Workloads {
		got[classOf(w.Name)]++
		for _, how := range []string{"required", "preferred", "balanced"} {
			if strings.Contains(w.Name, "-"+how+"-") {
				got[how]++
			}
		}
	}
	want := map[string]int{"ClusterQueues": 30, "LocalQueues": 30, "Workloads": 15000, "Nodes": 640, "Topologies": 1,
		"small": 10500, "medium": 3000, "large": 1500, "required": 30 * (120 + 34 + 17), "preferred": 30 * (120 + 33 + 17), "balanced": 30 * (110 + 33 + 16)}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("scenario (-want +got):\n%s", d)
	}
	if b := capacityBound(sc); math.Abs(b-66) > 1e-9 {
		t.Errorf("capacity bound = %gs, want 66s", b)
	}
}

// BenchmarkBaseline loads and simulates the whole scenario per iteration and
// reports, besides wall time, the load and run split, the virtual makespan,
// the capacity bound, and the mean time to first admission of each class.
func BenchmarkBaseline(b *testing.B) { benchmarkScenario(b, false) }

// BenchmarkTopology is BenchmarkBaseline of Kueue's topology-aware
// scheduling configuration.
func BenchmarkTopology(b *testing.B) { benchmarkScenario(b, true) }

// BenchmarkLargeScale is BenchmarkBaseline of Kueue's large-scale
// configuration: 1,000 ClusterQueues in 10 cohorts, 50,000 workloads. Its
// run-s/op is the engine's work over the whole replay.
func BenchmarkLargeScale(b *testing.B) { benchmarkLargeScale(b, 0) }

// BenchmarkLargeScaleStopping is BenchmarkLargeScale with victims that
// take 5 s to stop, as Jobs do in a live cluster, holding their quota
// meanwhile: the engine runs with deferred eviction, as the admission
// service runs it, so preemptors wait for their victims.
func BenchmarkLargeScaleStopping(b *testing.B) { benchmarkLargeScale(b, 5*time.Second) }

func benchmarkLargeScale(b *testing.B, stop time.Duration) {
	p := baseline.MustProfile("large-scale")
	var runTime time.Duration
	var last result
	for range b.N {
		b.StopTimer()
		var buf bytes.Buffer
		if err := writeProfile(&buf, p); err != nil {
			b.Fatal(err)
		}
		sc, err := simulate.Load([]simulate.Source{{Name: "large-scale", R: &buf}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		records, err := simulate.Run(sc, simulate.Options{StopDelay: stop})
		if err != nil {
			b.Fatal(err)
		}
		runTime += time.Since(start)
		b.StopTimer()
		last = summarize(b, records)
		if last.finished != len(sc.Workloads) || len(sc.Config.ClusterQueues) != 1000 {
			b.Fatalf("%d of %d workloads finished in %d queues", last.finished, len(sc.Workloads), len(sc.Config.ClusterQueues))
		}
		b.StartTimer()
	}
	b.ReportMetric(runTime.Seconds()/float64(b.N), "run-s/op")
	b.ReportMetric(last.makespan, "makespan-s")
	b.ReportMetric(float64(last.preempts), "preemptions")
	for _, cl := range classes {
		b.ReportMetric(last.meanWait[cl.name], cl.name+"-wait-s")
	}
}

func benchmarkScenario(b *testing.B, topology bool) {
	var loadTime, runTime time.Duration
	var last result
	var bound float64
	for range b.N {
		start := time.Now()
		sc := loadScenario(b, topology)
		loaded := time.Now()
		records, err := simulate.Run(sc, simulate.Options{})
		if err != nil {
			b.Fatal(err)
		}
		loadTime += loaded.Sub(start)
		runTime += time.Since(loaded)
		b.StopTimer()
		last = summarize(b, records)
		bound = capacityBound(sc)
		if last.finished != len(sc.Workloads) {
			b.Fatalf("%d of %d workloads finished", last.finished, len(sc.Workloads))
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(loadTime.Seconds()/n, "load-s/op")
	b.ReportMetric(runTime.Seconds()/n, "run-s/op")
	b.ReportMetric(last.makespan, "makespan-s")
	b.ReportMetric(bound, "bound-s")
	b.ReportMetric(float64(last.preempts), "preemptions")
	for _, cl := range classes {
		b.ReportMetric(last.meanWait[cl.name], cl.name+"-wait-s")
	}
}
