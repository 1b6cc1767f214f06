// Package statefulset is Sluice's adapter for apps/v1 StatefulSets, a
// parent kind: a StatefulSet labelled sluice.dev/queue-name is never queued
// itself. Its Pods are one serving pod group, queued by the pod
// integration and admitted all together (all or nothing) for spec.replicas
// pods. Its webhook writes into the pod template the queue and priority
// labels, the group's name (statefulset-<name>), its total count
// (spec.replicas) and two modes: fast admission (the group is queued on
// its first Pod, so a StatefulSet that creates its Pods one by one, each
// once the one before is ready, works) and serving (a Pod that ends does
// not end the group; the StatefulSet replaces it and the replacement
// starts under the group's admission). Preemption deletes every Pod; the
// StatefulSet creates them again, gated, and the group waits in its queue.
//
// Scaling to 0 deletes the Pods and releases the quota; scaling up from 0
// queues the group again. As in Kueue, the replicas of a queued
// StatefulSet may not change from one non-zero count to another (its
// group was admitted for that many), nor grow from 0 before the Pods of
// the scale-down are gone, and its Pods' shape (requests, node selector,
// tolerations, affinity, priority and runtime class) may not change while
// it has replicas; other template changes roll out under the admission.
package statefulset

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Kind is the StatefulSet's kind.
var Kind = jobframework.Kind{Name: "statefulset", GVK: appsv1.SchemeGroupVersion.WithKind("StatefulSet"), Resource: "statefulsets", QueuedBy: "pod",
	Title: "StatefulSet (its Pods one serving pod group, queued by the pod integration)"}

// GroupPrefix starts the name of a StatefulSet's pod group.
const GroupPrefix = "statefulset-"

// Adapter is the StatefulSet adapter.
type Adapter struct{}

var _ jobframework.Parent = Adapter{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter: a parent's objects are not jobs.
func (Adapter) Decode(runtime.Object) (jobframework.Job, error) {
	return nil, jobframework.ErrParentKind
}

// PodTemplates implements jobframework.Parent.
func (Adapter) PodTemplates() [][]string { return [][]string{{"spec", "template"}} }

// GroupName is the pod group of the StatefulSet called name: within a
// label value's 63 characters, with a hash of the whole name in place of
// what does not fit.
func GroupName(name string) string {
	return jobframework.GroupLabelValue(GroupPrefix+name, name, "")
}

// PodMeta implements jobframework.Parent: the group's name, its total
// count (left as it is at 0 replicas, when there are no Pods to read it)
// and its modes.
func (Adapter) PodMeta(obj *unstructured.Unstructured) (map[string]string, map[string]string, error) {
	ss, err := decode(obj)
	if err != nil {
		return nil, nil, err
	}
	annotations := map[string]string{v1beta1.PodGroupServingAnnotation: "true", v1beta1.PodGroupFastAdmissionAnnotation: "true"}
	if n := replicas(ss); n > 0 {
		annotations[v1beta1.PodGroupTotalCountAnnotation] = strconv.Itoa(int(n))
	}
	return map[string]string{v1beta1.PodGroupNameLabel: GroupName(ss.Name)}, annotations, nil
}

// Running implements jobframework.Parent: any Pod, ready or not, holds
// (or waits for) the group's quota.
func (Adapter) Running(obj *unstructured.Unstructured) bool {
	n, _, _ := unstructured.NestedInt64(obj.Object, "status", "replicas")
	return n > 0
}

// CheckUpdate implements jobframework.Parent.
func (Adapter) CheckUpdate(oldObj, obj *unstructured.Unstructured) error {
	old, err := decode(oldObj)
	if err != nil {
		return err
	}
	ss, err := decode(obj)
	if err != nil {
		return err
	}
	was, is := replicas(old), replicas(ss)
	switch {
	case was > 0 && is > 0 && was != is:
		return fmt.Errorf("spec.replicas: may not change from %d to %d: a queued StatefulSet's pods are one group, admitted all together for %d pods; scale it to 0, then to %d",
			was, is, was, is)
	case was == 0 && is > 0 && old.Status.Replicas > 0:
		return fmt.Errorf("spec.replicas: may grow from 0 only once the pods of the scale-down are gone (%d are left)", old.Status.Replicas)
	}
	if was > 0 && is > 0 && !jobframework.SameShape(&old.Spec.Template.Spec, &ss.Spec.Template.Spec) {
		return fmt.Errorf("spec.template.spec: the pods' requests, node selector, tolerations, affinity, priority and runtime class may not change while the StatefulSet has replicas: " +
			"its group was admitted for them; scale it to 0 first")
	}
	return nil
}

func decode(obj *unstructured.Unstructured) (*appsv1.StatefulSet, error) {
	ss := &appsv1.StatefulSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, ss); err != nil {
		return nil, fmt.Errorf("not an apps/v1 StatefulSet: %w", err)
	}
	return ss, nil
}

// replicas is spec.replicas, 1 when unset.
func replicas(ss *appsv1.StatefulSet) int32 {
	if ss.Spec.Replicas == nil {
		return 1
	}
	return *ss.Spec.Replicas
}
