package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/nodecap"
	"github.com/sluice-dev/sluice/internal/queueconfig"
	"github.com/sluice-dev/sluice/internal/workloads"
)

func (s *Service) applyConfig(e jetstream.KeyValueEntry) {
	if e.Operation() == jetstream.KeyValuePut {
		s.config.Apply(e.Key(), e.Value())
	} else {
		s.config.Apply(e.Key(), nil)
	}
	s.configDirty = true
}

// reconfigure rebuilds the engine's configuration from the mirror.
func (s *Service) reconfigure() {
	snap, errs := s.config.Snapshot()
	for _, err := range errs {
		s.log.Warn().Err(err).Msg("ignoring configuration object")
	}
	snap.Objects.FairSharing = s.cfg.FairSharing
	snap.Objects.WaitForPodsReady = s.cfg.WaitForPodsReady
	snap.Objects.FairStrategies = s.cfg.FairStrategies
	snap.Objects.AdmissionFairSharing = s.cfg.AdmissionFairSharing
	cfg, err := queueconfig.ToEngine(snap.Objects)
	if err != nil {
		s.log.Error().Err(err).Msg("configuration not applied")
		return
	}
	s.eng.SetConfig(cfg)
	s.cqBorn = make(map[string]time.Time, len(snap.Objects.ClusterQueues))
	for _, cq := range snap.Objects.ClusterQueues {
		s.cqBorn[cq.Name] = cq.CreationTimestamp.Time
	}
	controllers := make(map[string]string, len(cfg.AdmissionChecks))
	for _, ac := range cfg.AdmissionChecks {
		controllers[ac.Name] = ac.Controller
	}
	s.checkControllers.Store(&controllers)
	s.configDirty = false
	s.dirty = true
	// A configuration change may have dropped admissions whose queue it
	// no longer has; the ledger still holds them.
	s.bookLedger()
}

// applyNode records one node's capacity, or its absence.
func (s *Service) applyNode(e jetstream.KeyValueEntry) {
	name, ok := nodecap.NodeOf(e.Key())
	if !ok {
		s.log.Warn().Str("key", e.Key()).Msg("ignoring a key of the nodes bucket that names no node")
		return
	}
	if s.nodes == nil {
		s.nodes = map[string]engine.Node{}
	}
	s.nodesDirty = true
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.nodes, name)
		return
	}
	n, err := nodecap.Decode(e.Value())
	if err != nil {
		// A node whose capacity cannot be read offers none.
		s.log.Warn().Err(err).Str("key", e.Key()).Msg("ignoring node capacity")
		delete(s.nodes, name)
		return
	}
	s.nodes[name] = n
}

// renode gives the engine the nodes as they are now.
func (s *Service) renode() {
	names := make([]string, 0, len(s.nodes))
	for n := range s.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	nodes := make([]engine.Node, len(names))
	for i, n := range names {
		nodes[i] = s.nodes[n]
	}
	s.eng.SetNodes(nodes)
	s.nodesDirty = false
	s.dirty = true
	s.log.Debug().Int("nodes", len(nodes)).Msg("node capacity applied")
}

func (s *Service) applyWorkload(e jetstream.KeyValueEntry) {
	s.dirty = true
	key := workloads.EngineKeyFromKV(e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		s.forgetRecord(key)
		return
	}
	var w events.WorkloadSubmittedV1
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		s.log.Error().Err(err).Str("workload", e.Key()).Msg("ignoring malformed workload record")
		return
	}
	key = workloads.EngineKey(w.Workload)
	for i, ps := range w.PodSets {
		if sh, err := s.shapes.of(ps.Requests); err == nil {
			w.PodSets[i].Requests = sh.text
		}
	}
	if old, known := s.wls[key]; known && old.Workload.UID != w.Workload.UID {
		// The job left its queue and came back with a new workload, and
		// the earlier record's deletion never reached this watch: the
		// bucket keeps one revision per key, so the new record replaced
		// the deletion's marker before the watch paged it. The earlier
		// record is gone all the same.
		s.forgetRecord(key)
	}
	if old, known := s.wls[key]; known {
		// Only the priority of a record changes after submission (its
		// priority class label was changed), and an elastic job's pod
		// counts.
		upd := *old
		upd.Priority, upd.PriorityClass = w.Priority, w.PriorityClass
		counts, resized := resizedCounts(old, &w)
		if resized {
			upd.PodSets, upd.ResizedAt = w.PodSets, w.ResizedAt
		}
		if old.Priority == w.Priority && old.PriorityClass == w.PriorityClass && !resized {
			return
		}
		s.wls[key] = &upd
		if !s.synced.IsOpen() || !s.eng.Known(key) {
			return
		}
		if err := s.eng.SetPriority(key, w.Priority); err != nil {
			s.log.Error().Err(err).Str("workload", key).Msg("cannot change priority")
		}
		if resized {
			if err := s.eng.Resize(key, counts, w.ResizedAt); err != nil {
				s.log.Error().Err(err).Str("workload", key).Msg("cannot resize")
			}
			s.dirty = true
		}
		return
	}
	s.wls[key] = &w
	if s.synced.IsOpen() {
		s.submit(key)
	}
}

// resizedCounts: an elastic record whose pod counts changed, and the new
// counts by pod set. Only the counts of an elastic job's record change.
func resizedCounts(old, w *events.WorkloadSubmittedV1) ([]int32, bool) {
	if !old.Elastic || !w.Elastic || len(old.PodSets) != len(w.PodSets) {
		return nil, false
	}
	counts := make([]int32, len(w.PodSets))
	changed := false
	for i, ps := range w.PodSets {
		if ps.Name != old.PodSets[i].Name {
			return nil, false
		}
		counts[i] = ps.Count
		changed = changed || ps.Count != old.PodSets[i].Count
	}
	return counts, changed
}

// forgetRecord drops a deleted record from the mirror. The engine keeps
// an admitted workload until the ledger lets go of its quota.
func (s *Service) forgetRecord(key string) {
	delete(s.wls, key)
	delete(s.told, key)
	delete(s.queued, key)
	s.out.Forget(key)
	if _, held := s.res[key]; held || !s.synced.IsOpen() {
		return
	}
	_ = s.eng.Remove(key)
}

// kvFeed carries a bucket's entries to the service's loop, in order; a
// nil entry says the bucket's initial entries are all in.
type kvFeed struct {
	entries chan jetstream.KeyValueEntry
}

// feed starts following a bucket; an error ending the watch goes to errc.
func (s *Service) feed(ctx context.Context, kv jetstream.KeyValue, errc chan<- error) *kvFeed {
	f := &kvFeed{entries: make(chan jetstream.KeyValueEntry, 256)}
	send := func(e jetstream.KeyValueEntry) {
		select {
		case f.entries <- e:
		case <-ctx.Done():
		}
	}
	synced := make(chan struct{})
	go func() {
		// WatchKV marks the initial entries in only after handing every
		// one of them to send: the nil goes after them.
		go func() {
			select {
			case <-synced:
				send(nil)
			case <-ctx.Done():
			}
		}()
		err := bus.WatchKV(ctx, kv, synced, func(e jetstream.KeyValueEntry, _ bool) { send(e) },
			bus.WithWatchLogger(s.log))
		if err != nil {
			errc <- fmt.Errorf("watch %s: %w", kv.Bucket(), err)
		}
	}()
	return f
}

// applyFence records a fence's readiness and requeue state, for the
// engine to take at the next tick.
func (s *Service) applyFence(e jetstream.KeyValueEntry) {
	key := workloads.EngineKeyFromKV(e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.fences, key)
		delete(s.unapplied, key)
		return
	}
	var st fence.State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		s.log.Warn().Err(err).Str("workload", key).Msg("ignoring unreadable fence")
		return
	}
	s.fences[key] = st
	s.unapplied[key] = true
}

// applyFences gives the engine what changed in the fences: whether the
// pods of a held admission are ready, and, for a workload this replica
// learns about, how often it was requeued. A fence of an admission the
// engine has not booked yet waits for it.
func (s *Service) applyFences() {
	if !s.synced.IsOpen() {
		return
	}
	for key := range s.unapplied {
		if !s.eng.Known(key) {
			// Applied when the record arrives (submit lists it again).
			// Kept here, the fences of every finished workload would be
			// looked at again each cycle.
			delete(s.unapplied, key)
			continue
		}
		st := s.fences[key]
		switch rq, cur := st.Requeue, s.eng.Requeues(key); {
		case rq == nil:
		case rq.Count > cur.Count || rq.At.After(cur.At) || (rq.Deactivated != "" && cur.Deactivated == "") || rq.Executed > cur.Executed ||
			rq.Reactivations > cur.Reactivations:
			// Newer than what the engine has, or a reactivation (a
			// user's, through the job), which starts the state over.
			_ = s.eng.SetRequeues(key, engine.RequeueState{Count: rq.Count, At: rq.At, Deactivated: rq.Deactivated, Why: rq.Why, Executed: rq.Executed,
				Reactivations: rq.Reactivations, Reactivation: rq.Reactivation})
			s.dirty = true
		case rq.Reactivation != cur.Reactivation:
			// Only the annotation's value, remembered while active.
			cur.Reactivation = rq.Reactivation
			_ = s.eng.SetRequeues(key, cur)
		}
		if st.Ready != nil {
			if !s.eng.IsAdmitted(key) || s.heldAdmission(key) != st.Admission {
				continue // its admission is not booked here yet
			}
			if err := s.eng.SetPodsReady(key, st.Ready.Ready, st.Ready.At); err != nil {
				s.log.Error().Err(err).Str("workload", key).Msg("cannot record pods readiness")
			}
			s.dirty = true
		}
		delete(s.unapplied, key)
	}
}

// submit queues a known record, admitted if the ledger holds it.
func (s *Service) submit(key string) {
	if s.eng.Known(key) {
		return
	}
	w := s.wls[key]
	ew, err := s.toEngine(w)
	if err != nil {
		s.log.Error().Err(err).Str("workload", key).Msg("ignoring workload")
		return
	}
	if h, ok := s.res[key]; ok {
		a := admissionOf(h.Reservation)
		ew.Admission = &a
	}
	if err := s.eng.Submit(ew); err != nil {
		s.log.Error().Err(err).Str("workload", key).Msg("workload not queued")
	}
	s.fenceToApply(key)
}

// fenceToApply lists the fence of a workload the engine just learned
// about for the next tick's applyFences.
func (s *Service) fenceToApply(key string) {
	if _, ok := s.fences[key]; ok {
		s.unapplied[key] = true
	}
}

// build makes the engine from the mirrors once all three are complete,
// so that no reservation is booked against a configuration or a record
// that has not arrived yet.
func (s *Service) build() {
	s.synced.Open()
	s.reconfigure()
	keys := make([]string, 0, len(s.wls))
	for k := range s.wls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.submit(k)
	}
	s.bookLedger()
}

// fromReservation rebuilds an admitted workload from its reservation
// alone, for a workload whose record is not known.
func fromReservation(key string, r ledger.Reservation) (engine.Workload, error) {
	n, ok := workloads.ParseEngine(key)
	if !ok {
		return engine.Workload{}, fmt.Errorf("reservation key %q is not kind/namespace/name", key)
	}
	a := admissionOf(r)
	w := engine.Workload{Kind: n.Kind, Namespace: n.Namespace, Name: n.Name, Queue: r.LocalQueue, Priority: r.Priority, Submitted: r.Submitted, Admission: &a,
		MaxExecution: r.MaxExecution}
	for _, ps := range r.PodSets {
		eps := engine.PodSet{Name: ps.Name, Count: ps.Count, Requests: map[string]int64{}}
		for res, v := range r.Requests[ps.Name] {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return w, fmt.Errorf("reservation of %s: request %s=%q: %w", key, res, v, err)
			}
			eps.Requests[res] = engine.Canonical(res, q)
		}
		w.PodSets = append(w.PodSets, eps)
	}
	return w, nil
}

// toEngine converts a submitted workload, resolving its priority class.
func (s *Service) toEngine(w *events.WorkloadSubmittedV1) (engine.Workload, error) {
	ew := engine.Workload{
		Kind:      w.Workload.Kind,
		Namespace: w.Workload.Namespace,
		Name:      w.Workload.Name,
		Queue:     w.LocalQueue,
		Priority:  w.Priority,
		Submitted: w.CreationTime,
		// Kueue's maximumExecutionTimeSeconds.
		MaxExecution: time.Duration(w.MaximumExecutionTimeSeconds) * time.Second,
		Elastic:      w.Elastic,
		ResizedAt:    w.ResizedAt,
	}
	for _, ps := range w.PodSets {
		sh, err := s.shapes.of(ps.Requests)
		if err != nil {
			return ew, fmt.Errorf("pod set %s: %w", ps.Name, err)
		}
		eps := engine.PodSet{Name: ps.Name, Count: ps.Count, MinCount: ps.MinCount, Requests: sh.canon,
			NodeSelector: ps.NodeSelector, Tolerations: ps.Tolerations}
		if t := ps.Topology; t != nil {
			eps.Topology = engine.TopologyRequest{Required: t.Required, Preferred: t.Preferred, Unconstrained: t.Unconstrained,
				SliceLevel: t.SliceLevel, SliceSize: t.SliceSize, Group: t.Group}
		}
		ew.PodSets = append(ew.PodSets, eps)
	}
	return ew, nil
}

// applyLedger brings the engine in line with one ledger key's new
// content: a reservation made by another replica is booked, a released one
// is let go. Only that workload is touched.
func (s *Service) applyLedger(ctx context.Context, e jetstream.KeyValueEntry) {
	c, err := ledger.Parse(e)
	if errors.Is(err, ledger.ErrCorrupt) && c.Workload != "" {
		s.blockUnreadable(c, err)
		return
	}
	if err != nil {
		s.log.Error().Err(err).Str("key", e.Key()).Msg("ledger entry not understood; ignoring it")
		return
	}
	if c.Workload != "" && s.eng.Unblock(unreadableBlock(c.Workload)) {
		s.dirty = true
	}
	if c.Tree != "" {
		s.trees[c.Tree] = max(s.trees[c.Tree], c.Revision)
		if len(c.Legacy) > 0 {
			s.log.Error().Str("key", c.Tree).Int("reservations", len(c.Legacy)).
				Msg("ledger entry written by an older Sluice; restart admission to move its reservations to their own keys")
		}
		return
	}
	prev, had := s.res[c.Workload]
	if had && c.Revision <= prev.Revision {
		return // our own write, already applied
	}
	if c.Reservation != nil {
		s.res[c.Workload] = ledger.Held{Reservation: *c.Reservation, Revision: c.Revision}
		s.dirty = true
		if s.synced.IsOpen() {
			s.book(c.Workload, *c.Reservation)
		}
		if a, ok := s.uncertain[c.Workload]; ok {
			delete(s.uncertain, c.Workload)
			if n, ok := workloads.ParseEngine(c.Workload); ok && a == c.Reservation.Admission() && c.Reservation.UID != "" {
				// This replica's booking whose answer was lost: it is
				// stored, so it is announced (once: the id is the
				// admission's).
				ref := n.Ref(c.Reservation.UID)
				s.log.Info().Str("workload", c.Workload).Msg("announcing a booking whose answer was lost")
				an := announcementOf(ref, *c.Reservation)
				s.out.Add(ctx, outgoing{ev: an.ev, id: an.id, ended: c.Workload})
			}
		}
		return
	}
	if !had {
		return
	}
	delete(s.res, c.Workload)
	s.dirty = true
	if !s.synced.IsOpen() {
		return
	}
	wk := c.Workload
	if w, known := s.wls[wk]; known && prev.Reservation.UID != "" && w.Workload.UID != prev.Reservation.UID {
		// The reservation of an earlier workload of the same job, which
		// left its queue or moved to another and came back: the engine
		// held that one until now; the record's queues afresh.
		_ = s.eng.Remove(wk)
		s.submit(wk)
		return
	}
	if _, known := s.wls[wk]; known && !s.recordGone(ctx, wk) {
		// Stopped (preempted, drained, or suspended from outside): back
		// to its queue. Its run until now counts toward a maximum
		// execution time, unless the engine's decision counted it.
		_ = s.eng.Stop(wk, s.clock())
		return
	}
	// Finished or deleted. The integration deletes the record before it
	// reports the end, so asking the bucket settles a race between the
	// two watches.
	delete(s.wls, wk)
	delete(s.told, wk)
	delete(s.queued, wk)
	_ = s.eng.Remove(wk)
}

// blockUnreadable fails closed on a reservation whose value cannot be
// read: it holds quota of an unknown size, so nothing is admitted into its
// cohort tree (every tree, when not even its ClusterQueue can be read)
// until the key is repaired or deleted. A reservation booked before keeps
// its quota.
func (s *Service) blockUnreadable(c ledger.Change, err error) {
	cq := c.CorruptQueue
	if prev, had := s.res[c.Workload]; had {
		cq = prev.ClusterQueue
	}
	where := "ClusterQueue " + cq + "'s cohort"
	if cq == "" {
		where = "any ClusterQueue"
	}
	reason := fmt.Sprintf("the reservation of %s in %s cannot be read: nothing is admitted into %s until it is repaired or deleted",
		c.Workload, ledger.Bucket, where)
	s.eng.Block(unreadableBlock(c.Workload), cq, reason)
	s.dirty = true
	bus.ReportUnreadable("ledger")
	s.log.Error().Err(err).Str("workload", c.Workload).Str("queue", cq).Msg("reservation not readable; admission blocked")
}

// unreadableBlock names the engine block of a workload's unreadable
// reservation.
func unreadableBlock(workload string) string { return "ledger/" + workload }

// recordExists asks the workload bucket directly; on an error it assumes
// the record exists, which at worst queues a finished workload until its
// deletion arrives.
func (s *Service) recordExists(ctx context.Context, key string) bool {
	exists, _ := s.record(ctx, key)
	return exists
}

// recordGone: the bucket says the record is gone (not only unreachable).
func (s *Service) recordGone(ctx context.Context, key string) bool {
	exists, known := s.record(ctx, key)
	return known && !exists
}

// record asks the workload bucket directly whether the record this
// replica mirrors is still there; known is false when the bucket did not
// answer (e.g. while a NATS server that led it is replaced), and exists is
// then true. A record of another workload UID under the same key (the job
// left its queue and came back) means the mirrored one is gone: its
// deletion and the new record may not have reached the mirror yet.
func (s *Service) record(ctx context.Context, key string) (exists, known bool) {
	if s.wlKV == nil {
		return true, true
	}
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
	v, err := bus.Value(ctx, s.wlKV, workloads.KVKeyFromEngine(key))
	switch {
	case err == nil:
		var stored struct {
			Workload struct {
				UID string `json:"uid"`
			} `json:"workload"`
		}
		mirrored, ok := s.wls[key]
		if ok && json.Unmarshal(v, &stored) == nil && stored.Workload.UID != mirrored.Workload.UID {
			return false, true
		}
		return true, true
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, true
	default:
		return true, false
	}
}

// heldAdmission names the admission a workload holds (its reservation's
// admission time).
func (s *Service) heldAdmission(key string) string {
	return s.res[key].Admission()
}

// refOf names the workload a decision is about: from its record or, for
// one admitted by another replica whose record this replica has not seen
// yet, from its reservation. An eviction or a preemption of such a
// workload, or its admission once its checks passed, must be announced
// all the same: nothing decides it again (seen in a test: a ClusterQueue
// drained between another replica's booking and its record's arrival,
// and the admission it held never stopped).
func (s *Service) refOf(key string) (events.WorkloadRef, bool) {
	if w := s.wls[key]; w != nil {
		return w.Workload, true
	}
	h, held := s.res[key]
	n, ok := workloads.ParseEngine(key)
	if !held || !ok || h.UID == "" {
		return events.WorkloadRef{}, false
	}
	return n.Ref(h.UID), true
}
