package integration

import (
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/ledger"
)

// indexGroups adds the group index to a Grouper's informer.
func indexGroups(ad jobframework.Adapter, inf cache.SharedIndexInformer) error {
	if _, ok := ad.(jobframework.Grouper); !ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{jobframework.GroupIndex: func(obj any) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil
		}
		if g := jobframework.GroupOf(ad, m); g != "" {
			return []string{m.GetNamespace() + "/" + g}, nil
		}
		return nil, nil
	}})
}

// members decodes a group's objects as the informer holds them, in the
// order they were created (then by name), leaving out those another
// integration owns.
func (s *Service) members(k *kindRunner, key string) ([]jobframework.Job, error) {
	objs, err := k.inf.GetIndexer().ByIndex(jobframework.GroupIndex, key)
	if err != nil {
		return nil, err
	}
	return s.decodeMembers(k, objs)
}

func (s *Service) decodeMembers(k *kindRunner, objs []any) ([]jobframework.Job, error) {
	out := make([]jobframework.Job, 0, len(objs))
	for _, o := range objs {
		ro, ok := o.(runtime.Object)
		if !ok {
			return nil, fmt.Errorf("informer of %s holds a %T", k.kind.Resource, o)
		}
		j, err := k.decode(ro)
		if err != nil {
			return nil, err
		}
		if ig, ok := j.(jobframework.Ignorer); ok && ig.Ignored() {
			continue
		}
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool {
		ma, mb := out[a].Meta(), out[b].Meta()
		ta, tb := ma.GetCreationTimestamp(), mb.GetCreationTimestamp()
		if !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		return ma.GetName() < mb.GetName()
	})
	return out, nil
}

// listMembers asks the API server for a group's members: the informer may
// be behind.
func (s *Service) listMembers(ctx context.Context, k *kindRunner, g jobframework.Grouper, ns, group string) ([]jobframework.Job, error) {
	sel := labels.Set{g.GroupLabel(): group}.AsSelector().String()
	l, err := s.dyn.Resource(k.kind.GVR()).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list group %s/%s: %w", ns, group, err)
	}
	objs := make([]any, 0, len(l.Items))
	for i := range l.Items {
		objs = append(objs, &l.Items[i])
	}
	return s.decodeMembers(k, objs)
}

// syncGroup brings a group and its workload record in line: the group's
// counterpart of sync, with the same fences.
func (s *Service) syncGroup(ctx context.Context, k *kindRunner, g jobframework.Grouper, ref events.WorkloadRef, rk string, rec *events.WorkloadSubmittedV1, all []jobframework.Job) error {
	if rec != nil && len(all) == 0 {
		fresh, err := s.listMembers(ctx, k, g, ref.Namespace, ref.Name)
		if err != nil {
			return err
		}
		if len(fresh) > 0 {
			return errLookAgain
		}
		return s.gone(ctx, rk, rec, nil)
	}
	if len(all) == 0 {
		return nil
	}
	if finished, ok, msg := jobframework.GroupFinished(all); finished && !jobframework.ModeOf(k.ad, all).Serving {
		if rec != nil {
			return s.gone(ctx, rk, rec, &events.WorkloadFinishedV1{Succeeded: ok, Message: msg})
		}
		return nil
	}
	live := make([]jobframework.Job, 0, len(all))
	for _, m := range all {
		if m.Meta().GetDeletionTimestamp() == nil {
			live = append(live, m)
		}
	}
	if len(live) == 0 {
		return nil // going away: its deletion ends the workload
	}
	if rec == nil {
		var err error
		if rec, err = s.submitGroup(ctx, k, rk, ref, live); err != nil || rec == nil {
			return err
		}
	}
	if stopping, err := s.fencedStop(ctx, rk, rec, func(cq, reason, message, admission string) error {
		// Members the informer has not seen yet are stopped too.
		fresh, err := s.listMembers(ctx, k, g, ref.Namespace, ref.Name)
		if err != nil {
			return err
		}
		return s.stopGroup(ctx, k, fresh, rec.Workload, cq, reason, message, admission)
	}); stopping {
		return err
	}
	r, held := s.reservation(rec.Workload)
	var gated []jobframework.Job
	running, holding := false, false
	for _, m := range live {
		if m.IsSuspended() {
			gated = append(gated, m)
			_, hold := m.Meta().GetAnnotations()[jobframework.HoldAnnotation]
			holding = holding || hold
		} else if done, _, _ := m.Finished(); !done {
			running = true
		}
	}
	switch {
	case holding:
		// Held back (a worker cluster's copy, until its manager picks
		// this cluster): admitted or not, no member starts. Each gated
		// member says which admission the group holds.
		want := ""
		if held && r.Startable() {
			want = r.Admission()
		}
		for _, m := range gated {
			if err := s.markHeld(ctx, k, m, want); err != nil {
				return err
			}
		}
		return nil
	case held && len(gated) > 0 && !r.Startable():
		return nil // quota reserved: it waits for its admission checks
	case held && r.DispatchedTo != "":
		// Dispatched to a worker cluster: its members run there as
		// copies, these stay gated and mirror theirs.
		return s.startRemote(ctx, live[0], rec, r)
	case held && len(gated) > 0:
		return s.startGroup(ctx, k, rec, r, gated, live)
	case held:
		if err := s.confirmStart(ctx, rec, r); err != nil {
			return err
		}
		// A group's pods are ready when every member's is (or ended).
		ready := true
		for _, m := range live {
			if done, _, _ := m.Finished(); !done && !podsReady(m) {
				ready = false
			}
		}
		return s.reportReady(ctx, rk, ready, r)
	case running:
		// Members run without quota (created while the webhook was
		// away). The informer may be behind a stop: ask the API server.
		fresh, err := s.listMembers(ctx, k, g, ref.Namespace, ref.Name)
		if err != nil {
			return err
		}
		var stray []jobframework.Job
		for _, m := range fresh {
			if done, _, _ := m.Finished(); !done && !m.IsSuspended() && m.Meta().GetDeletionTimestamp() == nil {
				stray = append(stray, m)
			}
		}
		if _, still := s.reservation(rec.Workload); still || len(stray) == 0 {
			return nil
		}
		return s.stopGroup(ctx, k, stray, rec.Workload, "", "NoReservation", "no quota is reserved for this group", "")
	}
	return nil
}

// submitGroup queues a complete group: nil, nil while members are
// missing, or when the group is invalid (reported on its members).
func (s *Service) submitGroup(ctx context.Context, k *kindRunner, rk string, ref events.WorkloadRef, live []jobframework.Job) (*events.WorkloadSubmittedV1, error) {
	s.mu.Lock()
	prio := s.priorities()
	s.mu.Unlock()
	w, complete, err := jobframework.GroupWorkload(k.ad, ref.Namespace, ref.Name, live, prio, s.workloadOptions()...)
	if err == nil && complete {
		var rec *events.WorkloadSubmittedV1
		if rec, err = s.store(ctx, k, rk, w); !errors.Is(err, jobframework.ErrInvalidJob) {
			return rec, err
		}
	}
	if err != nil {
		for _, m := range live {
			s.recorder.Eventf(m.Object(), corev1.EventTypeWarning, "InvalidWorkload", "group %s not queued: %v", ref.Name, err)
		}
		s.log.Warn().Err(err).Str("workload", rk).Msg("group not queued")
		return nil, nil
	}
	return nil, nil // a partial group is never queued
}

// roleOf returns the pod set of the group's workload a member belongs to.
func roleOf(k *kindRunner, m jobframework.Job) (string, error) {
	role, _, err := jobframework.MemberRole(k.decode, m)
	return role, err
}

// startGroup applies a group's reservation to its gated members, one API
// write each, under the same fences as start. Members created after the
// group started (replacements) are started under the same admission.
func (s *Service) startGroup(ctx context.Context, k *kindRunner, rec *events.WorkloadSubmittedV1, r ledger.Reservation, gated, live []jobframework.Job) (err error) {
	assigned, err := assignmentOf(r)
	if err != nil {
		for _, m := range gated {
			s.recorder.Eventf(m.Object(), corev1.EventTypeWarning, "AdmissionFailed", "cannot apply admission: %v", err)
		}
		return nil
	}
	byRole := map[string]jobframework.PodSetAssignment{}
	placements := map[string]*engine.TopologyAssignment{}
	for i, psa := range assigned.PodSets {
		byRole[psa.Name] = psa
		if i < len(r.PodSets) && r.PodSets[i].Topology != nil {
			placements[psa.Name] = r.PodSets[i].Topology
		}
	}
	// Members of a role placed on a topology-aware flavor each take a
	// domain with room: those already started hold theirs.
	placed := map[string][]map[string]string{}
	if len(placements) > 0 {
		for _, m := range live {
			if m.IsSuspended() {
				continue
			}
			if done, _, _ := m.Finished(); done {
				continue
			}
			role, err := roleOf(k, m)
			if err != nil {
				return err
			}
			if sets, err := m.PodSets(); err == nil && len(sets) == 1 {
				placed[role] = append(placed[role], sets[0].Spec.NodeSelector)
			}
		}
	}
	s.mu.Lock()
	flavors := s.configLocked().Flavors
	s.mu.Unlock()
	type write struct {
		job   jobframework.Job
		patch []byte
	}
	var writes []write
	for _, m := range gated {
		meta := m.Meta()
		role, err := roleOf(k, m)
		if err != nil {
			return err
		}
		psa, ok := byRole[role]
		if !ok {
			s.recorder.Eventf(m.Object(), corev1.EventTypeWarning, "AdmissionFailed",
				"asks for what no pod set of group %s's admission has; it stays gated", rec.Workload.Name)
			continue
		}
		admitted, err := k.decode(m.Object())
		if err != nil {
			return err
		}
		sets, err := admitted.PodSets()
		if err != nil {
			return err
		}
		a := jobframework.Assignment{ClusterQueue: r.ClusterQueue, PodSets: []jobframework.PodSetAssignment{{Name: sets[0].Name, Count: sets[0].Count, Flavors: psa.Flavors, Update: psa.Update}}}
		if t := placements[role]; t != nil {
			picked := pickDomains(t, placed[role], 1)
			if len(picked) == 0 {
				s.recorder.Eventf(m.Object(), corev1.EventTypeWarning, "AdmissionFailed", "every domain of pod set %s's placement is taken; it stays gated", role)
				continue
			}
			placed[role] = append(placed[role], picked[0])
			u, err := withTopology(psa.Update, k.kind.Name, "", role, r.Admission(), t, true, picked[0])
			if err != nil {
				return err
			}
			a.PodSets[0].Update = u
		}
		if err := jobframework.Admit(admitted, a, flavors); err != nil {
			s.recorder.Eventf(m.Object(), corev1.EventTypeWarning, "AdmissionFailed", "cannot apply admission: %v", err)
			continue
		}
		p, err := jobframework.MergePatch(m.Object(), admitted.Object(), string(meta.GetUID()), meta.GetResourceVersion())
		if err != nil {
			return err
		}
		writes = append(writes, write{m, p})
	}
	if len(writes) == 0 {
		return nil
	}
	ctx, span := s.startSpan(ctx, rec, r)
	defer func() { endSpan(span, err) }()
	startedBefore, err := s.fencedStart(ctx, rec, r, func() error {
		for _, w := range writes {
			m := w.job.Meta()
			if err := s.patch(ctx, k, m.GetNamespace(), m.GetName(), w.patch); err != nil {
				return fmt.Errorf("resume %s: %w", m.GetName(), err)
			}
			s.recorder.Eventf(w.job.Object(), corev1.EventTypeNormal, "Admitted", "admitted with group %s by ClusterQueue %s: %s", rec.Workload.Name, r.ClusterQueue, describe(r))
		}
		return nil
	})
	if err != nil || startedBefore {
		return err // a failure, or replacements of a group already announced
	}
	return s.announceStart(ctx, rec, r)
}

// stopGroup stops a group by deleting its members (a member cannot be held
// back once started, and the group runs all together or not at all), then
// announces the stop.
func (s *Service) stopGroup(ctx context.Context, k *kindRunner, members []jobframework.Job, ref events.WorkloadRef, cq, reason, message, admission string) error {
	r, held := s.reservation(ref)
	if admission == "" && held {
		admission = r.Admission()
	}
	if cq == "" {
		cq = r.ClusterQueue
	}
	for _, m := range members {
		meta := m.Meta()
		if err := s.delete(ctx, k, meta.GetNamespace(), meta.GetName(), string(meta.GetUID())); err != nil {
			return err
		}
		s.recorder.Event(m.Object(), corev1.EventTypeNormal, reason, message+" (group "+ref.Name+" deleted: it runs all together or not at all)")
	}
	return s.announceStop(ctx, ref, cq, reason, admission)
}
