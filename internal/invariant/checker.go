package invariant

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Config is the queue configuration the limits come from.
type Config struct {
	ClusterQueues []v1beta1.ClusterQueue
	Cohorts       []v1beta1.Cohort
}

// Violation is one broken limit, or one running Job nothing limits, right
// after one Job event.
type Violation struct {
	// ResourceVersion is that of the Job event (or the re-list) after which
	// the violation holds.
	ResourceVersion string
	// Node is "ClusterQueue/NAME" or "Cohort/NAME". It is empty for a Job
	// running without a readable admission, which belongs to no node.
	Node string
	// Flavor and Resource are the quota broken. For a violation about a
	// Job's admission Flavor is empty, and Resource names a requested
	// resource the admission gave no flavor, if that is the violation.
	Flavor, Resource string
	// Used and Limit are zero for a violation about a Job's admission.
	Used, Limit resource.Quantity
	// Jobs are namespace/name of the running Jobs in the node's subtree
	// that use Flavor/Resource (for an admission violation, the Job itself),
	// sorted.
	Jobs []string
	// Message is a full sentence for a report.
	Message string
}

// String is the Message, prefixed with the resourceVersion it holds at.
func (v Violation) String() string {
	if v.ResourceVersion == "" {
		return v.Message
	}
	return "resourceVersion " + v.ResourceVersion + ": " + v.Message
}

// Checker holds the quota tree and the usage of every running Job. It is not
// safe for concurrent use: commit order is one sequence, and so are the
// calls.
type Checker struct {
	cqs     map[string]*node
	cohorts map[string]*node
	// roots in name order, so that a re-list reports deterministically.
	roots []*node
	// jobs holds the booking of every running Job with a known
	// ClusterQueue, by namespace/name.
	jobs map[string]*booking
	// formats remembers how the configuration writes each resource, so
	// that amounts are reported as "4Gi" rather than "4294967296".
	formats map[string]resource.Format
	max     map[string]map[fr]int64
}

// fr is a flavor and resource pair, the unit quota is counted in.
type fr struct{ flavor, resource string }

func (f fr) String() string { return f.flavor + "/" + f.resource }

type node struct {
	kind, name string
	parent     *node
	children   []*node
	root       *node

	nominal map[fr]int64
	// borrow and lend hold only the limits that are set.
	borrow map[fr]int64
	lend   map[fr]int64
	// quota is nominal plus what the children lend, fixed by New.
	quota map[fr]int64
	// usage of a ClusterQueue is kept up to date by every booking; of a
	// cohort it is recomputed by each check.
	usage map[fr]int64
	// jobs are the namespace/name of the Jobs booked on a ClusterQueue.
	jobs map[string]*booking
}

func (n *node) id() string { return n.kind + "/" + n.name }

func (n *node) lendable(f fr) int64 {
	if l, ok := n.lend[f]; ok {
		return min(l, n.quota[f])
	}
	return n.quota[f]
}

func (n *node) guaranteed(f fr) int64 { return n.quota[f] - n.lendable(f) }

type booking struct {
	key   string
	uid   types.UID
	cq    *node
	usage map[fr]int64
}

const (
	kindCQ     = "ClusterQueue"
	kindCohort = "Cohort"
)

// New builds the quota tree. It fails on a configuration the API server
// should have refused, naming the object, rather than check against limits
// that mean nothing: a cohort cycle, a duplicate name, a negative quantity,
// or a flavor and resource given twice in one object.
func New(cfg Config) (*Checker, error) {
	c := &Checker{
		cqs:     map[string]*node{},
		cohorts: map[string]*node{},
		jobs:    map[string]*booking{},
		formats: map[string]resource.Format{},
		max:     map[string]map[fr]int64{},
	}
	cohort := func(name string) *node {
		n, ok := c.cohorts[name]
		if !ok {
			n = newNode(kindCohort, name)
			c.cohorts[name] = n
		}
		return n
	}
	explicit := map[string]bool{}
	for i := range cfg.Cohorts {
		co := &cfg.Cohorts[i]
		if co.Name == "" {
			return nil, fmt.Errorf("a Cohort has no name")
		}
		if explicit[co.Name] {
			return nil, fmt.Errorf("Cohort/%s is given twice", co.Name)
		}
		explicit[co.Name] = true
		n := cohort(co.Name)
		if err := c.setQuota(n, co.Spec.ResourceGroups); err != nil {
			return nil, err
		}
		if p := co.Spec.ParentOf(); p != "" {
			if p == co.Name {
				return nil, fmt.Errorf("Cohort/%s is its own parent", co.Name)
			}
			n.parent = cohort(p)
		}
	}
	for i := range cfg.ClusterQueues {
		cq := &cfg.ClusterQueues[i]
		if cq.Name == "" {
			return nil, fmt.Errorf("a ClusterQueue has no name")
		}
		if _, dup := c.cqs[cq.Name]; dup {
			return nil, fmt.Errorf("ClusterQueue/%s is given twice", cq.Name)
		}
		n := newNode(kindCQ, cq.Name)
		n.jobs = map[string]*booking{}
		if err := c.setQuota(n, cq.Spec.ResourceGroups); err != nil {
			return nil, err
		}
		if cq.Spec.Cohort != "" {
			n.parent = cohort(cq.Spec.Cohort)
		}
		c.cqs[cq.Name] = n
	}

	// A loop in the parent chain leaves no root to check against: refuse
	// it rather than guess which limit the user meant.
	for _, name := range slices.Sorted(maps.Keys(c.cohorts)) {
		seen := map[*node]bool{}
		var chain []string
		for n := c.cohorts[name]; n != nil; n = n.parent {
			chain = append(chain, n.name)
			if seen[n] {
				return nil, fmt.Errorf("Cohort/%s: the parent chain loops: %s", name, strings.Join(chain, " → "))
			}
			seen[n] = true
		}
	}

	all := slices.Concat(slices.Collect(maps.Values(c.cohorts)), slices.Collect(maps.Values(c.cqs)))
	slices.SortFunc(all, func(a, b *node) int { return strings.Compare(a.id(), b.id()) })
	for _, n := range all {
		if n.parent != nil {
			n.parent.children = append(n.parent.children, n)
		} else {
			c.roots = append(c.roots, n)
		}
	}
	for _, r := range c.roots {
		computeQuota(r, r)
	}
	return c, nil
}

func newNode(kind, name string) *node {
	return &node{
		kind: kind, name: name,
		nominal: map[fr]int64{}, borrow: map[fr]int64{}, lend: map[fr]int64{},
		quota: map[fr]int64{}, usage: map[fr]int64{},
	}
}

func (c *Checker) setQuota(n *node, groups []v1beta1.ResourceGroup) error {
	for _, g := range groups {
		for _, f := range g.Flavors {
			for _, q := range f.Resources {
				k := fr{f.Name, string(q.Name)}
				if _, dup := n.nominal[k]; dup {
					return fmt.Errorf("%s: quota for %s in flavor %s is given twice", n.id(), k.resource, k.flavor)
				}
				if _, ok := c.formats[k.resource]; !ok {
					c.formats[k.resource] = q.NominalQuota.Format
				}
				var err error
				if n.nominal[k], err = milli(n, k, "nominalQuota", &q.NominalQuota); err != nil {
					return err
				}
				if q.BorrowingLimit != nil {
					if n.borrow[k], err = milli(n, k, "borrowingLimit", q.BorrowingLimit); err != nil {
						return err
					}
				}
				if q.LendingLimit != nil {
					if n.lend[k], err = milli(n, k, "lendingLimit", q.LendingLimit); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func milli(n *node, k fr, field string, q *resource.Quantity) (int64, error) {
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%s: %s of %s in flavor %s is negative (%s)", n.id(), field, k.resource, k.flavor, q)
	}
	return q.MilliValue(), nil
}

func computeQuota(n, root *node) {
	n.root = root
	maps.Copy(n.quota, n.nominal)
	for _, ch := range n.children {
		computeQuota(ch, root)
		for f := range ch.quota {
			n.quota[f] += ch.lendable(f)
		}
	}
}

// Observe applies one Job's new state, in commit order (deleted=true for a
// deletion), and returns the violations that hold right after it in the
// quota trees the change touched, plus those about the Job's own admission.
//
// A Job's booking replaces its previous one, so observing the same state
// twice counts it once.
func (c *Checker) Observe(j *batchv1.Job, deleted bool) []Violation {
	if j == nil {
		return nil
	}
	key := j.Namespace + "/" + j.Name
	old := c.jobs[key]
	// A deletion of an earlier Job of the same name cannot come after the
	// newer Job in commit order; if one does, it says nothing about the
	// Job that is booked.
	if deleted && old != nil && j.UID != "" && old.uid != "" && j.UID != old.uid {
		return nil
	}
	touched := map[*node]bool{}
	if old != nil {
		c.unbook(old)
		touched[old.cq.root] = true
	}
	var out []Violation
	if !deleted {
		b, vs := c.book(j)
		out = vs
		if b != nil {
			touched[b.cq.root] = true
		}
	}
	trigger := "Job " + key
	for _, r := range c.roots {
		if touched[r] {
			out = append(out, c.check(r, trigger)...)
		}
	}
	for i := range out {
		out[i].ResourceVersion = j.ResourceVersion
	}
	return out
}

// Max returns, per node and "flavor/resource", the highest usage seen.
// Only usage above zero is recorded.
func (c *Checker) Max() map[string]map[string]resource.Quantity {
	out := make(map[string]map[string]resource.Quantity, len(c.max))
	for n, m := range c.max {
		out[n] = make(map[string]resource.Quantity, len(m))
		for f, v := range m {
			out[n][f.String()] = c.quantity(f.resource, v)
		}
	}
	return out
}

// resync replaces every booking with the Jobs of one list, which is a single
// point of commit order, and checks every tree once, so that the order the
// list happens to come in cannot show a state that never existed.
func (c *Checker) resync(items []batchv1.Job, rv string) []Violation {
	for _, b := range c.jobs {
		c.unbook(b)
	}
	var out []Violation
	for i := range items {
		j := &items[i]
		// The list is one state: a repeated name would be a second Job
		// that cannot exist beside the first, so the last one wins.
		if old := c.jobs[j.Namespace+"/"+j.Name]; old != nil {
			c.unbook(old)
		}
		_, vs := c.book(j)
		out = append(out, vs...)
	}
	trigger := "the re-list"
	for _, r := range c.roots {
		out = append(out, c.check(r, trigger)...)
	}
	for i := range out {
		out[i].ResourceVersion = rv
	}
	return out
}

func (c *Checker) unbook(b *booking) {
	for f, v := range b.usage {
		b.cq.usage[f] -= v
		if b.cq.usage[f] == 0 {
			delete(b.cq.usage, f)
		}
	}
	delete(b.cq.jobs, b.key)
	delete(c.jobs, b.key)
}

// book records the usage of a running Job and returns its booking (nil if it
// uses no quota) and the violations of its admission.
func (c *Checker) book(j *batchv1.Job) (*booking, []Violation) {
	if !running(j) {
		return nil, nil
	}
	key := j.Namespace + "/" + j.Name
	a, ok, err := jobframework.AdmissionOf(j.Annotations)
	switch {
	case err != nil:
		return nil, []Violation{{
			Jobs:    []string{key},
			Message: fmt.Sprintf("Job %s runs with an unreadable admission: %v", key, err),
		}}
	case !ok:
		return nil, []Violation{{
			Jobs: []string{key},
			Message: fmt.Sprintf("Job %s is running without an admission: it is not suspended, not finished and has no %s annotation",
				key, jobframework.AdmissionAnnotation),
		}}
	}
	cq, known := c.cqs[a.ClusterQueue]
	if !known {
		return nil, []Violation{{
			Node:    kindCQ + "/" + a.ClusterQueue,
			Jobs:    []string{key},
			Message: fmt.Sprintf("Job %s runs under ClusterQueue %q, which does not exist", key, a.ClusterQueue),
		}}
	}

	var vs []Violation
	usage := map[fr]int64{}
	// A batch/v1 Job has one pod template; every pod set of its admission
	// runs pods of it.
	perPod := jobframework.PodRequests(&j.Spec.Template.Spec)
	// A Job never runs more pods at once than its parallelism (an elastic
	// Job's may fall below its admission's count before the admission
	// gives the rest back).
	runs := int64(1)
	if j.Spec.Parallelism != nil {
		runs = int64(*j.Spec.Parallelism)
	}
	for _, ps := range a.PodSets {
		count := min(int64(max(ps.Count, 0)), max(runs, 0))
		for _, res := range slices.Sorted(maps.Keys(perPod)) {
			q := perPod[res]
			m := q.MilliValue()
			if m <= 0 || count == 0 {
				continue
			}
			flavor, ok := ps.Flavors[string(res)]
			if !ok {
				// The engine admits no workload with a request its
				// ClusterQueue does not cover, so this amount is
				// outside every quota.
				vs = append(vs, Violation{
					Node:     cq.id(),
					Resource: string(res),
					Jobs:     []string{key},
					Message: fmt.Sprintf("Job %s requests %s of %s per pod in pod set %s, but its admission to ClusterQueue %s gives %s no flavor",
						key, q.String(), res, ps.Name, cq.name, res),
				})
				continue
			}
			usage[fr{flavor, string(res)}] += count * m
		}
	}
	b := &booking{key: key, uid: j.UID, cq: cq, usage: usage}
	for f, v := range usage {
		cq.usage[f] += v
	}
	cq.jobs[key] = b
	c.jobs[key] = b
	return b, vs
}

func running(j *batchv1.Job) bool {
	if _, labelled := j.Labels[v1beta1.QueueNameLabel]; !labelled {
		return false
	}
	if j.Spec.Suspend != nil && *j.Spec.Suspend {
		return false
	}
	return !finished(j)
}

// finished reads the end of a Job from its own conditions, as the Job
// controller writes them: the checker audits Sluice, so it does not ask
// Sluice's adapter.
func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return true
		}
	}
	return false
}

// check recomputes the cohort usage of one tree, records maxima and returns
// the violations in it, ordered by node, flavor and resource.
func (c *Checker) check(root *node, trigger string) []Violation {
	sumUsage(root)
	var out []Violation
	var walk func(n *node)
	walk = func(n *node) {
		for _, f := range slices.SortedFunc(maps.Keys(n.usage), cmpFR) {
			used := n.usage[f]
			c.recordMax(n, f, used)
			limit, why, ok := limitOf(n, f)
			if !ok || used <= limit {
				continue
			}
			jobs := jobsUsing(n, f)
			out = append(out, Violation{
				Node:     n.id(),
				Flavor:   f.flavor,
				Resource: f.resource,
				Used:     c.quantity(f.resource, used),
				Limit:    c.quantity(f.resource, limit),
				Jobs:     jobs,
				Message: fmt.Sprintf("after %s, %s %s uses %s of %s in flavor %s, over its limit of %s (%s); running Jobs: %s",
					trigger, n.kind, n.name, c.format(f.resource, used), f.resource, f.flavor,
					c.format(f.resource, limit), c.explain(n, f, why), strings.Join(jobs, ", ")),
			})
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	walk(root)
	slices.SortStableFunc(out, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.Flavor, b.Flavor), strings.Compare(a.Resource, b.Resource))
	})
	return out
}

func cmpFR(a, b fr) int {
	return cmp.Or(strings.Compare(a.flavor, b.flavor), strings.Compare(a.resource, b.resource))
}

func sumUsage(n *node) {
	if n.kind == kindCQ {
		return
	}
	clear(n.usage)
	for _, ch := range n.children {
		sumUsage(ch)
		for f, u := range ch.usage {
			if above := u - ch.guaranteed(f); above > 0 {
				n.usage[f] += above
			}
		}
	}
}

type limitKind int

const (
	rootLimit limitKind = 1 << iota
	borrowLimit
)

// limitOf is the tighter of the limits that apply to the node, if any.
func limitOf(n *node, f fr) (int64, limitKind, bool) {
	var limit int64
	var why limitKind
	if n.parent == nil {
		limit, why = n.quota[f], rootLimit
	}
	if b, ok := n.borrow[f]; ok {
		if l := n.quota[f] + b; why == 0 || l < limit {
			limit, why = l, borrowLimit
		}
	}
	return limit, why, why != 0
}

func (c *Checker) explain(n *node, f fr, why limitKind) string {
	var quota string
	if n.kind == kindCQ {
		quota = "nominal quota " + c.format(f.resource, n.quota[f])
	} else {
		own := n.nominal[f]
		quota = fmt.Sprintf("cohort quota %s: own %s plus %s lent by its members",
			c.format(f.resource, n.quota[f]), c.format(f.resource, own), c.format(f.resource, n.quota[f]-own))
	}
	if why == borrowLimit {
		return quota + " plus borrowingLimit " + c.format(f.resource, n.borrow[f])
	}
	return quota
}

func jobsUsing(n *node, f fr) []string {
	var out []string
	var walk func(n *node)
	walk = func(n *node) {
		for key, b := range n.jobs {
			if b.usage[f] > 0 {
				out = append(out, key)
			}
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	walk(n)
	slices.Sort(out)
	return out
}

func (c *Checker) recordMax(n *node, f fr, v int64) {
	if v <= 0 {
		return
	}
	m := c.max[n.id()]
	if m == nil {
		m = map[fr]int64{}
		c.max[n.id()] = m
	}
	if v > m[f] {
		m[f] = v
	}
}

func (c *Checker) quantity(res string, milli int64) resource.Quantity {
	f, ok := c.formats[res]
	if !ok {
		f = resource.DecimalSI
	}
	return *resource.NewMilliQuantity(milli, f)
}

func (c *Checker) format(res string, milli int64) string {
	q := c.quantity(res, milli)
	return q.String()
}
