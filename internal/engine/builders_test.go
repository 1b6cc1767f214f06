package engine

import (
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// t0 is the virtual start of every test.
var t0 = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// cqBuilder builds a ClusterQueue fluently. quota adds to the current
// resource group; group starts a new one.
type cqBuilder struct{ cq ClusterQueue }

func newCQ(name string) *cqBuilder {
	return &cqBuilder{cq: ClusterQueue{
		Name:              name,
		QueueingStrategy:  BestEffortFIFO,
		NamespaceSelector: labels.Everything(),
		WhenCanBorrow:     Borrow,
		WhenCanPreempt:    TryNextFlavor,
		Preemption:        Preemption{WithinClusterQueue: Never, ReclaimWithinCohort: Never, BorrowWithinCohort: Never},
		StopPolicy:        StopNone,
		FairWeight:        1000,
	}}
}

func (b *cqBuilder) cohort(c string) *cqBuilder { b.cq.Cohort = c; return b }
func (b *cqBuilder) strict() *cqBuilder         { b.cq.QueueingStrategy = StrictFIFO; return b }
func (b *cqBuilder) weight(milli int64) *cqBuilder {
	b.cq.FairWeight = milli
	return b
}
func (b *cqBuilder) stop(p StopPolicy) *cqBuilder { b.cq.StopPolicy = p; return b }
func (b *cqBuilder) selector(s labels.Selector) *cqBuilder {
	b.cq.NamespaceSelector = s
	return b
}
func (b *cqBuilder) fungibility(borrow, preempt FungibilityPolicy) *cqBuilder {
	b.cq.WhenCanBorrow, b.cq.WhenCanPreempt = borrow, preempt
	return b
}
func (b *cqBuilder) preference(p FlavorPreference) *cqBuilder {
	b.cq.FlavorPreference = p
	return b
}
func (b *cqBuilder) preemption(within, reclaim PreemptionPolicy) *cqBuilder {
	b.cq.Preemption.WithinClusterQueue, b.cq.Preemption.ReclaimWithinCohort = within, reclaim
	return b
}
func (b *cqBuilder) borrowWithinCohort(threshold *int32) *cqBuilder {
	b.cq.Preemption.BorrowWithinCohort = LowerPriority
	b.cq.Preemption.MaxPriorityThreshold = threshold
	return b
}
func (b *cqBuilder) group() *cqBuilder {
	b.cq.ResourceGroups = append(b.cq.ResourceGroups, ResourceGroup{})
	return b
}

// quota adds nominal quota for flavor × resource, with optional limits.
func (b *cqBuilder) quota(flavor, res string, nominal int64, limits ...Limit) *cqBuilder {
	b.cq.ResourceGroups = addQuota(b.cq.ResourceGroups, flavor, res, nominal, limits...)
	return b
}
func (b *cqBuilder) obj() ClusterQueue { return b.cq }

func addQuota(groups []ResourceGroup, flavor, res string, nominal int64, limits ...Limit) []ResourceGroup {
	if len(groups) == 0 {
		groups = append(groups, ResourceGroup{})
	}
	g := &groups[len(groups)-1]
	covered := false
	for _, r := range g.CoveredResources {
		covered = covered || r == res
	}
	if !covered {
		g.CoveredResources = append(g.CoveredResources, res)
	}
	q := Quota{Resource: res, Nominal: nominal}
	if len(limits) > 0 {
		q.BorrowingLimit = limits[0]
	}
	if len(limits) > 1 {
		q.LendingLimit = limits[1]
	}
	for i := range g.Flavors {
		if g.Flavors[i].Name == flavor {
			g.Flavors[i].Resources = append(g.Flavors[i].Resources, q)
			return groups
		}
	}
	g.Flavors = append(g.Flavors, FlavorQuotas{Name: flavor, Resources: []Quota{q}})
	return groups
}

var noLimit = Limit{}

// wlBuilder builds a workload fluently.
type wlBuilder struct{ w Workload }

func newWL(ns, name string) *wlBuilder {
	return &wlBuilder{w: Workload{Namespace: ns, Name: name, Queue: "lq", Submitted: t0}}
}

func (b *wlBuilder) queue(q string) *wlBuilder { b.w.Queue = q; return b }
func (b *wlBuilder) prio(p int32) *wlBuilder   { b.w.Priority = p; return b }
func (b *wlBuilder) at(d time.Duration) *wlBuilder {
	b.w.Submitted = t0.Add(d)
	return b
}

// pods adds a pod set of count pods, each requesting res=v pairs.
func (b *wlBuilder) pods(name string, count int32, reqs ...any) *wlBuilder {
	ps := PodSet{Name: name, Count: count, Requests: map[string]int64{}}
	for i := 0; i+1 < len(reqs); i += 2 {
		ps.Requests[reqs[i].(string)] = int64(reqs[i+1].(int))
	}
	b.w.PodSets = append(b.w.PodSets, ps)
	return b
}
func (b *wlBuilder) minCount(m int32) *wlBuilder {
	b.w.PodSets[len(b.w.PodSets)-1].MinCount = m
	return b
}
func (b *wlBuilder) selector(k, v string) *wlBuilder {
	ps := &b.w.PodSets[len(b.w.PodSets)-1]
	if ps.NodeSelector == nil {
		ps.NodeSelector = map[string]string{}
	}
	ps.NodeSelector[k] = v
	return b
}

// admittedIn marks the workload as already running in cq, admitted at d,
// with every resource of every pod set on flavor.
func (b *wlBuilder) admittedIn(cq, flavor string, d time.Duration) *wlBuilder {
	adm := &Admission{ClusterQueue: cq, At: t0.Add(d)}
	for _, ps := range b.w.PodSets {
		fl := map[string]string{}
		for r := range ps.Requests {
			fl[r] = flavor
		}
		adm.PodSets = append(adm.PodSets, PodSetAssignment{Name: ps.Name, Count: ps.Count, Flavors: fl})
	}
	b.w.Admission = adm
	return b
}
func (b *wlBuilder) obj() Workload { return b.w }

// lqs returns LocalQueue "lq" in namespace ns for each ns → cq pair.
func lqs(pairs ...string) []LocalQueue {
	var out []LocalQueue
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, LocalQueue{Namespace: pairs[i], Name: "lq", ClusterQueue: pairs[i+1], StopPolicy: StopNone})
	}
	return out
}

func flavors(names ...string) []Flavor {
	var out []Flavor
	for _, n := range names {
		out = append(out, Flavor{Name: n})
	}
	return out
}

// maxExec gives the workload a maximum execution time.
func (b *wlBuilder) maxExec(d time.Duration) *wlBuilder { b.w.MaxExecution = d; return b }

// ranBefore sets how long an already admitted workload ran in earlier
// admissions.
func (b *wlBuilder) ranBefore(d time.Duration) *wlBuilder {
	b.w.Admission.PastExecution = d
	return b
}
