package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/queueconfig"
	"github.com/sluice-dev/sluice/internal/usage"
)

// statusWriter computes queue status from the ledger and the workload
// records, and writes it only when it changed: one API write per queue per
// interval at most, never one per workload.
type statusWriter struct {
	js       jetstream.JetStream
	interval time.Duration
	client   rest.Interface
	last     map[string]queueStatus
	// eng is the configuration as of mirrored change engGen, for the
	// queues' Active conditions.
	eng    *engine.Engine
	engGen uint64
	// lqUsage is the LocalQueues' Admission Fair Sharing usage.
	lqUsage *lqUsage
}

// queueStatus is the status the watcher owns.
type queueStatus struct {
	Pending      int32                 `json:"pendingWorkloads"`
	Admitted     int32                 `json:"admittedWorkloads"`
	FlavorsUsage []v1beta1.FlavorUsage `json:"flavorsUsage"`
	// Conditions holds the queue's Active condition (Kueue's).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// FairSharing is a LocalQueue's Admission Fair Sharing usage.
	FairSharing *v1beta1.LocalQueueFairSharingStatus `json:"fairSharing,omitempty"`
}

func (w *statusWriter) run(ctx context.Context, s *Service) {
	w.last = map[string]queueStatus{}
	w.lqUsage = newLQUsage()
	go func() {
		if err := w.lqUsage.run(ctx, w.js, s.log); err != nil && ctx.Err() == nil {
			s.log.Error().Err(err).Msg("LocalQueue usage not followed: status.fairSharing not written")
		}
	}()
	tracker := usage.NewTracker(w.js, s.log)
	tracked := make(chan struct{})
	go func() {
		// The watches retry on their own: Run ends early only when a
		// bucket cannot be opened.
		if err := tracker.Run(ctx, tracked); err != nil {
			s.log.Error().Err(err).Msg("queue usage not followed: status not written")
		}
	}()
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			select {
			case <-tracked:
			default:
				continue // not every record read yet
			}
			if err := w.write(ctx, s, tracker); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("queue status not written")
			}
		}
	}
}

func (w *statusWriter) write(ctx context.Context, s *Service, tracker *usage.Tracker) error {
	lqToCQ := map[string]string{}
	for _, obj := range s.stores[configstore.KindLocalQueue].List() {
		u := obj.(*unstructured.Unstructured)
		cq, _, _ := unstructured.NestedString(u.Object, "spec", "clusterQueue")
		lqToCQ[u.GetNamespace()+"/"+u.GetName()] = cq
	}
	rep := tracker.Report(lqToCQ)
	if gen := s.configGen.Load(); w.eng == nil || gen != w.engGen {
		// Read before the stores: a change after it is seen next time.
		w.eng, w.engGen = s.engineOfStores(), gen
	}
	eng := w.eng
	now := metav1.NewTime(time.Now()).Rfc3339Copy()
	status := func(u *unstructured.Unstructured, id string, q *usage.Queue, nominal map[string]map[string]int64, a engine.Activity, known bool) queueStatus {
		var st queueStatus
		if q != nil {
			st = queueStatus{Pending: q.Pending, Admitted: q.Admitted, FlavorsUsage: flavorsUsage(q.Amounts, nominal)}
		}
		if known {
			st.Conditions = []metav1.Condition{w.activeCondition(u, id, a, now)}
		}
		return st
	}
	var errs []error
	for _, obj := range s.stores[configstore.KindClusterQueue].List() {
		u := obj.(*unstructured.Unstructured)
		id := "cq/" + u.GetName()
		a, known := eng.ClusterQueueActivity(u.GetName())
		errs = append(errs, w.patch(ctx, mirrored[1].gvr, "", u.GetName(), id, status(u, id, rep.ClusterQueues[u.GetName()], nominalOf(u), a, known)))
	}
	for _, obj := range s.stores[configstore.KindLocalQueue].List() {
		u := obj.(*unstructured.Unstructured)
		lq := u.GetNamespace() + "/" + u.GetName()
		id := "lq/" + lq
		a, known := eng.LocalQueueActivity(u.GetNamespace(), u.GetName())
		st := status(u, id, rep.LocalQueues[lq], nil, a, known)
		if w.lqUsage != nil {
			st.FairSharing = w.lqUsage.status(u.GetNamespace(), u.GetName())
		}
		errs = append(errs, w.patch(ctx, mirrored[3].gvr, u.GetNamespace(), u.GetName(), id, st))
	}
	return errors.Join(errs...)
}

// engineOfStores is an engine with the configuration the watcher sees (as
// it mirrors it), to tell which queues are active as admission does.
func (s *Service) engineOfStores() *engine.Engine {
	cs := configstore.New()
	for _, m := range mirrored {
		for _, obj := range s.stores[m.kind].List() {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			b, err := encode(m.kind, u)
			if err != nil {
				continue
			}
			cs.Apply(configstore.Key(m.kind, u.GetNamespace(), u.GetName()), b)
		}
	}
	snap, _ := cs.Snapshot() // objects that do not decode are left out, as admission does
	cfg, err := queueconfig.ToEngine(snap.Objects)
	if err != nil {
		// Admission reports the same error; here the queues' Active
		// conditions are left as they are until it is fixed.
		s.log.Debug().Err(err).Msg("queue configuration not read: Active conditions not written")
	}
	return engine.New(cfg)
}

// activeCondition is a queue's Active condition: its last transition time
// is kept while its status stays the same (from what this watcher wrote,
// else from the object).
func (w *statusWriter) activeCondition(u *unstructured.Unstructured, id string, a engine.Activity, now metav1.Time) metav1.Condition {
	c := metav1.Condition{Type: v1beta1.QueueActive, Status: metav1.ConditionFalse, Reason: a.Reason, Message: a.Message,
		ObservedGeneration: u.GetGeneration(), LastTransitionTime: now}
	if a.Active {
		c.Status = metav1.ConditionTrue
	}
	if prev, ok := w.last[id]; ok {
		for _, p := range prev.Conditions {
			if p.Type == c.Type && p.Status == c.Status {
				c.LastTransitionTime = p.LastTransitionTime
				return c
			}
		}
		return c
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, raw := range conds {
		m, ok := raw.(map[string]any)
		if !ok || m["type"] != c.Type || m["status"] != string(c.Status) {
			continue
		}
		if ts, ok := m["lastTransitionTime"].(string); ok {
			if at, err := time.Parse(time.RFC3339, ts); err == nil {
				c.LastTransitionTime = metav1.NewTime(at)
			}
		}
	}
	return c
}

func (w *statusWriter) patch(ctx context.Context, gvr schema.GroupVersionResource, ns, name, id string, st queueStatus) error {
	if prev, ok := w.last[id]; ok && reflect.DeepEqual(prev, st) {
		return nil
	}
	body, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	// The answer, the whole patched queue, is not decoded: nothing reads
	// it, and at 1,000 queues decoding it was most of what the writer
	// allocated.
	path := []string{"/apis", gvr.Group, gvr.Version}
	if ns != "" {
		path = append(path, "namespaces", ns)
	}
	path = append(path, gvr.Resource, name, "status")
	if err := w.client.Patch(types.MergePatchType).AbsPath(path...).Body(body).Do(ctx).Error(); err != nil {
		return fmt.Errorf("status of %s: %w", id, err)
	}
	w.last[id] = st
	return nil
}

// nominalOf reads a ClusterQueue's nominal quotas, flavor → resource →
// canonical amount; nil if its spec cannot be read.
func nominalOf(u *unstructured.Unstructured) map[string]map[string]int64 {
	var cq v1beta1.ClusterQueue
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cq); err != nil {
		return nil
	}
	out := map[string]map[string]int64{}
	for _, g := range cq.Spec.ResourceGroups {
		for _, f := range g.Flavors {
			for _, r := range f.Resources {
				if out[string(f.Name)] == nil {
					out[string(f.Name)] = map[string]int64{}
				}
				out[string(f.Name)][string(r.Name)] = engine.Canonical(string(r.Name), r.NominalQuota)
			}
		}
	}
	return out
}

// flavorsUsage renders usage by flavor and resource; with nominal quotas
// (a ClusterQueue's) also the part borrowed above them.
func flavorsUsage(m, nominal map[string]map[string]int64) []v1beta1.FlavorUsage {
	var out []v1beta1.FlavorUsage
	for f, rs := range m {
		fu := v1beta1.FlavorUsage{Name: f}
		for r, v := range rs {
			ru := v1beta1.ResourceUsage{Name: corev1.ResourceName(r), Total: resource.MustParse(engine.Format(r, v))}
			if nominal != nil {
				ru.Borrowed = resource.MustParse(engine.Format(r, max(0, v-nominal[f][r])))
			}
			fu.Resources = append(fu.Resources, ru)
		}
		sort.Slice(fu.Resources, func(i, j int) bool { return fu.Resources[i].Name < fu.Resources[j].Name })
		out = append(out, fu)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
