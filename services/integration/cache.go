package integration

import (
	"maps"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// lastApplied is kubectl's copy of the manifest it applied.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// cacheTransform returns what an adapter's informer does to each object
// it receives before keeping it: trim it (trimForCache, the adapter's
// CacheTrimmer), and pack it when the informer is typed (packed), its
// labels and annotations kept decoded for a Grouper's index.
func cacheTransform(ad jobframework.Adapter) cache.TransformFunc {
	trimmer, _ := ad.(jobframework.CacheTrimmer)
	_, typed := ad.(jobframework.InformerSource)
	_, grouper := ad.(jobframework.Grouper)
	return func(obj any) (any, error) {
		o, ok := obj.(runtime.Object)
		if !ok {
			return obj, nil
		}
		if trimmer != nil {
			trimmer.TrimForCache(o)
		}
		trimForCache(o)
		if typed {
			return jobframework.Pack(o, grouper), nil
		}
		return o, nil
	}
}

// trimForCache drops from the informer's copy of an object what no
// decision reads: its managed fields, often as large as the rest of the
// object, and kubectl's last-applied manifest. Patches are computed
// between two copies of the cached object, so what is dropped here is
// never written back or removed.
func trimForCache(obj runtime.Object) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return // no metadata to trim
	}
	m.SetManagedFields(nil)
	if a := m.GetAnnotations(); a[lastApplied] != "" {
		trimmed := make(map[string]string, len(a)-1)
		for k, v := range a {
			if k != lastApplied {
				trimmed[k] = v
			}
		}
		m.SetAnnotations(trimmed)
	}
}

// relevant reports whether an update can change what Sluice does: most
// updates are pod counts in the status, which it ignores.
func relevant(ad jobframework.Adapter, o, n any, podsReady bool) bool {
	oo, ok1 := o.(runtime.Object)
	no, ok2 := n.(runtime.Object)
	if !ok1 || !ok2 {
		return true
	}
	oj, err1 := ad.Decode(oo)
	nj, err2 := ad.Decode(no)
	if err1 != nil || err2 != nil {
		return true
	}
	om, nm := oj.Meta(), nj.Meta()
	if om.GetResourceVersion() == nm.GetResourceVersion() {
		return true // a resync: reconcile anyway
	}
	if oj.IsSuspended() != nj.IsSuspended() || om.GetUID() != nm.GetUID() {
		return true
	}
	of, _, _ := oj.Finished()
	nf, _, _ := nj.Finished()
	if of != nf {
		return true
	}
	if podsReady {
		or, ok1 := oj.(jobframework.PodsReadier)
		nr, ok2 := nj.(jobframework.PodsReadier)
		if ok1 && ok2 && or.PodsReady() != nr.PodsReady() {
			return true
		}
	}
	if (len(ad.Kind().CountField) > 0 || ad.Kind().Elastic && jobframework.IsElastic(nm)) && !samePodCounts(oj, nj) {
		return true // resized: an elastic job's record follows; another stops
	}
	return !maps.Equal(om.GetLabels(), nm.GetLabels()) || !maps.Equal(om.GetAnnotations(), nm.GetAnnotations())
}

// samePodCounts: two versions of an object run the same pod counts.
func samePodCounts(a, b jobframework.Job) bool {
	as, err1 := a.PodSets()
	bs, err2 := b.PodSets()
	if err1 != nil || err2 != nil || len(as) != len(bs) {
		return false
	}
	for i := range as {
		if as[i].Count != bs[i].Count {
			return false
		}
	}
	return true
}
