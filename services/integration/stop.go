package integration

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// stopFirst stops a running object whose queue label changed (possible
// only while the webhook was not asked), on its workload's admission; the
// caller's change follows once the stop is seen (errLookAgain).
func (s *Service) stopFirst(ctx context.Context, k *kindRunner, job jobframework.Job, rec *events.WorkloadSubmittedV1, reason, message string) error {
	r, _ := s.reservation(rec.Workload)
	if err := s.stop(ctx, k, job, rec.Workload, "", reason, message, r.Admission()); err != nil {
		return err
	}
	return errLookAgain
}

// stop suspends an object and restores its templates, then announces it.
// admission names the admission it is stopped from when the caller knows
// it (a preemption or eviction names it); otherwise it is the one this
// service sees in the ledger, if any.
//
// The writes are: mark the admission stopped; suspend, when the templates
// must change and the object runs (templates of a running object cannot
// change); unlock the templates, for a kind that needs it; restore. An
// object whose templates Sluice never changed is stopped in one write,
// which carries the mark. Every step is idempotent: a failed stop is
// retried from the start.
func (s *Service) stop(ctx context.Context, k *kindRunner, job jobframework.Job, ref events.WorkloadRef, cq, reason, message, admission string) error {
	r, held := s.reservation(ref)
	if admission == "" && held {
		admission = r.Admission()
	}
	m := job.Meta()
	ns, name, uid := m.GetNamespace(), m.GetName(), string(m.GetUID())
	if cq == "" {
		cq = r.ClusterQueue
	}
	if d, ok := job.(jobframework.Deleter); ok && d.StopsByDeletion() {
		if err := s.delete(ctx, k, ns, name, uid); err != nil {
			return err
		}
		s.recorder.Event(job.Object(), corev1.EventTypeNormal, reason, message+" (deleted: it cannot be held back once admitted)")
		return s.announceStop(ctx, ref, cq, reason, admission)
	}
	step, err := jobframework.NextStopStep(k.ad, job)
	if admission != "" {
		// A stop in one write carries its mark; otherwise the mark is
		// written first (also when the stop cannot be computed: the
		// admission must not start the object again meanwhile).
		marked := false
		if err == nil {
			if step, marked, err = jobframework.MarkStopped(step, admission); err != nil {
				return err
			}
		}
		if !marked {
			if err := s.markStopped(ctx, k, ns, name, uid, admission); err != nil {
				return err
			}
		}
	}
	if err != nil {
		return err
	}
	for n := 0; ; n++ {
		if n > 3 {
			return fmt.Errorf("stop: not done after %d writes", n)
		}
		if n > 0 {
			if step, err = jobframework.NextStopStep(k.ad, job); err != nil {
				return err
			}
		}
		if err := s.patch(ctx, k, ns, name, step.Patch, step.Subresource()...); err != nil {
			return fmt.Errorf("stop (%s): %w", step.Name, err)
		}
		if step.Last {
			break
		}
		// The next step must see this one: re-read.
		if job, err = s.fetch(ctx, k, ns, name); err != nil {
			return err
		}
		if job == nil || string(job.Meta().GetUID()) != uid {
			return nil // gone: its deletion releases the quota
		}
	}
	s.recorder.Event(job.Object(), corev1.EventTypeNormal, reason, message)
	return s.announceStop(ctx, ref, cq, reason, admission)
}

// markStopped writes StoppedAnnotation: the object is stopped from
// admission, which never starts it again.
func (s *Service) markStopped(ctx context.Context, k *kindRunner, ns, name, uid, admission string) error {
	mark, err := jobframework.MarkPatch(uid, admission)
	if err != nil {
		return err
	}
	if err := s.patch(ctx, k, ns, name, mark); err != nil {
		return fmt.Errorf("mark stopped: %w", err)
	}
	return nil
}

// announceStop publishes stopped, unless the workload ended meanwhile
// (its object finished while being stopped): its finished event released
// the quota, and a stop after the end would contradict it.
func (s *Service) announceStop(ctx context.Context, ref events.WorkloadRef, cq, reason, admission string) error {
	st, err := fence.Get(ctx, s.fenceKV, workloads.Key(ref))
	if err != nil {
		return err
	}
	if st.Phase == fence.Finished && st.UID == ref.UID {
		return nil
	}
	ev := events.WorkloadStoppedV1{Workload: ref, ClusterQueue: cq, Reason: reason, Admission: admission}
	ctx, span := s.tracer(ref.Kind).Start(ctx, ref, tracing.SpanStop, trace.WithAttributes(
		tracing.AttrClusterQueue.String(cq), tracing.AttrReason.String(reason), tracing.AttrAdmission.String(admission)))
	err = s.pub.Publish(ctx, ev, events.ID(ev.Type(), ref.UID, admission))
	endSpan(span, err)
	return err
}

// fencedStop reports whether the admission a workload holds is being
// stopped (preempted, drained: its fence moved to stopping). Then, unless
// this replica announced that stop already, it reads the stop's cause and
// has stop stop the object and announce it, which releases the
// reservation.
func (s *Service) fencedStop(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, stop func(cq, reason, message, admission string) error) (bool, error) {
	r, held := s.reservation(rec.Workload)
	st := s.fenceOf(rk)
	if st.Phase != fence.Stopping || !held || r.Admission() != st.Admission || r.UID != rec.Workload.UID {
		return false, nil
	}
	s.mu.Lock()
	announced := s.stopsAnnounced[rk] == st.Admission
	s.mu.Unlock()
	if announced {
		return true, nil // the release is on its way
	}
	cq, reason, message, err := s.stopCause(ctx, rec.Workload, st.Admission)
	if err != nil {
		return true, err
	}
	if err := stop(cq, reason, message, st.Admission); err != nil {
		return true, err
	}
	s.mu.Lock()
	s.stopsAnnounced[rk] = st.Admission
	s.mu.Unlock()
	return true, nil
}

// stopCause reads the announcement of the stop of an admission (its
// preempted or evicted event) for the ClusterQueue and the reason to
// report. The fence moves to stopping just before the announcement is
// published: until it is stored the stop waits, so that the workload's
// stopped event never comes before it.
func (s *Service) stopCause(ctx context.Context, w events.WorkloadRef, admission string) (cq, reason, message string, err error) {
	for _, typ := range []string{events.TypeWorkloadPreemptedV1, events.TypeWorkloadEvictedV1} {
		gctx, cancel := bus.Bounded(ctx)
		msg, err := s.events.GetLastMsgForSubject(gctx, events.WorkloadSubject(typ, w))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return "", "", "", fmt.Errorf("read the stop of %s: %w", w, err)
		}
		env, err := events.DecodeParts(msg.Subject, msg.Header, msg.Data)
		if err != nil {
			return "", "", "", fmt.Errorf("read the stop of %s: %w", w, err)
		}
		switch typ {
		case events.TypeWorkloadPreemptedV1:
			var e events.WorkloadPreemptedV1
			if env.As(&e) == nil && e.Admission == admission && e.Workload.UID == w.UID {
				return e.ClusterQueue, "Preempted", fmt.Sprintf("preempted (%s) by %s/%s", e.Reason, e.Preemptor.Namespace, e.Preemptor.Name), nil
			}
		case events.TypeWorkloadEvictedV1:
			var e events.WorkloadEvictedV1
			if env.As(&e) == nil && e.Admission == admission && e.Workload.UID == w.UID {
				msg := "evicted: " + e.Reason
				if e.Message != "" {
					msg += ": " + e.Message
				}
				return e.ClusterQueue, "Evicted", msg, nil
			}
		}
	}
	return "", "", "", errStopNotAnnounced
}
