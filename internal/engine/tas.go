package engine

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// resourcePods is the pod count a node allows: every pod takes one.
const resourcePods = "pods"

// tasState is the capacity of every topology-aware flavor.
type tasState struct {
	nodes   []Node
	flavors map[string]*tasFlavor
}

// tasFlavor is one topology-aware flavor's domains and their capacity.
type tasFlavor struct {
	name   string
	levels []string
	// missing says why the flavor has no capacity at all (its Topology
	// does not exist); its pods fit nowhere.
	missing string
	flavor  *Flavor
	// leaves are the lowest-level domains, sorted by their values level
	// by level, so a domain of any level is a run of them.
	leaves []tasLeaf
	leafOf map[string]int
	// res indexes the resources the flavor's nodes offer.
	res map[string]int
	// used is what admitted topology-aware workloads take, per leaf and
	// resource.
	used [][]int64
	// base is the free capacity per leaf and resource of the nodes a pod
	// set may use, by what decides that (eligibilityKey).
	base map[string][][]int64
	// spans are the domains of each level over all leaves, in order, and
	// spanOf the index in spans of the domain holding each leaf.
	spans  [][]span
	spanOf [][]int
	// tables are how many pods of each shape placed so far fit where, at
	// current usage (kept current by bookTAS) and with nothing booked.
	tables     map[string]*fitTable
	tableList  []*fitTable
	emptyTable map[string]*fitTable
}

// maxFitTables bounds the shapes a flavor keeps tables for; past it a
// placement builds its table afresh each time.
const maxFitTables = 256

// fitTable is how many pods of one shape (the nodes it may use and what
// each pod requests) fit in each leaf of a flavor and in each domain of
// every level. Placements read it many times between bookings, so it is
// kept rather than counted over every node per placement.
type fitTable struct {
	key  string
	base [][]int64
	req  []int64
	// current: less what admitted workloads use; else with nothing booked.
	current bool
	leaf    []int64
	dom     [][]int64
}

type tasLeaf struct {
	values []string
	nodes  []int
}

// tasUse is what one admitted pod set takes of one leaf.
type tasUse struct {
	f      *tasFlavor
	leaf   int
	amount []int64
}

// SetNodes replaces the nodes topology-aware flavors place pods on.
// Workloads admitted before keep their placement, counted against the new
// capacity; every pending workload is judged again.
func (e *Engine) SetNodes(nodes []Node) {
	e.nodes = nodes
	e.nodesChanged = true
	e.buildTAS()
	for _, ws := range e.workloads {
		if ws.admitted != nil {
			ws.admitted.tas = e.tasUsage(ws, ws.admitted.podSets)
			e.bookTAS(ws.admitted.tas, 1)
		}
	}
	e.changed(nil)
	e.unparkAll()
	// Units may join or split trees: ownership is asked again.
	e.applyOwner()
}

// buildTAS builds the domains of every topology-aware flavor from the
// configuration and the nodes, with nothing booked, and the units of
// quota interaction they link trees into.
func (e *Engine) buildTAS() {
	topos := map[string]*Topology{}
	for i := range e.cfg.Topologies {
		topos[e.cfg.Topologies[i].Name] = &e.cfg.Topologies[i]
	}
	st := &tasState{nodes: e.nodes, flavors: map[string]*tasFlavor{}}
	for i := range e.cfg.Flavors {
		fl := &e.cfg.Flavors[i]
		if fl.TopologyName == "" {
			continue
		}
		f := &tasFlavor{name: fl.Name, flavor: fl, leafOf: map[string]int{}, res: map[string]int{}, base: map[string][][]int64{}}
		st.flavors[fl.Name] = f
		t, ok := topos[fl.TopologyName]
		if !ok || len(t.Levels) == 0 {
			f.missing = fmt.Sprintf("flavor %s names Topology %s, which does not exist", fl.Name, fl.TopologyName)
			continue
		}
		f.levels = t.Levels
		f.build(e.nodes)
	}
	e.tas = st
	e.units = e.tasUnits()
}

// tasUnits joins the cohort trees whose queues use a topology-aware
// flavor into one unit per connected set, named after its first such
// flavor.
func (e *Engine) tasUnits() map[*node]string {
	if len(e.tas.flavors) == 0 {
		return nil
	}
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		if p, ok := parent[x]; ok && p != x {
			r := find(p)
			parent[x] = r
			return r
		}
		parent[x] = x
		return x
	}
	union := func(a, b string) {
		ra, rb := find(a), find(b)
		if ra == rb {
			return
		}
		// The smaller name roots the set, so a flavor names it.
		if rb < ra {
			ra, rb = rb, ra
		}
		parent[rb] = ra
	}
	roots := map[string]*node{}
	for _, cq := range e.tree.cqOrder {
		root := cq.node.root()
		// A tree's key sorts before every flavor's, so a flavor names
		// the set; a cohort and a queue may share a name.
		rk := "\x00q" + root.name
		if root.cq == nil {
			rk = "\x00c" + root.name
		}
		roots[rk] = root
		for _, g := range cq.groups {
			for _, gf := range g.flavors {
				if _, ok := e.tas.flavors[gf.name]; ok {
					union("\x01"+gf.name, rk)
				}
			}
		}
	}
	out := map[*node]string{}
	for rk, root := range roots {
		r := find(rk)
		if strings.HasPrefix(r, "\x01") {
			out[root] = "tas/" + strings.TrimPrefix(r, "\x01")
		}
	}
	return out
}

// build files the flavor's nodes into leaves: those with the flavor's
// node labels and a value for every level.
func (f *tasFlavor) build(nodes []Node) {
	byKey := map[string]*tasLeaf{}
	for ni := range nodes {
		n := &nodes[ni]
		if !matchesLabels(n.Labels, f.flavor.NodeLabels) {
			continue
		}
		values := make([]string, len(f.levels))
		ok := true
		for k, l := range f.levels {
			if values[k], ok = n.Labels[l]; !ok {
				break
			}
		}
		if !ok {
			continue
		}
		key := strings.Join(values, "/")
		lf := byKey[key]
		if lf == nil {
			lf = &tasLeaf{values: values}
			byKey[key] = lf
		}
		lf.nodes = append(lf.nodes, ni)
		for r := range n.Allocatable {
			if _, ok := f.res[r]; !ok {
				f.res[r] = len(f.res)
			}
		}
	}
	for _, lf := range byKey {
		f.leaves = append(f.leaves, *lf)
	}
	sort.Slice(f.leaves, func(i, j int) bool { return slices.Compare(f.leaves[i].values, f.leaves[j].values) < 0 })
	f.used = make([][]int64, len(f.leaves))
	for i := range f.leaves {
		f.leafOf[strings.Join(f.leaves[i].values, "/")] = i
		f.used[i] = make([]int64, len(f.res))
	}
	f.spans = make([][]span, len(f.levels))
	f.spanOf = make([][]int, len(f.levels))
	for k := range f.levels {
		f.spanOf[k] = make([]int, len(f.leaves))
		for l := 0; l < len(f.leaves); {
			h := l + 1
			for h < len(f.leaves) && slices.Equal(f.leaves[h].values[:k+1], f.leaves[l].values[:k+1]) {
				h++
			}
			for i := l; i < h; i++ {
				f.spanOf[k][i] = len(f.spans[k])
			}
			f.spans[k] = append(f.spans[k], span{l, h})
			l = h
		}
	}
	f.tables, f.emptyTable = map[string]*fitTable{}, map[string]*fitTable{}
}

func matchesLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// domains are the domains of level k within d, a domain of a level above
// (or all leaves): a run of the level's spans, found by binary search.
func (f *tasFlavor) domains(k int, d span) []span {
	all := f.spans[k]
	i := sort.Search(len(all), func(i int) bool { return all[i].lo >= d.lo })
	j := sort.Search(len(all), func(j int) bool { return all[j].lo >= d.hi })
	return all[i:j]
}

// levelIndex is the index of a level's label, or -1.
func (f *tasFlavor) levelIndex(label string) int {
	return slices.Index(f.levels, label)
}

// eligibilityKey renders what decides which of a flavor's nodes a pod set
// may use: its node selector and tolerations.
func eligibilityKey(ps *PodSet) string {
	if len(ps.NodeSelector) == 0 && len(ps.Tolerations) == 0 {
		return ""
	}
	var b strings.Builder
	for _, k := range sortedKeys(ps.NodeSelector) {
		fmt.Fprintf(&b, "%q=%q,", k, ps.NodeSelector[k])
	}
	for _, t := range ps.Tolerations {
		fmt.Fprintf(&b, "|%q%q%q%q", t.Key, t.Operator, t.Value, t.Effect)
	}
	return b.String()
}

// eligible reports whether a pod set may run on a node: it is schedulable,
// matches the pod set's node selector, and every taint that keeps pods
// off it is tolerated by the pod set or the flavor.
func (f *tasFlavor) eligible(n *Node, ps *PodSet) bool {
	if n.Unschedulable || n.NotReady {
		return false
	}
	for k, v := range ps.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	for ti := range n.Taints {
		t := &n.Taints[ti]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerated(t, ps.Tolerations) && !tolerated(t, f.flavor.Tolerations) {
			return false
		}
	}
	return true
}

// baseFor is the free capacity per leaf of the nodes ps may use, before
// topology-aware workloads: allocatable less what other pods use.
// key is eligibilityKey(ps).
func (f *tasFlavor) baseFor(nodes []Node, ps *PodSet, key string) [][]int64 {
	if b, ok := f.base[key]; ok {
		return b
	}
	b := make([][]int64, len(f.leaves))
	for li := range f.leaves {
		b[li] = make([]int64, len(f.res))
		for _, ni := range f.leaves[li].nodes {
			n := &nodes[ni]
			if !f.eligible(n, ps) {
				continue
			}
			for r, v := range n.Allocatable {
				b[li][f.res[r]] += max(0, v-n.Used[r])
			}
		}
	}
	f.base[key] = b
	return b
}

// perPod maps a pod set's requests to the flavor's resources, with the
// pod itself counted when nodes limit pods. ok is false, with the
// resource, when a request is for something no node of the flavor offers.
func (f *tasFlavor) perPod(ps *PodSet) (req []int64, missing string) {
	req = make([]int64, len(f.res))
	for r, v := range ps.Requests {
		if v <= 0 {
			continue
		}
		i, ok := f.res[r]
		if !ok {
			// Name the first missing one, whatever the map's order.
			if missing == "" || r < missing {
				missing = r
			}
			continue
		}
		req[i] = v
	}
	if missing != "" {
		return nil, missing
	}
	if i, ok := f.res[resourcePods]; ok && req[i] == 0 {
		req[i] = 1
	}
	return req, ""
}

// table is the fit table of pod set ps's shape with per-pod requests
// req: current, or (current false) as if nothing were booked.
func (f *tasFlavor) table(nodes []Node, ps *PodSet, req []int64, current bool) *fitTable {
	key := eligibilityKey(ps)
	base := f.baseFor(nodes, ps, key)
	var b strings.Builder
	b.WriteString(key)
	for _, v := range req {
		b.WriteByte('|')
		b.WriteString(strconv.FormatInt(v, 10))
	}
	k := b.String()
	cache := f.tables
	if !current {
		cache = f.emptyTable
	}
	if t, ok := cache[k]; ok {
		return t
	}
	t := &fitTable{key: k, base: base, req: req, current: current, leaf: make([]int64, len(f.leaves)), dom: make([][]int64, len(f.levels))}
	for lv := range f.levels {
		t.dom[lv] = make([]int64, len(f.spans[lv]))
	}
	for li := range f.leaves {
		n := f.fitIn(t, li)
		t.leaf[li] = n
		for lv := range f.levels {
			t.dom[lv][f.spanOf[lv][li]] += n
		}
	}
	if len(cache) < maxFitTables {
		cache[k] = t
		if current {
			f.tableList = append(f.tableList, t)
		}
	}
	return t
}

// fitIn is how many pods of t's shape fit in leaf li.
func (f *tasFlavor) fitIn(t *fitTable, li int) int64 {
	n := int64(-1)
	for r, v := range t.req {
		if v == 0 {
			continue
		}
		free := t.base[li][r]
		if t.current {
			free -= f.used[li][r]
		}
		k := max(0, free) / v
		if n < 0 || k < n {
			n = k
		}
	}
	if n < 0 {
		n = 1 << 40 // requests nothing the nodes count
	}
	return n
}

// rebook brings the current fit tables up to date after leaf li's usage
// changed.
func (f *tasFlavor) rebook(li int) {
	for _, t := range f.tableList {
		n := f.fitIn(t, li)
		if d := n - t.leaf[li]; d != 0 {
			t.leaf[li] = n
			for lv := range t.dom {
				t.dom[lv][f.spanOf[lv][li]] += d
			}
		}
	}
}

// sum is how many pods of t's shape fit in domain d of level k.
func (t *fitTable) sum(f *tasFlavor, k int, d span) int64 {
	if d.hi > d.lo {
		if i := f.spanOf[k][d.lo]; f.spans[k][i] == d {
			return t.dom[k][i]
		}
	}
	var n int64
	for l := d.lo; l < d.hi; l++ {
		n += t.leaf[l]
	}
	return n
}

// request turns a pod set's topology request into a placement request
// on f, or says why the flavor cannot serve it.
func (f *tasFlavor) request(ps *PodSet, count int32) (placeReq, string) {
	t := ps.Topology
	last := len(f.levels) - 1
	r := placeReq{mode: placeUnconstrained, level: last, unitLevel: last, size: 1, units: int64(count)}
	level := func(label string) (int, string) {
		k := f.levelIndex(label)
		if k < 0 {
			return 0, fmt.Sprintf("level %s is not a level of the topology of flavor %s (%s)", label, f.name, strings.Join(f.levels, ", "))
		}
		return k, ""
	}
	var why string
	switch {
	case t.Required != "":
		r.mode = placeRequired
		r.level, why = level(t.Required)
	case t.Preferred != "":
		r.mode = placePreferred
		r.level, why = level(t.Preferred)
	}
	if why != "" {
		return r, why
	}
	if t.SliceLevel != "" {
		k, why := level(t.SliceLevel)
		if why != "" {
			return r, why
		}
		if r.mode == placeUnconstrained {
			// Slices alone: as close together as the slices allow.
			r.mode, r.level = placePreferred, k
		}
		if k < r.level {
			return r, fmt.Sprintf("slice level %s is wider than the level %s the pod set asks for", t.SliceLevel, f.levels[r.level])
		}
		r.unitLevel, r.size, r.units = k, int64(t.SliceSize), int64(count)/int64(t.SliceSize)
	}
	return r, ""
}

// tasUsage is what an admission's topology assignments take of each
// leaf. A domain no longer in the flavor (its nodes are gone) takes
// nothing.
func (e *Engine) tasUsage(ws *wlState, podSets []PodSetAssignment) []tasUse {
	var out []tasUse
	for _, psa := range podSets {
		if psa.Topology == nil {
			continue
		}
		f := e.tasFlavorOf(psa)
		if f == nil || f.missing != "" {
			continue
		}
		ps := podSetNamed(ws.w, psa.Name)
		if ps == nil {
			continue
		}
		req, missing := f.perPod(ps)
		if missing != "" {
			continue
		}
		for _, d := range psa.Topology.Domains {
			li, ok := f.leafOf[strings.Join(d.Values, "/")]
			if !ok {
				continue
			}
			amount := make([]int64, len(req))
			for r, v := range req {
				amount[r] = v * int64(d.Count)
			}
			out = append(out, tasUse{f: f, leaf: li, amount: amount})
		}
	}
	return out
}

// tasFlavorOf is the topology-aware flavor among an assignment's flavors.
func (e *Engine) tasFlavorOf(psa PodSetAssignment) *tasFlavor {
	if e.tas == nil {
		return nil
	}
	for _, r := range sortedKeys(psa.Flavors) {
		if f, ok := e.tas.flavors[psa.Flavors[r]]; ok {
			return f
		}
	}
	return nil
}

func podSetNamed(w *Workload, name string) *PodSet {
	for i := range w.PodSets {
		if w.PodSets[i].Name == name {
			return &w.PodSets[i]
		}
	}
	return nil
}

// bookTAS adds (sign 1) or takes back (sign -1) leaf usage.
func (e *Engine) bookTAS(uses []tasUse, sign int64) {
	for _, u := range uses {
		row := u.f.used[u.leaf]
		for r, v := range u.amount {
			row[r] += sign * v
		}
		u.f.rebook(u.leaf)
	}
}

// tasPlan is the placement of one pod set of an assignment.
type tasPlan struct {
	podSet int
	f      *tasFlavor
	count  int32
	leaves []leafCount
	req    []int64
}

func (p *tasPlan) uses() []tasUse {
	out := make([]tasUse, len(p.leaves))
	for i, lc := range p.leaves {
		amount := make([]int64, len(p.req))
		for r, v := range p.req {
			amount[r] = v * lc.count
		}
		out[i] = tasUse{f: p.f, leaf: lc.leaf, amount: amount}
	}
	return out
}

// assignment renders the plan as the recorded topology assignment.
func (p *tasPlan) assignment() *TopologyAssignment {
	t := &TopologyAssignment{Levels: p.f.levels}
	for _, lc := range p.leaves {
		if lc.count > 0 {
			t.Domains = append(t.Domains, TopologyDomain{Values: p.f.leaves[lc.leaf].values, Count: int32(lc.count)})
		}
	}
	return t
}

// placeOn places count pods of pod set pi of ws on flavor f at current
// usage, with the workload's earlier plans already booked. It returns
// the plan, or the reason it has none and whether freeing every
// topology-aware workload's usage could make room (preemption might).
func (e *Engine) placeOn(ws *wlState, pi int, f *tasFlavor, count int32, within span) (*tasPlan, reason, bool) {
	ps := &ws.w.PodSets[pi]
	fail := reason{kind: reasonTopology, podSet: ps.Name, flavor: f.name}
	sh := e.shapeOn(ws, pi, f, count)
	if sh.why != "" {
		fail.detail = sh.why
		return nil, fail, false
	}
	t := sh.t
	if t == nil {
		t = f.table(e.nodes, ps, sh.req, true)
	}
	p := &placement{f: f, t: t, r: sh.r}
	if p.run(within) {
		return &tasPlan{podSet: pi, f: f, count: count, leaves: p.out, req: sh.req}, reason{}, false
	}
	fail.detail = placeFailure(ps, f, sh.r, p.best)
	// Would the pods fit if no topology-aware workload held anything?
	empty := &placement{f: f, t: f.table(e.nodes, ps, sh.req, false), r: sh.r}
	return nil, fail, empty.run(within)
}

// tasShape is what placing one pod set of a workload on a flavor reads
// every time: its per-pod requests, its placement request and its fit
// table, or why the flavor cannot serve it. A workload waiting in a long
// queue is placed again and again; this is worked out once.
type tasShape struct {
	f     *tasFlavor
	count int32
	req   []int64
	r     placeReq
	// t is nil when the flavor keeps no table for the shape.
	t   *fitTable
	why string
}

// shapeOn is pod set pi's shape on f for count pods, kept on the
// workload until its pod sets, the count or the flavor (SetNodes builds
// flavors anew) change.
func (e *Engine) shapeOn(ws *wlState, pi int, f *tasFlavor, count int32) *tasShape {
	if len(ws.tasShapes) != len(ws.w.PodSets) {
		ws.tasShapes = make([]tasShape, len(ws.w.PodSets))
	}
	sh := &ws.tasShapes[pi]
	if sh.f == f && sh.count == count {
		return sh
	}
	ps := &ws.w.PodSets[pi]
	*sh = tasShape{f: f, count: count}
	if f.missing != "" {
		sh.why = f.missing
		return sh
	}
	req, missing := f.perPod(ps)
	if missing != "" {
		sh.why = fmt.Sprintf("no node of flavor %s offers %s", f.name, missing)
		return sh
	}
	r, why := f.request(ps, count)
	if why != "" {
		sh.why = why
		return sh
	}
	sh.req, sh.r = req, r
	if t := f.table(e.nodes, ps, req, true); f.tables[t.key] == t {
		sh.t = t
	}
	return sh
}

// placeFailure says why a placement found no room, in the words a user
// thinks in: "16 pods need one rack (level …); the best rack has room
// for 12".
func placeFailure(ps *PodSet, f *tasFlavor, r placeReq, best int64) string {
	what := fmt.Sprintf("%d pods", r.units)
	unit := "pods"
	if r.size > 1 {
		what = fmt.Sprintf("%d slices of %d pods (each in one %s)", r.units, r.size, LevelName(f.levels[r.unitLevel]))
		unit = "slices"
	}
	switch r.mode {
	case placeRequired:
		l := f.levels[r.level]
		return fmt.Sprintf("%s need one %s (level %s) of flavor %s; the best %s has room for %d %s", what, LevelName(l), l, f.name, LevelName(l), best, unit)
	case placePreferred:
		return fmt.Sprintf("%s do not fit in the nodes of flavor %s; they have room for %d %s", what, f.name, best, unit)
	}
	return fmt.Sprintf("%s do not fit in the nodes of flavor %s; they have room for %d %s", what, f.name, best, unit)
}

// all is every leaf of the flavor.
func (f *tasFlavor) all() span { return span{0, len(f.leaves)} }

// domainOf is the domain of level k that holds leaf l.
func (f *tasFlavor) domainOf(k int, l int) span {
	d := span{l, l + 1}
	same := func(o int) bool { return slices.Equal(f.leaves[o].values[:k+1], f.leaves[l].values[:k+1]) }
	for d.lo > 0 && same(d.lo-1) {
		d.lo--
	}
	for d.hi < len(f.leaves) && same(d.hi) {
		d.hi++
	}
	return d
}

// groupLevel is the level a pod set of a group is placed together at:
// the one it requires or prefers, else the widest.
func (f *tasFlavor) groupLevel(ps *PodSet) int {
	for _, l := range []string{ps.Topology.Required, ps.Topology.Preferred} {
		if k := f.levelIndex(l); l != "" && k >= 0 {
			return k
		}
	}
	return 0
}

// placeGroup places pod set pi, keeping it with the other pod sets of its
// group (podset-group-name): a later member goes in the domain an earlier
// one was given; the first goes in a domain where every member fits.
// earlier are the workload's plans so far, booked.
func (e *Engine) placeGroup(ws *wlState, earlier []*tasPlan, pi int, f *tasFlavor, count int32) (*tasPlan, reason, bool) {
	ps := &ws.w.PodSets[pi]
	g := ps.Topology.Group
	if g == "" || f.missing != "" {
		return e.placeOn(ws, pi, f, count, f.all())
	}
	k := f.groupLevel(ps)
	for _, p := range earlier {
		if p.f == f && ws.w.PodSets[p.podSet].Topology.Group == g && len(p.leaves) > 0 {
			return e.placeOn(ws, pi, f, count, f.domainOf(k, p.leaves[0].leaf))
		}
	}
	var later []int
	for j := pi + 1; j < len(ws.w.PodSets); j++ {
		if ws.w.PodSets[j].Topology.Group == g {
			later = append(later, j)
		}
	}
	plan, why, could := e.placeOn(ws, pi, f, count, f.all())
	if plan == nil || len(later) == 0 {
		return plan, why, could
	}
	// Try the domains of the group's level, those where this pod set fits
	// most tightly first, until one holds every member.
	doms := f.domains(k, f.all())
	type cand struct {
		d    span
		plan *tasPlan
		room int64
	}
	var cands []cand
	t := f.table(e.nodes, ps, plan.req, true)
	for _, d := range doms {
		p, _, _ := e.placeOn(ws, pi, f, count, d)
		if p == nil {
			continue
		}
		cands = append(cands, cand{d, p, t.sum(f, k, d)})
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].room < cands[j].room })
	for _, c := range cands {
		booked := [][]tasUse{c.plan.uses()}
		e.bookTAS(booked[0], 1)
		ok := true
		for _, j := range later {
			p, _, _ := e.placeOn(ws, j, f, ws.full[j], c.d)
			if p == nil {
				ok = false
				break
			}
			u := p.uses()
			e.bookTAS(u, 1)
			booked = append(booked, u)
		}
		for _, u := range booked {
			e.bookTAS(u, -1)
		}
		if ok {
			return c.plan, reason{}, false
		}
	}
	why = reason{kind: reasonTopology, podSet: ps.Name, flavor: f.name,
		detail: fmt.Sprintf("the pod sets of group %s do not fit together in one %s (level %s) of flavor %s", g, LevelName(f.levels[k]), f.levels[k], f.name)}
	return nil, why, true
}

// planned reports whether pod set pi already has a placement.
func (a *assignment) planned(pi int) bool {
	for _, p := range a.plans {
		if p.podSet == pi {
			return true
		}
	}
	return false
}

// replan places a's pod sets again at current usage (victims taken, or
// others admitted since), keeping the new placement only if every pod set
// has one.
func (e *Engine) replan(a *assignment) bool {
	fresh := make([]*tasPlan, 0, len(a.plans))
	ok := true
	for _, p := range a.plans {
		np, _, _ := e.placeGroup(a.ws, fresh, p.podSet, p.f, p.count)
		if np == nil {
			ok = false
			break
		}
		fresh = append(fresh, np)
		e.bookTAS(np.uses(), 1)
	}
	for _, p := range fresh {
		e.bookTAS(p.uses(), -1)
	}
	if ok {
		a.plans = fresh
	}
	return ok
}

// validTopology says what is wrong with a pod set's topology request, or
// "". Levels are checked against a flavor's topology when it is placed.
func validTopology(ps *PodSet) string {
	t := ps.Topology
	n := 0
	for _, set := range []bool{t.Required != "", t.Preferred != "", t.Unconstrained} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return "asks for more than one of required, preferred and unconstrained topology"
	case t.SliceLevel == "" && t.SliceSize != 0:
		return fmt.Sprintf("slice size %d is given without a slice-required topology level", t.SliceSize)
	case t.SliceLevel != "" && t.SliceSize <= 0:
		return fmt.Sprintf("slice-required topology %s needs a slice size above zero", t.SliceLevel)
	case t.SliceLevel != "" && t.Unconstrained:
		return "unconstrained topology cannot have slices"
	case t.SliceLevel != "" && ps.Count%t.SliceSize != 0:
		return fmt.Sprintf("%d pods do not divide into slices of %d", ps.Count, t.SliceSize)
	case t.SliceLevel != "" && ps.shrinks():
		return "partial admission (minCount) cannot be combined with slices"
	}
	return ""
}

// DomainUsage is one lowest-level domain of a topology-aware flavor and
// one resource: what its schedulable nodes offer beyond other pods'
// use, and what admitted workloads take of it.
type DomainUsage struct {
	Flavor   string
	Values   []string
	Resource string
	Capacity int64
	Used     int64
}

// Domains lists the usage of every domain of every topology-aware flavor,
// by flavor, domain and resource.
func (e *Engine) Domains() []DomainUsage {
	if e.tas == nil {
		return nil
	}
	var out []DomainUsage
	for _, name := range sortedKeys(e.tas.flavors) {
		f := e.tas.flavors[name]
		res := sortedKeys(f.res)
		for li, lf := range f.leaves {
			for _, r := range res {
				var c int64
				for _, ni := range lf.nodes {
					n := &e.nodes[ni]
					if !n.Unschedulable && !n.NotReady {
						c += max(0, n.Allocatable[r]-n.Used[r])
					}
				}
				out = append(out, DomainUsage{Flavor: name, Values: lf.values, Resource: r, Capacity: c, Used: f.used[li][f.res[r]]})
			}
		}
	}
	return out
}

// ReasonNodeFailure evicts a workload placed on a node that is gone or not
// Ready; the message names the node.
const ReasonNodeFailure = "NodeFailure"

// failedNode names a node of an admitted workload's placement that failed
// (gone, or not Ready), or "".
func (e *Engine) failedNode(ws *wlState) string {
	for _, psa := range ws.admitted.podSets {
		if psa.Topology == nil {
			continue
		}
		f := e.tasFlavorOf(psa)
		if f == nil || f.missing != "" {
			continue
		}
		for _, d := range psa.Topology.Domains {
			if len(d.Values) == 0 {
				continue // names no domain: nothing there to fail
			}
			name := strings.Join(d.Values, "/")
			li, ok := f.leafOf[name]
			if !ok {
				return fmt.Sprintf("node %s of its placement is gone", d.Values[len(d.Values)-1])
			}
			down := 0
			for _, ni := range f.leaves[li].nodes {
				if e.nodes[ni].NotReady {
					down++
				}
			}
			if down > 0 && down == len(f.leaves[li].nodes) {
				return fmt.Sprintf("node %s of its placement is not Ready", e.nodes[f.leaves[li].nodes[0]].Name)
			}
		}
	}
	return ""
}

// nodeFailures, once the nodes changed, moves the pods each admitted
// workload has on nodes that failed to other domains (replaceFailed), or
// evicts it when they fit nowhere: it queues again, to be placed anew.
func (c *cycle) nodeFailures() {
	e := c.e
	if !e.nodesChanged || e.tas == nil || len(e.tas.flavors) == 0 {
		e.nodesChanged = false
		return
	}
	e.nodesChanged = false
	var victims []*wlState
	for _, cq := range e.tree.cqOrder {
		if !ours(cq) {
			continue // another engine decides for its tree
		}
		for _, ws := range cq.admitted {
			if !ws.evicting && hasPlacement(ws) {
				victims = append(victims, ws)
			}
		}
	}
	for _, ws := range victims {
		why := e.failedNode(ws)
		if why == "" {
			continue
		}
		cq := ws.admitted.cq
		if podSets, moved, ok := e.replaceFailed(ws); ok {
			e.replace(ws, podSets)
			c.touched[cq] = true
			c.emit(Decision{Kind: KindReplaced, Key: ws.key, ClusterQueue: cq.Name, PodSets: podSets, Reason: ReasonNodeReplaced,
				Message: why + "; " + moved})
			continue
		}
		why += "; its pods there fit nowhere else it may run"
		ws.charge(c.now)
		if e.deferred {
			ws.evicting = true
		} else {
			e.evict(ws)
		}
		c.touched[cq] = true
		c.emit(Decision{Kind: KindEvicted, Key: ws.key, ClusterQueue: cq.Name, Reason: ReasonNodeFailure, Message: why})
	}
}

func hasPlacement(ws *wlState) bool {
	for _, psa := range ws.admitted.podSets {
		if psa.Topology != nil {
			return true
		}
	}
	return false
}

// unparkTopologyWaiters wakes the parked workloads whose last reason was
// room in a topology's domains: a release in one cohort tree frees nodes
// that queues of other trees place on. Those that wait for quota stay
// parked until their own tree releases some.
func (e *Engine) unparkTopologyWaiters() {
	if !e.topologyWaiting {
		return
	}
	e.topologyWaiting = false
	for _, cq := range e.tree.cqOrder {
		for _, p := range cq.pending {
			if p.parked && waitsFor(p.why, reasonTopology) {
				p.parked = false
				cq.settled = false
			}
		}
	}
}

// waitsFor reports whether any of the reasons is of the kind.
func waitsFor(why []reason, kind reasonKind) bool {
	for _, r := range why {
		if r.kind == kind {
			return true
		}
	}
	return false
}
