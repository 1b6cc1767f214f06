package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// start applies a reservation to a suspended object: one API write. The
// write is fenced three ways, so that an object never runs on a
// reservation that is gone or given away:
//   - the admission must be announced (its admitted event stored), so its
//     started event never comes first;
//   - the fence must let it start (no stop of this admission decided),
//     and holds off stops until the start is announced;
//   - the patch carries the resourceVersion the decision was made on, so a
//     stale view of the object (the informer lagging behind a stop) fails
//     with a conflict instead of resuming it.
func (s *Service) start(ctx context.Context, k *kindRunner, job jobframework.Job, rec *events.WorkloadSubmittedV1, r ledger.Reservation) (err error) {
	ctx, span := s.startSpan(ctx, rec, r)
	defer func() { endSpan(span, err) }()
	s.mu.Lock()
	flavors := s.configLocked().Flavors
	s.mu.Unlock()
	m := job.Meta()
	admitted, err := k.decode(job.Object())
	if err != nil {
		return err
	}
	a, err := assignmentOf(r)
	if err == nil {
		err = withPlacements(&a, r, k.kind.Name, m.GetNamespace()+"/"+m.GetName(), admitted, nil)
	}
	if err == nil && rec.Elastic {
		withElastic(&a, k.kind.Name, m.GetNamespace()+"/"+m.GetName())
	}
	if err == nil {
		err = jobframework.Admit(admitted, a, flavors)
	}
	if err != nil {
		s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "AdmissionFailed", "cannot apply admission: %v", err)
		return nil
	}
	if u, ok := job.(jobframework.Unlocker); ok {
		if p := u.UnlockPatch(); p != nil {
			// Stopped earlier without its templates unlocked (Sluice had not
			// changed them): unlock now, start once the informer sees it.
			p, err := jobframework.WithUID(p, string(m.GetUID()))
			if err != nil {
				return err
			}
			if err := s.patch(ctx, k, m.GetNamespace(), m.GetName(), p, "status"); err != nil {
				return fmt.Errorf("unlock templates: %w", err)
			}
			return errLookAgain
		}
	}
	if st, ok := admitted.(jobframework.Stager); ok && st.StagesStart() {
		if staged, err := stagedStart(k, job, admitted); err != nil {
			return err
		} else if staged != nil {
			if err := s.patch(ctx, k, m.GetNamespace(), m.GetName(), staged); err != nil {
				return fmt.Errorf("write the admission's templates: %w", err)
			}
			return errLookAgain // resumed once the informer sees them
		}
	}
	patch, err := jobframework.MergePatch(job.Object(), admitted.Object(), string(m.GetUID()), m.GetResourceVersion())
	if err != nil {
		return err
	}
	if _, err := s.fencedStart(ctx, rec, r, func() error {
		if err := s.patch(ctx, k, m.GetNamespace(), m.GetName(), patch); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		return nil
	}); err != nil {
		if errors.Is(err, fence.ErrCorrupt) {
			// Fails closed: it does not start until the fence is repaired.
			s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "FenceUnreadable",
				"not started: its fence in %s cannot be read; delete the key %s there to repair it", fence.Bucket, workloads.Key(rec.Workload))
		}
		return err
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "Admitted", "admitted by ClusterQueue %s: %s", r.ClusterQueue, describe(r))
	return s.announceStart(ctx, rec, r)
}

// stagedStart returns the patch that writes the admission into a
// Stager's templates while it stays suspended, nil when they already hold
// it (the second step resumes it).
func stagedStart(k *kindRunner, job, admitted jobframework.Job) ([]byte, error) {
	staged, err := k.decode(admitted.Object())
	if err != nil {
		return nil, err
	}
	staged.SetSuspended(true)
	if apiequality.Semantic.DeepEqual(job.Object(), staged.Object()) {
		return nil, nil
	}
	m := job.Meta()
	return jobframework.MergePatch(job.Object(), staged.Object(), string(m.GetUID()), m.GetResourceVersion())
}

// markHeld writes the admission a held object holds into HeldAnnotation
// ("" removes it).
func (s *Service) markHeld(ctx context.Context, k *kindRunner, job jobframework.Job, admission string) error {
	m := job.Meta()
	if m.GetAnnotations()[jobframework.HeldAnnotation] == admission {
		return nil
	}
	var value any
	if admission != "" {
		value = admission
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": string(m.GetUID()), "annotations": map[string]any{jobframework.HeldAnnotation: value}}})
	if err != nil {
		return err
	}
	return s.patch(ctx, k, m.GetNamespace(), m.GetName(), patch)
}

// startRemote announces the start of a workload a multicluster check
// dispatched to a worker cluster. Nothing here changes: the object stays
// suspended (the worker runs the job), and its end comes with the status
// the dispatcher mirrors from the worker. The fences hold as for a local
// start, so a preemption waits for the announcement.
func (s *Service) startRemote(ctx context.Context, job jobframework.Job, rec *events.WorkloadSubmittedV1, r ledger.Reservation) (err error) {
	rk := workloads.Key(rec.Workload)
	if st := s.fenceOf(rk); st.Admission == r.Admission() && st.Phase == fence.Started {
		// Its pods are the worker's, which admitted it: for
		// waitForPodsReady here it is ready once it runs there.
		return s.reportReady(ctx, rk, true, r)
	}
	ctx, span := s.startSpan(ctx, rec, r)
	defer func() { endSpan(span, err) }()
	before, err := s.fencedStart(ctx, rec, r, func() error { return nil })
	if err != nil {
		return err
	}
	if !before {
		s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "Dispatched", "admitted by ClusterQueue %s: runs in worker cluster %s", r.ClusterQueue, r.DispatchedTo)
	}
	if err := s.announceStart(ctx, rec, r); err != nil {
		return err
	}
	return s.reportReady(ctx, rk, true, r)
}

// assignmentOf is the assignment a reservation makes, with what its
// admission checks add to each pod set.
func assignmentOf(r ledger.Reservation) (jobframework.Assignment, error) {
	updates, err := jobframework.MergeUpdates(r.PodSetUpdates)
	if err != nil {
		return jobframework.Assignment{}, err
	}
	a := jobframework.Assignment{ClusterQueue: r.ClusterQueue}
	for _, ps := range r.PodSets {
		a.PodSets = append(a.PodSets, jobframework.PodSetAssignment{Name: ps.Name, Count: ps.Count, Flavors: ps.Flavors, Update: updates[ps.Name]})
	}
	return a, nil
}

// withPlacements adds to a what the pod sets placed on topology-aware
// flavors need (withTopology): gates for templates; for a Pod, the node
// selector of a domain with room, given the node selectors of the pods of
// the pod set already started (placed, by pod set).
func withPlacements(a *jobframework.Assignment, r ledger.Reservation, kind, owner string, j jobframework.Job, placed map[string][]map[string]string) error {
	own := jobframework.IsPod(j)
	for i := range a.PodSets {
		psa := &a.PodSets[i]
		t := r.PodSets[i].Topology
		if t == nil {
			continue
		}
		var sel map[string]string
		if own {
			picked := pickDomains(t, placed[psa.Name], 1)
			if len(picked) == 0 {
				return fmt.Errorf("pod set %q: every domain of its placement is taken: %w", psa.Name, jobframework.ErrInvalidAssignment)
			}
			sel = picked[0]
		}
		u, err := withTopology(psa.Update, kind, owner, psa.Name, r.Admission(), t, own, sel)
		if err != nil {
			return err
		}
		psa.Update = u
		psa.Topology = t
	}
	return nil
}

// fencedStart runs apply, the API writes of a start, under the fences
// start describes: the admission must be announced, and the fence must let
// it start; a failed write releases the fence. It reports whether the
// admission had started before (a start retried or extended).
func (s *Service) fencedStart(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation, apply func() error) (startedBefore bool, err error) {
	if err := s.announced(ctx, rec.Workload, r); err != nil {
		return false, err
	}
	rk := workloads.Key(rec.Workload)
	admission := r.Admission()
	st, err := fence.BeginStart(ctx, s.fenceMoves, rk, admission, r.ClusterQueue)
	if err != nil {
		if errors.Is(err, fence.ErrStopping) {
			// Its preemption (or drain) was decided meanwhile: the next
			// look sees the fence and stops it once that is announced.
			return false, errLookAgain
		}
		return false, err
	}
	if err := apply(); err != nil {
		if aerr := fence.AbortStart(ctx, s.fenceMoves, rk, admission); aerr != nil {
			s.log.Warn().Err(aerr).Str("workload", rk).Msg("start not released; stops wait until it is retried")
		}
		return false, err
	}
	return st.Phase == fence.Started, nil
}

// announceStart publishes started and then lets stops of the admission
// proceed.
func (s *Service) announceStart(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation) error {
	ev := events.WorkloadStartedV1{Workload: rec.Workload, ClusterQueue: r.ClusterQueue, Admission: r.Admission()}
	if err := s.publishStarted(ctx, ev, events.ID(ev.Type(), rec.Workload.UID, r.Admission())); err != nil {
		return err
	}
	first, err := fence.EndStartFirst(ctx, s.fenceMoves, workloads.Key(rec.Workload), r.Admission())
	if first {
		// The workload's first start ends its admission latency: the root
		// span, from its job's creation to now, which its start span (in
		// ctx, if any) must not outlast.
		trace.SpanFromContext(ctx).End()
		s.tracer(rec.Workload.Kind).Root(rec.Workload, trace.WithTimestamp(rec.CreationTime), trace.WithAttributes(
			tracing.AttrLocalQueue.String(rec.LocalQueue), tracing.AttrClusterQueue.String(r.ClusterQueue),
			tracing.AttrPriority.Int64(int64(rec.Priority)), tracing.AttrAdmission.String(r.Admission()))).End()
	}
	return err
}

// publishStarted announces a start unless the admission's stop or the
// job's end was announced first. The fence keeps a stop from being
// decided while a start is in flight, but a start whose claim was given up
// by another replica (one that took the shard over and failed its own
// write) can still be in flight after the stop: its announcement expects
// the last event about the workload, so it is refused if anything came
// since, and a stop that came first wins. The job is then stopped, as
// the stop says.
func (s *Service) publishStarted(ctx context.Context, ev events.WorkloadStartedV1, id string) error {
	ep, expecting := s.pub.(workloads.ExpectingPublisher)
	if !expecting || s.events == nil {
		return s.pub.Publish(ctx, ev, id)
	}
	stopped := false
	_, err := ep.PublishExpecting(ctx, ev, id, events.WorkloadFilter(ev.Workload), func(ctx context.Context) (uint64, bool, error) {
		last, err := workloads.Last(ctx, s.events, ev.Workload)
		switch {
		case err != nil:
			return 0, false, err
		case last.ID == id:
			return 0, false, nil // announced before (a retried start)
		case last.Stopped(ev.Admission) || last.Ended(ev.Workload.UID):
			s.log.Info().Str("workload", workloads.EngineKey(ev.Workload)).Str("event_type", last.Type).
				Msg("start not announced: its stop or its end came first")
			stopped = true
			return 0, false, nil
		}
		return last.Seq, true, nil
	})
	if err == nil && stopped {
		return errLookAgain
	}
	return err
}

// tracer is the tracer of a kind's workloads.
func (s *Service) tracer(kind string) *tracing.Tracer {
	if k := s.kinds[kind]; k != nil {
		return k.tracer
	}
	return nil
}

// startSpan starts the start span of an admission.
func (s *Service) startSpan(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation) (context.Context, trace.Span) {
	return s.tracer(rec.Workload.Kind).Start(ctx, rec.Workload, tracing.SpanStart, trace.WithAttributes(
		tracing.AttrClusterQueue.String(r.ClusterQueue), tracing.AttrAdmission.String(r.Admission()), tracing.Flavors(r.PodSets)))
}

// endSpan ends a span, marking it failed by err.
func endSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, errLookAgain) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// confirmStart finishes a start that was applied but not announced (the
// service stopped between the two): stops of that admission wait for it.
func (s *Service) confirmStart(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation) error {
	rk := workloads.Key(rec.Workload)
	if st := s.fenceOf(rk); st.Admission == r.Admission() && st.Phase != "" && st.Phase != fence.Starting {
		// An admission's fence never moves back to starting: seen past
		// it, even late, there is nothing to confirm (every running
		// object's change would otherwise read its fence).
		return nil
	}
	st, err := fence.Get(ctx, s.fenceKV, rk)
	if err != nil {
		return err
	}
	if st.Admission != r.Admission() || st.Phase != fence.Starting {
		return nil
	}
	return s.announceStart(ctx, rec, r)
}

// reportReady writes into the fence of a started job whether its pods are
// all ready, where admission's waitForPodsReady reads it. A kind that
// cannot tell counts as ready once started. Not ready is what a fence
// without readiness means, so only a change after the first ready is
// written as not ready (the pods must recover).
func (s *Service) reportReady(ctx context.Context, rk string, ready bool, r ledger.Reservation) error {
	if !s.cfg.ReportPodsReady {
		return nil
	}
	st := s.fenceOf(rk)
	if st.Admission == r.Admission() && st.Phase == fence.Started && (st.Ready != nil && st.Ready.Ready) == ready {
		return nil // nothing new, as far as this replica has seen
	}
	return fence.SetReady(ctx, s.fenceMoves, rk, r.Admission(), ready, time.Now())
}

// podsReady says whether a started object's pods are all ready: what its
// status says, or yes for a kind that cannot tell.
func podsReady(job jobframework.Job) bool {
	if pr, ok := job.(jobframework.PodsReadier); ok {
		return pr.PodsReady()
	}
	return true
}

// announced checks that the admitted event of the reservation is the last
// one stored for the workload.
func (s *Service) announced(ctx context.Context, w events.WorkloadRef, r ledger.Reservation) error {
	ok, err := workloads.Announced(ctx, s.events, w, r.Admission())
	if err != nil {
		return err
	}
	if !ok {
		return errNotAnnounced
	}
	return nil
}

func describe(r ledger.Reservation) string {
	var parts []string
	for _, ps := range r.PodSets {
		var fl []string
		for res, f := range ps.Flavors {
			fl = append(fl, res+"="+f)
		}
		sort.Strings(fl)
		parts = append(parts, fmt.Sprintf("%s×%d on %s", ps.Name, ps.Count, strings.Join(fl, ",")))
	}
	return strings.Join(parts, "; ")
}
