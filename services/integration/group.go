package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/ledger"
)

// Groups (see Grouper): the members of a group share one work-queue key,
// namespace/group, which is also the name of the group's workload. A lone
// object and a group of the same name in one namespace would share the
// workload's name: the group goes first, and the lone object waits until
// the group's workload ends.

const (
	// groupIndex indexes a Grouper's informer by namespace/group.
	groupIndex = "sluice-group"
	// groupUIDPrefix marks the UID of a group's workload, which is made of
	// its first member's. It tells a group's record from a lone object's
	// of the same name.
	groupUIDPrefix = "group-"
)

// groupOf returns the group an object of a Grouper belongs to, "" for a
// lone object or when the adapter has no groups.
func groupOf(ad Adapter, m metav1.Object) string {
	g, ok := ad.(Grouper)
	if !ok {
		return ""
	}
	return m.GetLabels()[g.GroupLabel()]
}

// workKey is the work-queue key of an object: namespace/name, or
// namespace/group for a member of a group.
func workKey(ad Adapter, obj any) (string, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", false
	}
	if g := groupOf(ad, m); g != "" {
		return m.GetNamespace() + "/" + g, true
	}
	return m.GetNamespace() + "/" + m.GetName(), true
}

// indexGroups adds the group index to a Grouper's informer.
func indexGroups(ad Adapter, inf cache.SharedIndexInformer) error {
	if _, ok := ad.(Grouper); !ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{groupIndex: func(obj any) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil
		}
		if g := groupOf(ad, m); g != "" {
			return []string{m.GetNamespace() + "/" + g}, nil
		}
		return nil, nil
	}})
}

// members decodes a group's objects as the informer holds them, in the
// order they were created (then by name), leaving out those another
// integration owns.
func (s *Service) members(k *kindRunner, key string) ([]Job, error) {
	objs, err := k.inf.GetIndexer().ByIndex(groupIndex, key)
	if err != nil {
		return nil, err
	}
	return s.decodeMembers(k, objs)
}

func (s *Service) decodeMembers(k *kindRunner, objs []any) ([]Job, error) {
	out := make([]Job, 0, len(objs))
	for _, o := range objs {
		ro, ok := o.(runtime.Object)
		if !ok {
			return nil, fmt.Errorf("informer of %s holds a %T", k.kind.Resource, o)
		}
		j, err := k.decode(ro)
		if err != nil {
			return nil, err
		}
		if ig, ok := j.(Ignorer); ok && ig.Ignored() {
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
func (s *Service) listMembers(ctx context.Context, k *kindRunner, g Grouper, ns, group string) ([]Job, error) {
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

// isGroupRecord reports whether a workload record is a group's.
func isGroupRecord(rec *events.WorkloadSubmittedV1) bool {
	return rec != nil && strings.HasPrefix(rec.Workload.UID, groupUIDPrefix)
}

// syncGroup brings a group and its workload record in line: the group's
// counterpart of sync, with the same fences.
func (s *Service) syncGroup(ctx context.Context, k *kindRunner, g Grouper, ref events.WorkloadRef, rk string, rec *events.WorkloadSubmittedV1, all []Job) error {
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
	if finished, ok, msg := groupFinished(all); finished {
		if rec != nil {
			return s.gone(ctx, rk, rec, &events.WorkloadFinishedV1{Succeeded: ok, Message: msg})
		}
		return nil
	}
	live := make([]Job, 0, len(all))
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
	var gated []Job
	running := false
	for _, m := range live {
		if m.IsSuspended() {
			gated = append(gated, m)
		} else if done, _, _ := m.Finished(); !done {
			running = true
		}
	}
	switch {
	case held && len(gated) > 0 && !r.Startable():
		return nil // quota reserved: it waits for its admission checks
	case held && len(gated) > 0:
		return s.startGroup(ctx, k, rec, r, gated)
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
		var stray []Job
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

// groupFinished reports whether every member ended, whether all of them
// succeeded, and the first failure's message.
func groupFinished(all []Job) (finished, succeeded bool, message string) {
	succeeded = true
	for _, m := range all {
		done, ok, msg := m.Finished()
		if !done {
			return false, false, ""
		}
		if !ok && succeeded {
			succeeded, message = false, m.Meta().GetName()+": "+msg
		}
	}
	if succeeded {
		message = fmt.Sprintf("all %d members succeeded", len(all))
	}
	return true, succeeded, message
}

// submitGroup queues a complete group: nil, nil while members are
// missing, or when the group is invalid (reported on its members).
func (s *Service) submitGroup(ctx context.Context, k *kindRunner, rk string, ref events.WorkloadRef, live []Job) (*events.WorkloadSubmittedV1, error) {
	s.mu.Lock()
	prio := s.priorities()
	s.mu.Unlock()
	w, complete, err := GroupWorkload(k.ad, ref.Namespace, ref.Name, live, prio, s.workloadOptions()...)
	if err == nil && complete {
		var rec *events.WorkloadSubmittedV1
		if rec, err = s.store(ctx, k, rk, w); !errors.Is(err, ErrInvalidJob) {
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

// GroupWorkload builds the workload of the group ns/group of a Grouper's
// objects from its members that are not being deleted, oldest first;
// complete is false while fewer of them exist than the group's total. An
// error names the member and the field that keep the group from being
// queued.
func GroupWorkload(ad Adapter, ns, group string, live []Job, prio PriorityResolver, opts ...WorkloadOption) (w Workload, complete bool, err error) {
	g, ok := ad.(Grouper)
	if !ok || len(live) == 0 {
		return Workload{}, false, fmt.Errorf("group %s/%s: no members of a grouping kind: %w", ns, group, ErrInvalidGroup)
	}
	kind := ad.Kind().Name
	first := live[0].Meta()
	var total int32
	queue := first.GetLabels()[v1beta1.QueueNameLabel]
	// First what the members' labels say, which is cheap: while the group
	// is incomplete nothing more is read, so the syncs of a group whose
	// members arrive one by one cost little each.
	for i, m := range live {
		meta := m.Meta()
		_, t, err := g.GroupOf(meta)
		if err != nil {
			return Workload{}, false, fmt.Errorf("%s: %w", meta.GetName(), err)
		}
		if i == 0 {
			total = t // the oldest member's count is the group's
		}
		if t != total {
			return Workload{}, false, fmt.Errorf("%s says the group has %d members, %s says %d: %w", meta.GetName(), t, first.GetName(), total, ErrInvalidGroup)
		}
		if q := meta.GetLabels()[v1beta1.QueueNameLabel]; q != queue {
			return Workload{}, false, fmt.Errorf("%s is queued in %q, %s in %q: %w", meta.GetName(), q, first.GetName(), queue, ErrInvalidGroup)
		}
	}
	if total > MaxGroupSize {
		return Workload{}, false, fmt.Errorf("%s says the group has %d members, more than the %d a group may have: %w", first.GetName(), total, MaxGroupSize, ErrInvalidGroup)
	}
	if n := int32(len(live)); n > total {
		return Workload{}, false, fmt.Errorf("%d members exist, more than the group's total of %d: %w", n, total, ErrInvalidGroup)
	} else if n < total {
		return Workload{}, false, nil
	}
	roles := map[string]*WorkloadPodSet{}
	for i, m := range live {
		meta := m.Meta()
		// A copy: WorkloadOf changes its argument.
		view, err := ad.Decode(m.Object())
		if err != nil {
			return Workload{}, false, err
		}
		mw, err := WorkloadOf(kind, view, prio, opts...)
		if err != nil {
			return Workload{}, false, err
		}
		if len(mw.PodSets) != 1 {
			return Workload{}, false, fmt.Errorf("%s has %d pod sets, a group member must have one: %w", meta.GetName(), len(mw.PodSets), ErrInvalidGroup)
		}
		if i == 0 {
			w = Workload{Namespace: ns, Name: group, UID: groupUIDPrefix + mw.UID, LocalQueue: queue,
				PriorityClass: mw.PriorityClass, Priority: mw.Priority, CreationTime: mw.CreationTime,
				MaxExecutionSeconds: mw.MaxExecutionSeconds}
		}
		ps := mw.PodSets[0]
		name := roleName(ps)
		if r := roles[name]; r != nil {
			r.Count++
			r.MinCount++
			continue
		}
		ps.Name, ps.Count, ps.MinCount = name, 1, 1
		roles[name] = &ps
		if len(roles) > MaxPodSets {
			return Workload{}, false, fmt.Errorf("its members have more than %d roles (pod shapes), the most pod sets a workload may have: %w", MaxPodSets, ErrInvalidGroup)
		}
	}
	names := make([]string, 0, len(roles))
	for n := range roles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w.PodSets = append(w.PodSets, *roles[n])
	}
	return w, true, nil
}

// GroupTemplates returns, by pod set (role) of a pod group's workload, the
// pod set of the first member in it, as its user wrote it: what a pod of
// that role looks like.
func GroupTemplates(ad Adapter, members []Job) (map[string]PodSet, error) {
	out := map[string]PodSet{}
	for _, m := range members {
		role, ps, err := memberRole(ad.Decode, m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Meta().GetName(), err)
		}
		if out[role].Spec == nil {
			out[role] = ps
		}
	}
	return out, nil
}

// roleName names the pod set of the members that ask for what ps asks
// for: the same requests, node selector and tolerations.
func roleName(ps WorkloadPodSet) string {
	reqs := make(map[string]string, len(ps.Requests))
	for r, q := range ps.Requests {
		reqs[string(r)] = q.String()
	}
	b, _ := json.Marshal(struct {
		Requests     map[string]string   `json:"r"`
		NodeSelector map[string]string   `json:"n"`
		Tolerations  []corev1.Toleration `json:"t"`
	}{reqs, ps.NodeSelector, ps.Tolerations})
	h := fnv.New32a()
	h.Write(b)
	return fmt.Sprintf("role-%08x", h.Sum32())
}

// roleOf returns the pod set of the group's workload a member belongs to.
func roleOf(k *kindRunner, m Job) (string, error) {
	role, _, err := memberRole(k.decode, m)
	return role, err
}

// memberRole returns a group member's role and its one pod set, as its
// user wrote it (a copy, decoded with decode).
func memberRole(decode func(runtime.Object) (Job, error), m Job) (string, PodSet, error) {
	view, err := decode(m.Object())
	if err != nil {
		return "", PodSet{}, err
	}
	if err := Pristine(view); err != nil {
		return "", PodSet{}, err
	}
	sets, err := view.PodSets()
	if err != nil {
		return "", PodSet{}, err
	}
	if len(sets) != 1 {
		return "", PodSet{}, fmt.Errorf("%d pod sets, a group member must have one: %w", len(sets), ErrInvalidGroup)
	}
	return roleName(askOf(sets[0].Spec)), sets[0], nil
}

// startGroup applies a group's reservation to its gated members, one API
// write each, under the same fences as start. Members created after the
// group started (replacements) are started under the same admission.
func (s *Service) startGroup(ctx context.Context, k *kindRunner, rec *events.WorkloadSubmittedV1, r ledger.Reservation, gated []Job) (err error) {
	assigned, err := assignmentOf(r)
	if err != nil {
		for _, m := range gated {
			s.recorder.Eventf(m.Object(), corev1.EventTypeWarning, "AdmissionFailed", "cannot apply admission: %v", err)
		}
		return nil
	}
	byRole := map[string]PodSetAssignment{}
	for _, psa := range assigned.PodSets {
		byRole[psa.Name] = psa
	}
	s.mu.Lock()
	flavors := s.snap.Flavors
	s.mu.Unlock()
	type write struct {
		job   Job
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
		a := Assignment{ClusterQueue: r.ClusterQueue, PodSets: []PodSetAssignment{{Name: sets[0].Name, Count: sets[0].Count, Flavors: psa.Flavors, Update: psa.Update}}}
		if err := Admit(admitted, a, flavors); err != nil {
			s.recorder.Eventf(m.Object(), corev1.EventTypeWarning, "AdmissionFailed", "cannot apply admission: %v", err)
			continue
		}
		p, err := MergePatch(m.Object(), admitted.Object(), string(meta.GetUID()), meta.GetResourceVersion())
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
func (s *Service) stopGroup(ctx context.Context, k *kindRunner, members []Job, ref events.WorkloadRef, cq, reason, message, admission string) error {
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
