package convert

import (
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Kueue's labels and annotations on jobs and their pod templates, by
// Sluice's name for the same.
var (
	kueueJobLabels = map[string]string{
		v1beta1.KueueQueueNameLabel:     v1beta1.QueueNameLabel,
		v1beta1.KueuePriorityClassLabel: v1beta1.PriorityClassLabel,
		v1beta1.KueueMaxExecTimeLabel:   v1beta1.MaxExecTimeLabel,
		"kueue.x-k8s.io/pod-group-name": v1beta1.PodGroupNameLabel,
	}
	kueueJobAnnotations = map[string]string{
		"kueue.x-k8s.io/pod-group-total-count":             v1beta1.PodGroupTotalCountAnnotation,
		"kueue.x-k8s.io/pod-group-serving":                 v1beta1.PodGroupServingAnnotation,
		"kueue.x-k8s.io/pod-group-fast-admission":          v1beta1.PodGroupFastAdmissionAnnotation,
		v1beta1.KueueMinParallelismAnnotation:              v1beta1.MinParallelismAnnotation,
		v1beta1.KueueElasticJobAnnotation:                  v1beta1.ElasticJobAnnotation,
		v1beta1.KueuePodSetRequiredTopologyAnnotation:      v1beta1.PodSetRequiredTopologyAnnotation,
		v1beta1.KueuePodSetPreferredTopologyAnnotation:     v1beta1.PodSetPreferredTopologyAnnotation,
		v1beta1.KueuePodSetUnconstrainedTopologyAnnotation: v1beta1.PodSetUnconstrainedTopologyAnnotation,
		v1beta1.KueuePodSetSliceRequiredTopologyAnnotation: v1beta1.PodSetSliceRequiredTopologyAnnotation,
		v1beta1.KueuePodSetSliceSizeAnnotation:             v1beta1.PodSetSliceSizeAnnotation,
		v1beta1.KueuePodSetGroupNameAnnotation:             v1beta1.PodSetGroupNameAnnotation,
	}
)

// carryJobLabels gives a job manifest (any kind outside Kueue's API
// groups) Sluice's names for Kueue's labels and annotations, on the object
// and on every pod template inside it (any nested metadata). A Kueue key
// Sluice has no counterpart for is unsupported. The document is written
// as it was when nothing changes.
func carryJobLabels(loc string, doc []byte, obj map[string]any, opts Options) ([]byte, []string, error) {
	changed := false
	var warnings []string
	var visit func(path string, v any) error
	visit = func(path string, v any) error {
		switch t := v.(type) {
		case map[string]any:
			if md, ok := t["metadata"].(map[string]any); ok {
				for _, part := range []struct {
					field string
					names map[string]string
				}{{"labels", kueueJobLabels}, {"annotations", kueueJobAnnotations}} {
					m, ok := md[part.field].(map[string]any)
					if !ok {
						continue
					}
					where := strings.TrimPrefix(path+".metadata."+part.field, ".")
					w, c, err := renameKeys(loc, where, m, part.names, opts)
					if err != nil {
						return err
					}
					warnings, changed = append(warnings, w...), changed || c
				}
			}
			for _, k := range sortedAnyKeys(t) {
				if k == "metadata" {
					continue
				}
				if err := visit(path+"."+k, t[k]); err != nil {
					return err
				}
			}
		case []any:
			for i, e := range t {
				if err := visit(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := visit("", obj); err != nil {
		return nil, nil, err
	}
	if !changed {
		return doc, warnings, nil
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", loc, err)
	}
	return out, warnings, nil
}

// renameKeys moves m's Kueue keys to Sluice's names (Sluice's own value
// wins when both are set), and refuses or drops the Kueue keys Sluice does
// not implement.
func renameKeys(loc, where string, m map[string]any, names map[string]string, opts Options) (warnings []string, changed bool, err error) {
	for _, k := range sortedAnyKeys(m) {
		if !strings.HasPrefix(k, "kueue.x-k8s.io/") {
			continue
		}
		to, ok := names[k]
		if !ok {
			err := fmt.Errorf("%s: %s[%s]: %w", loc, where, k, ErrUnsupported)
			if !opts.DropUnsupported {
				return nil, false, err
			}
			delete(m, k)
			warnings, changed = append(warnings, "dropped "+err.Error()), true
			continue
		}
		if own, ok := m[to]; ok {
			if fmt.Sprint(own) != fmt.Sprint(m[k]) {
				warnings = append(warnings, fmt.Sprintf("%s: %s[%s] %q left out: %s is %q", loc, where, k, fmt.Sprint(m[k]), to, fmt.Sprint(own)))
			}
		} else {
			m[to] = m[k]
		}
		delete(m, k)
		changed = true
	}
	return warnings, changed, nil
}

func sortedAnyKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
