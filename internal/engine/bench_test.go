package engine

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The benchmarks use 100 cohorts of 10 ClusterQueues each (1,000 queues),
// one flavor and one resource (cpu), no preemption, and 100 pending
// workloads of 1 CPU per queue (100,000 in all).
const (
	benchCohorts      = 100
	benchQueuesPer    = 10
	benchPendingPerCQ = 100
)

// benchConfig returns the 1,000 queues, each with nominal cpu quota of
// nominalCPU cores, and one LocalQueue per queue in its own namespace.
func benchConfig(strategy QueueingStrategy, nominalCPU int64) Config {
	cfg := Config{Flavors: flavors("default")}
	for c := range benchCohorts {
		for q := range benchQueuesPer {
			name := fmt.Sprintf("cq-%03d-%d", c, q)
			b := newCQ(name).cohort(fmt.Sprintf("cohort-%03d", c)).quota("default", "cpu", nominalCPU*1000)
			b.cq.QueueingStrategy = strategy
			cfg.ClusterQueues = append(cfg.ClusterQueues, b.obj())
			cfg.LocalQueues = append(cfg.LocalQueues, LocalQueue{Namespace: "ns-" + name, Name: "lq", ClusterQueue: name, StopPolicy: StopNone})
		}
	}
	return cfg
}

// fillerKey names the workload that holds all of a queue's quota.
func fillerKey(cq string) string { return "ns-" + cq + "/filler" }

func filler(cq string, cpu int64) Workload {
	return newWL("ns-"+cq, "filler").pods("main", 1, "cpu", int(cpu*1000)).admittedIn(cq, "default", 0).obj()
}

// benchEngine builds an engine with 100 pending 1-CPU workloads per queue
// and, when full, a pre-admitted filler that uses all of each queue's quota.
func benchEngine(b *testing.B, strategy QueueingStrategy, nominalCPU int64, full bool) *Engine {
	b.Helper()
	cfg := benchConfig(strategy, nominalCPU)
	e := New(cfg)
	for _, cq := range cfg.ClusterQueues {
		if full {
			if err := e.Submit(filler(cq.Name, nominalCPU)); err != nil {
				b.Fatal(err)
			}
		}
		for i := range benchPendingPerCQ {
			w := newWL("ns-"+cq.Name, fmt.Sprintf("w%03d", i)).at(time.Duration(i)*time.Second).pods("main", 1, "cpu", 1000).obj()
			if err := e.Submit(w); err != nil {
				b.Fatal(err)
			}
		}
	}
	return e
}

// BenchmarkCycleNothingFits measures one Cycle over 100,000 pending
// workloads when every queue's quota is in use and nothing can be admitted.
//
// StrictFIFO looks at the head of each queue only. BestEffortFIFO looks at
// every workload; since a Cycle parks what does not fit, each iteration
// first unparks all of them, outside the timer, by finishing and
// resubmitting one filler per cohort (a release wakes the whole cohort).
// The "first" variant rebuilds the engine outside the timer, so each timed
// Cycle also writes the 100,000 pending reasons and decisions; later
// cycles find the reasons unchanged and return no decisions.
func BenchmarkCycleNothingFits(b *testing.B) {
	const nominal = 10
	for _, strategy := range []QueueingStrategy{StrictFIFO, BestEffortFIFO} {
		b.Run(string(strategy)+"/steady", func(b *testing.B) {
			e := benchEngine(b, strategy, nominal, true)
			cfg := benchConfig(strategy, nominal)
			e.Cycle(t0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for c := 0; c < len(cfg.ClusterQueues); c += benchQueuesPer {
					cq := cfg.ClusterQueues[c].Name
					if err := e.Remove(fillerKey(cq)); err != nil {
						b.Fatal(err)
					}
					if err := e.Submit(filler(cq, nominal)); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if ds := e.Cycle(t0.Add(time.Duration(i+1) * time.Second)); len(ds) != 0 {
					b.Fatalf("got %d decisions, want none", len(ds))
				}
			}
		})
		b.Run(string(strategy)+"/first", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				e := benchEngine(b, strategy, nominal, true)
				// Collect the build's garbage outside the timer, so the
				// Cycle is not charged for it.
				runtime.GC()
				b.StartTimer()
				e.Cycle(t0)
			}
		})
	}
}

// BenchmarkCycleAdmitFree measures one Cycle that admits 100,000 pending
// workloads, all of which fit in free quota (100 CPUs per queue, 100
// workloads of 1 CPU each). The engine is rebuilt outside the timer.
func BenchmarkCycleAdmitFree(b *testing.B) {
	const want = benchCohorts * benchQueuesPer * benchPendingPerCQ
	for _, strategy := range []QueueingStrategy{StrictFIFO, BestEffortFIFO} {
		b.Run(string(strategy), func(b *testing.B) {
			b.ReportAllocs()
			admitted := 0
			for range b.N {
				b.StopTimer()
				e := benchEngine(b, strategy, benchPendingPerCQ, false)
				b.StartTimer()
				ds := e.Cycle(t0)
				b.StopTimer()
				n := 0
				for _, d := range ds {
					if d.Kind == KindAdmitted {
						n++
					}
				}
				if n != want {
					b.Fatalf("admitted %d workloads, want %d", n, want)
				}
				admitted += n
				b.StartTimer()
			}
			b.ReportMetric(float64(admitted)/b.Elapsed().Seconds(), "admits/s")
		})
	}
}

// BenchmarkCyclePreemptorsWaiting measures the cycle a live cluster runs
// most while preemptions are under way: a cohort of 6 ClusterQueues, each
// full with 100 admitted low-priority 1-CPU workloads, and 20 waiting
// high-priority 2-CPU workloads per queue whose victims were chosen and are
// still stopping. A release in the cohort wakes it, and the cycle then
// looks for victims again for every preemptor it nominates.
func BenchmarkCyclePreemptorsWaiting(b *testing.B) {
	e := preemptorsOverFullCohort(b)
	first := e.Cycle(t0)
	preempted := 0
	for _, d := range first {
		if d.Kind == KindPreempted {
			preempted++
		}
	}
	if preempted == 0 {
		b.Fatalf("the first cycle preempted nothing: %d decisions", len(first))
	}
	// A release wakes the cohort: each iteration, outside the timer, one
	// admitted workload that is no victim leaves and comes back.
	back := newWL("ns-cq-0", "low-000").prio(0).pods("main", 1, "cpu", 1000).admittedIn("cq-0", "default", 0).obj()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := e.Remove("ns-cq-0/low-000"); err != nil {
			b.Fatal(err)
		}
		if err := e.Submit(back); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		e.Cycle(t0.Add(time.Duration(i+1) * time.Millisecond))
	}
}

// BenchmarkCycleDeferredPreemptorsWaiting: as the admission service runs
// the engine, victims keep their quota until they are reported gone. 120
// preemptors wait for the victims they asked to go while the cohort is
// busy: each iteration, one workload is submitted to a queue that cannot
// take it, so every cycle has work but releases nothing.
func BenchmarkCycleDeferredPreemptorsWaiting(b *testing.B) {
	e := preemptorsOverFullCohort(b, WithDeferredEviction())
	preempted := 0
	for _, d := range e.Cycle(t0) {
		if d.Kind == KindPreempted {
			preempted++
		}
	}
	if preempted == 0 {
		b.Fatal("the first cycle preempted nothing")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w := newWL("ns-cq-1", fmt.Sprintf("big-%06d", i)).prio(0).at(time.Hour).pods("main", 1, "cpu", 1_000_000).obj()
		if err := e.Submit(w); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, d := range e.Cycle(t0.Add(time.Duration(i+1) * time.Millisecond)) {
			if d.Kind == KindAdmitted || d.Kind == KindPreempted {
				b.Fatalf("cycle %d: %s %s with nothing released", i, d.Kind, d.Key)
			}
		}
	}
}

// preemptorsOverFullCohort is an engine with six ClusterQueues in one
// cohort, each with 100 low-priority workloads admitted and 20
// high-priority ones waiting that need twice as much CPU.
func preemptorsOverFullCohort(b *testing.B, opts ...Option) *Engine {
	b.Helper()
	cfg := Config{Flavors: flavors("default")}
	for q := range 6 {
		name := fmt.Sprintf("cq-%d", q)
		cfg.ClusterQueues = append(cfg.ClusterQueues,
			newCQ(name).cohort("all").quota("default", "cpu", 100_000).preemption(LowerPriority, Any).obj())
		cfg.LocalQueues = append(cfg.LocalQueues, LocalQueue{Namespace: "ns-" + name, Name: "lq", ClusterQueue: name, StopPolicy: StopNone})
	}
	e := New(cfg, opts...)
	for _, cq := range cfg.ClusterQueues {
		for i := range 100 {
			w := newWL("ns-"+cq.Name, fmt.Sprintf("low-%03d", i)).prio(0).pods("main", 1, "cpu", 1000).
				admittedIn(cq.Name, "default", time.Duration(i)*time.Second).obj()
			if err := e.Submit(w); err != nil {
				b.Fatal(err)
			}
		}
		for i := range 20 {
			w := newWL("ns-"+cq.Name, fmt.Sprintf("high-%02d", i)).prio(100).at(time.Duration(200+i)*time.Second).pods("main", 1, "cpu", 2000).obj()
			if err := e.Submit(w); err != nil {
				b.Fatal(err)
			}
		}
	}
	return e
}

// BenchmarkCycleBaselineBacklog measures the cycle of Kueue's baseline
// workload with a large backlog, as the admission service runs the engine
// (deferred eviction): 5 cohorts × 6 ClusterQueues (20 CPU nominal,
// borrowing limit 100, LowerPriority within the queue, reclaim Any), each
// queue full with one running large Job and `backlog` waiting Jobs of the
// baseline's mix (70 % small, 20 % medium, 10 % large). Each iteration one
// running Job ends in cohort 0 and a new one joins the end of its queue,
// outside the timer, so the backlog stays as large however many
// iterations run, and the timed cycle admits what fits in its place.
// quiet=true runs the engine as admission does, WithQuietPending.
func BenchmarkCycleBaselineBacklog(b *testing.B) {
	for _, bench := range []struct {
		backlog int
		quiet   bool
	}{{500, false}, {500, true}, {3000, false}, {3000, true}} {
		b.Run(fmt.Sprintf("waiting=%d/quiet=%v", 30*bench.backlog, bench.quiet), func(b *testing.B) {
			benchBaselineBacklog(b, bench.backlog, bench.quiet, false)
		})
	}
}

// BenchmarkCycleTopologyBacklog is BenchmarkCycleBaselineBacklog on a
// topology-aware flavor, as Kueue's TAS performance configuration runs it:
// 640 nodes in 10 racks, every Job's pods (2, 4 or 8) required in one rack.
func BenchmarkCycleTopologyBacklog(b *testing.B) {
	for _, backlog := range []int{500, 3000} {
		b.Run(fmt.Sprintf("waiting=%d", 30*backlog), func(b *testing.B) {
			benchBaselineBacklog(b, backlog, true, true)
		})
	}
}

func benchBaselineBacklog(b *testing.B, backlog int, quiet, tas bool) {
	e, running := baselineBacklog(b, backlogShape{cohorts: 5, queues: 6, backlog: backlog, quiet: quiet, tas: tas})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		running = releaseOne(b, e, running, backlog, i)
		b.StartTimer()
		for _, d := range e.Cycle(t0.Add(time.Duration(i+1) * time.Second)) {
			if d.Kind == KindAdmitted {
				running = append(running, d.Key)
			}
		}
	}
}

// BenchmarkCycleScale measures the cycles issue 38 bounds, with Kueue's
// large-scale configuration (10 cohorts × 100 ClusterQueues) and its
// baseline (5 × 6), each with 100,000 workloads waiting in the baseline's
// mix as the admission service runs the engine: "release" is the cycle
// after one running Job in cohort 0 ends (its replacement joins the end of
// its queue, outside the timer); "config" is SetConfig with one queue's
// quota changed and the cycle after it, both timed, which judge every
// waiting workload again.
func BenchmarkCycleScale(b *testing.B) {
	for _, sh := range []backlogShape{
		{cohorts: 10, queues: 100, backlog: 100, quiet: true},
		{cohorts: 5, queues: 6, backlog: 3334, quiet: true},
	} {
		name := fmt.Sprintf("cqs=%d/waiting=%d", sh.cohorts*sh.queues, sh.cohorts*sh.queues*sh.backlog)
		b.Run(name+"/release", func(b *testing.B) {
			e, running := baselineBacklog(b, sh)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				running = releaseOne(b, e, running, sh.backlog, i)
				b.StartTimer()
				for _, d := range e.Cycle(t0.Add(time.Duration(i+1) * time.Second)) {
					if d.Kind == KindAdmitted {
						running = append(running, d.Key)
					}
				}
			}
		})
		b.Run(name+"/config", func(b *testing.B) {
			e, _ := baselineBacklog(b, sh)
			cfgs := [2]Config{e.cfg, e.cfg}
			// The second configuration gives the last queue one more CPU
			// of nominal quota; the iterations alternate between them.
			cqs := slices.Clone(cfgs[1].ClusterQueues)
			last := &cqs[len(cqs)-1]
			last.ResourceGroups = slices.Clone(last.ResourceGroups)
			last.ResourceGroups[0].Flavors = slices.Clone(last.ResourceGroups[0].Flavors)
			last.ResourceGroups[0].Flavors[0].Resources = slices.Clone(last.ResourceGroups[0].Flavors[0].Resources)
			last.ResourceGroups[0].Flavors[0].Resources[0].Nominal += 1000
			cfgs[1].ClusterQueues = cqs
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e.SetConfig(cfgs[(i+1)%2])
				e.Cycle(t0.Add(time.Duration(i+1) * time.Second))
			}
		})
	}
}

// BenchmarkCycleReclaimWaiting is the cycle that dominated the admission
// service in Kueue's large-scale configuration replayed live: 10 cohorts of
// 100 ClusterQueues (20 CPU, borrowing limit 100, LowerPriority within the
// queue, reclaim Any), half of each cohort's queues borrowing (40 small
// Jobs admitted each, the cohort full), the other half empty with 20
// waiting Jobs each (2 large, then small), whose large Jobs asked the
// borrowers' small ones to go and wait for them (deferred eviction). Each
// iteration one small Job that is no victim ends in cohort 0 and a new one
// takes its place, outside the timer: the release wakes the tree, and its
// waiting preemptors look for victims again.
func BenchmarkCycleReclaimWaiting(b *testing.B) {
	cfg := Config{Flavors: flavors("default")}
	for c := range 10 {
		for q := range 100 {
			name := fmt.Sprintf("cq-%d-%d", c, q)
			cfg.ClusterQueues = append(cfg.ClusterQueues, newCQ(name).cohort(fmt.Sprintf("cohort-%d", c)).
				quota("default", "cpu", 20_000, Limited(100_000)).preemption(LowerPriority, Any).obj())
			cfg.LocalQueues = append(cfg.LocalQueues, LocalQueue{Namespace: "ns-" + name, Name: "lq", ClusterQueue: name, StopPolicy: StopNone})
		}
	}
	e := New(cfg, WithDeferredEviction(), WithQuietPending())
	var borrowers []string // cohort 0's admitted small Jobs, for the releases
	for c := range 10 {
		for q := range 100 {
			ns := fmt.Sprintf("ns-cq-%d-%d", c, q)
			cq := fmt.Sprintf("cq-%d-%d", c, q)
			if q < 50 {
				for i := range 40 {
					w := newWL(ns, fmt.Sprintf("small-%02d", i)).prio(50).pods("main", 1, "cpu", 1000).admittedIn(cq, "default", time.Duration(i)*time.Second).obj()
					if err := e.Submit(w); err != nil {
						b.Fatal(err)
					}
					if c == 0 {
						borrowers = append(borrowers, ns+"/"+w.Name)
					}
				}
				continue
			}
			for i := range 20 {
				cl := baselineClasses[0]
				if i < 2 {
					cl = baselineClasses[2]
				}
				w := baselineJob(false, ns, fmt.Sprintf("w%02d", i), cl).at(time.Duration(100+i) * time.Second).obj()
				if err := e.Submit(w); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	preempted := map[string]bool{}
	for _, d := range e.Cycle(t0) {
		if d.Kind == KindPreempted {
			preempted[d.Key] = true
		}
	}
	if len(preempted) == 0 {
		b.Fatal("the first cycle preempted nothing")
	}
	var ends []string
	for _, k := range borrowers {
		if !preempted[k] {
			ends = append(ends, k)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		k := ends[i%len(ends)]
		if err := e.Remove(k); err != nil {
			b.Fatal(err)
		}
		ns, name, _ := strings.Cut(k, "/")
		back := newWL(ns, name).prio(50).pods("main", 1, "cpu", 1000).admittedIn("cq-0-"+strings.TrimPrefix(ns, "ns-cq-0-"), "default", time.Hour).obj()
		if err := e.Submit(back); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		e.Cycle(t0.Add(time.Duration(i+1) * time.Second))
	}
}

// backlogShape is the queues and backlog of baselineBacklog.
type backlogShape struct {
	cohorts, queues, backlog int
	quiet, tas               bool
}

// releaseOne ends the first running Job of cohort 0 and submits a small
// one to its queue in its place, so the backlog stays as large.
func releaseOne(b *testing.B, e *Engine, running []string, backlog, i int) []string {
	if len(running) == 0 {
		b.Fatalf("iteration %d: nothing running in cohort 0 to end", i)
	}
	if err := e.Remove(running[0]); err != nil {
		b.Fatal(err)
	}
	ns, _, _ := strings.Cut(running[0], "/")
	refill := baselineJob(e.nodes != nil, ns, fmt.Sprintf("refill%07d", i), baselineClasses[0]).
		at(time.Duration(backlog+i) * time.Millisecond).obj()
	if err := e.Submit(refill); err != nil {
		b.Fatal(err)
	}
	return running[1:]
}

// baselineClasses are the baseline's small, medium and large Jobs.
var baselineClasses = []struct {
	prio int32
	cpu  int
	pods int32
}{{50, 1000, 2}, {100, 5000, 4}, {200, 20_000, 8}}

// baselineJob is a Job of class cl: one pod, or cl.pods required in one
// rack on the topology-aware flavor.
func baselineJob(tas bool, ns, name string, cl struct {
	prio int32
	cpu  int
	pods int32
}) *wlBuilder {
	pods := cl.pods
	req := TopologyRequest{}
	if tas {
		req.Required = lvlRack
	} else {
		pods = 1
	}
	return newWL(ns, name).prio(cl.prio).pods("main", pods, "cpu", cl.cpu/int(pods)).topology(req)
}

// baselineBacklog is an engine with the baseline's queues in the given
// shape, each full with one running large Job and sh.backlog waiting Jobs
// of the baseline's mix (70 % small, 20 % medium, 10 % large), after its
// first cycle; it returns what runs in cohort 0.
func baselineBacklog(b *testing.B, sh backlogShape) (*Engine, []string) {
	b.Helper()
	cfg := Config{Flavors: flavors("default")}
	var nodes []Node
	if sh.tas {
		cfg.Flavors[0].TopologyName, cfg.Flavors[0].NodeLabels = "dc", map[string]string{"pool": "gpu"}
		cfg.Topologies = []Topology{{Name: "dc", Levels: []string{lvlBlock, lvlRack, "kubernetes.io/hostname"}}}
		for r := range 10 {
			for n := range 64 {
				name := fmt.Sprintf("b0r%dn%d", r, n)
				nodes = append(nodes, Node{Name: name, Labels: map[string]string{"pool": "gpu", lvlBlock: "b0", lvlRack: fmt.Sprintf("r%d", r), "kubernetes.io/hostname": name},
					Allocatable: map[string]int64{"cpu": 96_000, "pods": 110}})
			}
		}
	}
	for c := range sh.cohorts {
		for q := range sh.queues {
			name := fmt.Sprintf("cq-%d-%d", c, q)
			cfg.ClusterQueues = append(cfg.ClusterQueues, newCQ(name).cohort(fmt.Sprintf("cohort-%d", c)).
				quota("default", "cpu", 20_000, Limited(100_000)).preemption(LowerPriority, Any).obj())
			cfg.LocalQueues = append(cfg.LocalQueues, LocalQueue{Namespace: "ns-" + name, Name: "lq", ClusterQueue: name, StopPolicy: StopNone})
		}
	}
	opts := []Option{WithDeferredEviction()}
	if sh.quiet {
		opts = append(opts, WithQuietPending())
	}
	e := New(cfg, opts...)
	if sh.tas {
		e.SetNodes(nodes)
	}
	for _, cq := range cfg.ClusterQueues {
		ns := "ns-" + cq.Name
		if err := e.Submit(baselineJob(sh.tas, ns, "running", baselineClasses[2]).obj()); err != nil {
			b.Fatal(err)
		}
		for i := range sh.backlog {
			class := baselineClasses[0]
			switch {
			case i%10 == 9:
				class = baselineClasses[2]
			case i%10 >= 7:
				class = baselineClasses[1]
			}
			w := baselineJob(sh.tas, ns, fmt.Sprintf("w%05d", i), class).at(time.Duration(i) * time.Millisecond).obj()
			if err := e.Submit(w); err != nil {
				b.Fatal(err)
			}
		}
	}
	var running []string
	for _, d := range e.Cycle(t0) {
		if d.Kind == KindAdmitted && strings.HasPrefix(d.Key, "ns-cq-0-") {
			running = append(running, d.Key)
		}
	}
	return e, running
}

// BenchmarkSubmit measures what adding a waiting workload costs, its
// requests checked against MaxAmount included: the work every submitted
// Job does once in the admission service.
func BenchmarkSubmit(b *testing.B) {
	b.ReportAllocs()
	cfg := Config{Flavors: flavors("f"), ClusterQueues: []ClusterQueue{newCQ("cq").quota("f", "cpu", 1000).quota("f", "gpu", 8).obj()},
		LocalQueues: lqs("ns", "cq")}
	e := New(cfg)
	for i := range b.N {
		w := newWL("ns", fmt.Sprintf("w%d", i)).pods("launcher", 1, "cpu", 500).pods("workers", 4, "cpu", 2000, "gpu", 1).obj()
		if err := e.Submit(w); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPendingView: the view the admission service takes for the
// pending API, the web view and metrics, with 100,000 workloads waiting
// in 1,000 queues (taken at most once per cycle interval, and only while
// queries wait).
func BenchmarkPendingView(b *testing.B) {
	e := benchEngine(b, BestEffortFIFO, 1, true)
	e.Cycle(t0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if v := e.PendingView(); len(v.byCQ) != benchCohorts*benchQueuesPer {
			b.Fatalf("view of %d queues", len(v.byCQ))
		}
	}
}

// BenchmarkQueueStats: what the admission service's view adds for the
// metrics and the web view besides the pending view — every ClusterQueue's,
// LocalQueue's and cohort's stats — on the same engine (100,000 waiting,
// 1,000 ClusterQueues and LocalQueues, 100 cohorts).
func BenchmarkQueueStats(b *testing.B) {
	e := benchEngine(b, BestEffortFIFO, 1, true)
	e.Cycle(t0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		qs, lqs, cs := e.Stats(t0), e.LocalQueueStats(t0), e.CohortStats()
		if len(qs) != benchCohorts*benchQueuesPer || len(lqs) != benchCohorts*benchQueuesPer || len(cs) != benchCohorts {
			b.Fatalf("stats of %d ClusterQueues, %d LocalQueues, %d cohorts", len(qs), len(lqs), len(cs))
		}
	}
}
