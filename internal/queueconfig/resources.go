package queueconfig

import (
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Resources is Kueue's resources block: how a pod's requests become the
// requests a workload is queued with. Resources named by an excluded
// prefix are not counted at all; a transformation turns each unit of its
// input into the outputs (and keeps the input, with Retain, or drops it,
// with Replace). Exclusion comes first, as in Kueue. It changes what is
// counted against quota, never what the pods ask the scheduler for.
type Resources struct {
	ExcludeResourcePrefixes []string                 `json:"excludeResourcePrefixes,omitempty"`
	Transformations         []ResourceTransformation `json:"transformations,omitempty"`
	// DeviceClassMappings count the devices pods claim through Dynamic
	// Resource Allocation (devices.go).
	DeviceClassMappings []DeviceClassMapping `json:"deviceClassMappings,omitempty"`
}

// ResourceTransformation maps one input resource to outputs, per unit of
// the input.
type ResourceTransformation struct {
	Input corev1.ResourceName `json:"input"`
	// Strategy: Retain (the default) keeps the input beside the outputs,
	// Replace counts only the outputs.
	Strategy string              `json:"strategy,omitempty"`
	Outputs  corev1.ResourceList `json:"outputs,omitempty"`
}

// Transformation strategies, as Kueue names them.
const (
	Retain  = "Retain"
	Replace = "Replace"
)

// Validate checks the block as Kueue does, naming fields under p.
func (r *Resources) Validate(p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	for i, pre := range r.ExcludeResourcePrefixes {
		if pre == "" {
			errs = append(errs, field.Required(p.Child("excludeResourcePrefixes").Index(i), "an empty prefix would exclude every resource"))
		}
	}
	errs = append(errs, validateDeviceClassMappings(p.Child("deviceClassMappings"), r.DeviceClassMappings)...)
	seen := map[corev1.ResourceName]int{}
	for i, t := range r.Transformations {
		tp := p.Child("transformations").Index(i)
		if t.Input == "" {
			errs = append(errs, field.Required(tp.Child("input"), "the resource to transform"))
		} else if j, dup := seen[t.Input]; dup {
			errs = append(errs, field.Duplicate(tp.Child("input"), string(t.Input)+" (also transformations["+strconv.Itoa(j)+"])"))
		} else {
			seen[t.Input] = i
		}
		if t.Strategy != "" && t.Strategy != Retain && t.Strategy != Replace {
			errs = append(errs, field.NotSupported(tp.Child("strategy"), t.Strategy, []string{Retain, Replace}))
		}
		for _, name := range sortedNames(t.Outputs) {
			if q := t.Outputs[name]; q.Sign() < 0 {
				errs = append(errs, field.Invalid(tp.Child("outputs").Key(string(name)), q.String(), "must not be negative"))
			}
		}
	}
	return errs
}

// Apply returns the requests of one pod as they are queued: excluded
// resources dropped, transformations applied. Each output is its factor
// times the input's quantity rounded up to a whole number (Kueue's rule),
// summed over the inputs that produce it. requests is not changed; with
// nothing to do it is returned as is.
func (r *Resources) Apply(requests corev1.ResourceList) corev1.ResourceList {
	if r == nil || (len(r.ExcludeResourcePrefixes) == 0 && len(r.Transformations) == 0) {
		return requests
	}
	out := make(corev1.ResourceList, len(requests))
	outputs := corev1.ResourceList{}
	// Sums of quantities do not depend on the order they are added in.
	for name, q := range requests {
		if r.excluded(name) {
			continue
		}
		t := r.transformation(name)
		if t == nil {
			out[name] = q
			continue
		}
		for on, factor := range t.Outputs {
			add := factor.DeepCopy()
			add.Mul(q.Value())
			if have, ok := outputs[on]; ok {
				add.Add(have)
			}
			outputs[on] = add
		}
		if t.Strategy != Replace {
			out[name] = q
		}
	}
	// An output that is also a request of its own adds to it.
	for on, q := range outputs {
		if have, ok := out[on]; ok {
			q.Add(have)
		}
		out[on] = q
	}
	return out
}

func (r *Resources) excluded(name corev1.ResourceName) bool {
	for _, pre := range r.ExcludeResourcePrefixes {
		if strings.HasPrefix(string(name), pre) {
			return true
		}
	}
	return false
}

func (r *Resources) transformation(name corev1.ResourceName) *ResourceTransformation {
	for i := range r.Transformations {
		if r.Transformations[i].Input == name {
			return &r.Transformations[i]
		}
	}
	return nil
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}
