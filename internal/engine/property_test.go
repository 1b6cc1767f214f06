package engine

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
)

// The property test drives the engine with random configurations and random
// sequences of submissions, cycles, finishes and evictions, and after every
// step checks invariants computed from the outside: from the configuration,
// the decisions the engine returned, and a reference quota model written
// here from Kueue's documented semantics. Nothing in this file reads the
// engine's internal state.

const (
	propSeeds       = 300
	propSteps       = 120
	propMaxFailures = 3
)

// refFR is a flavor and a resource: the unit quota is counted in.
type refFR struct {
	flavor   string
	resource string
}

func (f refFR) String() string { return f.flavor + "/" + f.resource }

// refNode is a ClusterQueue or a Cohort of the reference quota model.
type refNode struct {
	name     string
	cq       *ClusterQueue // nil for a cohort
	parent   *refNode
	children []*refNode
	quota    map[refFR]Quota
}

func (n *refNode) label() string {
	if n.cq != nil {
		return "ClusterQueue " + n.name
	}
	return "Cohort " + n.name
}

// refModel is the cohort forest built from a Config without the engine.
type refModel struct {
	cqs   map[string]*refNode
	roots []*refNode
	frs   []refFR
}

func newRefModel(cfg Config) *refModel {
	m := &refModel{cqs: map[string]*refNode{}}
	cohorts := map[string]*refNode{}
	seenFR := map[refFR]bool{}
	quotas := func(groups []ResourceGroup) map[refFR]Quota {
		out := map[refFR]Quota{}
		for _, g := range groups {
			for _, f := range g.Flavors {
				for _, q := range f.Resources {
					k := refFR{f.Name, q.Resource}
					out[k] = q
					if !seenFR[k] {
						seenFR[k] = true
						m.frs = append(m.frs, k)
					}
				}
			}
		}
		return out
	}
	cohort := func(name string) *refNode {
		if n, ok := cohorts[name]; ok {
			return n
		}
		n := &refNode{name: name, quota: map[refFR]Quota{}}
		cohorts[name] = n
		return n
	}
	attach := func(child *refNode, parent string) {
		if parent == "" {
			return
		}
		p := cohort(parent)
		child.parent = p
		p.children = append(p.children, child)
	}
	for _, c := range cfg.Cohorts {
		n := cohort(c.Name)
		n.quota = quotas(c.ResourceGroups)
	}
	for _, c := range cfg.Cohorts {
		attach(cohort(c.Name), c.Parent)
	}
	for i := range cfg.ClusterQueues {
		cq := &cfg.ClusterQueues[i]
		n := &refNode{name: cq.Name, cq: cq, quota: quotas(cq.ResourceGroups)}
		m.cqs[cq.Name] = n
		attach(n, cq.Cohort)
	}
	for _, n := range cohorts {
		if n.parent == nil {
			m.roots = append(m.roots, n)
		}
	}
	for _, n := range m.cqs {
		if n.parent == nil {
			m.roots = append(m.roots, n)
		}
	}
	sort.Slice(m.roots, func(i, j int) bool { return m.roots[i].label() < m.roots[j].label() })
	sort.Slice(m.frs, func(i, j int) bool { return m.frs[i].String() < m.frs[j].String() })
	return m
}

func (n *refNode) root() *refNode {
	for n.parent != nil {
		n = n.parent
	}
	return n
}

// refUsage is what admitted workloads use: ClusterQueue → flavor-resource →
// amount in canonical units.
type refUsage map[string]map[refFR]int64

func (u refUsage) add(cq string, f refFR, v int64) {
	if u[cq] == nil {
		u[cq] = map[refFR]int64{}
	}
	u[cq][f] += v
}

// violations lists every quota rule the usage breaks. The rules, per
// flavor-resource, from Kueue's documentation of nominalQuota,
// borrowingLimit, lendingLimit and (hierarchical) cohorts, writing U(N) for
// the usage of all ClusterQueues in the subtree of N and Q(N) for the sum of
// the nominal quota of every node (ClusterQueues and cohorts) in it:
//
//   - a ClusterQueue without a cohort: U ≤ nominal;
//   - a tree root R: U(R) ≤ Q(R), nobody can use quota the tree does not have;
//   - a non-root node N with a borrowingLimit B: U(N) ≤ Q(N) + B; for a
//     ClusterQueue that is "usage ≤ nominal + borrowingLimit";
//   - a non-root node N with a lendingLimit L: the rest of its tree can use at
//     most L of N's quota, so U(R) − U(N) ≤ Q(R) − Q(N) + L;
//   - and, exactly: quota can be routed to the users so that every limit holds
//     at once (see refFeasible). The four rules above follow from this one; they
//     are kept because their messages say more.
func (m *refModel) violations(u refUsage) []string {
	var out []string
	for _, root := range m.roots {
		for _, f := range m.frs {
			out = append(out, m.treeViolations(root, f, u)...)
		}
	}
	return out
}

func (m *refModel) treeViolations(root *refNode, f refFR, u refUsage) []string {
	usage := map[*refNode]int64{}
	quota := map[*refNode]int64{}
	var nodes []*refNode
	var sum func(n *refNode)
	sum = func(n *refNode) {
		nodes = append(nodes, n)
		quota[n] = n.quota[f].Nominal
		if n.cq != nil {
			usage[n] = u[n.name][f]
		}
		for _, c := range n.children {
			sum(c)
			usage[n] += usage[c]
			quota[n] += quota[c]
		}
	}
	sum(root)
	var out []string
	for _, n := range nodes {
		q := n.quota[f]
		if n.cq != nil && n.parent == nil && usage[n] > q.Nominal {
			out = append(out, fmt.Sprintf("%s has no cohort and uses %d of %s, above its nominal quota %d", n.label(), usage[n], f, q.Nominal))
		}
		if n.parent == nil {
			continue
		}
		if q.BorrowingLimit.Set && usage[n] > quota[n]+q.BorrowingLimit.Value {
			out = append(out, fmt.Sprintf("%s uses %d of %s, above its subtree quota %d plus borrowingLimit %d", n.label(), usage[n], f, quota[n], q.BorrowingLimit.Value))
		}
		if q.LendingLimit.Set && usage[root]-usage[n] > quota[root]-quota[n]+q.LendingLimit.Value {
			out = append(out, fmt.Sprintf("the rest of the tree of %s uses %d of %s, above the quota outside it (%d) plus its lendingLimit %d", n.label(), usage[root]-usage[n], f, quota[root]-quota[n], q.LendingLimit.Value))
		}
	}
	if usage[root] > quota[root] {
		out = append(out, fmt.Sprintf("the tree of %s uses %d of %s, above all its quota %d", root.label(), usage[root], f, quota[root]))
	}
	if len(out) == 0 {
		if why := refFeasible(root, f, usage); why != "" {
			out = append(out, why)
		}
	}
	return out
}

// refFeasible decides whether the tree's usage can be served by its quota
// under every borrowing and lending limit, and says where it cannot.
//
// Let x(N) be the net amount the subtree of N takes from outside it (negative
// when it lends). A ClusterQueue serves U − x of its own usage from its
// nominal quota, so U − nominal ≤ x ≤ U; a cohort adds its own nominal
// quota to what its children take, so Σx(child) − nominal ≤ x ≤ Σx(child).
// A borrowingLimit B caps x ≤ B and a lendingLimit L caps −x ≤ L. A root
// trades with nobody: x(root) = 0. The set of feasible x of each subtree is
// an interval, and children are independent, so the intervals add up.
func refFeasible(root *refNode, f refFR, usage map[*refNode]int64) string {
	why := ""
	var interval func(n *refNode) (lo, hi int64)
	interval = func(n *refNode) (int64, int64) {
		q := n.quota[f]
		var lo, hi int64
		if n.cq != nil {
			lo, hi = usage[n]-q.Nominal, usage[n]
		} else {
			for _, c := range n.children {
				cl, ch := interval(c)
				lo, hi = lo+cl, hi+ch
			}
			lo -= q.Nominal
		}
		if n.parent != nil {
			if q.BorrowingLimit.Set {
				hi = min(hi, q.BorrowingLimit.Value)
			}
			if q.LendingLimit.Set {
				lo = max(lo, -q.LendingLimit.Value)
			}
		}
		if lo > hi && why == "" {
			why = fmt.Sprintf("%s would have to take at least %d of %s from outside its subtree, but may take at most %d", n.label(), lo, f, hi)
		}
		return lo, hi
	}
	lo, hi := interval(root)
	if why == "" && (lo > 0 || hi < 0) {
		why = fmt.Sprintf("the tree of %s needs %d more of %s than its quota can serve under its limits", root.label(), lo, f)
	}
	return why
}

// propRun is one seeded random run.
type propRun struct {
	r     *rand.Rand
	cfg   Config
	ref   *refModel
	e     *Engine
	now   time.Time
	step  int
	steps int
	next  int
	// known holds every workload submitted and not removed.
	known map[string]Workload
	// held is the test's own record of who holds quota where, kept from
	// pre-admissions and the decisions of every cycle.
	held map[string]Admission
	// deferred runs the engine as the live services do: a victim keeps its
	// quota (and stays in held) until the test reports it gone. evicting
	// holds the victims asked to go and not yet reported gone.
	deferred bool
	evicting map[string]bool
	ops      []string
	errs     []string
}

func newPropRun(seed uint64, opts ...Option) *propRun {
	r := rand.New(rand.NewPCG(seed, 0x51ce))
	p := &propRun{
		r:        r,
		cfg:      propRandomConfig(r),
		now:      t0,
		steps:    propSteps,
		known:    map[string]Workload{},
		held:     map[string]Admission{},
		evicting: map[string]bool{},
	}
	p.ref = newRefModel(p.cfg)
	p.e = New(p.cfg, opts...)
	p.deferred = p.e.deferred
	return p
}

// propRandomConfig builds flavors, one to three cohort trees with optional
// nested cohorts and cohort quota, and ClusterQueues with random quota,
// limits and policies, some outside any cohort.
func propRandomConfig(r *rand.Rand) Config {
	cfg := Config{FairSharing: r.IntN(10) < 3, NamespaceLabel: map[string]map[string]string{}}
	var flavorNames []string
	for i := range 2 + r.IntN(3) {
		name := fmt.Sprintf("f%d", i)
		flavorNames = append(flavorNames, name)
		cfg.Flavors = append(cfg.Flavors, Flavor{Name: name})
	}
	var homes []string // cohorts a ClusterQueue may join
	for k := range 1 + r.IntN(3) {
		root := fmt.Sprintf("t%d", k)
		homes = append(homes, root)
		if r.IntN(10) < 6 {
			c := Cohort{Name: root, FairWeight: propRandomWeight(r)}
			if r.IntN(2) == 0 {
				c.ResourceGroups = propRandomGroups(r, flavorNames, false)
			}
			cfg.Cohorts = append(cfg.Cohorts, c)
		}
		for j := range r.IntN(3) {
			child := fmt.Sprintf("%s-c%d", root, j)
			homes = append(homes, child)
			c := Cohort{Name: child, Parent: root, FairWeight: propRandomWeight(r)}
			if r.IntN(10) < 4 {
				c.ResourceGroups = propRandomGroups(r, flavorNames, true)
			}
			cfg.Cohorts = append(cfg.Cohorts, c)
			if r.IntN(3) == 0 {
				grand := child + "-g"
				homes = append(homes, grand)
				g := Cohort{Name: grand, Parent: child, FairWeight: propRandomWeight(r)}
				if r.IntN(2) == 0 {
					g.ResourceGroups = propRandomGroups(r, flavorNames, true)
				}
				cfg.Cohorts = append(cfg.Cohorts, g)
			}
		}
	}
	for i := range 2 + r.IntN(5) {
		cq := ClusterQueue{
			Name:              fmt.Sprintf("cq%d", i),
			QueueingStrategy:  BestEffortFIFO,
			NamespaceSelector: labels.Everything(),
			WhenCanBorrow:     propPick(r, Borrow, TryNextFlavor),
			WhenCanPreempt:    propPick(r, Preempt, TryNextFlavor),
			Preemption: Preemption{
				WithinClusterQueue:  propPick(r, Never, LowerPriority, LowerOrNewerEqualPriority),
				ReclaimWithinCohort: propPick(r, Never, LowerPriority, Any),
				BorrowWithinCohort:  Never,
			},
			StopPolicy: StopNone,
			FairWeight: propRandomWeight(r),
		}
		if r.IntN(100) >= 15 {
			cq.Cohort = homes[r.IntN(len(homes))]
		}
		cq.ResourceGroups = propRandomGroups(r, flavorNames, cq.Cohort != "")
		if r.IntN(10) < 3 {
			cq.QueueingStrategy = StrictFIFO
		}
		if cq.Preemption.ReclaimWithinCohort != Never && r.IntN(10) < 3 {
			cq.Preemption.BorrowWithinCohort = LowerPriority
			if r.IntN(2) == 0 {
				t := int32(r.IntN(4))
				cq.Preemption.MaxPriorityThreshold = &t
			}
		}
		switch n := r.IntN(100); {
		case n < 8:
			cq.NamespaceSelector = labels.SelectorFromSet(labels.Set{"team": "a"})
		case n < 11:
			cq.NamespaceSelector = nil
		}
		switch n := r.IntN(100); {
		case n < 4:
			cq.StopPolicy = Hold
		case n < 7:
			cq.StopPolicy = HoldAndDrain
		}
		cfg.ClusterQueues = append(cfg.ClusterQueues, cq)
		ns := "ns-" + cq.Name
		cfg.LocalQueues = append(cfg.LocalQueues, LocalQueue{Namespace: ns, Name: "lq", ClusterQueue: cq.Name, StopPolicy: StopNone})
		cfg.NamespaceLabel[ns] = map[string]string{"team": propPick(r, "a", "b")}
	}
	return cfg
}

func propPick[T any](r *rand.Rand, options ...T) T { return options[r.IntN(len(options))] }

func propRandomWeight(r *rand.Rand) int64 {
	if r.IntN(20) == 0 {
		return 0
	}
	return int64(500 + 500*r.IntN(4))
}

// propUnit is one unit of a resource in canonical form.
func propUnit(res string) int64 {
	if res == "cpu" {
		return 1000
	}
	return 1
}

// propRandomGroups covers cpu and gpu with one group of one to three flavors,
// or with a group each over disjoint flavors. withLimits allows
// borrowingLimit and lendingLimit, which only nodes with a parent may set.
func propRandomGroups(r *rand.Rand, flavorNames []string, withLimits bool) []ResourceGroup {
	order := r.Perm(len(flavorNames))
	quota := func(res string) Quota {
		u := propUnit(res)
		q := Quota{Resource: res, Nominal: int64(r.IntN(6)) * u}
		if withLimits && r.IntN(10) < 3 {
			q.BorrowingLimit = Limited(int64(r.IntN(4)) * u)
		}
		if withLimits && r.IntN(10) < 3 {
			q.LendingLimit = Limited(int64(r.IntN(int(q.Nominal/u)+2)) * u)
		}
		return q
	}
	group := func(resources []string, flavorIdx []int) ResourceGroup {
		g := ResourceGroup{CoveredResources: resources}
		for _, i := range flavorIdx {
			fq := FlavorQuotas{Name: flavorNames[i]}
			for _, res := range resources {
				fq.Resources = append(fq.Resources, quota(res))
			}
			g.Flavors = append(g.Flavors, fq)
		}
		return g
	}
	if len(order) < 2 || r.IntN(2) == 0 {
		n := 1 + r.IntN(min(3, len(order)))
		return []ResourceGroup{group([]string{"cpu", "gpu"}, order[:n])}
	}
	split := 1 + r.IntN(len(order)-1)
	return []ResourceGroup{
		group([]string{"cpu"}, order[:split]),
		group([]string{"gpu"}, order[split:]),
	}
}

// randomWorkload makes a workload for a random LocalQueue, or now and then
// for a LocalQueue that does not exist.
func (p *propRun) randomWorkload() Workload {
	r := p.r
	p.next++
	ns := "ns-lost"
	if r.IntN(25) != 0 {
		ns = p.cfg.LocalQueues[r.IntN(len(p.cfg.LocalQueues))].Namespace
	}
	w := Workload{
		Namespace: ns,
		Name:      fmt.Sprintf("w%d", p.next),
		Queue:     "lq",
		Priority:  int32(r.IntN(4)),
		Submitted: p.now.Add(-time.Duration(r.IntN(3)) * time.Second),
	}
	for i := range 1 + propBtoi(r.IntN(6) == 0) {
		ps := PodSet{Name: fmt.Sprintf("ps%d", i), Count: int32(1 + r.IntN(3)), Requests: map[string]int64{}}
		if r.IntN(10) < 9 {
			ps.Requests["cpu"] = int64(1+r.IntN(4)) * 500
		}
		if r.IntN(10) < 4 || len(ps.Requests) == 0 {
			ps.Requests["gpu"] = int64(1 + r.IntN(2))
		}
		if ps.Count > 1 && r.IntN(10) < 3 {
			ps.MinCount = int32(1 + r.IntN(int(ps.Count-1)))
		}
		w.PodSets = append(w.PodSets, ps)
	}
	return w
}

func propBtoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// clusterQueueOf follows a workload's LocalQueue; nil if either is missing.
func (p *propRun) clusterQueueOf(w Workload) *ClusterQueue {
	for _, lq := range p.cfg.LocalQueues {
		if lq.Namespace == w.Namespace && lq.Name == w.Queue {
			if n, ok := p.ref.cqs[lq.ClusterQueue]; ok {
				return n.cq
			}
		}
	}
	return nil
}

// preAdmit submits a few workloads as already running, each only if the
// reference model says the quota it takes is there, so the start is valid.
func (p *propRun) preAdmit() {
	for range p.r.IntN(6) {
		w := p.randomWorkload()
		cq := p.clusterQueueOf(w)
		if cq == nil {
			continue
		}
		adm := Admission{ClusterQueue: cq.Name, At: p.now.Add(-time.Minute)}
		ok := true
		for _, ps := range w.PodSets {
			count := ps.Count
			if ps.MinCount > 0 {
				count = ps.MinCount + int32(p.r.IntN(int(ps.Count-ps.MinCount+1)))
			}
			psa := PodSetAssignment{Name: ps.Name, Count: count, Flavors: map[string]string{}}
			for _, g := range cq.ResourceGroups {
				f := g.Flavors[p.r.IntN(len(g.Flavors))].Name
				for _, res := range g.CoveredResources {
					if ps.Requests[res] > 0 {
						psa.Flavors[res] = f
					}
				}
			}
			for res := range ps.Requests {
				if _, covered := psa.Flavors[res]; !covered {
					ok = false
				}
			}
			adm.PodSets = append(adm.PodSets, psa)
		}
		if !ok {
			continue
		}
		w.Admission = &adm
		trial := p.usage()
		refAddUsage(trial, w, adm)
		if len(p.ref.violations(trial)) > 0 {
			continue
		}
		p.ops = append(p.ops, "pre-admit "+propDescribeWorkload(w))
		if err := p.e.Submit(w); err != nil {
			p.fail("Submit(%s) of a pre-admitted workload: %v", w.Key(), err)
			continue
		}
		p.known[w.Key()] = w
		p.held[w.Key()] = adm
	}
}

func refAddUsage(u refUsage, w Workload, adm Admission) {
	for _, psa := range adm.PodSets {
		for _, ps := range w.PodSets {
			if ps.Name != psa.Name {
				continue
			}
			for res, v := range ps.Requests {
				if v > 0 {
					u.add(adm.ClusterQueue, refFR{psa.Flavors[res], res}, v*int64(psa.Count))
				}
			}
		}
	}
}

// usage recomputes every ClusterQueue's usage from the held admissions.
func (p *propRun) usage() refUsage {
	u := refUsage{}
	for key, adm := range p.held {
		refAddUsage(u, p.known[key], adm)
	}
	return u
}

func (p *propRun) fail(format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf("step %d: ", p.step)+fmt.Sprintf(format, args...))
}

func (p *propRun) run() {
	p.preAdmit()
	p.check()
	for p.step = 1; p.step <= p.steps && len(p.errs) == 0; p.step++ {
		switch n := p.r.IntN(100); {
		case n < 35:
			for range 1 + p.r.IntN(3) {
				p.submit()
			}
		case n < 65:
			p.cycle()
		case n < 80:
			p.removeHeld("finish")
		case n < 92:
			p.removeHeld("evict")
		case p.deferred && n < 97:
			p.gone()
		default:
			p.removePending()
		}
		p.check()
	}
	if len(p.errs) == 0 {
		p.cycle()
		p.check()
	}
}

func (p *propRun) submit() {
	w := p.randomWorkload()
	p.ops = append(p.ops, "submit "+propDescribeWorkload(w))
	if err := p.e.Submit(w); err != nil {
		p.fail("Submit(%s): %v", w.Key(), err)
		return
	}
	p.known[w.Key()] = w
}

func (p *propRun) sortedKeys(held bool) []string {
	var keys []string
	for k := range p.known {
		if _, ok := p.held[k]; ok == held {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// removeHeld finishes (Remove) or evicts a random admitted workload.
func (p *propRun) removeHeld(how string) {
	keys := p.sortedKeys(true)
	if len(keys) == 0 {
		return
	}
	key := keys[p.r.IntN(len(keys))]
	p.ops = append(p.ops, how+" "+key)
	var err error
	if how == "finish" {
		err = p.e.Remove(key)
		delete(p.known, key)
	} else {
		err = p.e.Evict(key)
	}
	if err != nil {
		p.fail("%s %s: %v", how, key, err)
	}
	delete(p.held, key)
	delete(p.evicting, key)
}

// gone reports a victim's job stopped (or, one time in four, finished
// before it could be stopped): only now does its quota come free.
func (p *propRun) gone() {
	var keys []string
	for k := range p.evicting {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return
	}
	sort.Strings(keys)
	key := keys[p.r.IntN(len(keys))]
	var err error
	if p.r.IntN(4) == 0 {
		p.ops = append(p.ops, "victim finished "+key)
		err = p.e.Remove(key)
		delete(p.known, key)
	} else {
		p.ops = append(p.ops, "victim stopped "+key)
		if !p.e.IsEvicting(key) {
			p.fail("%s was asked to go but IsEvicting says no", key)
		}
		err = p.e.Evict(key)
	}
	if err != nil {
		p.fail("gone %s: %v", key, err)
	}
	delete(p.held, key)
	delete(p.evicting, key)
}

// removePending deletes a random workload that waits.
func (p *propRun) removePending() {
	keys := p.sortedKeys(false)
	if len(keys) == 0 {
		return
	}
	key := keys[p.r.IntN(len(keys))]
	p.ops = append(p.ops, "delete "+key)
	if err := p.e.Remove(key); err != nil {
		p.fail("Remove(%s): %v", key, err)
	}
	delete(p.known, key)
}

// cycle runs one Cycle and checks its decisions one by one against the
// configuration and the test's own record of who holds quota.
func (p *propRun) cycle() {
	p.now = p.now.Add(time.Second)
	p.ops = append(p.ops, "cycle")
	decisions := p.e.Cycle(p.now)
	// admittedAt is the last position at which each workload was admitted.
	admittedAt := map[string]int{}
	for i, d := range decisions {
		if d.Kind == KindAdmitted {
			admittedAt[d.Key] = i
		}
	}
	// A preemptor that takes quota from the same victim twice in one cycle
	// lost it in between: preemption went round in a circle.
	pairs := map[[2]string]int{}
	for i, d := range decisions {
		w, ok := p.known[d.Key]
		if !ok {
			p.fail("decision %s for unknown workload %s", d.Kind, d.Key)
			continue
		}
		_, holds := p.held[d.Key]
		switch d.Kind {
		case KindAdmitted:
			if holds {
				p.fail("%s admitted while it already holds quota", d.Key)
			}
			adm := Admission{ClusterQueue: d.ClusterQueue, PodSets: d.PodSets, At: p.now}
			p.checkNewAdmission(w, adm)
			p.held[d.Key] = adm
		case KindPreempted:
			if !holds {
				p.fail("%s preempted while it holds no quota", d.Key)
				continue
			}
			pair := [2]string{d.Key, d.Preemptor}
			pairs[pair]++
			if pairs[pair] == 2 {
				p.fail("%s preempted %s twice in one cycle (the cycle returned %d decisions)", d.Preemptor, d.Key, len(decisions))
			}
			p.checkPreemption(d, w)
			if p.deferred {
				// The victim keeps its quota until its job is gone; the
				// preemptor waits for it.
				if p.evicting[d.Key] {
					p.fail("%s asked to go again while it is already going", d.Key)
				}
				if _, ok := admittedAt[d.Preemptor]; ok {
					p.fail("%s admitted in the cycle that asked its victim %s to go", d.Preemptor, d.Key)
				}
				p.evicting[d.Key] = true
				continue
			}
			if at, ok := admittedAt[d.Preemptor]; !ok || at < i {
				p.fail("%s preempted for %s, which was not admitted after it in the same cycle", d.Key, d.Preemptor)
			}
			delete(p.held, d.Key)
		case KindEvicted:
			if !holds {
				p.fail("%s evicted while it holds no quota", d.Key)
				continue
			}
			if p.deferred {
				p.evicting[d.Key] = true
				continue
			}
			delete(p.held, d.Key)
		case KindPending:
			if d.Reason == "" {
				p.fail("pending decision for %s without a reason", d.Key)
			}
		}
		if len(p.errs) > 20 {
			return
		}
	}
	p.checkAfterCycle()
}

// checkNewAdmission checks that an admission made by a cycle is well formed:
// the workload's own ClusterQueue, active and selecting its namespace, every
// pod set once with a count between minCount and count, and every requested
// resource on a flavor the queue lists for it, one flavor per resource
// group.
func (p *propRun) checkNewAdmission(w Workload, adm Admission) {
	cq := p.clusterQueueOf(w)
	switch {
	case cq == nil:
		p.fail("%s admitted to %s but its LocalQueue leads nowhere", w.Key(), adm.ClusterQueue)
		return
	case cq.Name != adm.ClusterQueue:
		p.fail("%s admitted to %s, but its LocalQueue points at %s", w.Key(), adm.ClusterQueue, cq.Name)
		return
	case cq.StopPolicy != StopNone:
		p.fail("%s admitted to %s, which is stopped (%s)", w.Key(), cq.Name, cq.StopPolicy)
	case cq.NamespaceSelector == nil || !cq.NamespaceSelector.Matches(labels.Set(p.cfg.NamespaceLabel[w.Namespace])):
		p.fail("%s admitted to %s, whose namespaceSelector does not select %s", w.Key(), cq.Name, w.Namespace)
	}
	var gotNames, wantNames []string
	for _, ps := range w.PodSets {
		wantNames = append(wantNames, ps.Name)
	}
	for _, psa := range adm.PodSets {
		gotNames = append(gotNames, psa.Name)
		var ps *PodSet
		for i := range w.PodSets {
			if w.PodSets[i].Name == psa.Name {
				ps = &w.PodSets[i]
			}
		}
		if ps == nil {
			continue
		}
		least := ps.Count
		if ps.MinCount > 0 && ps.MinCount < ps.Count {
			least = ps.MinCount
		}
		if psa.Count < least || psa.Count > ps.Count {
			p.fail("%s pod set %s admitted with %d pods, want %d to %d", w.Key(), ps.Name, psa.Count, least, ps.Count)
		}
		for gi, g := range cq.ResourceGroups {
			groupFlavor := ""
			for _, res := range g.CoveredResources {
				if ps.Requests[res] == 0 {
					continue
				}
				f := psa.Flavors[res]
				if !propGroupHasFlavor(g, f) {
					p.fail("%s pod set %s got flavor %q for %s, which group %d of %s does not list", w.Key(), ps.Name, f, res, gi, cq.Name)
				}
				if groupFlavor != "" && f != groupFlavor {
					p.fail("%s pod set %s got flavors %s and %s in one resource group", w.Key(), ps.Name, groupFlavor, f)
				}
				groupFlavor = f
			}
		}
		for res, v := range ps.Requests {
			if _, ok := psa.Flavors[res]; v > 0 && !ok {
				p.fail("%s pod set %s admitted without a flavor for %s", w.Key(), ps.Name, res)
			}
		}
	}
	if d := cmp.Diff(wantNames, gotNames); d != "" {
		p.fail("%s admitted pod sets (-want +got):\n%s", w.Key(), d)
	}
}

func propGroupHasFlavor(g ResourceGroup, flavor string) bool {
	for _, f := range g.Flavors {
		if f.Name == flavor {
			return true
		}
	}
	return false
}

// checkPreemption checks that the preemptor's ClusterQueue policy allows
// the preemption and that the reason matches.
func (p *propRun) checkPreemption(d Decision, victim Workload) {
	preemptor, ok := p.known[d.Preemptor]
	if !ok {
		p.fail("%s preempted by unknown workload %q", d.Key, d.Preemptor)
		return
	}
	cq := p.clusterQueueOf(preemptor)
	if cq == nil {
		p.fail("%s preempted by %s, which has no ClusterQueue", d.Key, d.Preemptor)
		return
	}
	victimCQ := p.held[d.Key].ClusterQueue
	pol := cq.Preemption
	lower := victim.Priority < preemptor.Priority
	if victimCQ == cq.Name {
		allowed := (pol.WithinClusterQueue == LowerPriority && lower) ||
			(pol.WithinClusterQueue == LowerOrNewerEqualPriority &&
				(lower || (victim.Priority == preemptor.Priority && !victim.Submitted.Before(preemptor.Submitted))))
		if !allowed {
			p.fail("%s (priority %d) preempted within %s by %s (priority %d) under withinClusterQueue %s",
				d.Key, victim.Priority, cq.Name, d.Preemptor, preemptor.Priority, pol.WithinClusterQueue)
		}
		if d.Reason != ReasonInClusterQueue {
			p.fail("%s preempted in its own ClusterQueue with reason %s", d.Key, d.Reason)
		}
		return
	}
	if p.ref.cqs[victimCQ].root() != p.ref.cqs[cq.Name].root() {
		p.fail("%s in %s preempted by %s in %s, another cohort tree", d.Key, victimCQ, d.Preemptor, cq.Name)
	}
	allowed := pol.ReclaimWithinCohort == Any || (pol.ReclaimWithinCohort == LowerPriority && lower)
	if !allowed {
		p.fail("%s (priority %d) in %s preempted by %s (priority %d) in %s under reclaimWithinCohort %s",
			d.Key, victim.Priority, victimCQ, d.Preemptor, preemptor.Priority, cq.Name, pol.ReclaimWithinCohort)
	}
	switch d.Reason {
	case ReasonInCohortReclamation, ReasonInCohortReclaimWhileBorrowing, ReasonInCohortFairSharing:
	default:
		p.fail("%s preempted from another ClusterQueue with reason %q", d.Key, d.Reason)
	}
}

// checkAfterCycle: every waiting workload has a reason, drained queues hold
// nothing, and no waiting workload of a BestEffortFIFO queue would fit in
// the quota left unused.
func (p *propRun) checkAfterCycle() {
	for _, key := range p.sortedKeys(false) {
		if p.e.PendingReason(key) == "" {
			p.fail("%s is not admitted and has no pending reason", key)
		}
	}
	for key, adm := range p.held {
		if p.ref.cqs[adm.ClusterQueue].cq.StopPolicy == HoldAndDrain && !p.evicting[key] {
			p.fail("%s still holds quota in %s, which is stopped with HoldAndDrain", key, adm.ClusterQueue)
		}
	}
	u := p.usage()
	// With deferred eviction a preemptor stays at the head of its queue
	// until its victims are gone, and the queue behind it waits, as in
	// Kueue; judge only trees with no victim on its way out.
	going := map[*refNode]bool{}
	for key := range p.evicting {
		going[p.ref.cqs[p.held[key].ClusterQueue].root()] = true
	}
	for _, key := range p.sortedKeys(false) {
		w := p.known[key]
		if cq := p.clusterQueueOf(w); cq != nil && going[p.ref.cqs[cq.Name].root()] {
			continue
		}
		if f := p.fitsNow(w, u); f != "" {
			p.fail("%s waits (%q) though it fits in unused quota: %s", key, p.e.PendingReason(key), f)
		}
	}
}

// fitsNow says how w would fit without preemption, or "" if it does not or
// if the engine may legitimately leave it waiting: a StrictFIFO, stopped or
// unselecting queue, or whenCanPreempt: Preempt, under which flavor search
// may stop at a flavor where preemption looked possible and then finds no
// set of victims that makes room. Only single-pod-set workloads are judged, at their
// smallest admissible count: flavors of one pod set are chosen per resource
// group independently, so any fitting flavor per group is a fit.
func (p *propRun) fitsNow(w Workload, u refUsage) string {
	cq := p.clusterQueueOf(w)
	if cq == nil || len(w.PodSets) != 1 || cq.QueueingStrategy != BestEffortFIFO || cq.StopPolicy != StopNone || cq.WhenCanPreempt != TryNextFlavor ||
		cq.NamespaceSelector == nil || !cq.NamespaceSelector.Matches(labels.Set(p.cfg.NamespaceLabel[w.Namespace])) {
		return ""
	}
	ps := w.PodSets[0]
	count := ps.Count
	if ps.MinCount > 0 {
		count = ps.MinCount
	}
	covered := 0
	var chosen []string
	for _, g := range cq.ResourceGroups {
		var need []string
		for _, res := range g.CoveredResources {
			if ps.Requests[res] > 0 {
				need = append(need, res)
			}
		}
		covered += len(need)
		if len(need) == 0 {
			continue
		}
		found := ""
		for _, f := range g.Flavors {
			trial := refUsage{}
			for q, m := range u {
				for k, v := range m {
					trial.add(q, k, v)
				}
			}
			for _, res := range need {
				trial.add(cq.Name, refFR{f.Name, res}, ps.Requests[res]*int64(count))
			}
			if len(p.ref.violations(trial)) == 0 {
				found = f.Name
				break
			}
		}
		if found == "" {
			return ""
		}
		chosen = append(chosen, fmt.Sprintf("%s on %s", strings.Join(need, ","), found))
	}
	if covered != len(ps.Requests) {
		return ""
	}
	return fmt.Sprintf("%d pods with %s", count, strings.Join(chosen, ", "))
}

// check runs after every step: the engine agrees with the test on who is
// admitted, and the quota they hold breaks no rule of the reference model.
func (p *propRun) check() {
	for _, key := range p.sortedKeys(true) {
		if !p.e.IsAdmitted(key) {
			p.fail("the decisions say %s holds quota, IsAdmitted says no", key)
		}
	}
	for _, key := range p.sortedKeys(false) {
		if p.e.IsAdmitted(key) {
			p.fail("IsAdmitted(%s) is true but no decision admitted it", key)
		}
	}
	for _, v := range p.ref.violations(p.usage()) {
		p.fail("quota: %s", v)
	}
}

// propDescribeWorkload renders a workload in one line for failure reports.
func propDescribeWorkload(w Workload) string {
	var parts []string
	for _, ps := range w.PodSets {
		var reqs []string
		for res, v := range ps.Requests {
			reqs = append(reqs, fmt.Sprintf("%s=%d", res, v))
		}
		sort.Strings(reqs)
		s := fmt.Sprintf("%s×%d", ps.Name, ps.Count)
		if ps.MinCount > 0 {
			s += fmt.Sprintf("(min %d)", ps.MinCount)
		}
		parts = append(parts, s+" "+strings.Join(reqs, ","))
	}
	s := fmt.Sprintf("%s prio=%d submitted=%s [%s]", w.Key(), w.Priority, w.Submitted.Sub(t0), strings.Join(parts, "; "))
	if a := w.Admission; a != nil {
		s += " admitted in " + a.ClusterQueue + fmt.Sprint(a.PodSets)
	}
	return s
}

// propDescribeConfig renders a configuration compactly for failure reports.
func propDescribeConfig(cfg Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "fairSharing=%v\n", cfg.FairSharing)
	groups := func(gs []ResourceGroup) string {
		var out []string
		for _, g := range gs {
			var fl []string
			for _, f := range g.Flavors {
				var qs []string
				for _, q := range f.Resources {
					s := fmt.Sprintf("%s=%d", q.Resource, q.Nominal)
					if q.BorrowingLimit.Set {
						s += fmt.Sprintf(" bl=%d", q.BorrowingLimit.Value)
					}
					if q.LendingLimit.Set {
						s += fmt.Sprintf(" ll=%d", q.LendingLimit.Value)
					}
					qs = append(qs, s)
				}
				fl = append(fl, f.Name+"{"+strings.Join(qs, ", ")+"}")
			}
			out = append(out, strings.Join(g.CoveredResources, ",")+": "+strings.Join(fl, " "))
		}
		return strings.Join(out, " | ")
	}
	for _, c := range cfg.Cohorts {
		fmt.Fprintf(&b, "cohort %s parent=%q weight=%d %s\n", c.Name, c.Parent, c.FairWeight, groups(c.ResourceGroups))
	}
	for _, cq := range cfg.ClusterQueues {
		sel := "<nil>"
		if cq.NamespaceSelector != nil {
			sel = cq.NamespaceSelector.String()
		}
		fmt.Fprintf(&b, "cq %s cohort=%q %s borrow=%s preempt=%s within=%s reclaim=%s bwc=%s/%v stop=%s weight=%d selector=%q %s\n",
			cq.Name, cq.Cohort, cq.QueueingStrategy, cq.WhenCanBorrow, cq.WhenCanPreempt,
			cq.Preemption.WithinClusterQueue, cq.Preemption.ReclaimWithinCohort, cq.Preemption.BorrowWithinCohort,
			propThreshold(cq.Preemption.MaxPriorityThreshold), cq.StopPolicy, cq.FairWeight, sel, groups(cq.ResourceGroups))
	}
	for ns, l := range cfg.NamespaceLabel {
		fmt.Fprintf(&b, "namespace %s labels %v\n", ns, l)
	}
	return b.String()
}

func propThreshold(t *int32) string {
	if t == nil {
		return "-"
	}
	return fmt.Sprint(*t)
}

func TestPropertyInvariants(t *testing.T) { propRunSeeds(t) }

// TestPropertyDeferredEviction runs the same random steps with eviction
// deferred, as in the live services, where several preemptors of one
// cohort wait for victims that stop at random times. Victims hold their
// quota until reported gone, and at no step may admitted workloads and
// victims together exceed any quota rule.
func TestPropertyDeferredEviction(t *testing.T) { propRunSeeds(t, WithDeferredEviction()) }

// propRunSeeds runs every seed with an engine built with opts and reports
// the first failures in full.
func propRunSeeds(t *testing.T, opts ...Option) {
	failures := 0
	for seed := uint64(1); seed <= propSeeds; seed++ {
		p := newPropRun(seed, opts...)
		p.run()
		if len(p.errs) == 0 {
			continue
		}
		failures++
		if failures <= propMaxFailures {
			t.Errorf("seed %d: %s\nconfig:\n%sops:\n  %s", seed, strings.Join(p.errs, "\n"), propDescribeConfig(p.cfg), strings.Join(p.ops, "\n  "))
		}
	}
	if failures > propMaxFailures {
		t.Errorf("%d of %d seeds failed; the first %d are shown", failures, propSeeds, propMaxFailures)
	}
}

// TestReferenceQuotaModel pins the reference model to hand-worked cases, so
// that the property test's verdicts rest on checked ground.
func TestReferenceQuotaModel(t *testing.T) {
	cpu := func(cq string, nominal int64, limits ...Limit) ClusterQueue {
		b := newCQ(cq).quota("default", "cpu", nominal, limits...)
		return b.obj()
	}
	inCohort := func(cq ClusterQueue, cohort string) ClusterQueue { cq.Cohort = cohort; return cq }
	cohort := func(name, parent string, nominal int64, limits ...Limit) Cohort {
		return Cohort{Name: name, Parent: parent, ResourceGroups: addQuota(nil, "default", "cpu", nominal, limits...)}
	}
	cases := []struct {
		name    string
		cqs     []ClusterQueue
		cohorts []Cohort
		usage   map[string]int64 // ClusterQueue → cpu in use
		wantOK  bool
	}{
		{
			name:   "a queue without cohort within nominal",
			cqs:    []ClusterQueue{cpu("a", 10)},
			usage:  map[string]int64{"a": 10},
			wantOK: true,
		},
		{
			name:  "a queue without cohort above nominal",
			cqs:   []ClusterQueue{cpu("a", 10)},
			usage: map[string]int64{"a": 11},
		},
		{
			name:   "borrowing up to borrowingLimit",
			cqs:    []ClusterQueue{inCohort(cpu("a", 10, Limited(2)), "c"), inCohort(cpu("b", 10), "c")},
			usage:  map[string]int64{"a": 12},
			wantOK: true,
		},
		{
			name:  "borrowing beyond borrowingLimit",
			cqs:   []ClusterQueue{inCohort(cpu("a", 10, Limited(2)), "c"), inCohort(cpu("b", 10), "c")},
			usage: map[string]int64{"a": 13},
		},
		{
			name:   "others use up to the lendingLimit",
			cqs:    []ClusterQueue{inCohort(cpu("a", 10, noLimit, Limited(4)), "c"), inCohort(cpu("b", 0), "c")},
			usage:  map[string]int64{"a": 6, "b": 4},
			wantOK: true,
		},
		{
			name:  "others use beyond the lendingLimit while the lender is idle",
			cqs:   []ClusterQueue{inCohort(cpu("a", 10, noLimit, Limited(4)), "c"), inCohort(cpu("b", 0), "c")},
			usage: map[string]int64{"b": 5},
		},
		{
			name:    "a cohort's own quota is shared by its queues",
			cqs:     []ClusterQueue{inCohort(cpu("a", 0), "c")},
			cohorts: []Cohort{cohort("c", "", 5)},
			usage:   map[string]int64{"a": 5},
			wantOK:  true,
		},
		{
			name:    "no queue uses more than the tree has",
			cqs:     []ClusterQueue{inCohort(cpu("a", 0), "c")},
			cohorts: []Cohort{cohort("c", "", 5)},
			usage:   map[string]int64{"a": 6},
		},
		{
			name: "a nested cohort with borrowingLimit 0 lives on its own quota and what its members lend",
			cqs: []ClusterQueue{
				inCohort(cpu("a", 10, noLimit, Limited(2)), "team"),
				inCohort(cpu("b", 0), "team"),
				inCohort(cpu("d", 10), "org"),
			},
			cohorts: []Cohort{cohort("team", "org", 0, Limited(0))},
			usage:   map[string]int64{"b": 2},
			wantOK:  true,
		},
		{
			name: "a nested cohort with borrowingLimit 0 cannot borrow from its parent",
			cqs: []ClusterQueue{
				inCohort(cpu("a", 10, noLimit, Limited(2)), "team"),
				inCohort(cpu("b", 0), "team"),
				inCohort(cpu("d", 10), "org"),
			},
			cohorts: []Cohort{cohort("team", "org", 0, Limited(0))},
			usage:   map[string]int64{"b": 3},
		},
		{
			// The rule U(R) − U(N) ≤ Q(R) − Q(N) + L holds for each lender
			// (3 ≤ 4 + 1), but together they lend only 2: only the exact
			// check sees it.
			name: "two lending limits bind together",
			cqs: []ClusterQueue{
				inCohort(cpu("a", 0), "c"),
				inCohort(cpu("b", 4, noLimit, Limited(1)), "c"),
				inCohort(cpu("e", 4, noLimit, Limited(1)), "c"),
			},
			usage: map[string]int64{"a": 3},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newRefModel(Config{ClusterQueues: tc.cqs, Cohorts: tc.cohorts})
			u := refUsage{}
			for cq, v := range tc.usage {
				u.add(cq, refFR{"default", "cpu"}, v)
			}
			got := m.violations(u)
			if ok := len(got) == 0; ok != tc.wantOK {
				t.Errorf("violations = %q, want ok = %v", got, tc.wantOK)
			}
		})
	}
}
