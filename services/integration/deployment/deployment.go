// Package deployment is Sluice's adapter for apps/v1 Deployments, a parent
// kind: a Deployment labelled sluice.dev/queue-name is never queued itself.
// Its webhook copies the queue and priority labels into the pod template,
// so each Pod its ReplicaSets create is queued and admitted on its own by
// the pod integration (gated on create, started when admitted, deleted
// when preempted, and then created again, gated, by its ReplicaSet).
// Scaling up queues the new Pods, scaling down releases the quota of the
// Pods removed, and a rolling update queues each new Pod as it comes.
//
// The queue may not change, nor be removed, while the Deployment has ready
// Pods: they run on the quota of the queue they were admitted by.
package deployment

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Kind is the Deployment's kind.
var Kind = jobframework.Kind{Name: "deployment", GVK: appsv1.SchemeGroupVersion.WithKind("Deployment"), Resource: "deployments", QueuedBy: "pod",
	Title: "Deployment (its Pods queued one by one by the pod integration)"}

// Adapter is the Deployment adapter.
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

// PodMeta implements jobframework.Parent: nothing beyond the queue
// labels; each Pod is a workload of its own.
func (Adapter) PodMeta(*unstructured.Unstructured) (map[string]string, map[string]string, error) {
	return nil, nil, nil
}

// Running implements jobframework.Parent: any ready replica.
func (Adapter) Running(obj *unstructured.Unstructured) bool {
	n, _, _ := unstructured.NestedInt64(obj.Object, "status", "readyReplicas")
	return n > 0
}

// CheckUpdate implements jobframework.Parent: every Pod holds its own
// quota, so any scaling or rollout is fine.
func (Adapter) CheckUpdate(_, _ *unstructured.Unstructured) error { return nil }
