package baseline

import (
	"fmt"
	"maps"
	"math"
	"sort"
	"time"
)

// Class is one kind of workload of a profile (a generator file's
// workload template).
type Class struct {
	Name string
	// PodMilliCPU is each pod's CPU request; Pods the Job's parallelism.
	PodMilliCPU int64
	Pods        int32
	Runtime     time.Duration
	Priority    int32
	// Annotations go on the pod template (topology requests).
	Annotations map[string]string
}

// pods is the Job's pod count.
func (c Class) pods() int32 { return max(1, c.Pods) }

// MilliCPU is the Job's CPU request, all pods together.
func (c Class) MilliCPU() int64 { return c.PodMilliCPU * int64(c.pods()) }

func (c Class) same(o Class) bool {
	return c.Name == o.Name && c.PodMilliCPU == o.PodMilliCPU && c.pods() == o.pods() && c.Runtime == o.Runtime &&
		c.Priority == o.Priority && maps.Equal(c.Annotations, o.Annotations)
}

// TopologyLevels are the node labels of the topology profile's Topology.
var TopologyLevels = func() []string {
	var out []string
	for _, l := range MustProfile("tas").Topology.Levels {
		out = append(out, l.NodeLabel)
	}
	return out
}()

// Classes are the baseline profile's classes: small, medium, large.
var Classes = MustProfile("baseline").Classes

// Scaled is the per-queue count of a class at the given scale: rounded to
// the nearest integer, and at least one for any positive scale.
func Scaled(count int, scale float64) int {
	n := int(math.Round(float64(count) * scale))
	if n < 1 && scale > 0 && count > 0 {
		n = 1
	}
	return n
}

// Item is one Job of the plan.
type Item struct {
	At    time.Duration // when to create it, from the start of the run
	Queue int           // index into Profile.Queues
	Class int           // index into Profile.Classes
	Index int           // within its queue and class
}

// Plan is every Job of the profile at the given scale (each workload set's
// count scaled), in creation order. As Kueue's generator does, each
// workload set of each queue creates its workloads one after another, one
// every interval, the first after one interval; all sets and queues start
// together. Ties are broken by queue, then class, so the plan is
// deterministic.
func (p *Profile) Plan(scale float64) []Item {
	var items []Item
	for q, queue := range p.Queues {
		next := map[int]int{}
		for _, set := range queue.Sets {
			k := 0
			for range Scaled(set.Count, scale) {
				for _, cl := range set.Classes {
					k++
					items = append(items, Item{At: time.Duration(k) * set.Every, Queue: q, Class: cl, Index: next[cl]})
					next[cl]++
				}
			}
		}
	}
	sort.SliceStable(items, func(a, b int) bool {
		if items[a].At != items[b].At {
			return items[a].At < items[b].At
		}
		if items[a].Queue != items[b].Queue {
			return items[a].Queue < items[b].Queue
		}
		return items[a].Class < items[b].Class
	})
	return items
}

// CapacityBound is the shortest possible makespan of a plan: per cohort,
// all CPU-seconds of its Jobs spread over the nominal CPU of the cohort's
// queues (they may borrow only from each other), the largest over the
// cohorts. The baseline's at scale 1 is 66 s: 6 × (350×1×0.2 + 100×5×0.5
// + 50×20×1) CPU-seconds over 6 × 20 CPUs.
func (p *Profile) CapacityBound(items []Item) time.Duration {
	work := map[int]float64{}    // milli-CPU-seconds per cohort
	nominal := map[int]float64{} // milli-CPUs per cohort
	for _, q := range p.Queues {
		nominal[q.Cohort] += float64(q.NominalMilli)
	}
	for _, it := range items {
		cl := p.Classes[it.Class]
		work[p.Queues[it.Queue].Cohort] += float64(cl.MilliCPU()) * cl.Runtime.Seconds()
	}
	var worst float64
	for c, w := range work {
		worst = max(worst, w/nominal[c])
	}
	return time.Duration(worst * float64(time.Second))
}

// Names of the objects of a run.
type names struct {
	prefix, namespace string
	p                 *Profile
}

func (n names) class(k int) Class { return n.p.Classes[k] }

func (n names) flavor() string      { return n.prefix }
func (n names) cohort(c int) string { return fmt.Sprintf("%s-cohort-%d", n.prefix, c) }
func (n names) queue(q int) string {
	return fmt.Sprintf("%s-cohort-%d-cq-%d", n.prefix, n.p.Queues[q].Cohort, n.p.Queues[q].Index)
}
func (n names) priorityClass(k int) string { return n.prefix + "-" + n.class(k).Name }
func (n names) job(it Item) string {
	q := n.p.Queues[it.Queue]
	return fmt.Sprintf("c%d-q%d-%s-%03d", q.Cohort, q.Index, n.class(it.Class).Name, it.Index)
}
