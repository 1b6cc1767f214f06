// Package appwrapper is Sluice's adapter for AppWrappers
// (workload.codeflare.dev/v1beta2): one workload for everything an
// AppWrapper wraps. Its pod sets are those of its components in order,
// each component's declared podSets or, when it declares none, those the
// AppWrapper project infers for the kinds it knows (a Job, a JobSet, a
// PyTorchJob, a RayCluster…); pod set k is named <name>-<k>, as in Kueue,
// and counts its podSet's replicas.
//
// An AppWrapper is suspended through spec.suspend. Its wrapped resources
// are raw objects, so admission does not write into their templates:
// the flavor's node labels and tolerations, and the pod set updates of
// admission checks, go into the component's podSetInfos, which the
// AppWrapper controller applies to the templates when it creates the
// resources; a stop clears them. It finishes when its status.phase is
// Succeeded or Failed, and its pods are ready with its PodsReady
// condition.
package appwrapper

import (
	"fmt"
	"maps"
	"slices"

	awv1beta2 "github.com/project-codeflare/appwrapper/api/v1beta2"
	awutils "github.com/project-codeflare/appwrapper/pkg/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Kind is the AppWrapper's kind.
var Kind = jobframework.Kind{Name: "appwrapper", GVK: awv1beta2.GroupVersion.WithKind("AppWrapper"), Resource: "appwrappers", SuspendField: []string{"spec", "suspend"},
	ManagedBy: []string{"spec", "managedBy"}, Module: "github.com/project-codeflare/appwrapper", CRD: "config/crd/bases/workload.codeflare.dev_appwrappers.yaml", Title: "AppWrapper"}

// Adapter is the AppWrapper adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[awv1beta2.AppWrapper](obj, "AppWrapper")
	if err != nil {
		return nil, err
	}
	return &AppWrapper{AppWrapper: o}, nil
}

// AppWrapper is an AppWrapper under the framework. Its pod sets are made
// once, from the components' templates with their podSetInfos applied;
// what the framework writes into them goes back into the podSetInfos
// when the object is read (Object).
type AppWrapper struct {
	*awv1beta2.AppWrapper
	sets []jobframework.PodSet
	// base is each pod set's template as wrapped, before podSetInfos.
	base []corev1.PodTemplateSpec
	// at is where each pod set is: its component and its index there.
	at [][2]int
}

// Object implements jobframework.Job: the podSetInfos written first.
func (a *AppWrapper) Object() runtime.Object {
	a.flush()
	return a.AppWrapper
}

// Meta implements jobframework.Job.
func (a *AppWrapper) Meta() metav1.Object { return a.AppWrapper }

// IsSuspended implements jobframework.Job.
func (a *AppWrapper) IsSuspended() bool { return a.Spec.Suspend }

// SetSuspended implements jobframework.Job.
func (a *AppWrapper) SetSuspended(s bool) { a.Spec.Suspend = s }

// PodSets implements jobframework.Job.
func (a *AppWrapper) PodSets() ([]jobframework.PodSet, error) {
	if a.sets != nil {
		return a.sets, nil
	}
	var sets []jobframework.PodSet
	var base []corev1.PodTemplateSpec
	var at [][2]int
	for i := range a.Spec.Components {
		c := &a.Spec.Components[i]
		obj := &unstructured.Unstructured{}
		if _, _, err := unstructured.UnstructuredJSONScheme.Decode(c.Template.Raw, nil, obj); err != nil {
			return nil, fmt.Errorf("spec.components[%d].template: %w", i, err)
		}
		declared := c.DeclaredPodSets
		if len(declared) == 0 {
			inferred, err := awutils.InferPodSets(obj)
			if err != nil {
				return nil, fmt.Errorf("spec.components[%d]: its pod sets cannot be inferred (declare them in podSets): %w", i, err)
			}
			declared = inferred
		}
		for j, ps := range declared {
			tpl, err := awutils.GetPodTemplateSpec(obj, ps.Path)
			if err != nil {
				return nil, fmt.Errorf("spec.components[%d].podSets[%d].path %q: %w", i, j, ps.Path, err)
			}
			n := awutils.Replicas(ps)
			if n < 0 {
				return nil, fmt.Errorf("spec.components[%d].podSets[%d].replicas: %d is negative: %w", i, j, n, jobframework.ErrInvalidJob)
			}
			base = append(base, *tpl.DeepCopy())
			if j < len(c.PodSetInfos) {
				apply(tpl, c.PodSetInfos[j])
			}
			name := fmt.Sprintf("%s-%d", a.Name, len(sets))
			if len(name) > 63 {
				name = fmt.Sprintf("podset-%d", len(sets))
			}
			sets = append(sets, jobframework.PodSet{Name: name, Count: n, Spec: &tpl.Spec, Meta: &tpl.ObjectMeta})
			at = append(at, [2]int{i, j})
		}
	}
	a.sets, a.base, a.at = sets, base, at
	return sets, nil
}

// apply adds what a podSetInfo holds to a template.
func apply(tpl *corev1.PodTemplateSpec, info awv1beta2.AppWrapperPodSetInfo) {
	if len(info.NodeSelector) > 0 && tpl.Spec.NodeSelector == nil {
		tpl.Spec.NodeSelector = map[string]string{}
	}
	maps.Copy(tpl.Spec.NodeSelector, info.NodeSelector)
	tpl.Spec.Tolerations = append(tpl.Spec.Tolerations, info.Tolerations...)
	if len(info.Labels) > 0 && tpl.Labels == nil {
		tpl.Labels = map[string]string{}
	}
	maps.Copy(tpl.Labels, info.Labels)
	if len(info.Annotations) > 0 && tpl.Annotations == nil {
		tpl.Annotations = map[string]string{}
	}
	maps.Copy(tpl.Annotations, info.Annotations)
	tpl.Spec.SchedulingGates = append(tpl.Spec.SchedulingGates, info.SchedulingGates...)
}

// flush writes back into the components' podSetInfos what the pod sets
// have beyond their wrapped templates; an AppWrapper whose pod sets are
// as wrapped has none.
func (a *AppWrapper) flush() {
	if a.sets == nil {
		return
	}
	infos := make([][]awv1beta2.AppWrapperPodSetInfo, len(a.Spec.Components))
	written := false
	for k, ps := range a.sets {
		i := a.at[k][0]
		info := awv1beta2.AppWrapperPodSetInfo{
			NodeSelector: beyond(ps.Spec.NodeSelector, a.base[k].Spec.NodeSelector),
			Labels:       beyond(ps.Meta.Labels, a.base[k].Labels),
			Annotations:  beyond(ps.Meta.Annotations, a.base[k].Annotations),
		}
		for _, t := range ps.Spec.Tolerations {
			if !slices.ContainsFunc(a.base[k].Spec.Tolerations, func(b corev1.Toleration) bool { return b.MatchToleration(&t) }) {
				info.Tolerations = append(info.Tolerations, t)
			}
		}
		for _, g := range ps.Spec.SchedulingGates {
			if !slices.Contains(a.base[k].Spec.SchedulingGates, g) {
				info.SchedulingGates = append(info.SchedulingGates, g)
			}
		}
		if info.NodeSelector != nil || info.Labels != nil || info.Annotations != nil || info.Tolerations != nil || info.SchedulingGates != nil {
			written = true
		}
		infos[i] = append(infos[i], info)
	}
	for i := range a.Spec.Components {
		if written {
			a.Spec.Components[i].PodSetInfos = infos[i]
		} else {
			a.Spec.Components[i].PodSetInfos = nil
		}
	}
}

// beyond returns the entries of m that base lacks or holds otherwise (nil
// for none).
func beyond(m, base map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if b, ok := base[k]; ok && b == v {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// Finished implements jobframework.Job: phase Succeeded or Failed.
func (a *AppWrapper) Finished() (finished, succeeded bool, message string) {
	switch a.Status.Phase {
	case awv1beta2.AppWrapperSucceeded:
		return true, true, "AppWrapper succeeded"
	case awv1beta2.AppWrapperFailed:
		msg := "AppWrapper failed"
		for _, c := range a.Status.Conditions {
			if c.Status == metav1.ConditionTrue && c.Message != "" {
				msg = c.Message
			}
		}
		return true, false, msg
	}
	return false, false, ""
}

// PodsReady implements jobframework.PodsReadier: the PodsReady
// condition.
func (a *AppWrapper) PodsReady() bool {
	return meta.IsStatusConditionTrue(a.Status.Conditions, string(awv1beta2.PodsReady))
}
