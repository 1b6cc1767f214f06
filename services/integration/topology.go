package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/workloop"
)

// Topology-aware scheduling's enforcement. A pod set admitted on a
// topology-aware flavor gets, in its template, the topology scheduling gate,
// a label naming the kind (so each kind's integration watches only its own
// pods) and annotations with its placement and owner. Each pod is created
// gated; the ungater removes the gate pod by pod, adding the node selector
// of a domain of the placement that still has room (its count less the
// pods already sent there), so kube-scheduler places it inside that
// domain. A Pod that is its own pod set cannot be gated after it is
// created: it is given its domain's node selector when it is admitted.

// withTopology adds to u what a pod set admitted with placement t needs:
// for a pod set with a template, the gate, label and annotations; for a
// Pod, the node selector of the domain sel (from pickDomains).
func withTopology(u *jobframework.PodSetUpdate, kind, owner, podSet, admission string, t *engine.TopologyAssignment, ownPod bool, sel map[string]string) (*jobframework.PodSetUpdate, error) {
	out := &jobframework.PodSetUpdate{}
	if u != nil {
		c := *u
		out = &c
		out.Labels, out.Annotations, out.NodeSelector = maps.Clone(u.Labels), maps.Clone(u.Annotations), maps.Clone(u.NodeSelector)
	}
	if ownPod {
		if out.NodeSelector == nil {
			out.NodeSelector = map[string]string{}
		}
		maps.Copy(out.NodeSelector, sel)
		return out, nil
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("encode topology assignment: %w", err)
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Labels[v1beta1.TopologyPodLabel] = kind
	out.Annotations[v1beta1.TopologyAssignmentAnnotation] = string(b)
	out.Annotations[v1beta1.TopologyOwnerAnnotation] = owner
	out.Annotations[v1beta1.TopologyPodSetAnnotation] = podSet
	out.Annotations[v1beta1.TopologyAdmissionAnnotation] = admission
	out.SchedulingGates = append(slices.Clone(out.SchedulingGates), v1beta1.TopologySchedulingGate)
	return out, nil
}

// domainSelector is the node selector of a domain: its value of every
// level.
func domainSelector(levels, values []string) map[string]string {
	sel := make(map[string]string, len(levels))
	for i, l := range levels {
		if i < len(values) {
			sel[l] = values[i]
		}
	}
	return sel
}

// pickDomains chooses the domains of n more pods of a placement, given
// the node selectors of the pods already sent (each counts against the
// first domain it matches): the domains with room left, in order.
func pickDomains(t *engine.TopologyAssignment, placed []map[string]string, n int) []map[string]string {
	left := make([]int32, len(t.Domains))
	sels := make([]map[string]string, len(t.Domains))
	for i, d := range t.Domains {
		left[i], sels[i] = d.Count, domainSelector(t.Levels, d.Values)
	}
	for _, p := range placed {
		for i, s := range sels {
			if left[i] > 0 && matches(p, s) {
				left[i]--
				break
			}
		}
	}
	var out []map[string]string
	for i := range sels {
		for left[i] > 0 && len(out) < n {
			out = append(out, sels[i])
			left[i]--
		}
	}
	return out
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// errGone: the pod went before it was ungated; it holds no place.
var errGone = errors.New("pod gone")

// ungater removes the topology gate from one kind's pods.
type ungater struct {
	s    *Service
	k    *kindRunner
	pods cache.Indexer
	// sent holds the domain of each pod ungated that the informer still
	// shows gated: it holds its place, so a sync on that stale view does
	// not give its place to another pod. One worker uses it.
	sent map[string]map[types.UID]map[string]string
}

// runUngater watches the kind's gated pods and ungates them, until ctx
// ends. Only the replica owning an object's shard ungates its pods.
func (s *Service) runUngater(ctx context.Context, k *kindRunner) error {
	u := &ungater{s: s, k: k, sent: map[string]map[types.UID]map[string]string{}}
	return s.runPodWatch(ctx, k, podWatch{name: "topology", label: v1beta1.TopologyPodLabel, owner: v1beta1.TopologyOwnerAnnotation, slot: &k.ungating},
		func(pods cache.Indexer) func(context.Context, string) error {
			u.pods = pods
			return u.sync
		})
}

// podWatch is what an ungater watches: one kind's pods labelled with
// label (its value the kind's name), each naming the object it belongs to
// (namespace/name) in annotation owner. slot holds the watch's queue while
// it runs, so that a change of the object's reservation looks again.
type podWatch struct {
	name, label, owner string
	slot               *atomic.Pointer[workqueue.TypedRateLimitingInterface[string]]
}

// runPodWatch calls the sync that start returns (given the pods' index by
// owner) for an object whenever one of its pods changes or its slot's
// queue is given it, until ctx ends. Every change of a pod counts: a
// gated one waits for room, an ended one leaves room.
func (s *Service) runPodWatch(ctx context.Context, k *kindRunner, w podWatch, start func(pods cache.Indexer) func(context.Context, string) error) error {
	factory := informers.NewSharedInformerFactoryWithOptions(s.kube, s.cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = w.label + "=" + k.kind.Name
		}))
	inf := factory.Core().V1().Pods().Informer()
	ownerOf := func(obj any) string {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			return p.Annotations[w.owner]
		}
		return ""
	}
	if err := inf.AddIndexers(cache.Indexers{w.owner: func(obj any) ([]string, error) {
		if o := ownerOf(obj); o != "" {
			return []string{o}, nil
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: k.kind.Name + "-" + w.name + "-ungater"})
	enqueue := func(obj any) {
		if o := ownerOf(obj); o != "" {
			queue.Add(o)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue}); err != nil {
		return err
	}
	sync := start(inf.GetIndexer())
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	w.slot.Store(&queue)
	defer w.slot.Store(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for workloop.Next(queue, func(owner string) error {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			return sync(wctx, owner)
		}, func(owner string, err error) {
			s.log.Warn().Err(err).Str("object", owner).Str("kind", k.kind.Name).Str("gate", w.name).Msg("ungating pods failed; retrying")
		}) {
		}
	}()
	<-ctx.Done()
	queue.ShutDownWithDrain()
	<-done
	factory.Shutdown()
	return nil
}

func gated(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == v1beta1.TopologySchedulingGate
	})
}

// live: the pod still holds its place (not ended, not being deleted).
func live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// sync ungates the gated pods of one object, pod set by pod set.
func (u *ungater) sync(ctx context.Context, owner string) error {
	if !u.k.owner.Owns(owner) {
		return nil
	}
	objs, err := u.pods.ByIndex(v1beta1.TopologyOwnerAnnotation, owner)
	if err != nil {
		return err
	}
	// Pods of one pod set and one placement (a new admission places
	// anew; its pods carry the new annotation).
	type group struct {
		podSet, assignment, admission string
		placed                        []map[string]string
		waiting                       []*corev1.Pod
	}
	groups := map[string]*group{}
	sent := u.sent[owner]
	stillSent := map[types.UID]map[string]string{}
	defer func() {
		if len(stillSent) == 0 {
			delete(u.sent, owner)
		} else {
			u.sent[owner] = stillSent
		}
	}()
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok || !live(p) {
			continue
		}
		a, adm, ps := p.Annotations[v1beta1.TopologyAssignmentAnnotation], p.Annotations[v1beta1.TopologyAdmissionAnnotation], p.Annotations[v1beta1.TopologyPodSetAnnotation]
		key := ps + "\x00" + adm + "\x00" + a
		g := groups[key]
		if g == nil {
			g = &group{podSet: ps, assignment: a, admission: adm}
			groups[key] = g
		}
		sel, wasSent := sent[p.UID]
		switch {
		case !gated(p):
			g.placed = append(g.placed, p.Spec.NodeSelector)
		case wasSent:
			stillSent[p.UID] = sel
			g.placed = append(g.placed, sel)
		default:
			g.waiting = append(g.waiting, p)
		}
	}
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(groups)) {
		g := groups[key]
		if len(g.waiting) == 0 {
			continue
		}
		t := u.placement(owner, g.podSet, g.admission)
		if t == nil {
			t = &engine.TopologyAssignment{}
			if err := json.Unmarshal([]byte(g.assignment), t); err != nil {
				u.s.log.Warn().Err(err).Str("object", owner).Msg("a pod's topology assignment cannot be read; it stays gated")
				continue
			}
		}
		sort.Slice(g.waiting, func(i, j int) bool { return g.waiting[i].Name < g.waiting[j].Name })
		sels := pickDomains(t, g.placed, len(g.waiting))
		for i, sel := range sels {
			if err := u.ungate(ctx, g.waiting[i], sel); errors.Is(err, errGone) {
				continue
			} else if err != nil {
				errs = append(errs, err)
				continue
			}
			stillSent[g.waiting[i].UID] = sel
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d pods not ungated, the first: %w", len(errs), errs[0])
	}
	return nil
}

// placement is where the ledger's reservation of owner places pod set
// podSet now, if it is the admission named (a node replacement moves pods
// of a running admission; its pods' annotation still says where they
// went first); nil otherwise.
func (u *ungater) placement(owner, podSet, admission string) *engine.TopologyAssignment {
	if admission == "" {
		return nil
	}
	u.s.mu.Lock()
	r, ok := u.s.held[u.k.kind.Name+"/"+owner]
	u.s.mu.Unlock()
	if !ok || r.Admission() != admission {
		return nil
	}
	for _, ps := range r.PodSets {
		if ps.Name == podSet {
			return ps.Topology
		}
	}
	return nil
}

// ungate sends one pod to a domain: the topology gate removed, the
// domain's node selector added, in one write checked against the pod as
// it was read.
func (u *ungater) ungate(ctx context.Context, p *corev1.Pod, sel map[string]string) error {
	var gates []corev1.PodSchedulingGate
	for _, g := range p.Spec.SchedulingGates {
		if g.Name != v1beta1.TopologySchedulingGate {
			gates = append(gates, g)
		}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": string(p.UID), "resourceVersion": p.ResourceVersion},
		"spec":     map[string]any{"schedulingGates": gates, "nodeSelector": sel},
	})
	if err != nil {
		return err
	}
	_, err = u.s.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return errGone
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
