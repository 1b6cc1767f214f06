package engine

import (
	"fmt"
	"math"
	"sort"
)

// unlimited marks an unset borrowing or lending limit.
const unlimited = int64(-1)

// fr is a flavor-resource pair, the unit quota is counted in.
type fr struct {
	Flavor   string
	Resource string
}

// node is a ClusterQueue or a Cohort in the quota tree. Arrays are indexed
// by flavor-resource index (see tree.frIndex).
type node struct {
	name     string
	cq       *cqState // nil for a cohort
	parent   *node
	children []*node

	nominal     []int64
	borrowLimit []int64
	lendLimit   []int64
	// subtree is the quota this node holds with its descendants' lendable
	// quota: nominal plus what the children put up for lending.
	subtree []int64
	// usage of a ClusterQueue is what its admitted workloads use; of a
	// cohort, what its children use beyond their guaranteed quota.
	usage []int64
	// weight for fair sharing in milli-units.
	weight int64
	// height is the distance to the farthest leaf below: 0 for a
	// ClusterQueue, 1 for a cohort of ClusterQueues only.
	height int
	// released counts, on a root, the releases of quota in its tree.
	released uint64
	// epoch counts, on a root, the changes of usage in its tree (see
	// Engine.judgedAt).
	epoch uint64
	// foreign: on a root, another engine decides for its tree
	// (Engine.SetOwner).
	foreign bool
}

// guaranteed is the part of the subtree quota kept from the parent by a
// lending limit.
func (n *node) guaranteed(i int) int64 {
	if n.lendLimit[i] == unlimited {
		return 0
	}
	return max(0, n.subtree[i]-n.lendLimit[i])
}

// addUsage changes usage and carries the part above guaranteed quota up.
func (n *node) addUsage(i int, d int64) {
	for d != 0 && n != nil {
		g := n.guaranteed(i)
		before := max(0, n.usage[i]-g)
		n.usage[i] += d
		after := max(0, n.usage[i]-g)
		d = after - before
		n = n.parent
	}
}

// available is how much more this node may use of a flavor-resource now,
// through its own quota and by borrowing up the tree.
func (n *node) available(i int) int64 {
	if n.parent == nil {
		return max(0, n.subtree[i]-n.usage[i])
	}
	g := n.guaranteed(i)
	local := max(0, g-n.usage[i])
	fromParent := n.parent.available(i)
	if n.borrowLimit[i] != unlimited {
		stored := n.subtree[i] - g
		usedAbove := max(0, n.usage[i]-g)
		fromParent = min(fromParent, stored-usedAbove+n.borrowLimit[i])
	}
	return max(0, local+fromParent)
}

// potential is how much this node could use of a flavor-resource if nobody
// else used anything: the bound preemption can ever reach.
func (n *node) potential(i int) int64 {
	if n.parent == nil {
		return n.subtree[i]
	}
	g := n.guaranteed(i)
	fromParent := n.parent.potential(i)
	if n.borrowLimit[i] != unlimited {
		fromParent = min(fromParent, n.subtree[i]-g+n.borrowLimit[i])
	}
	return g + fromParent
}

// borrowing reports whether the node uses more than its subtree quota.
func (n *node) borrowing(i int) bool { return n.usage[i] > n.subtree[i] }

// borrowingAny reports whether the node uses more than its subtree quota
// in any of frs.
func (n *node) borrowingAny(frs map[int]bool) bool {
	for i := range frs {
		if n.borrowing(i) {
			return true
		}
	}
	return false
}

// localFree is the part of the node's guaranteed quota (kept from the
// parent by a lending limit) that is unused.
func (n *node) localFree(i int) int64 { return max(0, n.guaranteed(i)-n.usage[i]) }

// borrowLevel says how far up the tree a further use of val of
// flavor-resource i finds its quota: 0 when the node's own quota holds it,
// otherwise the height of the lowest cohort above whose subtree quota holds
// it, or the root's height when none does. Lower is more local; Kueue ranks
// flavors by the same measure. below reports whether quota was found in a
// cohort under the root, where reclaiming it needs no help from the rest of
// the tree.
func (n *node) borrowLevel(i int, val int64) (level int, below bool) {
	if n.parent == nil || n.usage[i]+val <= n.subtree[i] {
		return 0, n.parent != nil
	}
	rest := val - n.localFree(i)
	for a := n.parent; a != nil; a = a.parent {
		if a.usage[i]+rest <= a.subtree[i] {
			return a.height, a.parent != nil
		}
		rest -= a.localFree(i)
	}
	return n.root().height, false
}

// fitsQuota reports whether usage plus reqs stays within the node's
// subtree quota, and returns what of reqs its unused guaranteed quota does
// not cover, which is what the parent has to hold.
func (n *node) fitsQuota(reqs []frAmount) (bool, []frAmount) {
	fits := true
	rest := make([]frAmount, len(reqs))
	for k, r := range reqs {
		if n.usage[r.fr]+r.v > n.subtree[r.fr] {
			fits = false
		}
		rest[k] = frAmount{r.fr, max(0, r.v-n.localFree(r.fr))}
	}
	return fits, rest
}

func (n *node) root() *node {
	for n.parent != nil {
		n = n.parent
	}
	return n
}

// path returns the nodes from the root down to n.
func (n *node) path() []*node {
	var p []*node
	for x := n; x != nil; x = x.parent {
		p = append(p, x)
	}
	for i, j := 0, len(p)-1; i < j; i, j = i+1, j-1 {
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// share is the node's dominant resource share divided by its weight, with
// extra usage added (negative to take some away). Zero for a root.
func (t *tree) share(n *node, extra []frAmount) int64 {
	if n.parent == nil {
		return 0
	}
	borrowed := map[string]int64{}
	for i := range t.frs {
		u := n.usage[i]
		for _, e := range extra {
			if e.fr == i {
				u += e.v
			}
		}
		if b := u - n.subtree[i]; b > 0 {
			borrowed[t.frs[i].Resource] += b
		}
	}
	if len(borrowed) == 0 {
		return 0
	}
	lendable := map[string]int64{}
	for i := range t.frs {
		lendable[t.frs[i].Resource] = min(MaxAmount, lendable[t.frs[i].Resource]+n.parent.potential(i))
	}
	var drs int64
	for r, b := range borrowed {
		if l := lendable[r]; l > 0 {
			drs = max(drs, mulDiv(b, 1000, l))
		}
	}
	if n.weight == 0 {
		return math.MaxInt64
	}
	return mulDiv(drs, 1000, n.weight)
}

// frAmount is an amount of one flavor-resource.
type frAmount struct {
	fr int
	v  int64
}

// tree is the compiled configuration: quota nodes and lookups.
type tree struct {
	frIndex map[fr]int
	frs     []fr
	flavors map[string]*Flavor
	cqs     map[string]*cqState
	cohorts map[string]*node
	lqs     map[string]*LocalQueue // namespace/name
	nsLabel map[string]map[string]string
	fair    bool
	// cqOrder lists ClusterQueues by name so every walk is deterministic.
	cqOrder []*cqState
	// members lists the ClusterQueues of each tree root, in name order.
	members map[*node][]*cqState
	// checks: some ClusterQueue runs admission checks.
	checks bool
	// drains: some ClusterQueue or LocalQueue is stopped with
	// HoldAndDrain, so cycles look for admitted workloads to evict.
	drains bool
}

// cqState is a ClusterQueue with its compiled groups.
type cqState struct {
	ClusterQueue
	node   *node
	groups []group
	// groupOf maps a covered resource to its group index.
	groupOf map[string]int
	// inactive, when set, says why the queue admits nothing;
	// inactiveReason is its Kueue condition reason.
	inactive, inactiveReason string
	// pending is kept in queue order (see queueLess).
	pending  []*wlState
	admitted []*wlState
	// memo remembers the last workload found not to fit, so that the
	// next of the same shape needs no flavor assignment while usage has
	// not changed.
	memo struct {
		epoch judgement
		rep   *wlState
		why   []reason
		mode  mode
		// byPriority: rep's outcome depended on whom it could preempt,
		// so it stands for workloads of its shape and priority only
		// (see cycle.memoHit).
		byPriority bool
	}
	// scan is this queue's place in the current cycle's walk, valid
	// while scan.cycle is the cycle's id (kept here, not in maps of the
	// cycle: heads looks it up once per queue per round).
	scan queueScan
	// reorder: a LocalQueue's Admission Fair Sharing usage changed, so
	// pending must be put in order again before it is walked; changed
	// lists those LocalQueues. sortAtEnd: only the part of pending after
	// a cycle's cursor was put in order (afs.go).
	reorder   bool
	changed   []*lqFair
	sortAtEnd bool
	// settled: every pending workload was judged and parked, each with
	// its reason, so until something in the queue or its cohort tree
	// changes (a workload added, removed or reprioritized, quota
	// released) a cycle has nothing to look at or explain in it.
	settled bool
}

// queueScan is where a cycle's walk of a queue's pending list stands.
type queueScan struct {
	cycle uint64
	// cursor: the workloads before it were judged this cycle.
	cursor int
	// blocked: the queue admits nothing more this cycle.
	blocked bool
	// unsettled: a workload before cursor is held back or in a stopped
	// LocalQueue, not parked (see cqState.settled).
	unsettled bool
}

type group struct {
	resources []string
	flavors   []groupFlavor
}

type groupFlavor struct {
	name   string
	flavor *Flavor        // nil if the ResourceFlavor does not exist
	fr     map[string]int // resource → flavor-resource index
	// frs holds the flavor-resource index of each of the group's
	// resources, in coveredResources order (see resReq.slot).
	frs []int
}

func buildTree(cfg Config) *tree {
	t := &tree{
		frIndex: map[fr]int{},
		flavors: map[string]*Flavor{},
		cqs:     map[string]*cqState{},
		cohorts: map[string]*node{},
		lqs:     map[string]*LocalQueue{},
		nsLabel: cfg.NamespaceLabel,
		fair:    cfg.FairSharing,
	}
	for i := range cfg.Flavors {
		t.flavors[cfg.Flavors[i].Name] = &cfg.Flavors[i]
	}
	for i := range cfg.LocalQueues {
		lq := &cfg.LocalQueues[i]
		t.lqs[lq.Namespace+"/"+lq.Name] = lq
		t.drains = t.drains || lq.StopPolicy == HoldAndDrain
	}
	index := func(groups []ResourceGroup) {
		add := func(k fr) {
			if _, ok := t.frIndex[k]; !ok {
				t.frIndex[k] = len(t.frs)
				t.frs = append(t.frs, k)
			}
		}
		for _, g := range groups {
			for _, f := range g.Flavors {
				for _, q := range f.Resources {
					add(fr{f.Name, q.Resource})
				}
				// A covered resource a flavor gives no quota for has
				// quota zero there.
				for _, r := range g.CoveredResources {
					add(fr{f.Name, r})
				}
			}
		}
	}
	for _, cq := range cfg.ClusterQueues {
		index(cq.ResourceGroups)
	}
	for _, c := range cfg.Cohorts {
		index(c.ResourceGroups)
	}

	cohortCfg := map[string]*Cohort{}
	for i := range cfg.Cohorts {
		cohortCfg[cfg.Cohorts[i].Name] = &cfg.Cohorts[i]
	}
	var cohortNode func(name string) *node
	cohortNode = func(name string) *node {
		if n, ok := t.cohorts[name]; ok {
			return n
		}
		n := t.newNode(name)
		t.cohorts[name] = n
		if c, ok := cohortCfg[name]; ok {
			t.setQuota(n, c.ResourceGroups)
			n.weight = c.FairWeight
			if c.Parent != "" {
				p := cohortNode(c.Parent)
				n.parent = p
				p.children = append(p.children, n)
			}
		}
		return n
	}
	// Create cohorts in name order for determinism.
	var cohortNames []string
	for _, c := range cfg.Cohorts {
		cohortNames = append(cohortNames, c.Name)
	}
	sort.Strings(cohortNames)
	for _, name := range cohortNames {
		cohortNode(name)
	}
	cyclic := t.breakCycles()
	checks := map[string]bool{}
	for _, ac := range cfg.AdmissionChecks {
		checks[ac.Name] = ac.Active
	}

	for _, cq := range cfg.ClusterQueues {
		s := &cqState{ClusterQueue: cq, groupOf: map[string]int{}}
		n := t.newNode(cq.Name)
		n.cq = s
		n.weight = cq.FairWeight
		s.node = n
		t.setQuota(n, cq.ResourceGroups)
		for gi, g := range cq.ResourceGroups {
			cg := group{resources: g.CoveredResources}
			for _, r := range g.CoveredResources {
				s.groupOf[r] = gi
			}
			for _, f := range g.Flavors {
				gf := groupFlavor{name: f.Name, fr: map[string]int{}, flavor: t.flavors[f.Name]}
				for _, r := range g.CoveredResources {
					i := t.frIndex[fr{f.Name, r}]
					gf.fr[r] = i
					gf.frs = append(gf.frs, i)
				}
				cg.flavors = append(cg.flavors, gf)
				if _, ok := t.flavors[f.Name]; !ok && s.inactive == "" {
					s.inactive = fmt.Sprintf("ClusterQueue %s is inactive: ResourceFlavor %s does not exist", cq.Name, f.Name)
					s.inactiveReason = "FlavorNotFound"
				}
			}
			s.groups = append(s.groups, cg)
		}
		t.drains = t.drains || cq.StopPolicy == HoldAndDrain
		for _, rule := range cq.AdmissionChecks {
			t.checks = true
			active, exists := checks[rule.Name]
			switch {
			case s.inactive != "":
			case !exists:
				s.inactive = fmt.Sprintf("ClusterQueue %s is inactive: AdmissionCheck %s does not exist", cq.Name, rule.Name)
				s.inactiveReason = "AdmissionCheckNotFound"
			case !active:
				s.inactive = fmt.Sprintf("ClusterQueue %s is inactive: AdmissionCheck %s is not active (its controller does not run)", cq.Name, rule.Name)
				s.inactiveReason = "AdmissionCheckInactive"
			}
		}
		if cq.Cohort != "" {
			p := cohortNode(cq.Cohort)
			n.parent = p
			p.children = append(p.children, n)
			if cyclic[p.root().name] && s.inactive == "" {
				s.inactive = fmt.Sprintf("ClusterQueue %s is inactive: its cohort tree has a cycle", cq.Name)
				s.inactiveReason = "CohortCycle"
			}
		}
		t.cqs[cq.Name] = s
		t.cqOrder = append(t.cqOrder, s)
	}
	sort.Slice(t.cqOrder, func(i, j int) bool { return t.cqOrder[i].Name < t.cqOrder[j].Name })
	t.members = map[*node][]*cqState{}
	for _, cq := range t.cqOrder {
		r := cq.node.root()
		t.members[r] = append(t.members[r], cq)
	}
	for _, n := range t.cohorts {
		if n.parent == nil {
			t.computeSubtree(n)
		}
	}
	for _, s := range t.cqOrder {
		if s.node.parent == nil {
			t.computeSubtree(s.node)
		}
	}
	return t
}

func (t *tree) newNode(name string) *node {
	n := &node{
		name:        name,
		nominal:     make([]int64, len(t.frs)),
		borrowLimit: make([]int64, len(t.frs)),
		lendLimit:   make([]int64, len(t.frs)),
		subtree:     make([]int64, len(t.frs)),
		usage:       make([]int64, len(t.frs)),
		weight:      1000,
	}
	for i := range t.frs {
		n.borrowLimit[i] = unlimited
		n.lendLimit[i] = unlimited
	}
	return n
}

func (t *tree) setQuota(n *node, groups []ResourceGroup) {
	for _, g := range groups {
		for _, f := range g.Flavors {
			for _, q := range f.Resources {
				i := t.frIndex[fr{f.Name, q.Resource}]
				// Bounded, so that sums of quotas and usage never
				// overflow (see MaxAmount).
				n.nominal[i] = ClampQuota(q.Nominal)
				if q.BorrowingLimit.Set {
					n.borrowLimit[i] = ClampQuota(q.BorrowingLimit.Value)
				}
				if q.LendingLimit.Set {
					n.lendLimit[i] = ClampQuota(q.LendingLimit.Value)
				}
			}
		}
	}
}

// breakCycles detaches cohorts whose parent chain loops, and returns the
// names of the roots left behind so their queues can be marked inactive.
func (t *tree) breakCycles() map[string]bool {
	cyclic := map[string]bool{}
	names := make([]string, 0, len(t.cohorts))
	for name := range t.cohorts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		seen := map[*node]bool{}
		for n := t.cohorts[name]; n != nil; n = n.parent {
			if seen[n] {
				// n is on the cycle: cut it loose from its parent.
				p := n.parent
				for i, c := range p.children {
					if c == n {
						p.children = append(p.children[:i], p.children[i+1:]...)
						break
					}
				}
				n.parent = nil
				cyclic[n.name] = true
				break
			}
			seen[n] = true
		}
	}
	return cyclic
}

func (t *tree) computeSubtree(n *node) {
	copy(n.subtree, n.nominal)
	n.height = 0
	for _, c := range n.children {
		t.computeSubtree(c)
		for i := range t.frs {
			// Each term is within MaxAmount, so the sum cannot overflow
			// before it is bounded again.
			n.subtree[i] = min(MaxAmount, n.subtree[i]+c.subtree[i]-c.guaranteed(i))
		}
		n.height = max(n.height, c.height+1)
	}
}
