package provisioning

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// podSet is one pod template of a request: the pods of one or more of the
// workload's pod sets (more when merged).
type podSet struct {
	names    []string
	count    int32
	template corev1.PodTemplateSpec
}

// podSetsOfJob returns the workload's pod sets as they would run under the
// reservation: the admitted counts, the templates with the assigned
// flavors' node labels and tolerations.
func podSetsOfJob(ad jobframework.Adapter, obj runtime.Object, assigned []events.PodSetAssignmentV1, flavors map[string]*v1beta1.ResourceFlavor) ([]podSet, error) {
	a := jobframework.Assignment{ClusterQueue: "-"}
	for _, ps := range assigned {
		a.PodSets = append(a.PodSets, jobframework.PodSetAssignment{Name: ps.Name, Count: ps.Count, Flavors: ps.Flavors})
	}
	view, err := ad.Decode(obj)
	if err != nil {
		return nil, err
	}
	// Admit refuses a job that runs; its templates are the user's then,
	// without the flavors', which the request does without.
	if err := jobframework.Admit(view, a, flavors); err != nil {
		if view, err = ad.Decode(obj); err != nil {
			return nil, err
		}
		if err := jobframework.Pristine(view); err != nil {
			return nil, err
		}
	}
	sets, err := view.PodSets()
	if err != nil {
		return nil, err
	}
	counts := map[string]int32{}
	for _, ps := range assigned {
		counts[ps.Name] = ps.Count
	}
	var out []podSet
	for _, ps := range sets {
		n, ok := counts[ps.Name]
		if !ok {
			n = ps.Count
		}
		out = append(out, templateOf(ps, ps.Name, n))
	}
	return out, nil
}

// templateOf is the pod template of a request for count pods like ps's.
func templateOf(ps jobframework.PodSet, name string, count int32) podSet {
	t := corev1.PodTemplateSpec{Spec: *ps.Spec.DeepCopy()}
	if ps.Meta != nil {
		t.Labels, t.Annotations = maps.Clone(ps.Meta.Labels), maps.Clone(ps.Meta.Annotations)
		delete(t.Annotations, jobframework.AdmissionAnnotation)
		delete(t.Annotations, jobframework.OriginalAnnotation)
	}
	limitsAsRequests(&t.Spec)
	return podSet{names: []string{name}, count: count, template: t}
}

// limitsAsRequests sets a container's request for each resource it only
// limits, as the API server defaults it for the pods.
func limitsAsRequests(spec *corev1.PodSpec) {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			c := &cs[i]
			for r, q := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[r]; ok {
					continue
				}
				if c.Resources.Requests == nil {
					c.Resources.Requests = corev1.ResourceList{}
				}
				c.Resources.Requests[r] = q.DeepCopy()
			}
		}
	}
}

// managed keeps the pod sets with pods that ask for one of the resources
// (all of them when none is named).
func managed(sets []podSet, resources []corev1.ResourceName) []podSet {
	var out []podSet
	for _, ps := range sets {
		if ps.count > 0 && (len(resources) == 0 || uses(&ps.template.Spec, resources)) {
			out = append(out, ps)
		}
	}
	return out
}

func uses(spec *corev1.PodSpec, resources []corev1.ResourceName) bool {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, r := range resources {
				if _, ok := c.Resources.Requests[r]; ok {
					return true
				}
				if _, ok := c.Resources.Limits[r]; ok {
					return true
				}
			}
		}
	}
	return false
}

// merge joins pod sets the policy deems alike into one template (counts
// added), in the order they come; no policy joins none.
func merge(sets []podSet, policy string) []podSet {
	if policy == "" {
		return sets
	}
	var out []podSet
	for _, ps := range sets {
		i := slices.IndexFunc(out, func(o podSet) bool { return alike(o.template, ps.template, policy) })
		if i < 0 {
			out = append(out, podSet{names: slices.Clone(ps.names), count: ps.count, template: ps.template})
			continue
		}
		out[i].names = append(out[i].names, ps.names...)
		out[i].count += ps.count
	}
	return out
}

func alike(a, b corev1.PodTemplateSpec, policy string) bool {
	if policy == v1beta1.IdenticalPodTemplates {
		return apiequality.Semantic.DeepEqual(a, b)
	}
	requests := func(cs []corev1.Container) []corev1.ResourceList {
		out := make([]corev1.ResourceList, len(cs))
		for i, c := range cs {
			out[i] = c.Resources.Requests
		}
		return out
	}
	x, y := &a.Spec, &b.Spec
	return apiequality.Semantic.DeepEqual(requests(x.Containers), requests(y.Containers)) &&
		apiequality.Semantic.DeepEqual(requests(x.InitContainers), requests(y.InitContainers)) &&
		apiequality.Semantic.DeepEqual(x.Resources, y.Resources) &&
		apiequality.Semantic.DeepEqual(x.NodeSelector, y.NodeSelector) &&
		apiequality.Semantic.DeepEqual(x.Tolerations, y.Tolerations) &&
		apiequality.Semantic.DeepEqual(x.Affinity, y.Affinity) &&
		apiequality.Semantic.DeepEqual(x.ResourceClaims, y.ResourceClaims)
}

// names lists the pod sets of templates, comma separated.
func names(sets []podSet) string {
	var all []string
	for _, ps := range sets {
		all = append(all, ps.names...)
	}
	return strings.Join(all, ",")
}
