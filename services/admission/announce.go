package admission

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// announcement is how a reservation is announced: admitted, or reserved
// while it waits for admission checks.
type announcement struct {
	ev        events.Event
	id        string
	ref       events.WorkloadRef
	admission string
}

// announcementOf is the announcement of a reservation.
func announcementOf(ref events.WorkloadRef, r ledger.Reservation) announcement {
	a := announcement{ref: ref, admission: r.Admission()}
	if r.AwaitingChecks {
		a.ev, a.id = reservedOf(ref, r), workloads.ReservedID(ref, a.admission)
	} else {
		a.ev, a.id = admittedOf(ref, r), workloads.AdmittedID(ref, a.admission)
	}
	return a
}

// reservedOf is the announcement of a reservation waiting for checks.
func reservedOf(ref events.WorkloadRef, r ledger.Reservation) events.WorkloadReservedV1 {
	ev := events.WorkloadReservedV1{Workload: ref, ClusterQueue: r.ClusterQueue, PodSets: assignments(r.PodSets), Admission: r.Admission()}
	for _, c := range r.Checks {
		ev.Checks = append(ev.Checks, c.Name)
	}
	return ev
}

// announceLedger publishes the admitted event of every reservation whose
// announcement is not the last one stored for its workload: a replica that
// stopped between writing a reservation and announcing it leaves the
// admission unannounced, and an integration starts a job only once its
// admission is announced.
func (s *Service) announceLedger(ctx context.Context) {
	if s.stream == nil {
		return
	}
	for _, wk := range slices.Sorted(maps.Keys(s.res)) {
		s.announce(ctx, wk, s.res[wk].Reservation)
	}
	if err := s.out.Flush(ctx); err != nil {
		s.log.Warn().Err(err).Msg("admissions a restart left unannounced not announced yet")
	}
}

// announce publishes the admitted event of one reservation unless it is
// the last announcement stored for its workload.
func (s *Service) announce(ctx context.Context, wk string, r ledger.Reservation) {
	n, ok := workloads.ParseEngine(wk)
	if !ok || r.UID == "" {
		return
	}
	ref := n.Ref(r.UID)
	an := announcementOf(ref, r)
	check := workloads.Announced
	if r.AwaitingChecks {
		check = workloads.Reserved
	}
	done, err := check(ctx, s.stream, ref, r.Admission())
	if err != nil {
		s.log.Warn().Err(err).Str("workload", wk).Msg("cannot check the announcement of a reservation")
		return
	}
	if done {
		return
	}
	s.log.Info().Str("workload", wk).Str("queue", r.ClusterQueue).Msg("announcing an admission a restart left unannounced")
	s.out.Add(ctx, outgoing{ev: an.ev, id: an.id, ended: wk})
}

// admittedOf is the announcement of a reservation.
func admittedOf(ref events.WorkloadRef, r ledger.Reservation) events.WorkloadAdmittedV1 {
	return events.WorkloadAdmittedV1{Workload: ref, ClusterQueue: r.ClusterQueue, PodSets: assignments(r.PodSets), Admission: r.Admission()}
}

// announceDecisions turns the cycle's decisions into events in the outbox
// and flushes it. Admissions whose reservation
// was lost are not announced. Admissions, evictions and preemption
// requests go first and pending reasons last: an integration starts a job
// only once its admission is announced, and a cycle may also have
// thousands of pending reasons to tell.
func (s *Service) announceDecisions(ctx context.Context, ds []engine.Decision, lost map[string]bool) error {
	admitted := 0
	defer func() { s.metrics.cycleAdmitted.Observe(float64(admitted)) }()
	preemptions := map[string]*events.PreemptionRequestedV1{}
	var order []string
	for _, d := range ds {
		w := s.wls[d.Key]
		ref, known := s.refOf(d.Key)
		if !known {
			continue
		}
		switch d.Kind {
		case engine.KindReserved:
			if lost[d.Key] || w == nil {
				continue
			}
			delete(s.told, d.Key)
			r := s.res[d.Key].Reservation
			s.countReserved(d.ClusterQueue, w, max(0, r.AdmittedAt.Sub(w.CreationTime)))
			s.out.Add(ctx, outgoing{ev: reservedOf(ref, r), id: workloads.ReservedID(ref, r.Admission()), ended: d.Key})
		case engine.KindAdmitted:
			if lost[d.Key] || w == nil {
				continue
			}
			delete(s.told, d.Key) // a reason after this admission is news
			r := s.res[d.Key].Reservation
			admitted++
			// Without admission checks, the reservation is the admission.
			s.countReserved(d.ClusterQueue, w, max(0, r.AdmittedAt.Sub(w.CreationTime)))
			s.countAdmitted(d.ClusterQueue, w, max(0, r.AdmittedAt.Sub(w.CreationTime)))
			ev := admittedOf(ref, r)
			actx, span := s.traceAdmission(ctx, w, d, r.Admission(), r.AdmittedAt)
			s.out.Add(actx, outgoing{ev: ev, id: workloads.AdmittedID(ref, r.Admission()), ended: d.Key})
			span.End()
		case engine.KindEvicted:
			// Like a preemption, a drain is fenced: once announced, the
			// admission never starts.
			r := s.res[d.Key].Reservation
			admission := r.Admission()
			s.metrics.evicted.WithLabelValues(d.ClusterQueue, d.Reason).Inc()
			if w != nil {
				s.metrics.lqEvicted.WithLabelValues(w.LocalQueue, w.Workload.Namespace, d.Reason).Inc()
			}
			ev := events.WorkloadEvictedV1{Workload: ref, ClusterQueue: d.ClusterQueue, Reason: d.Reason, Message: d.Message, Admission: admission}
			first := announcementOf(ref, r)
			o := outgoing{ev: ev, id: events.ID(ev.Type(), ref.UID, admission),
				fenceKey: workloads.Key(ref), admission: admission, admitted: &first}
			switch d.Reason {
			case engine.ReasonPodsReadyTimeout, engine.ReasonRequeuingLimitExceeded, engine.ReasonAdmissionCheck, engine.ReasonDeactivated,
				engine.ReasonMaxExecTimeExceeded:
				// The fence keeps the count and the backoff for a
				// replica that starts after this one.
				rs := s.eng.Requeues(d.Key)
				o.requeue = &fence.Requeue{Count: rs.Count, At: rs.At.UTC(), Deactivated: rs.Deactivated, Why: rs.Why, Executed: rs.Executed,
					Reactivations: rs.Reactivations, Reactivation: rs.Reactivation}
			}
			ectx, span := s.traceEviction(ctx, ref, d, admission)
			s.out.Add(ectx, o)
			span.End()
		case engine.KindReplaced:
			if lost[d.Key] {
				continue
			}
			h := s.res[d.Key]
			ev := events.WorkloadMovedV1{Workload: ref, ClusterQueue: d.ClusterQueue, PodSets: assignments(h.PodSets), Reason: d.Reason,
				Message: d.Message, Admission: h.Admission()}
			s.log.Info().Str("workload", d.Key).Str("queue", d.ClusterQueue).Str("event_type", ev.Type()).Str("message", d.Message).
				Msg("pods moved off failed nodes")
			// One move per revision of the reservation.
			s.out.Add(ctx, outgoing{ev: ev, id: events.ID(ev.Type(), ref.UID, fmt.Sprintf("%s/%d", ev.Admission, h.Revision)), ended: d.Key})
		case engine.KindResized:
			if lost[d.Key] {
				continue
			}
			h := s.res[d.Key]
			ev := events.WorkloadResizedV1{Workload: ref, ClusterQueue: d.ClusterQueue, PodSets: assignments(h.PodSets), Reason: d.Reason,
				Admission: h.Admission()}
			s.log.Info().Str("workload", d.Key).Str("queue", d.ClusterQueue).Str("event_type", ev.Type()).Str("reason", d.Reason).
				Msg("admission resized")
			// One resize per revision of the reservation.
			s.out.Add(ctx, outgoing{ev: ev, id: events.ID(ev.Type(), ref.UID, fmt.Sprintf("%s/%d", ev.Admission, h.Revision)), ended: d.Key})
		case engine.KindPreempted:
			p := preemptions[d.Preemptor]
			if p == nil {
				pw := s.wls[d.Preemptor]
				if pw == nil {
					continue
				}
				p = &events.PreemptionRequestedV1{Preemptor: pw.Workload, ClusterQueue: s.eng.ClusterQueueOf(d.Preemptor)}
				preemptions[d.Preemptor] = p
				order = append(order, d.Preemptor)
			}
			admission := s.heldAdmission(d.Key)
			s.metrics.preempted.WithLabelValues(p.ClusterQueue, d.Reason).Inc()
			p.Victims = append(p.Victims, events.VictimV1{Workload: ref, ClusterQueue: d.ClusterQueue, Reason: d.Reason, Admission: admission})
		}
	}
	for _, k := range order {
		p := preemptions[k]
		pctx, span := s.tracePreemption(ctx, p, s.clock())
		s.out.Add(pctx, outgoing{ev: *p, id: preemptionID(*p)})
		span.End()
	}
	now := s.clock()
	var tells []pendingTell
	for _, d := range ds {
		w := s.wls[d.Key]
		if w == nil || d.Kind != engine.KindPending {
			continue
		}
		// Only a reason of another kind is news: a place in line or a
		// number that moved is not worth an event (and a Kubernetes Event
		// on the job) for every waiting workload at every admission; and
		// news comes at most once per interval.
		class := engine.ReasonClass(d.Reason)
		s.noteWaiting(d.Key, class, d.Reason, now)
		t, ok := s.told[d.Key]
		kept, news := engine.Retold(t.class, class)
		switch {
		case ok && !news:
			t.class, t.held = kept, false
			s.told[d.Key] = t
			continue
		case ok && s.clock().Sub(t.at) < s.cfg.PendingInterval:
			t.held = true
			s.told[d.Key] = t
			continue
		}
		tells = append(tells, pendingTell{ref: w.Workload, key: d.Key, cq: d.ClusterQueue, reason: d.Reason, told: ok})
	}
	s.tellPending(ctx, tells)
	return s.out.Flush(ctx)
}

// preemptionID is the id of a preemption request. It names each victim's
// admission and reason, not only the victim: a preemptor that asks again
// for the same workloads once they were admitted again makes a new
// request, which the stream must not take for a re-send of the first and
// drop (seen at 100,000 Jobs: three such requests).
func preemptionID(p events.PreemptionRequestedV1) string {
	victims := make([]string, 0, 3*len(p.Victims))
	for _, v := range p.Victims {
		victims = append(victims, v.Workload.UID, v.Admission, v.Reason)
	}
	return events.ID(p.Type(), p.Preemptor.UID, victims)
}

func assignments(ps []engine.PodSetAssignment) []events.PodSetAssignmentV1 {
	out := make([]events.PodSetAssignmentV1, len(ps))
	for i, p := range ps {
		out[i] = events.PodSetAssignmentV1{Name: p.Name, Count: p.Count, Flavors: p.Flavors, TopologyAssignment: TopologyV1(p.Topology)}
	}
	return out
}

// TopologyV1 is a topology assignment as events carry it; nil for none.
func TopologyV1(t *engine.TopologyAssignment) *events.TopologyAssignmentV1 {
	if t == nil {
		return nil
	}
	out := &events.TopologyAssignmentV1{Levels: t.Levels, Domains: make([]events.TopologyDomainV1, len(t.Domains))}
	for i, d := range t.Domains {
		out.Domains[i] = events.TopologyDomainV1{Values: d.Values, Count: d.Count}
	}
	return out
}
