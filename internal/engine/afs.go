package engine

import (
	"maps"
	"math"
	"slices"
	"sort"
	"time"
)

// AdmissionFairSharing is Kueue's Admission Fair Sharing (the
// Configuration's admissionFairSharing block): in a ClusterQueue whose
// admission scope is UsageBasedAdmission, pending workloads are ordered
// first by their LocalQueue's recent usage divided by its weight, then as
// usual (priority, then submission). A LocalQueue's usage is a moving
// average of what its admitted workloads hold, sampled every
// SamplingInterval and decayed by half every HalfLife, and each admission
// adds an entry penalty at once, so that a burst of submissions from one
// queue cannot all pass before the next sample counts them.
type AdmissionFairSharing struct {
	// HalfLife is usageHalfLifeTime; 0 keeps no history (every usage is
	// 0, so the order is the usual one).
	HalfLife time.Duration
	// SamplingInterval is usageSamplingInterval (Kueue's default: 5m).
	SamplingInterval time.Duration
	// ResourceWeights weigh each resource's usage (default 1).
	ResourceWeights map[string]float64
}

// LocalQueueUsage is a LocalQueue's decayed usage (Kueue's
// consumedResources): per resource, in the resource's own unit (cores for
// cpu, bytes for memory, units otherwise), as of LastUpdate.
type LocalQueueUsage struct {
	Consumed   map[string]float64
	LastUpdate time.Time
	// Share is what the queue's workloads are ordered by: its weighted
	// usage divided by its weight (+Inf for weight 0). The engine reports
	// it; SetLocalQueueUsage ignores it.
	Share float64
}

// lqFair is the engine's Admission Fair Sharing state of one LocalQueue.
// It outlives configuration changes (the history is the LocalQueue's, not
// the configuration's); cq is set while the LocalQueue's ClusterQueue
// orders by usage.
type lqFair struct {
	key      string
	cq       *cqState
	weight   float64
	consumed map[string]float64
	last     time.Time
	// held is what the LocalQueue's admitted workloads hold now, per
	// resource in the engine's units (kept by hold and release, exactly:
	// a queue that holds nothing has no entry).
	held map[string]int64
	// score orders the LocalQueue's workloads: weighted usage / weight.
	score float64
}

// afsAlpha is the weight of the current usage after elapsed: 1 − ½^(elapsed/halfLife).
func afsAlpha(elapsed, halfLife time.Duration) float64 {
	if halfLife <= 0 {
		return 0
	}
	return 1 - math.Pow(0.5, elapsed.Seconds()/halfLife.Seconds())
}

// afs returns the Admission Fair Sharing settings, nil when off.
func (e *Engine) afs() *AdmissionFairSharing { return e.cfg.AdmissionFairSharing }

// fairOf returns the state of LocalQueue key, made if new.
func (e *Engine) fairOf(key string) *lqFair {
	f, ok := e.fair[key]
	if !ok {
		f = &lqFair{key: key, consumed: map[string]float64{}, held: map[string]int64{}}
		e.fair[key] = f
	}
	return f
}

// configureFair links each LocalQueue's state to its ClusterQueue when
// that orders by usage, after a configuration change. The amounts held
// are counted again as admissions are held anew.
func (e *Engine) configureFair() {
	for _, f := range e.fair {
		f.cq = nil
		clear(f.held)
	}
	if e.afs() == nil {
		return
	}
	for key, lq := range e.tree.lqs {
		cq := e.tree.cqs[lq.ClusterQueue]
		if cq == nil || !cq.UsageBasedAdmission {
			continue
		}
		f := e.fairOf(key)
		f.cq = cq
		f.weight = 1
		if lq.FairWeight != nil {
			f.weight = *lq.FairWeight
		}
		f.rescore(e.afs())
	}
}

// fairFor is the state a workload of LocalQueue lq is ordered by, nil
// when its ClusterQueue does not order by usage.
func (e *Engine) fairFor(lq *LocalQueue) *lqFair {
	if lq == nil || e.afs() == nil {
		return nil
	}
	if f := e.fair[lq.Namespace+"/"+lq.Name]; f != nil && f.cq != nil {
		return f
	}
	return nil
}

// rescore recomputes the score; it reports whether it changed.
func (f *lqFair) rescore(afs *AdmissionFairSharing) bool {
	var weights map[string]float64
	if afs != nil {
		weights = afs.ResourceWeights
	}
	var sum float64
	for _, r := range slices.Sorted(maps.Keys(f.consumed)) {
		w, ok := weights[r]
		if !ok {
			w = 1
		}
		sum += w * f.consumed[r]
	}
	score := math.Inf(1)
	if f.weight > 0 {
		score = sum / f.weight
	}
	changed := score != f.score
	f.score = score
	return changed
}

// decay moves the consumed usage toward what is held now, for the time
// since the last update.
func (f *lqFair) decay(afs *AdmissionFairSharing, now time.Time) {
	if f.last.IsZero() {
		f.last = now // history starts now
		return
	}
	if afs.HalfLife <= 0 {
		clear(f.consumed)
		f.last = now
		return
	}
	elapsed := max(0, now.Sub(f.last))
	a := afsAlpha(elapsed, afs.HalfLife)
	for r, v := range f.consumed {
		f.consumed[r] = (1 - a) * v
	}
	for r, v := range f.held {
		f.consumed[r] += a * baseUnits(r, v)
	}
	if now.After(f.last) {
		f.last = now
	}
}

// amounts sums frAmounts per resource.
func (e *Engine) amounts(usage []frAmount) map[string]int64 {
	out := make(map[string]int64, len(usage))
	for _, u := range usage {
		out[e.tree.frs[u.fr].Resource] += u.v
	}
	return out
}

// baseUnits converts an amount in the engine's units to the resource's
// own (cores for cpu), as Kueue reports usage.
func baseUnits(res string, v int64) float64 {
	if res == "cpu" {
		return float64(v) / 1000
	}
	return float64(v)
}

// holdFair counts an admission in, or out of (sign -1), its LocalQueue's
// held amounts.
func (e *Engine) holdFair(ws *wlState, sign int64) {
	f := ws.admitted.fair
	if f == nil {
		return
	}
	for r, v := range e.amounts(ws.admitted.usage) {
		f.held[r] += sign * v
		if f.held[r] == 0 {
			delete(f.held, r)
		}
	}
}

// penalize charges a new admission's entry penalty to its LocalQueue at
// once: what it would have added to the usage had it been held for one
// sampling interval.
func (c *cycle) penalize(ws *wlState) {
	f, afs := ws.admitted.fair, c.e.afs()
	if f == nil || afs == nil {
		return
	}
	f.decay(afs, c.now)
	a := afsAlpha(afs.SamplingInterval, afs.HalfLife)
	amounts := c.e.amounts(ws.admitted.usage)
	ws.admitted.penalty = make(map[string]float64, len(amounts))
	for r, v := range amounts {
		p := a * baseUnits(r, v)
		f.consumed[r] += p
		ws.admitted.penalty[r] = p
	}
	c.e.fairChanged(f)
}

// unpenalize takes an admission's entry penalty back (Undo).
func (e *Engine) unpenalize(a *admitted) {
	f := a.fair
	if f == nil || len(a.penalty) == 0 {
		return
	}
	for r, p := range a.penalty {
		f.consumed[r] = max(0, f.consumed[r]-p)
	}
	a.penalty = nil
	e.fairChanged(f)
}

// fairChanged notes a LocalQueue's new usage: its ClusterQueue's order
// may change, and the caller may want to store it.
func (e *Engine) fairChanged(f *lqFair) {
	e.fairDirty[f.key] = true
	if f.rescore(e.afs()) && f.cq != nil {
		f.cq.reorder = true
		f.cq.settled = false
		if !slices.Contains(f.cq.changed, f) {
			f.cq.changed = append(f.cq.changed, f)
		}
	}
}

// SampleUsage brings the usage of every LocalQueue of this engine's trees
// whose sampling interval passed up to date: it moves toward what the
// queue holds now. Every cycle does it first; a caller that learns of
// several changes at one moment (the simulator, at each instant) calls it
// before applying them, so that the time until then counts what was held
// until then.
func (e *Engine) SampleUsage(now time.Time) {
	afs := e.afs()
	if afs == nil {
		return
	}
	for _, f := range e.fair {
		if f.cq == nil || !ours(f.cq) {
			continue
		}
		if !f.last.IsZero() && now.Sub(f.last) < afs.SamplingInterval {
			continue
		}
		f.decay(afs, now)
		e.fairChanged(f)
	}
}

// NextSample is when SampleUsage next has something to do for a
// LocalQueue that holds quota or whose ClusterQueue has workloads waiting
// (otherwise its usage only decays toward nothing, which a later sample
// computes as well). The services run a cycle then, so that the usage and
// the order of the queues stay current; ok is false when none is due.
func (e *Engine) NextSample() (next time.Time, ok bool) {
	afs := e.afs()
	if afs == nil {
		return time.Time{}, false
	}
	for _, f := range e.fair {
		if f.cq == nil || !ours(f.cq) || f.last.IsZero() || (len(f.held) == 0 && len(f.cq.pending) == 0) {
			continue
		}
		if t := f.last.Add(afs.SamplingInterval); !ok || t.Before(next) {
			next, ok = t, true
		}
	}
	return next, ok
}

// sampleFair samples the usage at the cycle's time and re-sorts the
// queues whose order changed.
func (c *cycle) sampleFair() {
	c.e.SampleUsage(c.now)
	c.reorderQueues()
}

// reorderQueues puts back in order the pending lists of the queues whose
// LocalQueues' usage changed. Within a cycle's walk of a queue, after an
// admission's entry penalty, only the part after the walk's cursor is put
// in order, by taking the changed LocalQueues' workloads out and merging
// them back (linear, where sorting the whole list again after every
// admission was most of the cycle's time: 2.8 s for 1,000 admissions
// from 10,000 waiting); the whole list is sorted once at the cycle's end.
func (c *cycle) reorderQueues() {
	for _, cq := range c.e.tree.cqOrder {
		if !cq.reorder {
			continue
		}
		if sc := &cq.scan; sc.cycle == c.id && sc.cursor < len(cq.pending) {
			// The walk started: what it passed keeps its place.
			c.e.remerge(cq, sc.cursor)
			cq.sortAtEnd = true
		} else {
			cq.sortPending()
			c.rescan(cq)
		}
		cq.reorder, cq.changed = false, cq.changed[:0]
	}
}

// remerge puts cq.pending[from:] back in order after the usage of the
// LocalQueues in cq.changed changed: their workloads are taken out, put
// in order among themselves, and merged back with the others, whose
// order did not change.
func (e *Engine) remerge(cq *cqState, from int) {
	changed := func(ws *wlState) bool { return ws.fair != nil && slices.Contains(cq.changed, ws.fair) }
	if len(cq.changed) == 1 {
		f := cq.changed[0]
		changed = func(ws *wlState) bool { return ws.fair == f }
	}
	// What comes before the first changed workload keeps its place.
	for from < len(cq.pending) && !changed(cq.pending[from]) {
		from++
	}
	if len(cq.changed) == 1 && e.moveBlock(cq, from, changed) {
		return
	}
	moved := e.scratch.moved[:0]
	rest := e.scratch.rest[:0]
	for _, ws := range cq.pending[from:] {
		if changed(ws) {
			moved = append(moved, ws)
		} else {
			rest = append(rest, ws)
		}
	}
	if len(cq.changed) > 1 {
		slices.SortStableFunc(moved, queueCompare)
	}
	// Each moved workload goes before the first of the rest it precedes
	// (after those it ties with, as a stable merge would): found by binary
	// search, the rest copied in runs between.
	out := cq.pending[from:from]
	i := 0
	for _, m := range moved {
		k := i + sort.Search(len(rest)-i, func(x int) bool { return queueLess(m, rest[i+x]) })
		out = append(append(out, rest[i:k]...), m)
		i = k
	}
	out = append(out, rest[i:]...)
	clear(moved)
	clear(rest)
	e.scratch.moved, e.scratch.rest = moved[:0], rest[:0]
}

// moveBlock is remerge's common case, in time mostly spent copying: the
// one changed LocalQueue's workloads form one block at from (its usage
// went up with an admission's penalty, and no other LocalQueue's usage
// equals its old or new one), so the block moves behind the workloads of
// the LocalQueues whose usage is now below its own. It reports false when
// the case does not hold, for the merge to do it.
func (e *Engine) moveBlock(cq *cqState, from int, changed func(*wlState) bool) bool {
	p := cq.pending
	end := from
	for end < len(p) && changed(p[end]) {
		end++
	}
	if end == from {
		return true // nothing of it waits past the cursor
	}
	for _, ws := range p[end:] {
		if changed(ws) || ws.fair == nil {
			return false
		}
	}
	score := p[from].fair.score
	rest := p[end:]
	lo := sort.Search(len(rest), func(i int) bool { return rest[i].fair.score >= score })
	hi := sort.Search(len(rest), func(i int) bool { return rest[i].fair.score > score })
	if lo != hi {
		return false // ties with another LocalQueue: interleaved by age
	}
	block := append(e.scratch.moved[:0], p[from:end]...)
	copy(p[from:], rest[:lo])
	copy(p[from+lo:], block)
	clear(block)
	e.scratch.moved = block[:0]
	return true
}

// sortAtEnd sorts the whole pending list of the queues only partly put in
// order during the cycle.
func (c *cycle) sortAtEnd() {
	for _, cq := range c.e.tree.cqOrder {
		if cq.sortAtEnd {
			cq.sortAtEnd = false
			cq.sortPending()
		}
	}
}

// LocalQueueUsage returns the decayed usage of a LocalQueue of a
// ClusterQueue that orders by usage.
func (e *Engine) LocalQueueUsage(namespace, name string) (LocalQueueUsage, bool) {
	f := e.fair[namespace+"/"+name]
	if f == nil || f.cq == nil {
		return LocalQueueUsage{}, false
	}
	return f.usage(), true
}

func (f *lqFair) usage() LocalQueueUsage {
	return LocalQueueUsage{Consumed: cloneUsage(f.consumed), LastUpdate: f.last, Share: f.score}
}

// SetLocalQueueUsage restores a LocalQueue's usage as stored (after a
// restart, or from the replica that decided for its tree before), unless
// what the engine has is newer.
func (e *Engine) SetLocalQueueUsage(namespace, name string, u LocalQueueUsage) {
	f := e.fairOf(namespace + "/" + name)
	if !f.last.IsZero() && !u.LastUpdate.After(f.last) {
		return
	}
	f.consumed = cloneUsage(u.Consumed)
	f.last = u.LastUpdate
	if e.afs() != nil && f.rescore(e.afs()) && f.cq != nil {
		f.cq.reorder = true
		f.cq.settled = false
	}
}

// ChangedLocalQueueUsage returns the usage of the LocalQueues that
// changed since the last call, by namespace/name, for the caller to store.
func (e *Engine) ChangedLocalQueueUsage() map[string]LocalQueueUsage {
	if len(e.fairDirty) == 0 {
		return nil
	}
	out := make(map[string]LocalQueueUsage, len(e.fairDirty))
	for key := range e.fairDirty {
		if f := e.fair[key]; f != nil && f.cq != nil {
			out[key] = f.usage()
		}
	}
	clear(e.fairDirty)
	return out
}

func cloneUsage(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	maps.Copy(out, m)
	return out
}
