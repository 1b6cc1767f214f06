package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/ledger"
)

// Elastic jobs. The record of an elastic job follows its pod counts
// (resize); admission grows or shrinks the reservation in place. Its pods
// are started gated (withElastic), and the elastic ungater lifts the gate
// from as many pods of each pod set as the reservation holds now, so a
// raised parallelism runs its new pods only once the scale-up is admitted,
// and the pods already running never stop.

// resize follows a change of an elastic job's pod counts: the record
// takes the new counts (compare-and-set) and admission resizes the
// workload. Anything else about the pod sets stays as submitted.
func (s *Service) resize(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, job jobframework.Job) (*events.WorkloadSubmittedV1, error) {
	m := job.Meta()
	if !rec.Elastic || jobframework.ObjectUID(rec.Workload.UID) != string(m.GetUID()) {
		return rec, nil
	}
	sets, err := job.PodSets()
	if err != nil || len(sets) != len(rec.PodSets) {
		return rec, nil
	}
	upd := *rec
	upd.PodSets = slices.Clone(rec.PodSets)
	var was []string
	for i, ps := range sets {
		if ps.Name != upd.PodSets[i].Name {
			return rec, nil
		}
		if ps.Count != upd.PodSets[i].Count {
			was = append(was, fmt.Sprintf("%s %d→%d", ps.Name, upd.PodSets[i].Count, ps.Count))
			upd.PodSets[i].Count, upd.PodSets[i].MinCount = ps.Count, ps.Count
		}
	}
	if len(was) == 0 {
		return rec, nil
	}
	upd.ResizedAt = time.Now().UTC()
	if err := upd.Validate(); err != nil {
		s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "InvalidWorkload", "not resized: %v", err)
		return rec, nil
	}
	gctx, cancel := bus.Bounded(ctx)
	e, err := s.wlKV.Get(gctx, rk)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read workload %s: %w", rk, err)
	}
	b, err := json.Marshal(upd)
	if err != nil {
		return nil, err
	}
	// Compare-and-set: another replica or a delete in between makes this
	// sync run again on what is stored now.
	if _, err := s.wlKV.Update(ctx, rk, b, e.Revision()); err != nil {
		return nil, fmt.Errorf("resize %s: %w", rk, err)
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "Resized", "pod counts changed (%s): the admission follows", strings.Join(was, ", "))
	s.log.Info().Str("workload", rk).Strs("pod_sets", was).Msg("elastic job resized")
	return &upd, nil
}

// reshaped says why an object no longer matches its workload's record
// in a way its workload cannot follow ("" when it does): its elastic
// annotation changed after it was queued, or, for a kind whose count a
// user may change, one that is not elastic runs more pods than its
// reservation holds (raised while it ran, past the webhook) or changed
// its count while it waits.
func (s *Service) reshaped(k *kindRunner, rec *events.WorkloadSubmittedV1, job jobframework.Job) string {
	m := job.Meta()
	if jobframework.ObjectUID(rec.Workload.UID) != string(m.GetUID()) {
		return ""
	}
	if e := jobframework.IsElastic(m); e != rec.Elastic {
		return fmt.Sprintf("annotation %s changed after it was queued (elastic: %t, was %t)", v1beta1.ElasticJobAnnotation, e, rec.Elastic)
	}
	if rec.Elastic || len(k.kind.CountField) == 0 {
		return ""
	}
	sets, err := job.PodSets()
	if err != nil || len(sets) != len(rec.PodSets) {
		return ""
	}
	r, held := s.reservation(rec.Workload)
	for i, ps := range sets {
		switch {
		case held && !job.IsSuspended():
			for _, psa := range r.PodSets {
				if psa.Name == ps.Name && ps.Count > psa.Count {
					return fmt.Sprintf("pod set %s runs %d pods, its reservation holds %d (only an elastic job may change its pod count while it runs)", ps.Name, ps.Count, psa.Count)
				}
			}
		case !held && job.IsSuspended() && ps.Count != rec.PodSets[i].Count:
			return fmt.Sprintf("pod set %s asks for %d pods, it was queued for %d", ps.Name, ps.Count, rec.PodSets[i].Count)
		}
	}
	return ""
}

// reshape ends the workload of an object that reshaped: one that runs is
// stopped first; a suspended one's workload ends (the caller queues a new
// one as the object is now).
func (s *Service) reshape(ctx context.Context, k *kindRunner, rk string, rec *events.WorkloadSubmittedV1, job jobframework.Job, why string) error {
	if !job.IsSuspended() {
		return s.stopFirst(ctx, k, job, rec, ReasonPodSetsChanged, why+": stopped, to queue again as it is now")
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, ReasonPodSetsChanged, "%s: queued again as it is now", why)
	s.log.Info().Str("workload", rk).Str("why", why).Msg("reshaped: workload ended, a new one queues")
	return s.end(ctx, rk, rec, &fence.End{Deleted: true, Reason: ReasonPodSetsChanged})
}

// withElastic adds to a what an elastic job's pod sets need: each
// template gets the elastic gate, label and annotations (the gate, not
// the count field, holds back the pods the reservation has no room for).
func withElastic(a *jobframework.Assignment, kind, owner string) {
	for i := range a.PodSets {
		psa := &a.PodSets[i]
		out := &jobframework.PodSetUpdate{}
		if u := psa.Update; u != nil {
			c := *u
			out = &c
			out.Labels, out.Annotations = maps.Clone(u.Labels), maps.Clone(u.Annotations)
		}
		if out.Labels == nil {
			out.Labels = map[string]string{}
		}
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Labels[v1beta1.ElasticPodLabel] = kind
		out.Annotations[v1beta1.ElasticOwnerAnnotation] = owner
		out.Annotations[v1beta1.ElasticPodSetAnnotation] = psa.Name
		out.SchedulingGates = append(slices.Clone(out.SchedulingGates), v1beta1.ElasticSchedulingGate)
		psa.Update = out
	}
}

// sameCounts: two reservations hold the same pod counts.
func sameCounts(a, b ledger.Reservation) bool {
	if len(a.PodSets) != len(b.PodSets) {
		return false
	}
	for i := range a.PodSets {
		if a.PodSets[i].Count != b.PodSets[i].Count {
			return false
		}
	}
	return true
}

// elasticUngater lifts the elastic gate from one kind's pods.
type elasticUngater struct {
	s    *Service
	k    *kindRunner
	pods cache.Indexer
	// sent holds the pods ungated that the informer still shows gated,
	// so a sync on that stale view does not count their room twice.
	sent map[string]map[types.UID]bool
}

// runElasticUngater watches the kind's elastic pods and ungates them,
// until ctx ends. Only the replica owning an object's shard ungates its
// pods.
func (s *Service) runElasticUngater(ctx context.Context, k *kindRunner) error {
	u := &elasticUngater{s: s, k: k, sent: map[string]map[types.UID]bool{}}
	return s.runPodWatch(ctx, k, podWatch{name: "elastic", label: v1beta1.ElasticPodLabel, owner: v1beta1.ElasticOwnerAnnotation, slot: &k.elastic},
		func(pods cache.Indexer) func(context.Context, string) error {
			u.pods = pods
			return u.sync
		})
}

func elasticGated(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1beta1.ElasticSchedulingGate })
}

// sync ungates as many gated pods of each pod set of one object as its
// reservation has room for: its count less the live pods already
// ungated. Pods are ungated in name order.
func (u *elasticUngater) sync(ctx context.Context, owner string) error {
	if !u.k.owner.Owns(owner) {
		return nil
	}
	u.s.mu.Lock()
	r, held := u.s.held[u.k.kind.Name+"/"+owner]
	u.s.mu.Unlock()
	if !held || !r.Startable() || r.DispatchedTo != "" {
		delete(u.sent, owner)
		return nil
	}
	if err := u.recordCounts(ctx, owner, r); err != nil {
		return err
	}
	objs, err := u.pods.ByIndex(v1beta1.ElasticOwnerAnnotation, owner)
	if err != nil {
		return err
	}
	sent := u.sent[owner]
	stillSent := map[types.UID]bool{}
	defer func() {
		if len(stillSent) == 0 {
			delete(u.sent, owner)
		} else {
			u.sent[owner] = stillSent
		}
	}()
	running := map[string]int32{}
	waiting := map[string][]*corev1.Pod{}
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok || !live(p) {
			continue
		}
		ps := p.Annotations[v1beta1.ElasticPodSetAnnotation]
		switch {
		case !elasticGated(p):
			running[ps]++
		case sent[p.UID]:
			stillSent[p.UID] = true
			running[ps]++
		default:
			waiting[ps] = append(waiting[ps], p)
		}
	}
	var errs []error
	for _, psa := range r.PodSets {
		room := psa.Count - running[psa.Name]
		pods := waiting[psa.Name]
		if room <= 0 || len(pods) == 0 {
			continue
		}
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		for _, p := range pods[:min(int(room), len(pods))] {
			if err := u.ungate(ctx, p); err != nil {
				if !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
				continue
			}
			stillSent[p.UID] = true
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d pods not ungated, the first: %w", len(errs), errs[0])
	}
	return nil
}

// recordCounts writes the reservation's pod counts into the object's
// admission annotation before any pod is ungated for them, so the object
// always says what it runs under. The write is checked against the object
// as the informer holds it: a stop in between makes it fail and the sync
// run again.
func (u *elasticUngater) recordCounts(ctx context.Context, owner string, r ledger.Reservation) error {
	job, err := u.s.cached(u.k, owner)
	if err != nil || job == nil || job.IsSuspended() {
		return err
	}
	m := job.Meta()
	a, ok, err := jobframework.AdmissionOf(m.GetAnnotations())
	if !ok || err != nil || a.ClusterQueue != r.ClusterQueue {
		return nil
	}
	changed := false
	for i := range a.PodSets {
		for _, psa := range r.PodSets {
			if psa.Name == a.PodSets[i].Name && psa.Count != a.PodSets[i].Count {
				a.PodSets[i].Count, changed = psa.Count, true
			}
		}
	}
	if !changed {
		return nil
	}
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": string(m.GetUID()), "resourceVersion": m.GetResourceVersion(),
		"annotations": map[string]any{jobframework.AdmissionAnnotation: string(b)}}})
	if err != nil {
		return err
	}
	return u.s.patch(ctx, u.k, m.GetNamespace(), m.GetName(), patch)
}

// ungate lifts the elastic gate from one pod, in one write checked
// against the pod as it was read.
func (u *elasticUngater) ungate(ctx context.Context, p *corev1.Pod) error {
	gates := []corev1.PodSchedulingGate{}
	for _, g := range p.Spec.SchedulingGates {
		if g.Name != v1beta1.ElasticSchedulingGate {
			gates = append(gates, g)
		}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": string(p.UID), "resourceVersion": p.ResourceVersion},
		"spec":     map[string]any{"schedulingGates": gates},
	})
	if err != nil {
		return err
	}
	if _, err := u.s.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
