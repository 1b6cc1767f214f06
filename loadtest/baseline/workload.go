package baseline

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Class is one kind of workload submitted to every ClusterQueue.
type Class struct {
	Name     string
	Count    int           // per ClusterQueue at scale 1
	Every    time.Duration // one is created this often
	CPU      int64         // whole CPUs per Job
	Runtime  time.Duration
	Priority int32
	// Pods is the Job's parallelism (0: one pod), sharing CPU evenly.
	Pods int32
	// Annotations go on the pod template (topology requests).
	Annotations map[string]string
}

// pods is the Job's pod count.
func (c Class) pods() int32 { return max(1, c.Pods) }

// TopologyLevels are the node labels of the topology run's Topology.
var TopologyLevels = []string{"cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"}

// TopologyClasses are Kueue's topology-aware scheduling performance sets
// (test/performance/scheduler/configs/tas): the baseline's three sizes,
// each as 2, 4 or 8 pods sharing its CPU, split three ways: all pods in
// one rack (required), as few racks as can hold them (preferred), and
// slices of 1, 2 or 4 pods each in one rack (Kueue's "balanced").
var TopologyClasses = func() []Class {
	rack := TopologyLevels[1]
	var out []Class
	for _, size := range []struct {
		name           string
		counts         [3]int
		every, runtime time.Duration
		cpu            int64
		pods, slice    int32
		priority       int32
	}{
		{"small", [3]int{120, 120, 110}, 100 * time.Millisecond, 200 * time.Millisecond, 1, 2, 1, 50},
		{"medium", [3]int{34, 33, 33}, 500 * time.Millisecond, 500 * time.Millisecond, 5, 4, 2, 100},
		{"large", [3]int{17, 17, 16}, 1200 * time.Millisecond, time.Second, 20, 8, 4, 200},
	} {
		for i, how := range []map[string]string{
			{"sluice.dev/podset-required-topology": rack},
			{"sluice.dev/podset-preferred-topology": rack},
			{"sluice.dev/podset-slice-required-topology": rack, "sluice.dev/podset-slice-size": fmt.Sprint(size.slice)},
		} {
			out = append(out, Class{Name: size.name + "-" + [3]string{"required", "preferred", "sliced"}[i], Count: size.counts[i],
				Every: size.every, CPU: size.cpu, Runtime: size.runtime, Priority: size.priority, Pods: size.pods, Annotations: how})
		}
	}
	return out
}()

// Classes are Kueue's baseline workload sets, in the order Kueue lists them
// (test/performance/scheduler/configs/baseline), the same as
// loadtest/kueuebaseline's.
var Classes = []Class{
	{Name: "small", Count: 350, Every: 100 * time.Millisecond, CPU: 1, Runtime: 200 * time.Millisecond, Priority: 50},
	{Name: "medium", Count: 100, Every: 500 * time.Millisecond, CPU: 5, Runtime: 500 * time.Millisecond, Priority: 100},
	{Name: "large", Count: 50, Every: 1200 * time.Millisecond, CPU: 20, Runtime: time.Second, Priority: 200},
}

// Quota of every ClusterQueue, in CPUs.
const (
	NominalCPU     = 20
	BorrowingLimit = 100
)

// Scaled is the per-queue count of a class at the given scale: rounded to
// the nearest integer, and at least one for any positive scale.
func Scaled(count int, scale float64) int {
	n := int(math.Round(float64(count) * scale))
	if n < 1 && scale > 0 {
		n = 1
	}
	return n
}

// Item is one Job of the plan.
type Item struct {
	At     time.Duration // when to create it, from the start of the run
	Cohort int
	Queue  int // within its cohort
	Class  int // index into Classes
	Index  int // within its queue and class
}

// Plan is every Job to create in creation order: per ClusterQueue and
// class, Job i at i×Every, all queues starting together; ties are broken by
// cohort, queue, class, so the plan is deterministic.
func Plan(scale float64, cohorts, queuesPerCohort int) []Item {
	return PlanOf(Classes, scale, cohorts, queuesPerCohort)
}

// PlanOf is Plan of the given classes.
func PlanOf(classes []Class, scale float64, cohorts, queuesPerCohort int) []Item {
	var items []Item
	for c := range cohorts {
		for q := range queuesPerCohort {
			for k, cl := range classes {
				for i := range Scaled(cl.Count, scale) {
					items = append(items, Item{At: time.Duration(i) * cl.Every, Cohort: c, Queue: q, Class: k, Index: i})
				}
			}
		}
	}
	sort.SliceStable(items, func(a, b int) bool { return items[a].At < items[b].At })
	return items
}

// CapacityBound is the shortest possible makespan of a plan: per cohort,
// all CPU-seconds of its Jobs spread over the cohort's nominal CPU (its
// queues may borrow only from each other), the largest over the cohorts.
// At scale 1 it is 66 s: 6 × (350×1×0.2 + 100×5×0.5 + 50×20×1) CPU-seconds
// over 6 × 20 CPUs.
func CapacityBound(items []Item, queuesPerCohort int) time.Duration {
	return CapacityBoundOf(Classes, items, queuesPerCohort)
}

// CapacityBoundOf is CapacityBound of a plan of the given classes.
func CapacityBoundOf(classes []Class, items []Item, queuesPerCohort int) time.Duration {
	work := map[int]float64{} // CPU-seconds per cohort
	for _, it := range items {
		cl := classes[it.Class]
		work[it.Cohort] += float64(cl.CPU) * cl.Runtime.Seconds()
	}
	var worst float64
	for _, w := range work {
		worst = max(worst, w/float64(NominalCPU*queuesPerCohort))
	}
	return time.Duration(worst * float64(time.Second))
}

// Names of the objects of a run.
type names struct {
	prefix, namespace string
	// classes are the run's (Classes unless set).
	classes []Class
}

func (n names) class(k int) Class {
	if n.classes == nil {
		return Classes[k]
	}
	return n.classes[k]
}

func (n names) flavor() string             { return n.prefix }
func (n names) cohort(c int) string        { return fmt.Sprintf("%s-cohort-%d", n.prefix, c) }
func (n names) queue(c, q int) string      { return fmt.Sprintf("%s-cohort-%d-cq-%d", n.prefix, c, q) }
func (n names) priorityClass(k int) string { return n.prefix + "-" + n.class(k).Name }
func (n names) job(it Item) string {
	return fmt.Sprintf("c%d-q%d-%s-%03d", it.Cohort, it.Queue, n.class(it.Class).Name, it.Index)
}
