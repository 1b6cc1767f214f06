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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// statusWriter computes queue status from the ledger and the workload
// records, and writes it only when it changed: one API write per queue per
// interval at most, never one per workload.
type statusWriter struct {
	js       jetstream.JetStream
	interval time.Duration
	last     map[string]queueStatus
}

// queueStatus is the status the watcher owns.
type queueStatus struct {
	Pending      int32                 `json:"pendingWorkloads"`
	Admitted     int32                 `json:"admittedWorkloads"`
	FlavorsUsage []v1beta1.FlavorUsage `json:"flavorsUsage"`
}

func (w *statusWriter) run(ctx context.Context, s *Service) {
	w.last = map[string]queueStatus{}
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := w.write(ctx, s); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("queue status not written")
			}
		}
	}
}

func (w *statusWriter) write(ctx context.Context, s *Service) error {
	wls, err := readWorkloads(ctx, w.js)
	if err != nil {
		return err
	}
	ledKV, err := w.js.KeyValue(ctx, ledger.Bucket)
	if err != nil {
		return err
	}
	keys, err := ledger.Keys(ctx, ledKV)
	if err != nil {
		return err
	}
	lqToCQ := map[string]string{}
	for _, obj := range s.stores[configstore.KindLocalQueue].List() {
		u := obj.(*unstructured.Unstructured)
		cq, _, _ := unstructured.NestedString(u.Object, "spec", "clusterQueue")
		lqToCQ[u.GetNamespace()+"/"+u.GetName()] = cq
	}
	cqs := map[string]*queueStatus{}
	lqs := map[string]*queueStatus{}
	usage := map[string]map[string]map[string]int64{} // queue → flavor → resource → canonical amount
	get := func(m map[string]*queueStatus, k string) *queueStatus {
		if m[k] == nil {
			m[k] = &queueStatus{}
		}
		return m[k]
	}
	add := func(q, flavor, res string, v int64) {
		if usage[q] == nil {
			usage[q] = map[string]map[string]int64{}
		}
		if usage[q][flavor] == nil {
			usage[q][flavor] = map[string]int64{}
		}
		usage[q][flavor][res] += v
	}
	held := map[string]bool{}
	for _, k := range keys {
		v, err := ledger.Read(ctx, ledKV, k)
		if err != nil {
			return err
		}
		for wk, r := range v.Entry.Reservations {
			held[wk] = true
			get(cqs, "cq/"+r.ClusterQueue).Admitted++
			rec := wls[wk]
			if rec == nil {
				continue
			}
			lq := rec.Workload.Namespace + "/" + rec.LocalQueue
			get(lqs, lq).Admitted++
			for _, pa := range r.PodSets {
				for _, ps := range rec.PodSets {
					if ps.Name != pa.Name {
						continue
					}
					for res, qs := range ps.Requests {
						q, err := resource.ParseQuantity(qs)
						if err != nil {
							continue
						}
						m := engine.Canonical(res, q) * int64(pa.Count)
						add("cq/"+r.ClusterQueue, pa.Flavors[res], res, m)
						add("lq/"+lq, pa.Flavors[res], res, m)
					}
				}
			}
		}
	}
	for wk, rec := range wls {
		if held[wk] {
			continue
		}
		lq := rec.Workload.Namespace + "/" + rec.LocalQueue
		get(lqs, lq).Pending++
		if cq, ok := lqToCQ[lq]; ok {
			get(cqs, "cq/"+cq).Pending++
		}
	}
	var errs []error
	for _, obj := range s.stores[configstore.KindClusterQueue].List() {
		u := obj.(*unstructured.Unstructured)
		id := "cq/" + u.GetName()
		st := get(cqs, id)
		st.FlavorsUsage = flavorsUsage(usage[id])
		errs = append(errs, w.patch(ctx, s, mirrored[1].gvr, "", u.GetName(), id, *st))
	}
	for _, obj := range s.stores[configstore.KindLocalQueue].List() {
		u := obj.(*unstructured.Unstructured)
		lq := u.GetNamespace() + "/" + u.GetName()
		st := get(lqs, lq)
		st.FlavorsUsage = flavorsUsage(usage["lq/"+lq])
		errs = append(errs, w.patch(ctx, s, mirrored[3].gvr, u.GetNamespace(), u.GetName(), "lq/"+lq, *st))
	}
	return errors.Join(errs...)
}

func (w *statusWriter) patch(ctx context.Context, s *Service, gvr schema.GroupVersionResource, ns, name, id string, st queueStatus) error {
	if prev, ok := w.last[id]; ok && reflect.DeepEqual(prev, st) {
		return nil
	}
	body, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = s.dyn.Resource(gvr)
	if ns != "" {
		ri = s.dyn.Resource(gvr).Namespace(ns)
	}
	if _, err := ri.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("status of %s: %w", id, err)
	}
	w.last[id] = st
	return nil
}

func flavorsUsage(m map[string]map[string]int64) []v1beta1.FlavorUsage {
	var out []v1beta1.FlavorUsage
	for f, rs := range m {
		fu := v1beta1.FlavorUsage{Name: f}
		for r, v := range rs {
			fu.Resources = append(fu.Resources, v1beta1.ResourceUsage{Name: corev1.ResourceName(r), Total: resource.MustParse(engine.Format(r, v))})
		}
		sort.Slice(fu.Resources, func(i, j int) bool { return fu.Resources[i].Name < fu.Resources[j].Name })
		out = append(out, fu)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// readWorkloads reads every workload record by engine key.
func readWorkloads(ctx context.Context, js jetstream.JetStream) (map[string]*events.WorkloadSubmittedV1, error) {
	kv, err := js.KeyValue(ctx, workloads.Bucket)
	if err != nil {
		return nil, err
	}
	out := map[string]*events.WorkloadSubmittedV1{}
	l, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var w events.WorkloadSubmittedV1
		if json.Unmarshal(e.Value(), &w) == nil {
			out[workloads.EngineKey(w.Workload)] = &w
		}
	}
	return out, nil
}
