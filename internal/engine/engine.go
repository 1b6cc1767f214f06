package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Sentinel errors for bad calls into the engine.
var (
	ErrDuplicate       = errors.New("workload already known")
	ErrUnknownWorkload = errors.New("workload not known")
	ErrBadAdmission    = errors.New("admission does not match the configuration")
)

// admitted is a workload's hold on quota.
type admitted struct {
	cq      *cqState
	usage   []frAmount
	podSets []PodSetAssignment
	at      time.Time
	// checks are the reservation's admission checks; awaiting: not all
	// of them have been ready yet, so it holds quota without being
	// admitted. since is when it was admitted (checks passed).
	checks   []CheckStatus
	awaiting bool
	since    time.Time
	// charged: the time this admission ran was added to the workload's
	// executed time (see charge).
	charged bool
	// tas is what its pod sets take of topology-aware flavors' domains.
	tas []tasUse
	// fair is the LocalQueue whose Admission Fair Sharing usage the
	// admission counts in, if any; penalty is the entry penalty it
	// charged it, per resource.
	fair    *lqFair
	penalty map[string]float64
}

// wlState is the engine's bookkeeping for one workload. The fields a
// cycle reads of every waiting workload as it walks a queue (after each
// release in a cohort tree, its whole backlog) come first, and readiness
// starts with what heldBack reads, so that the walk touches as few cache
// lines of each workload as it can: at 100,000 waiting the walk's time is
// mostly waiting for memory.
type wlState struct {
	admitted *admitted
	// cq is the ClusterQueue the workload queues in; nil while its
	// LocalQueue or ClusterQueue is missing (see unresolved).
	cq *cqState
	lq *LocalQueue
	// fair is its LocalQueue's Admission Fair Sharing state when its
	// ClusterQueue orders by usage.
	fair *lqFair
	// why is the structured form of reason when it came from flavor
	// assignment; an unchanged why skips rendering reason again.
	why []reason
	// shape hashes what flavor assignment reads of the workload: its pod
	// sets. Workloads of one shape in one queue fit alike.
	shape uint32
	// prio is w.Priority, kept here for the walk.
	prio int32
	// parked: found inadmissible in a BestEffortFIFO queue; skipped until
	// quota is released in its cohort tree or configuration changes.
	parked bool
	// queued: the workload has an entry in its ClusterQueue's pending list.
	queued bool
	// selected: cq's namespaceSelector accepts the workload's namespace.
	selected bool
	// evicting: asked to give up its quota, which it holds until the
	// caller reports it gone (deferred eviction only).
	evicting bool
	// seenIn and victimIn hold the id of the last cycle that judged or
	// preempted the workload.
	seenIn, victimIn uint64
	reason           string
	// class is what the next reason is judged against (Retold), with
	// WithQuietPending.
	class string
	// behind is the workload this one was last said to wait behind.
	behind *wlState
	// waiting remembers a preemptor left waiting for its victims to
	// release quota (deferred eviction only): until quota is released in
	// its tree, judging it again would choose the same victims. nil for
	// a workload that never waited so.
	waiting *preemptionWait
	// pods is what waitForPodsReady knows of it.
	pods readiness
	// grow is the pending scale-up of an admitted elastic workload;
	// parent, for a scale-up, the workload it grows. gone: a scale-up
	// admitted or withdrawn, left in its list until it is compacted.
	grow, parent *wlState
	gone         bool

	w          *Workload
	key        string
	unresolved string
	// invalid, when set, is why the workload as written can never be
	// admitted (see validate): it waits in its queue with that reason,
	// holding no one up, until it is changed or removed.
	invalid string
	// split holds each pod set's requests by resource group of cq; full
	// holds each pod set's full count.
	split []podSetReqs
	full  []int32
	// tasShapes are its pod sets' shapes on topology-aware flavors.
	tasShapes []tasShape
	// orderAt places the workload in its queue among equal priorities:
	// its submission, or its last PodsReadyTimeout eviction.
	orderAt time.Time
}

// Engine holds configuration, queues and quota usage. It is not safe for
// concurrent use; one goroutine drives it.
type Engine struct {
	scratch  scratch
	deferred bool
	// quiet: a pending decision only for a reason that is news.
	quiet  bool
	cycles uint64
	// epoch changes whenever any usage changes; global whenever one
	// changes that may matter in every tree (priorities, nodes). With each
	// root's epoch they say how long a judgement holds (judgedAt).
	epoch, global uint64
	// shapes interns workload shapes (see shapeKey).
	shapes     map[string]uint32
	cfg        Config
	tree       *tree
	workloads  map[string]*wlState
	unresolved map[string]*wlState
	// timed counts known workloads with a maximum execution time, so
	// cycles look for expired ones only while there are any.
	timed int
	// blocks stop admission into cohort trees whose usage is not known
	// (Block), by the id of their cause.
	blocks map[string]block
	// nodes and tas are the capacity of topology-aware flavors.
	nodes []Node
	tas   *tasState
	// topologyWaiting: a workload was told it waits for room in a
	// topology's domains since unparkTopologyWaiters last looked.
	topologyWaiting bool
	// nodesChanged: SetNodes ran since the last cycle looked for
	// workloads on failed nodes.
	nodesChanged bool
	// units names the unit of quota interaction of cohort trees that
	// share a topology-aware flavor's nodes (see TreeOf).
	units map[*node]string
	// owns says which trees this engine decides for (SetOwner; nil: all);
	// ownedTrees are those it owned when last asked, tellsUnresolved
	// whether it tells workloads without a queue why they wait.
	owns            func(tree string) bool
	ownedTrees      map[string]bool
	tellsUnresolved bool
	// fair is each LocalQueue's Admission Fair Sharing state, by
	// namespace/name; fairDirty lists those changed since
	// ChangedLocalQueueUsage last asked.
	fair      map[string]*lqFair
	fairDirty map[string]bool
	// deactivating are admitted workloads deactivated from outside, for
	// the next cycle to evict.
	deactivating map[*wlState]bool
	// resizing are elastic workloads that shrank since the last cycle,
	// for it to tell; stale are queues whose lists hold withdrawn
	// scale-ups.
	resizing map[string]bool
	stale    map[*cqState]bool
}

// block is one cause that stops admission: into the tree of
// clusterQueue, or everywhere when that queue is unknown.
type block struct{ clusterQueue, reason string }

// scratch is reusable working memory for flavor assignment.
type scratch struct {
	why                  []reason
	preempt, bestPreempt []int
	// arena holds the reasons of a round's nominations; it is reset at
	// the start of each round, so reasons kept longer are copied.
	arena []reason
	// plan is the placement tryFlavor found on a topology-aware flavor.
	plan *tasPlan
	// hier, other and same are a preemption search's candidates, victims
	// its order (classicalTargets).
	hier, other, same []candidate
	victims           victimOrder
	// targets is the victims a preemption search took so far.
	targets []target
	// freed is what roomAtAll takes off the tree.
	freed []nodeAmount
	// moved and rest are remerge's halves of a pending list.
	moved, rest []*wlState
}

// New returns an engine for the given configuration.
func New(cfg Config, opts ...Option) *Engine {
	e := &Engine{workloads: map[string]*wlState{}, unresolved: map[string]*wlState{}, shapes: map[string]uint32{}, blocks: map[string]block{},
		tellsUnresolved: true, fair: map[string]*lqFair{}, fairDirty: map[string]bool{}, deactivating: map[*wlState]bool{},
		resizing: map[string]bool{}, stale: map[*cqState]bool{}}
	for _, o := range opts {
		o(e)
	}
	e.SetConfig(cfg)
	return e
}

// Option tunes an engine.
type Option func(*Engine)

// WithDeferredEviction makes evictions a request instead of a fact, as in
// a live cluster: a preempted or drained workload keeps its quota, marked
// as evicting, until the caller reports it gone with Evict or Remove, and
// a preemptor waits until then. Without it (the simulator), victims
// release their quota at once and the preemptor is admitted in the same
// cycle.
func WithDeferredEviction() Option { return func(e *Engine) { e.deferred = true } }

// WithQuietPending decides a workload's pending reason only when it is
// news after the last one decided (News): not when only a number in it or
// the workload it waits behind moved, nor when it goes from lacking quota
// at the head of its queue to waiting behind a preemptor and back. After
// each release in a cohort tree, every workload waiting in it would
// otherwise get a decision ("available 3", then "available 4"), which the
// admission service would then find is not worth an event. PendingReason
// still says the current reason. Without it (the simulator), every change
// of text is a decision.
func WithQuietPending() Option { return func(e *Engine) { e.quiet = true } }

// SetConfig replaces the configuration. Admitted workloads keep their
// admission; every pending workload is reconsidered.
func (e *Engine) SetConfig(cfg Config) {
	e.cfg = cfg
	e.tree = buildTree(cfg)
	e.buildTAS()
	e.configureFair()
	for _, ws := range e.sorted() {
		ws.parked, ws.queued = false, false
		e.resolve(ws)
		if ws.admitted == nil && ws.cq != nil {
			ws.cq.pending = append(ws.cq.pending, ws)
			ws.queued = true
		}
		if ws.admitted != nil {
			cq, ok := e.tree.cqs[ws.admitted.cq.Name]
			var usage []frAmount
			var err error
			if ok {
				usage, err = e.usageOf(cq, ws, ws.admitted.podSets)
			}
			if !ok || err != nil {
				// Its quota is gone with the configuration that gave it;
				// it queues again.
				ws.admitted = nil
				if ws.cq != nil {
					ws.cq.pending = append(ws.cq.pending, ws)
					ws.queued = true
				}
				continue
			}
			ws.admitted.cq = cq
			ws.admitted.usage = usage
			ws.syncChecks()
			e.hold(ws)
		}
	}
	// Scale-ups are queued anew in the new queues.
	clear(e.stale)
	for _, ws := range e.sorted() {
		ws.grow = nil
		e.fitSize(ws)
	}
	for _, cq := range e.tree.cqOrder {
		cq.sortPending()
	}
	e.applyOwner()
}

func (e *Engine) sorted() []*wlState {
	out := make([]*wlState, 0, len(e.workloads))
	for _, ws := range e.workloads {
		out = append(out, ws)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// resolve finds the ClusterQueue of a workload through its LocalQueue and
// files it in that queue's pending list if it is pending.
func (e *Engine) resolve(ws *wlState) {
	ws.cq, ws.lq, ws.fair, ws.unresolved = nil, nil, nil, ""
	lq, ok := e.tree.lqs[ws.w.Namespace+"/"+ws.w.Queue]
	switch {
	case !ok:
		ws.unresolved = fmt.Sprintf("LocalQueue %s/%s does not exist", ws.w.Namespace, ws.w.Queue)
	default:
		ws.lq = lq
		cq, ok := e.tree.cqs[lq.ClusterQueue]
		if !ok {
			ws.unresolved = fmt.Sprintf("ClusterQueue %s of LocalQueue %s/%s does not exist", lq.ClusterQueue, lq.Namespace, lq.Name)
			break
		}
		ws.cq = cq
		ws.fair = e.fairFor(lq)
	}
	if ws.cq == nil {
		e.unresolved[ws.key] = ws
	} else {
		delete(e.unresolved, ws.key)
		ws.selected = e.selects(ws.cq, ws.w.Namespace)
	}
	if ws.shape == 0 {
		ws.shape = e.shapeID(ws.w.PodSets)
	}
	ws.full = make([]int32, len(ws.w.PodSets))
	ws.split = make([]podSetReqs, len(ws.w.PodSets))
	ws.tasShapes = nil
	for i, ps := range ws.w.PodSets {
		ws.full[i] = ps.Count
		var rs []resReq
		for r, v := range ps.Requests {
			if v > 0 {
				rs = append(rs, resReq{resource: r, perPod: v})
			}
		}
		sort.Slice(rs, func(a, b int) bool { return rs[a].resource < rs[b].resource })
		if ws.cq == nil {
			continue
		}
		sp := &ws.split[i]
		for _, rr := range rs {
			gi, ok := ws.cq.groupOf[rr.resource]
			if !ok {
				sp.notCovered = append(sp.notCovered, rr.resource)
				continue
			}
			for k, r := range ws.cq.groups[gi].resources {
				if r == rr.resource {
					rr.slot = k
				}
			}
			j := sort.Search(len(sp.groups), func(k int) bool { return sp.groups[k].group >= gi })
			if j == len(sp.groups) || sp.groups[j].group != gi {
				sp.groups = append(sp.groups, groupReqs{})
				copy(sp.groups[j+1:], sp.groups[j:])
				sp.groups[j] = groupReqs{group: gi}
			}
			sp.groups[j].reqs = append(sp.groups[j].reqs, rr)
		}
	}
}

// Submit adds a workload. A workload with Admission set is taken as
// already admitted and holds its quota from now on.
func (e *Engine) Submit(w Workload) error {
	key := w.Key()
	if _, ok := e.workloads[key]; ok {
		return fmt.Errorf("submit %s: %w", key, ErrDuplicate)
	}
	ws := &wlState{w: &w, prio: w.Priority, key: key, orderAt: w.Submitted, invalid: validate(&w)}
	if w.Admission != nil {
		if ws.invalid != "" {
			return fmt.Errorf("submit %s: %s: %w", key, ws.invalid, ErrBadAdmission)
		}
		cq, ok := e.tree.cqs[w.Admission.ClusterQueue]
		if !ok {
			return fmt.Errorf("submit %s: ClusterQueue %s does not exist: %w", key, w.Admission.ClusterQueue, ErrBadAdmission)
		}
		usage, err := e.usageOf(cq, ws, w.Admission.PodSets)
		if err != nil {
			return fmt.Errorf("submit %s: %w", key, err)
		}
		ws.admitted = e.booked(cq, usage, *w.Admission)
		ws.admittedNow()
		ws.pods.executed = w.Admission.PastExecution
	}
	if w.MaxExecution > 0 {
		e.timed++
	}
	e.resolve(ws)
	e.workloads[key] = ws
	if ws.admitted != nil {
		e.hold(ws)
		e.fitSize(ws)
	} else if ws.cq != nil {
		ws.cq.insertPending(ws)
	}
	return nil
}

// usageOf computes the quota an admission takes in a ClusterQueue.
func (e *Engine) usageOf(cq *cqState, ws *wlState, podSets []PodSetAssignment) ([]frAmount, error) {
	a := &assignment{}
	for _, psa := range podSets {
		var ps *PodSet
		for i := range ws.w.PodSets {
			if ws.w.PodSets[i].Name == psa.Name {
				ps = &ws.w.PodSets[i]
			}
		}
		if ps == nil {
			return nil, fmt.Errorf("pod set %s is not in the workload: %w", psa.Name, ErrBadAdmission)
		}
		if psa.Count < 0 || (psa.Count > ps.Count && !ws.w.Elastic) {
			// An elastic workload may hold more than it asks for until
			// its shrink is written (fitSize).
			// Within the pod set's count, the totals validate bounded.
			return nil, fmt.Errorf("pod set %s: admitted with %d pods, it has %d: %w", psa.Name, psa.Count, ps.Count, ErrBadAdmission)
		}
		for r, v := range ps.Requests {
			if v == 0 {
				continue
			}
			f, ok := psa.Flavors[r]
			if !ok {
				return nil, fmt.Errorf("pod set %s: no flavor given for resource %s: %w", psa.Name, r, ErrBadAdmission)
			}
			gi, ok := cq.groupOf[r]
			if !ok {
				return nil, fmt.Errorf("pod set %s: ClusterQueue %s does not cover resource %s: %w", psa.Name, cq.Name, r, ErrBadAdmission)
			}
			idx := -1
			for _, gf := range cq.groups[gi].flavors {
				if gf.name == f {
					idx = gf.fr[r]
				}
			}
			if idx < 0 {
				return nil, fmt.Errorf("pod set %s: ClusterQueue %s has no flavor %s for resource %s: %w", psa.Name, cq.Name, f, r, ErrBadAdmission)
			}
			total, ok := MulAmount(v, int64(psa.Count))
			if !ok {
				return nil, fmt.Errorf("pod set %s: %d pods × %s of %s is more than Sluice can count: %w", psa.Name, psa.Count, Format(r, v), r, ErrBadAdmission)
			}
			a.addUsage(idx, total)
		}
	}
	return a.usage, nil
}

// hold books an admitted workload's usage.
func (e *Engine) hold(ws *wlState) {
	cq := ws.admitted.cq
	for _, u := range ws.admitted.usage {
		cq.node.addUsage(u.fr, u.v)
	}
	e.changed(cq.node.root())
	ws.admitted.tas = e.tasUsage(ws, ws.admitted.podSets)
	e.bookTAS(ws.admitted.tas, 1)
	cq.admitted = append(cq.admitted, ws)
	ws.admitted.fair = ws.fair
	e.holdFair(ws, 1)
}

// release frees an admitted workload's quota and wakes parked workloads in
// its cohort tree.
func (e *Engine) release(ws *wlState) {
	e.dropGrow(ws)
	delete(e.resizing, ws.key)
	cq := ws.admitted.cq
	for _, u := range ws.admitted.usage {
		cq.node.addUsage(u.fr, -u.v)
	}
	e.changed(cq.node.root())
	e.holdFair(ws, -1)
	for i, c := range cq.admitted {
		if c == ws {
			cq.admitted = append(cq.admitted[:i], cq.admitted[i+1:]...)
			break
		}
	}
	tas := ws.admitted.tas
	e.bookTAS(tas, -1)
	ws.admitted = nil
	cq.node.root().released++
	e.unpark(cq.node.root())
	if len(tas) > 0 {
		// Nodes are shared by every tree whose queues use the flavor:
		// elsewhere, those that waited for room in the domains may fit.
		e.unparkTopologyWaiters()
	}
}

// judgement is the moment a judgement of a queue's workload was made at
// (judgedAt): it holds while the moment stays.
type judgement struct{ epoch, global uint64 }

// changed records that usage changed in the tree under root, or, with
// root nil, that something changed that may matter in any tree.
func (e *Engine) changed(root *node) {
	e.epoch++
	if root == nil {
		e.global++
		return
	}
	root.epoch++
}

// judgedAt is the moment a judgement in cq's tree is made at. Trees are
// independent, so what changes in one leaves judgements in the others
// standing; but trees whose queues share a topology-aware flavor's nodes
// (e.units) take each other's room, so theirs hold only while nothing
// changes anywhere.
func (e *Engine) judgedAt(cq *cqState) judgement {
	root := cq.node.root()
	if _, shared := e.units[root]; shared {
		return judgement{epoch: e.epoch, global: e.global}
	}
	return judgement{epoch: root.epoch, global: e.global}
}

// preemptionWait is a preemptor's last request: victims asked to go in
// the tree under root, when root had seen released releases.
type preemptionWait struct {
	root     *node
	released uint64
	// usage is what the preemptor needs: kept for it while it waits.
	usage []frAmount
	// victims are the workloads it waits for.
	victims []*wlState
}

// victimsStopping: every victim the preemptor asked for still holds its
// quota, on its way out.
func (w *preemptionWait) victimsStopping() bool {
	for _, v := range w.victims {
		if v.admitted == nil || !v.evicting {
			return false
		}
	}
	return true
}

func (e *Engine) unpark(root *node) {
	for _, cq := range e.tree.members[root] {
		cq.settled = false
		for _, p := range cq.pending {
			p.parked = false
		}
	}
}

// sortedUnresolved lists pending workloads whose queue is missing.
func (e *Engine) sortedUnresolved() []*wlState {
	out := make([]*wlState, 0, len(e.unresolved))
	for _, ws := range e.unresolved {
		if ws.admitted == nil {
			out = append(out, ws)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// Remove forgets a workload (finished or deleted), releasing its quota.
func (e *Engine) Remove(key string) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("remove %s: %w", key, ErrUnknownWorkload)
	}
	if ws.admitted != nil {
		e.release(ws)
	} else if ws.cq != nil {
		ws.cq.removePending(ws)
	}
	if ws.w.MaxExecution > 0 {
		e.timed--
	}
	delete(e.workloads, key)
	delete(e.unresolved, key)
	return nil
}

// Evict takes a workload's quota away and puts it back in its queue.
func (e *Engine) Evict(key string) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("evict %s: %w", key, ErrUnknownWorkload)
	}
	e.evict(ws)
	return nil
}

// Undo takes back an admission of the last cycle that could not be
// booked (another replica moved first, or the ledger did not answer): as
// Evict, and the entry penalty it charged its LocalQueue is taken back
// too, since the workload never held the quota.
func (e *Engine) Undo(key string) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("undo %s: %w", key, ErrUnknownWorkload)
	}
	if ws.admitted != nil {
		e.unpenalize(ws.admitted)
	}
	e.evict(ws)
	return nil
}

func (e *Engine) evict(ws *wlState) {
	if ws.admitted == nil {
		return
	}
	ws.evicting = false
	e.release(ws)
	ws.reason, ws.class, ws.why = "", "", nil
	if ws.cq != nil {
		ws.cq.insertPending(ws)
	}
}

// Admit records an admission made elsewhere, such as by another replica
// whose reservation is in the quota ledger: the pending workload now holds
// quota in clusterQueue. The assignment must fit the configuration; quota
// limits are not checked, since the ledger is the authority.
func (e *Engine) Admit(key, clusterQueue string, podSets []PodSetAssignment, at time.Time) error {
	return e.Book(key, Admission{ClusterQueue: clusterQueue, PodSets: podSets, At: at})
}

// Book is Admit of a reservation that may wait for admission checks
// (a.AwaitingChecks), with their states as last known.
func (e *Engine) Book(key string, a Admission) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("admit %s: %w", key, ErrUnknownWorkload)
	}
	if ws.admitted != nil {
		return nil
	}
	cq, ok := e.tree.cqs[a.ClusterQueue]
	if !ok {
		return fmt.Errorf("admit %s: ClusterQueue %s does not exist: %w", key, a.ClusterQueue, ErrBadAdmission)
	}
	usage, err := e.usageOf(cq, ws, a.PodSets)
	if err != nil {
		return fmt.Errorf("admit %s: %w", key, err)
	}
	if ws.cq != nil {
		ws.cq.removePending(ws)
	}
	ws.admitted = e.booked(cq, usage, a)
	ws.admittedNow()
	ws.pods.executed = max(ws.pods.executed, a.PastExecution)
	ws.reason, ws.class, ws.why, ws.parked = "", "", nil, false
	e.hold(ws)
	e.fitSize(ws)
	return nil
}

// SetPriority changes a workload's priority, as when its priority class
// label changes. A pending workload moves to its new place in its queue
// and is judged afresh; an admitted one keeps its quota, and from the next
// cycle on the new priority decides whether it may be preempted, and by
// whom.
func (e *Engine) SetPriority(key string, priority int32) error {
	ws, ok := e.workloads[key]
	if !ok {
		return fmt.Errorf("set priority of %s: %w", key, ErrUnknownWorkload)
	}
	if ws.w.Priority == priority {
		return nil
	}
	// The pending list is sorted by priority: take the entry out under
	// the old one and put it back under the new.
	queued := ws.queued && ws.cq != nil
	if queued {
		ws.cq.removePending(ws)
	}
	w := *ws.w
	w.Priority = priority
	ws.w, ws.prio = &w, priority
	ws.parked = false
	if ws.cq != nil {
		ws.cq.settled = false
	}
	// An admitted workload's priority decides whom it may be preempted
	// by: what was judged before no longer holds, and workloads parked for
	// want of victims in its tree may find one now.
	e.changed(nil)
	if ws.admitted != nil {
		e.unpark(ws.admitted.cq.node.root())
	}
	if queued {
		ws.cq.insertPending(ws)
	}
	if ws.grow != nil {
		e.dropGrow(ws)
		e.fitSize(ws)
	}
	return nil
}

// Known reports whether the engine knows the workload.
func (e *Engine) Known(key string) bool {
	_, ok := e.workloads[key]
	return ok
}

// Block stops every admission, and so every preemption, into the cohort
// tree of clusterQueue, with reason as every pending workload's reason
// there, until Unblock(id). For a clusterQueue that is empty or not
// configured, every tree is blocked. It is how the caller fails closed on
// state it cannot read: a reservation whose value is corrupt holds quota
// of an unknown size, so nothing that could be given that quota is
// admitted. id names the cause; blocking again under the same id replaces
// it.
func (e *Engine) Block(id, clusterQueue, reason string) {
	if old, ok := e.blocks[id]; ok && old == (block{clusterQueue, reason}) {
		return
	}
	e.blocks[id] = block{clusterQueue: clusterQueue, reason: reason}
	e.unparkAll()
}

// Unblock lifts the block named id, and reports whether there was one.
func (e *Engine) Unblock(id string) bool {
	if _, ok := e.blocks[id]; !ok {
		return false
	}
	delete(e.blocks, id)
	e.unparkAll()
	return true
}

// Blocked lists the ids of the blocks in force, in order.
func (e *Engine) Blocked() []string { return slices.Sorted(maps.Keys(e.blocks)) }

// blockedReason says why cq's tree admits nothing because of a block, or
// "". With several blocks the first by id is told, so the reason is
// stable.
func (e *Engine) blockedReason(cq *cqState) string {
	if len(e.blocks) == 0 {
		return ""
	}
	best, reason := "", ""
	for id, b := range e.blocks {
		other, ok := e.tree.cqs[b.clusterQueue]
		if ok && other.node.root() != cq.node.root() {
			continue
		}
		if reason == "" || id < best {
			best, reason = id, b.reason
		}
	}
	return reason
}

func (e *Engine) unparkAll() {
	for _, cq := range e.tree.cqOrder {
		cq.settled = false
		for _, p := range cq.pending {
			p.parked = false
		}
	}
}

// TreeOf names the unit of quota interaction a ClusterQueue belongs to:
// "cohort/<root>" for a queue in a cohort tree, "cq/<name>" for a lone
// queue; "" for an unknown queue. Trees whose queues use topology-aware
// flavors share those flavors' nodes, so they interact too: all trees
// linked so are one unit, "tas/<flavor>" after the first such flavor by
// name. Two admissions interact only if their queues share a unit.
func (e *Engine) TreeOf(clusterQueue string) string {
	cq, ok := e.tree.cqs[clusterQueue]
	if !ok {
		return ""
	}
	if u, ok := e.units[cq.node.root()]; ok {
		return u
	}
	if r := cq.node.root(); r.cq == nil {
		return "cohort/" + r.name
	}
	return "cq/" + cq.Name
}

// IsEvicting reports whether the workload was asked to give up its quota
// and still holds it.
func (e *Engine) IsEvicting(key string) bool {
	ws, ok := e.workloads[key]
	return ok && ws.evicting
}

// IsAdmitted reports whether the workload holds quota.
func (e *Engine) IsAdmitted(key string) bool {
	ws, ok := e.workloads[key]
	return ok && ws.admitted != nil
}

// PendingReason returns the reason a pending workload is waiting.
func (e *Engine) PendingReason(key string) string {
	if ws, ok := e.workloads[key]; ok {
		return ws.reason
	}
	return ""
}

// ClusterQueueOf returns the ClusterQueue a workload queues or runs in.
func (e *Engine) ClusterQueueOf(key string) string {
	ws, ok := e.workloads[key]
	switch {
	case !ok:
		return ""
	case ws.admitted != nil:
		return ws.admitted.cq.Name
	case ws.cq != nil:
		return ws.cq.Name
	}
	return ""
}

// selects reports whether a ClusterQueue accepts workloads from a
// namespace. A nil selector selects nothing, as in Kueue.
func (e *Engine) selects(cq *cqState, namespace string) bool {
	if cq.NamespaceSelector == nil {
		return false
	}
	return cq.NamespaceSelector.Matches(labels.Set(e.tree.nsLabel[namespace]))
}
