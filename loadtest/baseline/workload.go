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
}

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
	var items []Item
	for c := range cohorts {
		for q := range queuesPerCohort {
			for k, cl := range Classes {
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
	work := map[int]float64{} // CPU-seconds per cohort
	for _, it := range items {
		cl := Classes[it.Class]
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
}

func (n names) flavor() string             { return n.prefix }
func (n names) cohort(c int) string        { return fmt.Sprintf("%s-cohort-%d", n.prefix, c) }
func (n names) queue(c, q int) string      { return fmt.Sprintf("%s-cohort-%d-cq-%d", n.prefix, c, q) }
func (n names) priorityClass(k int) string { return n.prefix + "-" + Classes[k].Name }
func (n names) job(it Item) string {
	return fmt.Sprintf("c%d-q%d-%s-%03d", it.Cohort, it.Queue, Classes[it.Class].Name, it.Index)
}
