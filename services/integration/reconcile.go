package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// fetch reads an object from the API server, decoded; nil when it is gone.
func (s *Service) fetch(ctx context.Context, k *kindRunner, ns, name string) (jobframework.Job, error) {
	var u runtime.Object
	var err error
	if src, ok := k.ad.(jobframework.InformerSource); ok {
		u, err = src.Get(ctx, s.kube, ns, name)
	} else {
		u, err = s.dyn.Resource(k.kind.GVR()).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return k.decode(u)
}

// patch sends a merge patch to an object (subresource "" or "status").
// The answer, the whole patched object, is not decoded: nothing reads it
// (the informer brings the change), and decoding it was a tenth of a
// start's cost.
func (s *Service) patch(ctx context.Context, k *kindRunner, ns, name string, patch []byte, subresource ...string) error {
	gvr := k.kind.GVR()
	path := []string{"/apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		path = []string{"/api", gvr.Version}
	}
	path = append(append(path, "namespaces", ns, gvr.Resource, name), subresource...)
	return s.kube.CoreV1().RESTClient().Patch(types.MergePatchType).AbsPath(path...).Body(patch).Do(ctx).Error()
}

// delete deletes an object, only the one with uid; one already gone is
// fine.
func (s *Service) delete(ctx context.Context, k *kindRunner, ns, name, uid string) error {
	uidp := types.UID(uid)
	bg := metav1.DeletePropagationBackground
	err := s.dyn.Resource(k.kind.GVR()).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uidp}, PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// sync brings one object and its workload record in line.
func (s *Service) sync(ctx context.Context, k *kindRunner, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	defer k.locks.lock(key)()
	// Only the replica owning the object's shard acts on it, and only
	// while its lease lasts (renewals extend it).
	ctx, cancel, owned := k.owner.Context(ctx, key)
	defer cancel()
	if !owned {
		return nil
	}
	ref := events.WorkloadRef{Kind: k.kind.Name, Namespace: ns, Name: name}
	rk := workloads.Key(ref)
	rec, err := s.record(ctx, k, key, rk)
	if err != nil {
		return err
	}
	if s.takeUnverified(rk) {
		if err := s.reannounce(ctx, rk, ref, rec); err != nil {
			s.markUnverified(rk)
			return err
		}
	}
	if g, ok := k.ad.(jobframework.Grouper); ok {
		members, err := s.members(k, key)
		if err != nil {
			return err
		}
		if jobframework.IsGroupRecord(rec) || (rec == nil && len(members) > 0) {
			return s.syncGroup(ctx, k, g, ref, rk, rec, members)
		}
	}
	job, err := s.cached(k, key)
	if err != nil {
		return err
	}
	if job != nil && jobframework.GroupOf(k.ad, job.Meta()) != "" {
		job = nil // a member of a group: the group's key covers it
	}
	if rec != nil && (job == nil || jobframework.ObjectUID(rec.Workload.UID) != string(job.Meta().GetUID())) {
		// Deleted, or deleted and created again under the same name. The
		// informer may only be behind (this replica just took the shard
		// from another that saw the object first): ask the API server
		// before forgetting a workload.
		fresh, err := s.fetch(ctx, k, ns, name)
		if err != nil {
			return err
		}
		if fresh != nil && string(fresh.Meta().GetUID()) == jobframework.ObjectUID(rec.Workload.UID) && jobframework.GroupOf(k.ad, fresh.Meta()) == "" {
			if _, labelled := fresh.Meta().GetLabels()[v1beta1.QueueNameLabel]; !labelled {
				// Not deleted: it left its queue (the informer
				// only holds labelled objects).
				return s.leave(ctx, k, rk, rec, fresh)
			}
			return errLookAgain
		}
		if err := s.gone(ctx, rk, rec, nil); err != nil {
			return err
		}
		rec = nil
	}
	if job == nil {
		return nil
	}
	m := job.Meta()
	if finished, ok, msg := job.Finished(); finished {
		if rec != nil {
			return s.gone(ctx, rk, rec, &events.WorkloadFinishedV1{Succeeded: ok, Message: msg})
		}
		return nil
	}
	if m.GetDeletionTimestamp() != nil {
		return nil // going away: its deletion ends the workload
	}
	if _, managed := m.GetLabels()[v1beta1.QueueNameLabel]; !managed {
		return nil
	}
	if ig, ok := job.(jobframework.Ignorer); ok && ig.Ignored() {
		return nil
	}
	if rec != nil && m.GetLabels()[v1beta1.QueueNameLabel] != rec.LocalQueue {
		// Moved to another LocalQueue: its workload ends, and a new one
		// queues in the other.
		if err := s.move(ctx, k, rk, rec, job); err != nil {
			return err
		}
		rec = nil
	}
	if rec != nil {
		if why := s.reshaped(k, rec, job); why != "" {
			// Queued again as it is now: its workload ends, a new one
			// queues.
			if err := s.reshape(ctx, k, rk, rec, job, why); err != nil {
				return err
			}
			rec = nil
		}
	}
	if rec == nil {
		if rec, err = s.submit(ctx, k, rk, job); err != nil || rec == nil {
			return err
		}
	} else if rec, err = s.reprioritize(ctx, rk, rec, job); err != nil {
		return err
	} else if rec, err = s.resize(ctx, rk, rec, job); err != nil {
		return err
	}
	if err := s.reactivate(ctx, rk, job); err != nil {
		return err
	}
	if stopping, err := s.fencedStop(ctx, rk, rec, func(cq, reason, message, admission string) error {
		// The informer may not have seen the start yet (it was applied
		// before the fence moved): stop what the API server holds, or a
		// stale suspended copy would announce a stop that never happened.
		fresh, err := s.fetch(ctx, k, ns, name)
		if err != nil {
			return err
		}
		if fresh == nil || fresh.Meta().GetUID() != m.GetUID() {
			return errLookAgain // deleted: its deletion ends the workload
		}
		if done, _, _ := fresh.Finished(); done {
			return errLookAgain // ended: its end releases the quota
		}
		return s.stop(ctx, k, fresh, rec.Workload, cq, reason, message, admission)
	}); stopping {
		return err
	}
	r, held := s.reservation(rec.Workload)
	if held && r.UID != "" && r.UID != rec.Workload.UID {
		// The reservation of an earlier workload of the same job (it
		// left its queue or moved, and came back), on its way out: not
		// this workload's to start with.
		held = false
	}
	suspended := job.IsSuspended()
	if _, hold := m.GetAnnotations()[jobframework.HoldAnnotation]; hold && suspended {
		// Held back: admitted or not, it does not start. Its annotation
		// says which admission it holds, for whoever releases it.
		want := ""
		if held && r.Startable() && m.GetAnnotations()[jobframework.StoppedAnnotation] != r.Admission() {
			want = r.Admission()
		}
		return s.markHeld(ctx, k, job, want)
	}
	switch {
	case held && suspended && !r.Startable():
		return nil // quota reserved: it waits for its admission checks
	case held && r.DispatchedTo != "":
		// Dispatched to a worker cluster: it runs there, this object
		// stays suspended and mirrors the worker's status.
		return s.startRemote(ctx, job, rec, r)
	case held && suspended && m.GetAnnotations()[jobframework.StoppedAnnotation] != r.Admission():
		return s.start(ctx, k, job, rec, r)
	case held && !suspended:
		if err := s.confirmStart(ctx, rec, r); err != nil {
			return err
		}
		return s.reportReady(ctx, rk, podsReady(job), r)
	case !held && !suspended:
		// Running without quota: suspended by the webhook's absence, or
		// its reservation is gone. Stop it; an object only runs while its
		// workload holds a reservation. The informer may be behind a stop
		// that already happened: look at the object itself first.
		fresh, err := s.fetch(ctx, k, ns, name)
		if err != nil || fresh == nil {
			return err
		}
		if fresh.Meta().GetUID() != m.GetUID() || fresh.IsSuspended() {
			return nil
		}
		if finished, _, _ := fresh.Finished(); finished {
			return nil
		}
		if _, still := s.reservation(rec.Workload); still {
			return nil // admitted meanwhile: the next sync starts it
		}
		return s.stop(ctx, k, fresh, rec.Workload, "", "NoReservation", "no quota is reserved for this workload", "")
	}
	return nil
}

// record reads the workload record rk of the object key of kind k, from
// the cache if it was read under the lease on key's shard held now.
func (s *Service) record(ctx context.Context, k *kindRunner, key, rk string) (*events.WorkloadSubmittedV1, error) {
	holding, held := k.owner.Holding(key)
	v, cached := s.records.get(rk, holding)
	if !held || !cached {
		ticket := s.records.begin(rk)
		rctx, cancel := bus.Bounded(ctx)
		var err error
		v, err = bus.Value(rctx, s.wlRead, rk)
		cancel()
		keep := v
		if !held || err != nil {
			keep = nil // only a record read under a lease is kept
		}
		s.records.fill(rk, ticket, holding, keep)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read workload %s: %w", rk, err)
		}
	}
	var rec events.WorkloadSubmittedV1
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("read workload %s: %w", rk, err)
	}
	return &rec, nil
}

// reprioritize follows a change of the priority class label of a queued
// or admitted object, as Kueue does: the record takes the class's value,
// and admission applies it to the queue's order and to preemption from its
// next cycle. A class that does not exist is reported on the object and
// the old priority stays; creating the class brings the object back here.
func (s *Service) reprioritize(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, job jobframework.Job) (*events.WorkloadSubmittedV1, error) {
	m := job.Meta()
	name := m.GetLabels()[v1beta1.PriorityClassLabel]
	if name == "" || name == rec.PriorityClass || jobframework.ObjectUID(rec.Workload.UID) != string(m.GetUID()) {
		return rec, nil
	}
	s.mu.Lock()
	prio := s.priorities()
	s.mu.Unlock()
	v, err := prio.WorkloadPriorityClass(name)
	if err != nil {
		s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "PriorityClassNotFound", "priority not changed: label %s: %v", v1beta1.PriorityClassLabel, err)
		return rec, nil
	}
	gctx, cancel := bus.Bounded(ctx)
	e, err := s.wlKV.Get(gctx, rk)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read workload %s: %w", rk, err)
	}
	upd := *rec
	upd.PriorityClass, upd.Priority = name, v
	b, err := json.Marshal(upd)
	if err != nil {
		return nil, err
	}
	// Compare-and-set: another replica or a delete in between makes this
	// sync run again on what is stored now.
	if _, err := s.wlKV.Update(ctx, rk, b, e.Revision()); err != nil {
		return nil, fmt.Errorf("change priority of %s: %w", rk, err)
	}
	was := fmt.Sprint(rec.Priority)
	if rec.PriorityClass != "" {
		was += " (" + rec.PriorityClass + ")"
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "PriorityChanged", "priority %d (%s), was %s", v, name, was)
	s.log.Info().Str("workload", rk).Int32("priority", v).Int32("was", rec.Priority).Msg("priority changed")
	return &upd, nil
}

// UserDeactivated is the deactivation of a workload whose job's active
// annotation is "false".
const UserDeactivated = "deactivated: by its user (" + jobframework.ActiveAnnotation + ": false)"

// reactivate takes the job's active annotation, "false" deactivating the
// workload (fence.Deactivate), and otherwise a new value of its
// reactivate annotation: a deactivated workload queues again
// (fence.Reactivate).
func (s *Service) reactivate(ctx context.Context, rk string, job jobframework.Job) error {
	ann := job.Meta().GetAnnotations()
	if ann[jobframework.ActiveAnnotation] == "false" {
		done, err := fence.Deactivate(ctx, s.fenceMoves, rk, UserDeactivated)
		if err != nil {
			return err
		}
		if done {
			s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "Deactivated", "%s: not admitted until reactivated", UserDeactivated)
			s.log.Info().Str("workload", rk).Msg("deactivated by its user")
		}
		return nil
	}
	token := ann[jobframework.ReactivateAnnotation]
	if token == "" {
		return nil
	}
	done, err := fence.Reactivate(ctx, s.fenceMoves, rk, token)
	if err != nil {
		return err
	}
	if done {
		s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "Reactivated", "reactivated (%s=%s): queued again", jobframework.ReactivateAnnotation, token)
		s.log.Info().Str("workload", rk).Str("token", token).Msg("reactivated")
	}
	return nil
}

// submit writes the workload record and announces it.
func (s *Service) submit(ctx context.Context, k *kindRunner, rk string, job jobframework.Job) (*events.WorkloadSubmittedV1, error) {
	s.mu.Lock()
	prio := s.priorities()
	s.mu.Unlock()
	st, err := fence.Get(ctx, s.fenceKV, rk)
	if err != nil {
		return nil, err
	}
	incarnation := 0
	if reopenable(st, string(job.Meta().GetUID())) {
		// Its earlier workload ended when it left its queue, or moved:
		// it is queued again, as a new workload.
		if job, err = s.reopen(ctx, k, rk, job.Meta().GetNamespace(), job.Meta().GetName(), st); err != nil || job == nil {
			return nil, err
		}
		incarnation = jobframework.IncarnationOf(st.UID) + 1
		if st, err = fence.Get(ctx, s.fenceKV, rk); err != nil {
			return nil, err
		}
	}
	// WorkloadOf changes its argument (Pristine): give it a copy.
	view, err := k.decode(job.Object())
	if err != nil {
		return nil, err
	}
	w, err := jobframework.WorkloadOf(k.kind.Name, view, prio, s.workloadOptions()...)
	if errors.Is(err, jobframework.ErrNotYet) {
		return nil, err // tried again, with backoff
	}
	if err == nil {
		w.UID = jobframework.WorkloadUID(w.UID, incarnation)
		var rec *events.WorkloadSubmittedV1
		if rec, err = s.storeFenced(ctx, k, rk, w, st); !errors.Is(err, jobframework.ErrInvalidJob) {
			return rec, err
		}
	}
	// Bad input is reported on the object and not retried: a change to
	// the object or the configuration brings it back.
	s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "InvalidWorkload", "not queued: %v", err)
	s.log.Warn().Err(err).Str("workload", rk).Msg("not queued")
	return nil, nil
}

// reopenable reports whether a fence says the job of uid had a workload
// that ended while the job lives on: it left its queue or moved to
// another (see leave and move).
func reopenable(st fence.State, uid string) bool {
	return st.Phase == fence.Finished && jobframework.ObjectUID(st.UID) == uid && st.End != nil && leftQueue(*st.End)
}

// leftQueue: an end that was the job leaving its queue, not the job's.
func leftQueue(e fence.End) bool {
	return e.Reason == ReasonQueueNameRemoved || e.Reason == ReasonQueueNameChanged || e.Reason == ReasonPodSetsChanged
}

// reopen clears the fence of a workload that ended when its job left its
// queue, so that the job queues again. The informer may be behind a
// removal of the label, so the object is read from the API server: only
// one that is labelled, suspended and unfinished now is queued again. It
// returns that object, or nil when there is none to queue.
func (s *Service) reopen(ctx context.Context, k *kindRunner, rk, ns, name string, st fence.State) (jobframework.Job, error) {
	fresh, err := s.fetch(ctx, k, ns, name)
	if err != nil || fresh == nil {
		return nil, err
	}
	m := fresh.Meta()
	if string(m.GetUID()) != jobframework.ObjectUID(st.UID) || m.GetLabels()[v1beta1.QueueNameLabel] == "" || !fresh.IsSuspended() || m.GetDeletionTimestamp() != nil {
		return nil, nil
	}
	if done, _, _ := fresh.Finished(); done {
		return nil, nil
	}
	// The end is told before the fence that keeps it for a successor
	// goes.
	ref := events.WorkloadRef{Kind: k.kind.Name, Namespace: ns, Name: name, UID: st.UID}
	ev, id := endEvent(ref, st.End)
	if err := s.ensureAnnounced(ctx, ev, id); err != nil {
		return nil, err
	}
	ended, err := fence.Reopen(ctx, s.fenceMoves, rk, st.UID, leftQueue)
	if err != nil {
		return nil, err
	}
	if ended == nil {
		return nil, errLookAgain // the fence moved meanwhile
	}
	s.log.Info().Str("workload", rk).Str("uid", st.UID).Msg("queued again after leaving its queue")
	return fresh, nil
}

// store writes a workload's record and announces it; nil, nil for an
// object that ended already.
func (s *Service) store(ctx context.Context, k *kindRunner, rk string, w jobframework.Workload) (*events.WorkloadSubmittedV1, error) {
	st, err := fence.Get(ctx, s.fenceKV, rk)
	if err != nil {
		return nil, err
	}
	return s.storeFenced(ctx, k, rk, w, st)
}

// storeFenced is store with the workload's fence read already.
func (s *Service) storeFenced(ctx context.Context, k *kindRunner, rk string, w jobframework.Workload, st fence.State) (*events.WorkloadSubmittedV1, error) {
	// An object that ended is never queued again, even when this
	// replica's informer is behind the replica that saw it end (nor is
	// one that left its queue, unless submit found it back in one).
	if st.Phase == fence.Finished && jobframework.ObjectUID(st.UID) == jobframework.ObjectUID(w.UID) {
		return nil, nil
	}
	rec := toEvent(k.kind.Name, w)
	// A record the stream would refuse is refused here, with the reason,
	// rather than written and then retried forever.
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("workload record: %v: %w", err, jobframework.ErrInvalidJob)
	}
	ctx, span := k.tracer.Start(ctx, rec.Workload, tracing.SpanSubmit, trace.WithAttributes(
		tracing.AttrLocalQueue.String(rec.LocalQueue), tracing.AttrPriority.Int64(int64(rec.Priority))))
	err := s.writeRecord(ctx, rk, rec)
	endSpan(span, err)
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// writeRecord writes a new workload's record and announces it.
func (s *Service) writeRecord(ctx context.Context, rk string, rec events.WorkloadSubmittedV1) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if len(b) > maxRecordBytes {
		return fmt.Errorf("its workload record is %d bytes, more than the %d a record may have (its pod sets' node selectors, tolerations or requests are too large): %w",
			len(b), maxRecordBytes, jobframework.ErrInvalidJob)
	}
	if _, err := s.wlKV.Create(ctx, rk, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("write workload %s: %w", rk, err)
	}
	return s.pub.Publish(ctx, rec, events.ID(rec.Type(), rec.Workload.UID))
}

func toEvent(kind string, w jobframework.Workload) events.WorkloadSubmittedV1 {
	ev := events.WorkloadSubmittedV1{
		Workload:      events.WorkloadRef{Kind: kind, Namespace: w.Namespace, Name: w.Name, UID: w.UID},
		LocalQueue:    w.LocalQueue,
		Priority:      w.Priority,
		PriorityClass: w.PriorityClass,
		CreationTime:  w.CreationTime,
		// Kueue's maximumExecutionTimeSeconds.
		MaximumExecutionTimeSeconds: w.MaxExecutionSeconds,
		Elastic:                     w.Elastic,
	}
	for _, ps := range w.PodSets {
		p := events.PodSetV1{Name: ps.Name, Count: ps.Count, MinCount: ps.MinCount, Requests: map[string]string{},
			NodeSelector: ps.NodeSelector, Tolerations: ps.Tolerations, Topology: ps.Topology}
		for r, q := range ps.Requests {
			p.Requests[string(r)] = q.String()
		}
		ev.PodSets = append(ev.PodSets, p)
	}
	return ev
}

// leave ends the workload of an object whose queue label was removed. A
// suspended object's workload ends at once, as if the object were
// deleted (reservation, fence and record released, one deleted event),
// and from then on the object is not Sluice's. One that still runs (the
// webhook refuses that change, so only while it was not asked) is
// stopped first: it runs on its workload's quota.
func (s *Service) leave(ctx context.Context, k *kindRunner, rk string, rec *events.WorkloadSubmittedV1, job jobframework.Job) error {
	if finished, ok, msg := job.Finished(); finished {
		return s.gone(ctx, rk, rec, &events.WorkloadFinishedV1{Succeeded: ok, Message: msg})
	}
	if !job.IsSuspended() {
		return s.stopFirst(ctx, k, job, rec, ReasonQueueNameRemoved,
			fmt.Sprintf("label %s removed while running: stopped, and no longer queued", v1beta1.QueueNameLabel))
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "LeftQueue",
		"label %s removed: no longer queued in LocalQueue %s; Sluice does not manage this job any more", v1beta1.QueueNameLabel, rec.LocalQueue)
	s.log.Info().Str("workload", rk).Str("queue", rec.LocalQueue).Msg("left its queue: workload ended")
	return s.end(ctx, rk, rec, &fence.End{Deleted: true, Reason: ReasonQueueNameRemoved})
}

// move ends the workload of an object whose queue label now names another
// LocalQueue; the caller then queues a new workload there (submit). A
// suspended object moves at once, keeping nothing of its place or any
// reservation in the old queue, as in Kueue. One that still runs (the
// webhook refuses that change) is stopped first.
func (s *Service) move(ctx context.Context, k *kindRunner, rk string, rec *events.WorkloadSubmittedV1, job jobframework.Job) error {
	to := job.Meta().GetLabels()[v1beta1.QueueNameLabel]
	if !job.IsSuspended() {
		return s.stopFirst(ctx, k, job, rec, ReasonQueueNameChanged,
			fmt.Sprintf("label %s changed from %s to %s while running: stopped, to queue in %s", v1beta1.QueueNameLabel, rec.LocalQueue, to, to))
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "QueueChanged", "moved from LocalQueue %s to %s", rec.LocalQueue, to)
	s.log.Info().Str("workload", rk).Str("queue", to).Str("was", rec.LocalQueue).Msg("moved to another queue: workload ended, a new one queues")
	return s.end(ctx, rk, rec, &fence.End{Deleted: true, Reason: ReasonQueueNameChanged})
}

// gone announces an object that finished or disappeared and deletes its
// record; quota accounting then releases its reservation.
func (s *Service) gone(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, fin *events.WorkloadFinishedV1) error {
	end := &fence.End{Deleted: fin == nil}
	if fin != nil {
		end.Succeeded, end.Message = fin.Succeeded, fin.Message
	}
	return s.end(ctx, rk, rec, end)
}

// end ends a workload: the fence, then the record, then the announcement.
func (s *Service) end(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, end *fence.End) error {
	r, _ := s.reservation(rec.Workload)
	// The fence first, so no preemption of the admission is announced
	// after the end; then the record: whoever learns of the end from the
	// event then finds the record gone, and never queues the workload
	// again.
	// The fence keeps the announcement too, for whoever takes over if
	// this replica stops before making it.
	end.ClusterQueue = r.ClusterQueue
	if end.ClusterQueue == "" && !end.Deleted {
		// Its reservation was released before the job ended (it was
		// stopped as its pods completed): the end names the ClusterQueue
		// it last started in, which the fence remembers.
		if st, err := fence.Get(ctx, s.fenceKV, rk); err == nil {
			end.ClusterQueue = st.ClusterQueue
		}
	}
	if err := fence.Finish(ctx, s.fenceMoves, rk, r.Admission(), rec.Workload.UID, end); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.stopsAnnounced, rk)
	s.mu.Unlock()
	if err := bus.Remove(ctx, s.wlKV, rk, 0); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete workload %s: %w", rk, err)
	}
	ev, id := endEvent(rec.Workload, end)
	return s.pub.Publish(ctx, ev, id)
}

// endEvent is the announcement of a workload's end and its id.
func endEvent(w events.WorkloadRef, end *fence.End) (events.Event, string) {
	if end.Deleted {
		ev := events.WorkloadDeletedV1{Workload: w, Reason: end.Reason}
		return ev, events.ID(ev.Type(), w.UID)
	}
	ev := events.WorkloadFinishedV1{Workload: w, ClusterQueue: end.ClusterQueue, Succeeded: end.Succeeded, Message: end.Message}
	return ev, events.ID(ev.Type(), w.UID)
}

// reannounce makes sure what a replica stored about a workload was also
// announced, for a workload this replica just took over (at its start, or
// from a replica that stopped between storing and announcing): the record
// (submitted) and, for an ended workload, its end (kept in its fence). An
// announcement is looked up by its id as the last one on its subject;
// publishing it again keeps that id.
func (s *Service) reannounce(ctx context.Context, rk string, ref events.WorkloadRef, rec *events.WorkloadSubmittedV1) error {
	if rec != nil {
		if err := s.ensureAnnounced(ctx, *rec, events.ID(rec.Type(), rec.Workload.UID)); err != nil {
			return err
		}
	}
	st := s.fenceOf(rk)
	if st.Phase != fence.Finished || st.End == nil || st.UID == "" {
		return nil
	}
	ref.UID = st.UID
	ev, id := endEvent(ref, st.End)
	return s.ensureAnnounced(ctx, ev, id)
}

func (s *Service) ensureAnnounced(ctx context.Context, ev events.Event, id string) error {
	lctx, cancel := bus.Bounded(ctx)
	defer cancel()
	msg, err := s.events.GetLastMsgForSubject(lctx, ev.NATSSubject())
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fmt.Errorf("read the last %s: %w", ev.Type(), err)
	case msg.Header.Get(jetstream.MsgIDHeader) == id:
		return nil
	}
	s.log.Info().Str("event_type", ev.Type()).Str("subject", ev.NATSSubject()).Msg("announcing what a stopped replica stored but did not announce")
	return s.pub.Publish(ctx, ev, id)
}

// handlePending reports on the object a changed pending reason, or the
// reservation of its quota while it waits for its admission checks
// (Kueue's QuotaReserved).
func (s *Service) handlePending(_ context.Context, k *kindRunner, env events.Envelope) error {
	var (
		w              events.WorkloadRef
		reason, detail string
		kind           = corev1.EventTypeNormal
	)
	switch env.Type {
	case events.TypeWorkloadReservedV1:
		var e events.WorkloadReservedV1
		if err := env.As(&e); err != nil {
			return bus.Poison(err)
		}
		w, reason = e.Workload, "QuotaReserved"
		detail = fmt.Sprintf("quota reserved in ClusterQueue %s; waiting for admission checks %s", e.ClusterQueue, strings.Join(e.Checks, ", "))
	default:
		var e events.WorkloadPendingV1
		if err := env.As(&e); err != nil {
			return bus.Poison(err)
		}
		w, reason, detail = e.Workload, "Pending", e.Reason
		if e.Invalid {
			// Never admitted as written: the tenant has to change it.
			kind, reason = corev1.EventTypeWarning, "InvalidWorkload"
		}
	}
	if strings.HasPrefix(w.UID, jobframework.GroupUIDPrefix) {
		// A group's news is told on each of its members.
		members, err := s.members(k, w.String())
		if err != nil {
			return err
		}
		for _, m := range members {
			s.recorder.Event(m.Object(), kind, reason, detail)
		}
		return nil
	}
	ref := &corev1.ObjectReference{Kind: k.kind.GVK.Kind, APIVersion: k.kind.GVK.GroupVersion().String(),
		Namespace: w.Namespace, Name: w.Name, UID: types.UID(jobframework.ObjectUID(w.UID))}
	s.recorder.Event(ref, kind, reason, detail)
	return nil
}
