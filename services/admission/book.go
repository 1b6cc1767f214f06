package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// bookLedger makes sure every reservation in the ledger holds quota in the
// engine, including those of workloads whose record is gone or not seen
// yet: the ledger, not the engine's view, says what is used. It walks the
// whole ledger, in workload order so that rebuilding is deterministic;
// a single change is booked by book.
func (s *Service) bookLedger() {
	wks := make([]string, 0, len(s.res))
	for wk := range s.res {
		wks = append(wks, wk)
	}
	sort.Strings(wks)
	for _, wk := range wks {
		s.book(wk, s.res[wk].Reservation)
	}
}

// resized: the reservation holds other pod counts than the engine's
// admission.
func resized(held, r []engine.PodSetAssignment) bool {
	if len(held) != len(r) {
		return false
	}
	for i := range held {
		if held[i].Count != r[i].Count {
			return true
		}
	}
	return false
}

// admissionOf is a reservation as the engine books it.
func admissionOf(r ledger.Reservation) engine.Admission {
	return engine.Admission{ClusterQueue: r.ClusterQueue, PodSets: r.PodSets, At: r.AdmittedAt, Checks: r.Checks, AwaitingChecks: r.AwaitingChecks,
		PastExecution: r.PastExecution}
}

// book makes one reservation hold quota in the engine. For one it holds
// already, it takes the admission checks' answers recorded since.
func (s *Service) book(wk string, r ledger.Reservation) {
	if s.eng.IsAdmitted(wk) {
		if s.heldAdmission(wk) == r.Admission() {
			for _, c := range r.Checks {
				if err := s.eng.SetCheck(wk, c); err != nil {
					s.log.Error().Err(err).Str("workload", wk).Msg("admission check answer not understood")
				}
			}
			if resized(s.eng.HeldPodSets(wk), r.PodSets) {
				// An elastic workload changed size (here or in another
				// replica).
				if err := s.eng.Resized(wk, r.PodSets); err != nil {
					s.log.Error().Err(err).Str("workload", wk).Msg("a resized reservation does not match the one held")
				}
				return
			}
			// Its pods moved off failed nodes (here or in another replica).
			if err := s.eng.Move(wk, r.PodSets); err != nil {
				s.log.Error().Err(err).Str("workload", wk).Msg("a moved reservation does not match the one held")
			}
		}
		return
	}
	var err error
	if s.eng.Known(wk) {
		err = s.eng.Book(wk, admissionOf(r))
	} else {
		var ew engine.Workload
		if ew, err = fromReservation(wk, r); err == nil {
			err = s.eng.Submit(ew)
		}
		if err == nil {
			s.fenceToApply(wk)
		}
	}
	if err != nil {
		s.log.Error().Err(err).Str("workload", wk).Str("queue", r.ClusterQueue).Msg("cannot book a reservation from the ledger")
	}
}

// cycle runs the engine once and makes its decisions durable.
func (s *Service) cycle(ctx context.Context) error {
	if s.configDirty {
		s.reconfigure()
		s.renumberTrees(ctx)
	}
	if s.nodesDirty {
		s.renode()
		// Topology-aware flavors may join or split trees.
		s.renumberTrees(ctx)
	}
	s.dirty = false
	now := s.clock()
	s.lastCycle = now
	s.cycles++
	began := time.Now()
	defer func() { s.metrics.cycleDuration.Observe(time.Since(began).Seconds()) }()
	decisions := s.eng.Cycle(now)
	if len(decisions) == 0 {
		return nil
	}
	for i, d := range decisions {
		if h, ok := s.res[d.Key]; ok && d.Kind == engine.KindAdmitted {
			// It holds its reservation already: its admission checks all
			// passed. That is recorded in the reservation (unless another
			// replica did), then announced (bookPassed).
			s.passing[d.Key] = h.Admission()
			decisions[i].Kind = ""
		}
	}
	// Reserve first: group admissions by tree and book each group in one
	// batch checked against the tree's revision.
	byKey := map[string][]engine.Decision{}
	// Whether each admitted workload's record is still there, asked for
	// all of them at once.
	type answer struct{ exists, known bool }
	answers := make([]answer, len(decisions))
	sem := make(chan struct{}, recordChecks)
	var wg sync.WaitGroup
	for i, d := range decisions {
		if !books(d) {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			answers[i].exists, answers[i].known = s.record(ctx, d.Key)
		})
	}
	wg.Wait()
	for i, d := range decisions {
		if !books(d) {
			continue
		}
		exists, known := answers[i].exists, answers[i].known
		if !known {
			// The bucket does not answer: the job may have ended. Reserve
			// nothing for it until the bucket says it is there.
			s.unbook(d)
			decisions[i].Kind = ""
			s.dirty = true
			continue
		}
		if !exists {
			// The workload ended while this replica's view of the records
			// lagged behind its view of the ledger (a replica just
			// started, or the two watches deliver out of step): never
			// reserve for a job that is gone.
			delete(s.wls, d.Key)
			delete(s.told, d.Key)
			delete(s.queued, d.Key)
			_ = s.eng.Remove(d.Key)
			decisions[i].Kind = ""
			continue
		}
		tree := s.eng.TreeOf(d.ClusterQueue)
		byKey[tree] = append(byKey[tree], d)
	}
	lost := map[string]bool{}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Trees are booked side by side: their keys and revisions are
	// disjoint, and each batch is a round trip to the stream's leader,
	// which a cycle admitting in every cohort would otherwise wait for
	// one after another.
	type booking struct {
		res    map[string]ledger.Reservation
		booked ledger.Booked
		err    error
	}
	bookings := make([]booking, len(keys))
	for i, tree := range keys {
		res := make(map[string]ledger.Reservation, len(byKey[tree]))
		var at map[string]uint64
		for _, d := range byKey[tree] {
			if d.Kind == engine.KindReplaced || d.Kind == engine.KindResized {
				// The same reservation, its pods elsewhere or other
				// counts of them: rewritten only if it is still the one
				// this replica holds.
				h := s.res[d.Key]
				r := h.Reservation
				r.PodSets = d.PodSets
				res[d.Key] = r
				if at == nil {
					at = map[string]uint64{}
				}
				at[d.Key] = h.Revision
				continue
			}
			res[d.Key] = s.reservation(d, now)
		}
		bookings[i].res = res
		rev := s.trees[ledger.TreeKey(tree)]
		wg.Go(func() { bookings[i].booked, bookings[i].err = s.writer.ReserveAt(ctx, tree, rev, res, at) })
	}
	wg.Wait()
	for i, tree := range keys {
		k := ledger.TreeKey(tree)
		res, booked, err := bookings[i].res, bookings[i].booked, bookings[i].err
		if booked.Tree > s.trees[k] {
			s.trees[k] = booked.Tree
		}
		for wk, rev := range booked.Reservations {
			s.res[wk] = ledger.Held{Reservation: res[wk], Revision: rev}
			delete(s.uncertain, wk)
		}
		if err != nil && !errors.Is(err, ledger.ErrConflict) {
			// No answer, or a refusal after the server may have stored
			// the batch: whatever of it shows up in the ledger is
			// announced when it does.
			for _, d := range byKey[tree] {
				if _, ok := booked.Reservations[d.Key]; !ok {
					s.uncertain[d.Key] = res[d.Key].Admission()
				}
			}
		}
		if err != nil {
			// Another replica moved first, or the write failed: undo what
			// was not booked and decide again once the watcher shows the
			// ledger as it is.
			for _, d := range byKey[tree] {
				if _, ok := booked.Reservations[d.Key]; ok {
					continue
				}
				lost[d.Key] = true
				s.unbook(d)
			}
			s.dirty = true
			if errors.Is(err, ledger.ErrConflict) {
				s.metrics.conflicts.Inc()
			} else {
				s.log.Error().Err(err).Str("key", k).Msg("reservation not written")
			}
		}
	}
	s.bookPassed(ctx)
	return s.announceDecisions(ctx, decisions, lost)
}

// unbook takes back a decision that was not written: an admission is
// undone, a node replacement or a resize goes back to what the ledger
// holds.
func (s *Service) unbook(d engine.Decision) {
	if d.Kind == engine.KindResized {
		if h, ok := s.res[d.Key]; ok {
			if err := s.eng.Resized(d.Key, h.PodSets); err != nil {
				s.log.Error().Err(err).Str("workload", d.Key).Msg("cannot take back a resize")
			}
		}
		return
	}
	_ = s.eng.Undo(d.Key)
	if d.Kind == engine.KindReplaced {
		s.unmove(d.Key)
	}
}

// unmove undoes a node replacement that was not written (after Evict):
// the workload holds what the ledger says it holds, and its failed nodes
// are looked at again next cycle.
func (s *Service) unmove(wk string) {
	if h, ok := s.res[wk]; ok {
		s.book(wk, h.Reservation)
	}
	s.nodesDirty = true
}

// books: the decision writes a reservation: it reserves quota (admitted,
// or reserved until its admission checks pass), or moves a reservation's
// pods to other domains (replaced).
func books(d engine.Decision) bool {
	return d.Kind == engine.KindAdmitted || d.Kind == engine.KindReserved || d.Kind == engine.KindReplaced || d.Kind == engine.KindResized
}

// bookPassed writes into their reservations that the admission checks
// of the workloads in s.passing all passed, then queues the announcement
// of their admission: the integration starts a job only once both are
// stored. What fails is tried again at the next tick.
func (s *Service) bookPassed(ctx context.Context) {
	if len(s.passing) == 0 || s.ledKV == nil {
		return
	}
	for _, wk := range slices.Sorted(maps.Keys(s.passing)) {
		admission := s.passing[wk]
		checks, awaiting := s.eng.Checks(wk)
		if awaiting || s.heldAdmission(wk) != admission {
			delete(s.passing, wk) // evicted or released meanwhile
			continue
		}
		h, _, err := s.writer.Update(ctx, s.ledKV, wk, func(r *ledger.Reservation) bool {
			if r.Admission() != admission || !r.AwaitingChecks {
				return false
			}
			r.Checks, r.AwaitingChecks = checks, false
			return true
		})
		if err != nil {
			s.log.Warn().Err(err).Str("workload", wk).Msg("admission checks passed, not recorded yet")
			continue
		}
		delete(s.passing, wk)
		if h.Admission() != admission || h.AwaitingChecks {
			continue // released, or another admission since
		}
		if h.Revision > s.res[wk].Revision {
			s.res[wk] = h
		}
		ref, known := s.refOf(wk)
		if !known {
			continue
		}
		s.countAdmitted(h.ClusterQueue, s.wls[wk], -1)
		s.out.Add(ctx, outgoing{ev: admittedOf(ref, h.Reservation), id: workloads.AdmittedID(ref, admission), ended: wk})
	}
}

// reservation is what the ledger records of an admission: enough to
// account for it without the workload's record.
func (s *Service) reservation(d engine.Decision, now time.Time) ledger.Reservation {
	r := ledger.Reservation{ClusterQueue: d.ClusterQueue, PodSets: d.PodSets, AdmittedAt: now.UTC(), Requests: map[string]map[string]string{}}
	if d.Kind == engine.KindReserved {
		r.Checks, r.AwaitingChecks = d.Checks, true
	}
	if w := s.wls[d.Key]; w != nil {
		r.LocalQueue, r.Priority, r.Submitted, r.UID = w.LocalQueue, w.Priority, w.CreationTime, w.Workload.UID
		for _, ps := range w.PodSets {
			r.Requests[ps.Name] = ps.Requests
		}
		if w.MaximumExecutionTimeSeconds > 0 {
			r.MaxExecution = time.Duration(w.MaximumExecutionTimeSeconds) * time.Second
			r.PastExecution = s.eng.Requeues(d.Key).Executed
		}
	}
	return r
}

// setPodSetUpdates records what check adds to the pods (none: forgets it).
func setPodSetUpdates(r *ledger.Reservation, check string, updates []events.PodSetUpdateV1) {
	if len(updates) == 0 {
		delete(r.PodSetUpdates, check)
		if len(r.PodSetUpdates) == 0 {
			r.PodSetUpdates = nil
		}
		return
	}
	if r.PodSetUpdates == nil {
		r.PodSetUpdates = map[string][]events.PodSetUpdateV1{}
	}
	r.PodSetUpdates[check] = updates
}

// handleCheck records an admission check's answer in the reservation it
// is about. An answer about a reservation that is gone, or another one,
// or a check the reservation does not run, changes nothing.
func (s *Service) handleCheck(ctx context.Context, env events.Envelope) error {
	var e events.CheckUpdatedV1
	if err := env.As(&e); err != nil {
		return fmt.Errorf("%w: %v", bus.ErrPoison, err)
	}
	wk := workloads.EngineKey(e.Workload)
	// Only the check's own controller answers it: the answer's subject
	// names its controller, and each controller's NATS user may publish
	// only under its own name.
	m := s.checkControllers.Load()
	if m == nil {
		return errors.New("the configuration is not loaded yet") // retried
	}
	want, known := (*m)[e.Check]
	if !known {
		s.log.Warn().Str("workload", wk).Str("check", e.Check).Msg("an answer for an AdmissionCheck not known (yet); ignored")
		return nil
	}
	if e.Controller != want {
		return fmt.Errorf("%w: answer for check %s from controller %q, but its controller is %q", bus.ErrPoison, e.Check, e.Controller, want)
	}
	st := engine.CheckStatus{Name: e.Check, State: engine.CheckState(e.State), Message: e.Message}
	if e.RequeueAfterSeconds != nil {
		st.RequeueAfter = time.Duration(*e.RequeueAfterSeconds) * time.Second
	}
	log := s.log.With().Str("workload", wk).Str("check", e.Check).Str("state", e.State).Logger()
	var updates []events.PodSetUpdateV1
	var cluster string
	if e.State == events.CheckReady {
		updates, cluster = e.PodSetUpdates, e.Cluster
	}
	_, wrote, err := s.writer.Update(ctx, s.ledKV, wk, func(r *ledger.Reservation) bool {
		if r.Admission() != e.Admission || (r.UID != "" && r.UID != e.Workload.UID) {
			return false
		}
		for i := range r.Checks {
			if r.Checks[i].Name != st.Name {
				continue
			}
			to, by := r.DispatchedTo, r.DispatchedBy
			if cluster != "" {
				to, by = cluster, st.Name
			} else if by == st.Name {
				to, by = "", ""
			}
			if r.Checks[i] == st && reflect.DeepEqual(r.PodSetUpdates[st.Name], updates) && to == r.DispatchedTo {
				return false
			}
			r.Checks[i] = st
			setPodSetUpdates(r, st.Name, updates)
			r.DispatchedTo, r.DispatchedBy = to, by
			return true
		}
		return false
	})
	if err != nil {
		return err // transient: redelivered with backoff
	}
	if wrote {
		log.Info().Msg("admission check answered")
	} else {
		log.Debug().Msg("admission check answer about no reservation held now")
	}
	return nil
}

// ChecksConsumer is the durable consumer of admission checks' answers. An
// answer is never given up on: its reservation waits for it.
func ChecksConsumer() bus.ConsumerSpec {
	return bus.ConsumerSpec{Stream: bus.StreamEvents, Durable: checksConsumer,
		FilterSubjects: []string{events.SubjectFilter("check", "updated", "", "")}, MaxDeliver: bus.RetryForever}
}

// checksConsumer is the durable consumer of admission checks' answers,
// shared by the admission replicas; checkPartitions answers are recorded
// at once, those about one workload in order.
const (
	checksConsumer  = "admission-checks"
	checkPartitions = 4
)
