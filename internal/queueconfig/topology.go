package queueconfig

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/engine"
)

// topologyKeys pairs each topology annotation with Kueue's name for it.
var topologyKeys = []struct{ sluice, kueue string }{
	{v1beta1.PodSetRequiredTopologyAnnotation, v1beta1.KueuePodSetRequiredTopologyAnnotation},
	{v1beta1.PodSetPreferredTopologyAnnotation, v1beta1.KueuePodSetPreferredTopologyAnnotation},
	{v1beta1.PodSetUnconstrainedTopologyAnnotation, v1beta1.KueuePodSetUnconstrainedTopologyAnnotation},
	{v1beta1.PodSetSliceRequiredTopologyAnnotation, v1beta1.KueuePodSetSliceRequiredTopologyAnnotation},
	{v1beta1.PodSetSliceSizeAnnotation, v1beta1.KueuePodSetSliceSizeAnnotation},
	{v1beta1.PodSetGroupNameAnnotation, v1beta1.KueuePodSetGroupNameAnnotation},
}

// TopologyRequest reads a pod set's topology request from its pod
// template's annotations: Sluice's, and Kueue's where Sluice's is absent
// if kueue is set. A bad value is an error naming the annotation.
func TopologyRequest(annotations map[string]string, kueue bool) (engine.TopologyRequest, error) {
	var t engine.TopologyRequest
	get := func(i int) (string, string, bool) {
		k := topologyKeys[i]
		if v, ok := annotations[k.sluice]; ok {
			return k.sluice, v, true
		}
		if v, ok := annotations[k.kueue]; ok && kueue {
			return k.kueue, v, true
		}
		return "", "", false
	}
	if _, v, ok := get(0); ok {
		t.Required = v
	}
	if _, v, ok := get(1); ok {
		t.Preferred = v
	}
	if k, v, ok := get(2); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return t, fmt.Errorf("annotation %s: %q is not true or false", k, v)
		}
		t.Unconstrained = b
	}
	if _, v, ok := get(3); ok {
		t.SliceLevel = v
	}
	if k, v, ok := get(4); ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n <= 0 {
			return t, fmt.Errorf("annotation %s: %q is not a whole number above zero", k, v)
		}
		t.SliceSize = int32(n)
	}
	if _, v, ok := get(5); ok {
		t.Group = v
	}
	for _, l := range []struct{ key, v string }{{"required", t.Required}, {"preferred", t.Preferred}, {"slice-required", t.SliceLevel}} {
		if l.v == "" {
			continue
		}
		if errs := validation.IsQualifiedName(l.v); len(errs) > 0 {
			return t, fmt.Errorf("%s topology %q is not a node label: %s", l.key, l.v, errs[0])
		}
	}
	if t.SliceLevel != "" && t.SliceSize == 0 {
		return t, fmt.Errorf("annotation %s needs %s with the slice size", v1beta1.PodSetSliceRequiredTopologyAnnotation, v1beta1.PodSetSliceSizeAnnotation)
	}
	return t, nil
}
