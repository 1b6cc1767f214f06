package simulate

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// step is one transition as the tests compare it: when, what, to whom and
// the data that matters for the type.
type step struct {
	At      time.Duration
	Type    string // last part of the CloudEvents type
	Subject string
	// Detail: the ClusterQueue and pod sets for admitted ("cq main×4
	// cpu=f"), "reason by preemptor" for preempted, the reason for
	// pending and evicted, the ClusterQueue for finished.
	Detail string
}

func (s step) String() string {
	return fmt.Sprintf("%s %s %s %s", s.At, s.Type, s.Subject, s.Detail)
}

const docHead = "apiVersion: sluice.dev/v1beta1\n"

// flavor, clusterQueue, localQueue and workload build documents; spec is
// YAML indented by two spaces, without the "spec:" line.
func flavor(name string) string {
	return docHead + "kind: ResourceFlavor\nmetadata: {name: " + name + "}\n"
}

func flavorWithLabels(name, labels string) string {
	return docHead + "kind: ResourceFlavor\nmetadata: {name: " + name + "}\nspec:\n  nodeLabels: " + labels + "\n"
}

func clusterQueue(name, spec string) string {
	return docHead + "kind: ClusterQueue\nmetadata: {name: " + name + "}\nspec:\n  namespaceSelector: {}\n" + spec
}

func localQueue(ns, name, spec string) string {
	return docHead + "kind: LocalQueue\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n" + spec
}

func workload(ns, name, spec string) string {
	return docHead + "kind: SimulatedWorkload\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n" + spec
}

// cpuQueue is a ClusterQueue spec with one flavor of cpu.
func cpuQueue(flavor string, nominal string, extra string) string {
	return extra + `  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: ` + flavor + `
      resources: [{name: cpu, nominalQuota: ` + nominal + `}]
`
}

func scenario(docs ...string) string { return strings.Join(docs, "---\n") }

func load(t *testing.T, yaml string) *Scenario {
	t.Helper()
	sc, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(yaml)}})
	if err != nil {
		t.Fatalf("Load: %v\n%s", err, yaml)
	}
	return sc
}

func run(t *testing.T, yaml string, opts Options) []Record {
	t.Helper()
	recs, err := Run(load(t, yaml), opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(recs) == 0 || recs[len(recs)-1].Type != "dev.sluice.simulation.v1.summary" {
		t.Fatalf("the last record is not the summary: %+v", recs)
	}
	return recs
}

// steps turns records (not the summary) into steps, keeping only the
// given types (all if none).
func steps(t *testing.T, recs []Record, types ...string) []step {
	t.Helper()
	keep := map[string]bool{}
	for _, ty := range types {
		keep[ty] = true
	}
	var out []step
	for _, r := range recs {
		d, ok := r.Data.(WorkloadData)
		if !ok {
			continue
		}
		ty := r.Type[strings.LastIndex(r.Type, ".")+1:]
		if len(keep) > 0 && !keep[ty] {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, r.Time)
		if err != nil {
			t.Fatalf("record %s: time %q: %v", r.ID, r.Time, err)
		}
		s := step{At: at.Sub(DefaultStart), Type: ty, Subject: r.Subject}
		switch ty {
		case "admitted":
			var parts []string
			for _, ps := range d.PodSets {
				var fl []string
				for res, f := range ps.Flavors {
					fl = append(fl, res+"="+f)
				}
				sort.Strings(fl)
				parts = append(parts, fmt.Sprintf("%s×%d %s", ps.Name, ps.Count, strings.Join(fl, ",")))
			}
			s.Detail = d.ClusterQueue + " " + strings.Join(parts, " ")
		case "resized":
			var parts []string
			for _, ps := range d.PodSets {
				parts = append(parts, fmt.Sprintf("%s×%d", ps.Name, ps.Count))
			}
			s.Detail = d.ClusterQueue + " " + strings.Join(parts, " ") + " " + d.Reason
		case "preempted":
			s.Detail = d.Reason + " by " + d.Preemptor
		case "pending", "evicted":
			s.Detail = d.Reason
		case "finished":
			s.Detail = d.ClusterQueue
		}
		if r.Subject != d.Namespace+"/"+d.Name {
			t.Errorf("record %s: subject %q but data names %s/%s", r.ID, r.Subject, d.Namespace, d.Name)
		}
		out = append(out, s)
	}
	return out
}

func summaryOf(t *testing.T, recs []Record) Summary {
	t.Helper()
	s, ok := recs[len(recs)-1].Data.(Summary)
	if !ok {
		t.Fatalf("summary data is %T", recs[len(recs)-1].Data)
	}
	return s
}

func workloadResult(t *testing.T, s Summary, key string) WorkloadResult {
	t.Helper()
	for _, w := range s.Workloads {
		if w.Namespace+"/"+w.Name == key {
			return w
		}
	}
	t.Fatalf("summary has no workload %s", key)
	return WorkloadResult{}
}

func resourceResult(t *testing.T, s Summary, cq, flavor, res string) ResourceResult {
	t.Helper()
	for _, q := range s.ClusterQueues {
		if q.Name != cq {
			continue
		}
		for _, r := range q.Resources {
			if r.Flavor == flavor && r.Resource == res {
				return r
			}
		}
	}
	t.Fatalf("summary has no %s %s/%s", cq, flavor, res)
	return ResourceResult{}
}

// at renders an elapsed time as the summary does.
func at(d time.Duration) string { return DefaultStart.Add(d).Format(time.RFC3339Nano) }

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

// oneQueue is a flavor "default", a ClusterQueue "cq" with 4 CPUs and the
// LocalQueue default/lq.
func oneQueue(extra string) []string {
	return []string{
		flavor("default"),
		clusterQueue("cq", cpuQueue("default", "4", extra)),
		localQueue("default", "lq", "  clusterQueue: cq\n"),
	}
}

func cpuJob(name, submitAt, runtime string, cpus int) string {
	spec := "  queueName: lq\n"
	if submitAt != "" {
		spec += "  submitAt: " + submitAt + "\n"
	}
	if runtime != "" {
		spec += "  runtime: " + runtime + "\n"
	}
	spec += fmt.Sprintf("  podSets: [{name: main, count: %d, requests: {cpu: 1}}]\n", cpus)
	return workload("default", name, spec)
}

func TestQueueingAdmitsWhenQuotaFrees(t *testing.T) {
	yaml := scenario(append(oneQueue(""),
		cpuJob("a", "", "10m", 3),
		cpuJob("b", "1m", "5m", 2),
		cpuJob("c", "2m", "20m", 1),
	)...)
	got := steps(t, run(t, yaml, Options{}))
	want := []step{
		{0, "submitted", "default/a", ""},
		{0, "admitted", "default/a", "cq main×3 cpu=default"},
		{time.Minute, "submitted", "default/b", ""},
		{time.Minute, "pending", "default/b", "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1"},
		// BestEffortFIFO: c fits next to a, so it goes ahead of b.
		{2 * time.Minute, "submitted", "default/c", ""},
		{2 * time.Minute, "admitted", "default/c", "cq main×1 cpu=default"},
		{10 * time.Minute, "finished", "default/a", "cq"},
		{10 * time.Minute, "admitted", "default/b", "cq main×2 cpu=default"},
		{15 * time.Minute, "finished", "default/b", "cq"},
		{22 * time.Minute, "finished", "default/c", "cq"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	s := summaryOf(t, run(t, yaml, Options{}))
	b := workloadResult(t, s, "default/b")
	if b.State != "finished" || b.Submitted != at(time.Minute) || b.Admitted != at(10*time.Minute) || b.Finished != at(15*time.Minute) ||
		b.WaitSeconds == nil || *b.WaitSeconds != 540 || b.Admissions != 1 {
		t.Errorf("summary of default/b = %+v", b)
	}
	if s.FinishedCount != 3 || s.PendingCount != 0 || s.AdmittedCount != 0 || s.End != at(22*time.Minute) || s.ElapsedSeconds != 1320 {
		t.Errorf("summary counts = %+v", s)
	}
}

func TestStrictFIFOHeadBlocks(t *testing.T) {
	yaml := scenario(append(oneQueue("  queueingStrategy: StrictFIFO\n"),
		cpuJob("a", "", "10m", 3),
		cpuJob("b", "1m", "5m", 2),
		cpuJob("c", "2m", "20m", 1),
	)...)
	got := steps(t, run(t, yaml, Options{}), "admitted", "pending")
	want := []step{
		{0, "admitted", "default/a", "cq main×3 cpu=default"},
		{time.Minute, "pending", "default/b", "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1"},
		{2 * time.Minute, "pending", "default/c", "waiting behind default/b in ClusterQueue cq"},
		{10 * time.Minute, "admitted", "default/b", "cq main×2 cpu=default"},
		{10 * time.Minute, "admitted", "default/c", "cq main×1 cpu=default"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// TestPendingOnlyWhenReasonChanges: a workload that waits through several
// cycles with the same reason gets one pending record.
func TestPendingOnlyWhenReasonChanges(t *testing.T) {
	docs := oneQueue("  queueingStrategy: StrictFIFO\n")
	docs = append(docs, cpuJob("big", "", "1h", 4), cpuJob("waiter", "1m", "1m", 4))
	for i := 2; i < 8; i++ {
		docs = append(docs, cpuJob(fmt.Sprintf("other-%d", i), fmt.Sprintf("%dm", i), "", 1))
	}
	got := steps(t, run(t, scenario(docs...), Options{}), "pending")
	var waiter []step
	for _, s := range got {
		if s.Subject == "default/waiter" {
			waiter = append(waiter, s)
		}
	}
	want := []step{
		{time.Minute, "pending", "default/waiter", "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 0"},
	}
	if diff := cmp.Diff(want, waiter); diff != "" {
		t.Errorf("pending records of default/waiter (-want +got):\n%s", diff)
	}
}

func TestFinishAndSubmitAtTheSameInstant(t *testing.T) {
	yaml := scenario(append(oneQueue(""),
		cpuJob("a", "", "10m", 4),
		cpuJob("b", "10m", "5m", 4),
	)...)
	got := steps(t, run(t, yaml, Options{}))
	want := []step{
		{0, "submitted", "default/a", ""},
		{0, "admitted", "default/a", "cq main×4 cpu=default"},
		{10 * time.Minute, "finished", "default/a", "cq"},
		{10 * time.Minute, "submitted", "default/b", ""},
		{10 * time.Minute, "admitted", "default/b", "cq main×4 cpu=default"},
		{15 * time.Minute, "finished", "default/b", "cq"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// twoFlavors is a ClusterQueue "cq" with 4 CPUs in flavor fast and 4 in
// slow, preempting lower priorities in the queue.
func twoFlavors(extra string) []string {
	return []string{
		flavorWithLabels("fast", "{tier: fast}"),
		flavorWithLabels("slow", "{tier: slow}"),
		clusterQueue("cq", `  preemption: {withinClusterQueue: LowerPriority}
`+extra+`  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: fast
      resources: [{name: cpu, nominalQuota: 4}]
    - name: slow
      resources: [{name: cpu, nominalQuota: 4}]
`),
		localQueue("default", "lq", "  clusterQueue: cq\n"),
	}
}

// lowThenHigh is twoFlavors with low running 20 minutes on all of fast
// from the start, and high, which needs fast, submitted at 5m.
func lowThenHigh() string {
	return scenario(append(twoFlavors(""),
		workload("default", "low", `  queueName: lq
  priority: 0
  runtime: 20m
  podSets: [{name: main, count: 4, requests: {cpu: 1}}]
`),
		workload("default", "high", `  queueName: lq
  priority: 10
  submitAt: 5m
  runtime: 10m
  podSets: [{name: main, count: 4, requests: {cpu: 1}, nodeSelector: {tier: fast}}]
`),
	)...)
}

// TestPreemptionAtTheSameInstant: the preemptor is admitted at the instant
// of the preemption, and the victim, back in its queue, is admitted again
// at that instant in the other flavor, its runtime starting over.
func TestPreemptionAtTheSameInstant(t *testing.T) {
	yaml := lowThenHigh()
	recs := run(t, yaml, Options{})
	got := steps(t, recs)
	want := []step{
		{0, "submitted", "default/low", ""},
		{0, "admitted", "default/low", "cq main×4 cpu=fast"},
		{5 * time.Minute, "submitted", "default/high", ""},
		{5 * time.Minute, "preempted", "default/low", "InClusterQueue by default/high"},
		{5 * time.Minute, "admitted", "default/high", "cq main×4 cpu=fast"},
		{5 * time.Minute, "admitted", "default/low", "cq main×4 cpu=slow"},
		{15 * time.Minute, "finished", "default/high", "cq"},
		{25 * time.Minute, "finished", "default/low", "cq"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	low := workloadResult(t, summaryOf(t, recs), "default/low")
	if low.Admissions != 2 || low.Preemptions != 1 || low.Admitted != at(5*time.Minute) || low.Finished != at(25*time.Minute) {
		t.Errorf("summary of default/low = %+v", low)
	}
	// The preempted record names the victim's queue.
	for _, r := range recs {
		if strings.HasSuffix(r.Type, ".preempted") {
			if d := r.Data.(WorkloadData); d.ClusterQueue != "cq" || d.Priority != 0 {
				t.Errorf("preempted data = %+v", d)
			}
		}
	}
}

// TestStopDelayHoldsTheVictimsQuota: with Options.StopDelay a victim keeps
// its quota while it stops, the preemptor waits for it, and the victim is
// back in its queue (here admitted in the other flavor) only once stopped.
func TestStopDelayHoldsTheVictimsQuota(t *testing.T) {
	yaml := lowThenHigh()
	recs := run(t, yaml, Options{StopDelay: 30 * time.Second})
	got := steps(t, recs, "preempted", "admitted", "finished")
	stopped := 5*time.Minute + 30*time.Second
	want := []step{
		{0, "admitted", "default/low", "cq main×4 cpu=fast"},
		{5 * time.Minute, "preempted", "default/low", "InClusterQueue by default/high"},
		{stopped, "admitted", "default/high", "cq main×4 cpu=fast"},
		{stopped, "admitted", "default/low", "cq main×4 cpu=slow"},
		{stopped + 10*time.Minute, "finished", "default/high", "cq"},
		{stopped + 20*time.Minute, "finished", "default/low", "cq"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	// While low stops, high waits for it and says so.
	var waited bool
	for _, r := range recs {
		if d, ok := r.Data.(WorkloadData); ok && strings.HasSuffix(r.Type, ".pending") && d.Name == "high" {
			waited = waited || strings.Contains(d.Reason, "preempted")
		}
	}
	if !waited {
		t.Error("no pending record says default/high waits for its victim")
	}
}

// TestPreemptedWorkloadTriesNextFlavorWhenNoCandidates: with
// whenCanPreempt: Preempt, a flavor where preemption would be needed but
// nobody can be preempted must not end the flavor search (Kueue's
// preemption oracle returns NoCandidates and the next flavor is tried). The
// victim here fits in "slow" and should be readmitted at once.
func TestPreemptedWorkloadTriesNextFlavorWhenNoCandidates(t *testing.T) {
	yaml := scenario(append(twoFlavors("  flavorFungibility: {whenCanPreempt: Preempt}\n"),
		workload("default", "low", `  queueName: lq
  priority: 0
  runtime: 20m
  podSets: [{name: main, count: 4, requests: {cpu: 1}}]
`),
		workload("default", "high", `  queueName: lq
  priority: 10
  submitAt: 5m
  runtime: 10m
  podSets: [{name: main, count: 4, requests: {cpu: 1}}]
`),
	)...)
	got := steps(t, run(t, yaml, Options{}), "preempted", "admitted", "finished")
	want := []step{
		{0, "admitted", "default/low", "cq main×4 cpu=fast"},
		// Preempt: high stops at fast, where it can preempt low.
		{5 * time.Minute, "preempted", "default/low", "InClusterQueue by default/high"},
		{5 * time.Minute, "admitted", "default/high", "cq main×4 cpu=fast"},
		{5 * time.Minute, "admitted", "default/low", "cq main×4 cpu=slow"},
		{15 * time.Minute, "finished", "default/high", "cq"},
		{25 * time.Minute, "finished", "default/low", "cq"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// reclaim is two ClusterQueues of 4 GPUs in one cohort; team-a's sweep
// borrows team-b's GPUs until team-b's train reclaims them.
func reclaim() string {
	gpuQueue := func(extra string) string {
		return extra + `  cohort: research
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
`
	}
	return scenario(
		flavor("a100"),
		clusterQueue("cq-a", gpuQueue("")),
		clusterQueue("cq-b", gpuQueue("  preemption: {reclaimWithinCohort: Any}\n")),
		localQueue("team-a", "lq", "  clusterQueue: cq-a\n"),
		localQueue("team-b", "lq", "  clusterQueue: cq-b\n"),
		workload("team-a", "sweep", `  queueName: lq
  runtime: 30m
  podSets: [{name: main, count: 8, requests: {nvidia.com/gpu: 1}}]
`),
		workload("team-b", "train", `  queueName: lq
  submitAt: 5m
  runtime: 10m
  podSets: [{name: main, count: 4, requests: {nvidia.com/gpu: 1}}]
`),
	)
}

// TestEvictedWorkloadRestartsRuntime: a preempted workload runs its whole
// runtime again from its next admission.
func TestEvictedWorkloadRestartsRuntime(t *testing.T) {
	recs := run(t, reclaim(), Options{})
	got := steps(t, recs, "admitted", "preempted", "finished")
	want := []step{
		{0, "admitted", "team-a/sweep", "cq-a main×8 nvidia.com/gpu=a100"},
		{5 * time.Minute, "preempted", "team-a/sweep", "InCohortReclamation by team-b/train"},
		{5 * time.Minute, "admitted", "team-b/train", "cq-b main×4 nvidia.com/gpu=a100"},
		{15 * time.Minute, "finished", "team-b/train", "cq-b"},
		{15 * time.Minute, "admitted", "team-a/sweep", "cq-a main×8 nvidia.com/gpu=a100"},
		// 15m + 30m, not 15m + the 25m left at the preemption.
		{45 * time.Minute, "finished", "team-a/sweep", "cq-a"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	s := summaryOf(t, recs)
	sweep := workloadResult(t, s, "team-a/sweep")
	if sweep.Admissions != 2 || sweep.Preemptions != 1 || sweep.Evictions != 0 ||
		sweep.Admitted != at(15*time.Minute) || sweep.Finished != at(45*time.Minute) {
		t.Errorf("summary of team-a/sweep = %+v", sweep)
	}
	if s.PreemptionCount != 1 {
		t.Errorf("summary preemptions = %d, want 1", s.PreemptionCount)
	}
	// Borrowing shows as utilization above 1: 8 GPUs for 5m and 30m over
	// 45m is 16800 GPU-seconds / 2700 s = 6.222222 on a nominal of 4.
	r := resourceResult(t, s, "cq-a", "a100", "nvidia.com/gpu")
	if r.Nominal != 4 || !near(r.AverageUsage, 6.222222) || !near(r.Utilization, 1.555556) {
		t.Errorf("cq-a a100/nvidia.com/gpu = %+v, want nominal 4, average 6.222222, utilization 1.555556", r)
	}
}

func TestPreAdmittedWorkloadFinishesAtAdmittedAtPlusRuntime(t *testing.T) {
	yaml := scenario(append(oneQueue(""),
		workload("default", "old", `  queueName: lq
  runtime: 30m
  podSets: [{name: main, count: 2, requests: {cpu: 1}}]
  admitted:
    clusterQueue: cq
    at: -10m
    podSets: [{name: main, count: 2, flavors: {cpu: default}}]
`),
		workload("default", "fresh", `  queueName: lq
  runtime: 5m
  podSets: [{name: main, count: 2, requests: {cpu: 1}}]
  admitted:
    clusterQueue: cq
    podSets: [{name: main, count: 2, flavors: {cpu: default}}]
`),
		cpuJob("next", "", "10m", 2),
	)...)
	recs := run(t, yaml, Options{})
	got := steps(t, recs)
	want := []step{
		{0, "submitted", "default/old", ""},
		{0, "admitted", "default/old", "cq main×2 cpu=default"},
		{0, "submitted", "default/fresh", ""},
		{0, "admitted", "default/fresh", "cq main×2 cpu=default"},
		{0, "submitted", "default/next", ""},
		{0, "pending", "default/next", "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0"},
		{5 * time.Minute, "finished", "default/fresh", "cq"},
		{5 * time.Minute, "admitted", "default/next", "cq main×2 cpu=default"},
		{15 * time.Minute, "finished", "default/next", "cq"},
		// -10m + 30m.
		{20 * time.Minute, "finished", "default/old", "cq"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	old := workloadResult(t, summaryOf(t, recs), "default/old")
	if old.Admitted != at(-10*time.Minute) || old.Finished != at(20*time.Minute) || old.WaitSeconds != nil {
		t.Errorf("summary of default/old = %+v", old)
	}
}

// stopped is a ClusterQueue "cq" with the given stop policy, two
// LocalQueues (team-x/lq with lqPolicy, team-y/lq running) and a workload
// in each admitted 5m before the start.
func stopped(cqPolicy, lqPolicy string) string {
	cqExtra := ""
	if cqPolicy != "" {
		cqExtra = "  stopPolicy: " + cqPolicy + "\n"
	}
	lqExtra := ""
	if lqPolicy != "" {
		lqExtra = "  stopPolicy: " + lqPolicy + "\n"
	}
	running := func(ns string) string {
		return workload(ns, "running", `  queueName: lq
  runtime: 20m
  podSets: [{name: main, count: 1, requests: {cpu: 1}}]
  admitted:
    clusterQueue: cq
    at: -5m
    podSets: [{name: main, count: 1, flavors: {cpu: default}}]
`)
	}
	later := func(ns string) string {
		return workload(ns, "later", `  queueName: lq
  submitAt: 1m
  runtime: 1m
  podSets: [{name: main, count: 1, requests: {cpu: 1}}]
`)
	}
	return scenario(
		flavor("default"),
		clusterQueue("cq", cpuQueue("default", "4", cqExtra)),
		localQueue("team-x", "lq", "  clusterQueue: cq\n"+lqExtra),
		localQueue("team-y", "lq", "  clusterQueue: cq\n"),
		running("team-x"), running("team-y"), later("team-x"), later("team-y"),
	)
}

func TestHoldAndDrainClusterQueue(t *testing.T) {
	recs := run(t, stopped("HoldAndDrain", ""), Options{})
	got := steps(t, recs, "evicted", "pending", "admitted", "finished")
	const why = "ClusterQueue cq is stopped (stopPolicy HoldAndDrain)"
	want := []step{
		{0, "admitted", "team-x/running", "cq main×1 cpu=default"},
		{0, "admitted", "team-y/running", "cq main×1 cpu=default"},
		{0, "evicted", "team-x/running", "ClusterQueueStopped"},
		{0, "evicted", "team-y/running", "ClusterQueueStopped"},
		{0, "pending", "team-x/running", why},
		{0, "pending", "team-y/running", why},
		{time.Minute, "pending", "team-x/later", why},
		{time.Minute, "pending", "team-y/later", why},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	s := summaryOf(t, recs)
	x := workloadResult(t, s, "team-x/running")
	if x.State != "pending" || x.Evictions != 1 || x.Preemptions != 0 || x.Reason != why {
		t.Errorf("summary of team-x/running = %+v", x)
	}
	if r := resourceResult(t, s, "cq", "default", "cpu"); r.AverageUsage != 0 {
		t.Errorf("usage of a queue drained at 0 = %+v, want 0", r)
	}
}

func TestHoldAndDrainLocalQueue(t *testing.T) {
	recs := run(t, stopped("", "HoldAndDrain"), Options{})
	got := steps(t, recs, "evicted", "pending", "admitted", "finished")
	const why = "LocalQueue team-x/lq is stopped (stopPolicy HoldAndDrain)"
	want := []step{
		{0, "admitted", "team-x/running", "cq main×1 cpu=default"},
		{0, "admitted", "team-y/running", "cq main×1 cpu=default"},
		{0, "evicted", "team-x/running", "LocalQueueStopped"},
		{0, "pending", "team-x/running", why},
		{time.Minute, "admitted", "team-y/later", "cq main×1 cpu=default"},
		{time.Minute, "pending", "team-x/later", why},
		{2 * time.Minute, "finished", "team-y/later", "cq"},
		{15 * time.Minute, "finished", "team-y/running", "cq"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

func TestHoldKeepsAdmittedWorkloads(t *testing.T) {
	recs := run(t, stopped("Hold", ""), Options{})
	got := steps(t, recs, "evicted", "pending", "finished")
	const why = "ClusterQueue cq is stopped (stopPolicy Hold)"
	want := []step{
		{time.Minute, "pending", "team-x/later", why},
		{time.Minute, "pending", "team-y/later", why},
		{15 * time.Minute, "finished", "team-x/running", "cq"},
		{15 * time.Minute, "finished", "team-y/running", "cq"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// utilization: 4 CPUs and 8Gi. a (2 CPUs, 1Gi) runs 0–10m; b (4 CPUs,
// 2Gi) waits for it and runs 10m–15m.
func utilization() string {
	return scenario(
		flavor("default"),
		clusterQueue("cq", `  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 4}, {name: memory, nominalQuota: 8Gi}]
`),
		localQueue("default", "lq", "  clusterQueue: cq\n"),
		workload("default", "a", `  queueName: lq
  runtime: 10m
  podSets: [{name: main, count: 2, requests: {cpu: 1, memory: 512Mi}}]
`),
		workload("default", "b", `  queueName: lq
  runtime: 5m
  podSets: [{name: main, count: 4, requests: {cpu: 1000m, memory: 512Mi}}]
`),
	)
}

func TestUtilization(t *testing.T) {
	s := summaryOf(t, run(t, utilization(), Options{}))
	// cpu: 2 × 600 s + 4 × 300 s = 2400 CPU-seconds over 900 s.
	cpu := resourceResult(t, s, "cq", "default", "cpu")
	if cpu.Nominal != 4 || !near(cpu.AverageUsage, 2.666667) || !near(cpu.Utilization, 0.666667) {
		t.Errorf("cpu = %+v, want nominal 4, average 2.666667, utilization 0.666667", cpu)
	}
	// memory: 1Gi × 600 s + 2Gi × 300 s = 1200 Gi-seconds over 900 s, in
	// bytes.
	gi := float64(1 << 30)
	mem := resourceResult(t, s, "cq", "default", "memory")
	if mem.Nominal != 8*gi || !near(mem.AverageUsage, 1200*gi/900) || !near(mem.Utilization, 0.166667) {
		t.Errorf("memory = %+v, want nominal %g, average %g, utilization 0.166667", mem, 8*gi, 1200*gi/900)
	}
	if s.End != at(15*time.Minute) || s.ElapsedSeconds != 900 {
		t.Errorf("summary end %s (%gs), want 15m", s.End, s.ElapsedSeconds)
	}
}

func TestUntilCutsTheRun(t *testing.T) {
	recs := run(t, utilization(), Options{Until: 12 * time.Minute})
	got := steps(t, recs, "admitted", "finished")
	want := []step{
		{0, "admitted", "default/a", "cq main×2 cpu=default,memory=default"},
		{10 * time.Minute, "finished", "default/a", "cq"},
		{10 * time.Minute, "admitted", "default/b", "cq main×4 cpu=default,memory=default"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	s := summaryOf(t, recs)
	if s.End != at(12*time.Minute) || s.ElapsedSeconds != 720 {
		t.Errorf("summary end %s (%gs), want 12m", s.End, s.ElapsedSeconds)
	}
	if s.FinishedCount != 1 || s.AdmittedCount != 1 || s.PendingCount != 0 {
		t.Errorf("summary counts: %d finished, %d admitted, %d pending; want 1, 1, 0", s.FinishedCount, s.AdmittedCount, s.PendingCount)
	}
	if b := workloadResult(t, s, "default/b"); b.State != "admitted" || b.Finished != "" {
		t.Errorf("summary of default/b = %+v, want admitted and not finished", b)
	}
	// 2 × 600 s + 4 × 120 s = 1680 CPU-seconds over 720 s.
	cpu := resourceResult(t, s, "cq", "default", "cpu")
	if !near(cpu.AverageUsage, 2.333333) || !near(cpu.Utilization, 0.583333) {
		t.Errorf("cpu = %+v, want average 2.333333, utilization 0.583333", cpu)
	}
	if last := recs[len(recs)-1]; last.Time != at(12*time.Minute) {
		t.Errorf("summary record at %s, want %s", last.Time, at(12*time.Minute))
	}
}

// TestUntilBeforeTheFirstSubmission: nothing happens, and the summary still
// covers the whole span.
func TestUntilBeforeTheFirstSubmission(t *testing.T) {
	yaml := scenario(append(oneQueue(""), cpuJob("late", "1h", "1m", 1))...)
	recs := run(t, yaml, Options{Until: 30 * time.Minute})
	if got := steps(t, recs); len(got) != 0 {
		t.Errorf("steps = %v, want none", got)
	}
	s := summaryOf(t, recs)
	if s.End != at(30*time.Minute) || s.PendingCount != 1 {
		t.Errorf("summary = %+v", s)
	}
}

func TestStartShiftsEveryTime(t *testing.T) {
	start := time.Date(2030, 6, 1, 8, 0, 0, 0, time.UTC)
	recs := run(t, scenario(append(oneQueue(""), cpuJob("a", "90s", "1m", 1))...), Options{Start: start})
	if recs[0].Time != "2030-06-01T08:01:30Z" {
		t.Errorf("first record at %s, want 2030-06-01T08:01:30Z", recs[0].Time)
	}
	s := summaryOf(t, recs)
	if s.Start != "2030-06-01T08:00:00Z" || s.End != "2030-06-01T08:02:30Z" {
		t.Errorf("summary from %s to %s", s.Start, s.End)
	}
}

func TestRunIsDeterministic(t *testing.T) {
	docs := []string{
		flavor("f1"), flavor("f2"),
		clusterQueue("cq-a", `  cohort: all
  preemption: {reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: f1
      resources: [{name: cpu, nominalQuota: 4}, {name: memory, nominalQuota: 8Gi}]
    - name: f2
      resources: [{name: cpu, nominalQuota: 4}, {name: memory, nominalQuota: 8Gi}]
`),
		clusterQueue("cq-b", `  cohort: all
  preemption: {reclaimWithinCohort: Any}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: f1
      resources: [{name: cpu, nominalQuota: 4}, {name: memory, nominalQuota: 8Gi}]
`),
		localQueue("a", "lq", "  clusterQueue: cq-a\n"),
		localQueue("b", "lq", "  clusterQueue: cq-b\n"),
	}
	for i := 0; i < 30; i++ {
		ns := []string{"a", "b"}[i%2]
		docs = append(docs, workload(ns, fmt.Sprintf("w%02d", i), fmt.Sprintf(`  queueName: lq
  priority: %d
  submitAt: %dm
  runtime: %dm
  podSets:
  - {name: one, count: %d, minCount: 1, requests: {cpu: 500m, memory: 1Gi}}
  - {name: two, count: 1, requests: {cpu: 1, memory: 512Mi}}
`, i%3, i%4, 5+i%7, 1+i%5)))
	}
	yaml := scenario(docs...)
	var outs []string
	for i := 0; i < 5; i++ {
		var buf bytes.Buffer
		if err := WriteJSONL(&buf, run(t, yaml, Options{})); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, buf.String())
	}
	for i := 1; i < len(outs); i++ {
		if outs[i] != outs[0] {
			t.Fatalf("run %d differs from run 0:\n%s", i, cmp.Diff(outs[0], outs[i]))
		}
	}
}

func TestLoadRejectsAdmissionToMissingQueue(t *testing.T) {
	doc := scenario(append(oneQueue(""), workload("default", "ghost", `  queueName: lq
  podSets: [{name: main, count: 1, requests: {cpu: 1}}]
  admitted:
    clusterQueue: nowhere
    podSets: [{name: main, count: 1, flavors: {cpu: default}}]
`))...)
	sc, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(doc)}})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Load error = %v, want ErrInvalid", err)
	}
	if sc != nil {
		t.Errorf("Load returned a scenario with an error")
	}
	if want := "spec.admitted.clusterQueue: Not found"; !strings.Contains(err.Error(), want) {
		t.Errorf("Load error = %q, want it to contain %q", err, want)
	}
}

func TestWorkloadInMissingLocalQueueWaits(t *testing.T) {
	yaml := scenario(append(oneQueue(""), workload("default", "lost", `  queueName: nowhere
  runtime: 1m
  podSets: [{name: main, count: 1, requests: {cpu: 1}}]
`))...)
	recs := run(t, yaml, Options{})
	got := steps(t, recs)
	want := []step{
		{0, "submitted", "default/lost", ""},
		{0, "pending", "default/lost", "LocalQueue default/nowhere does not exist"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if w := workloadResult(t, summaryOf(t, recs), "default/lost"); w.State != "pending" || w.Reason == "" {
		t.Errorf("summary of default/lost = %+v", w)
	}
}

// A manifest exported from a cluster running Kueue, apiVersion changed:
// status stanzas (Kueue's fields, unknown to Sluice) and server-set
// metadata are ignored, and Kueue's names (parentName, MayStopSearch) are
// understood.
func TestLoadAcceptsExportedKueueManifests(t *testing.T) {
	sc := load(t, `apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata:
  name: default
  uid: 0b5d1c9e-1111-4222-8333-944455556666
  resourceVersion: "123"
  generation: 1
  creationTimestamp: "2026-01-01T00:00:00Z"
  managedFields: [{manager: kubectl, operation: Apply, apiVersion: kueue.x-k8s.io/v1beta1}]
---
apiVersion: sluice.dev/v1beta1
kind: Cohort
metadata: {name: research}
spec: {parentName: org}
status: {fairSharing: {weightedShare: 0}}
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: cq, resourceVersion: "7"}
spec:
  cohort: research
  namespaceSelector: {}
  flavorFungibility: {whenCanBorrow: MayStopSearch, whenCanPreempt: MayStopSearch}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 4}]
status:
  reservingWorkloads: 0
  flavorsReservation: [{name: default, resources: [{name: cpu, total: "0", borrowed: "0"}]}]
  conditions: [{type: Active, status: "True", reason: Ready, message: Can admit new workloads, lastTransitionTime: "2026-01-01T00:00:00Z"}]
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: ns}
spec: {clusterQueue: cq}
status: {pendingWorkloads: 0, reservingWorkloads: 0, flavorUsage: []}
---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: w, namespace: ns}
spec:
  queueName: lq
  podSets: [{name: main, count: 1, requests: {cpu: "1"}}]
  runtime: 10s
`)
	recs, err := Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Type)
	}
	want := []string{"dev.sluice.workload.v1.submitted", "dev.sluice.workload.v1.admitted", "dev.sluice.workload.v1.finished", "dev.sluice.simulation.v1.summary"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("records (-want +got):\n%s", d)
	}
}

// TestRunEndsWhenOnlyTimeoutsAreLeft: a workload whose pods never get
// ready, without backoffLimitCount, would be evicted and admitted again
// forever; the run stops and says so, after the other workload finished.
func TestRunEndsWhenOnlyTimeoutsAreLeft(t *testing.T) {
	b, err := os.ReadFile("../../examples/wait-for-pods-ready.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(b), "    backoffLimitCount: 1\n", "", 1)
	if yaml == string(b) {
		t.Fatal("the example no longer sets backoffLimitCount")
	}
	sc, err := Load([]Source{{Name: "forever.yaml", R: strings.NewReader(yaml)}})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sum := recs[len(recs)-1].Data.(Summary)
	if !strings.Contains(sum.Stopped, "would time out and be requeued forever") {
		t.Errorf("summary.stopped = %q", sum.Stopped)
	}
	if sum.FinishedCount != 1 {
		t.Errorf("%d finished, want team/first", sum.FinishedCount)
	}
}

// TestFairSharingBlockTurnsItOn: a fairSharing block without enable turns
// fair sharing on, as waitForPodsReady's does (Kueue v1beta2 has no
// switch); enable: false keeps it off.
func TestFairSharingBlockTurnsItOn(t *testing.T) {
	cases := []struct {
		name, block string
		want        bool
	}{
		{name: "no block", block: "", want: false},
		{name: "block without enable", block: "fairSharing: {preemptionStrategies: [LessThanInitialShare]}\n", want: true},
		{name: "empty block", block: "fairSharing: {}\n", want: true},
		{name: "enable true", block: "fairSharing: {enable: true}\n", want: true},
		{name: "enable false", block: "fairSharing: {enable: false, preemptionStrategies: [LessThanInitialShare]}\n", want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sc := load(t, "apiVersion: sluice.dev/v1beta1\nkind: Configuration\n"+tc.block)
			if got := sc.Config.FairSharing; got != tc.want {
				t.Errorf("fair sharing on = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMaxExecutionTimeCountsOverAdmissions: a workload's run before its
// preemption counts toward its maximum execution time; when the total
// reaches it, the workload is evicted and never admitted again.
func TestMaxExecutionTimeCountsOverAdmissions(t *testing.T) {
	yaml := strings.Replace(reclaim(), "  runtime: 30m\n", "  runtime: 30m\n  maximumExecutionTimeSeconds: 1200\n", 1)
	recs := run(t, yaml, Options{})
	got := steps(t, recs, "admitted", "preempted", "evicted", "finished")
	want := []step{
		{0, "admitted", "team-a/sweep", "cq-a main×8 nvidia.com/gpu=a100"},
		{5 * time.Minute, "preempted", "team-a/sweep", "InCohortReclamation by team-b/train"},
		{5 * time.Minute, "admitted", "team-b/train", "cq-b main×4 nvidia.com/gpu=a100"},
		{15 * time.Minute, "finished", "team-b/train", "cq-b"},
		{15 * time.Minute, "admitted", "team-a/sweep", "cq-a main×8 nvidia.com/gpu=a100"},
		// 5m in its first admission, 15m in its second: 20m in all.
		{30 * time.Minute, "evicted", "team-a/sweep", "DeactivatedDueToMaximumExecutionTimeExceeded"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	sweep := workloadResult(t, summaryOf(t, recs), "team-a/sweep")
	if sweep.State == "finished" || sweep.Evictions != 1 {
		t.Errorf("summary of team-a/sweep = %+v, want one eviction and not finished", sweep)
	}
}

func TestLoadRejectsMaxExecutionTimeBelowOne(t *testing.T) {
	yaml := strings.Replace(reclaim(), "  runtime: 30m\n", "  runtime: 30m\n  maximumExecutionTimeSeconds: 0\n", 1)
	_, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(yaml)}})
	if err == nil || !strings.Contains(err.Error(), "spec.maximumExecutionTimeSeconds") || !strings.Contains(err.Error(), "team-a/sweep") {
		t.Errorf("Load() error = %v, want one naming team-a/sweep's spec.maximumExecutionTimeSeconds", err)
	}
}

// TestResourceTransformations: with Kueue's resources block, a workload is
// queued by its transformed requests: MIG slices count as accelerator
// memory (Replace), and a resource under an excluded prefix is not
// counted, so a ClusterQueue that covers neither input admits it.
func TestResourceTransformations(t *testing.T) {
	config := docHead + `kind: Configuration
resources:
  excludeResourcePrefixes: [example.com/nic]
  transformations:
  - input: nvidia.com/mig-1g.5gb
    strategy: Replace
    outputs: {example.com/accelerator-memory: 5Gi}
`
	queue := clusterQueue("cq", `  resourceGroups:
  - coveredResources: [cpu, example.com/accelerator-memory]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 8}, {name: example.com/accelerator-memory, nominalQuota: 20Gi}]
`)
	job := func(name string, slices int) string {
		return workload("default", name, fmt.Sprintf(`  queueName: lq
  runtime: 10m
  podSets: [{name: main, count: 1, requests: {cpu: 1, example.com/nic: 1, nvidia.com/mig-1g.5gb: %d}}]
`, slices))
	}
	yaml := scenario(config, flavor("default"), queue, localQueue("default", "lq", "  clusterQueue: cq\n"),
		job("three", 3), job("two", 2))
	got := steps(t, run(t, yaml, Options{}), "admitted", "pending")
	want := []step{
		{0, "admitted", "default/three", "cq main×1 cpu=default,example.com/accelerator-memory=default"},
		// 15Gi of 20Gi taken: 2 slices (10Gi) wait.
		{0, "pending", "default/two", "pod set main: insufficient unused quota for example.com/accelerator-memory in flavor default: requested 10Gi, available 5Gi"},
		{10 * time.Minute, "admitted", "default/two", "cq main×1 cpu=default,example.com/accelerator-memory=default"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}

	// Without the block, the same workloads ask for resources the
	// ClusterQueue does not cover.
	plain := scenario(flavor("default"), queue, localQueue("default", "lq", "  clusterQueue: cq\n"), job("three", 3))
	got = steps(t, run(t, plain, Options{}), "admitted", "pending")
	if len(got) != 1 || got[0].Type != "pending" {
		t.Errorf("without transformations: steps %v, want one pending", got)
	}
}

func TestLoadRejectsABadResourcesBlock(t *testing.T) {
	yaml := docHead + `kind: Configuration
resources:
  transformations:
  - {input: cpu, strategy: Keep}
`
	_, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(yaml)}})
	if err == nil || !strings.Contains(err.Error(), "resources.transformations[0].strategy") {
		t.Errorf("Load() error = %v, want one naming resources.transformations[0].strategy", err)
	}
}
