// Package rayservice is Sluice's adapter for KubeRay's RayServices
// (ray.io/v1), a parent kind: a RayService labelled sluice.dev/queue-name
// is never queued itself. KubeRay gives each RayCluster it creates for the
// RayService the RayService's labels, queue label included, so the
// raycluster integration queues each cluster as any RayCluster: suspended
// on create, admitted with its flavor, stopped when preempted, its quota
// released when KubeRay deletes it (after an upgrade switched traffic to a
// new cluster, which queues on its own). The RayService's webhook refuses
// a queue name no LocalQueue can have, and a change of queue while a
// cluster of the RayService serves or is being prepared.
package rayservice

import (
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Kind is the RayService's kind.
var Kind = jobframework.Kind{Name: "rayservice", GVK: rayv1.GroupVersion.WithKind("RayService"), Resource: "rayservices", QueuedBy: "raycluster",
	Module: "github.com/ray-project/kuberay/ray-operator", CRD: "config/crd/bases/ray.io_rayservices.yaml",
	Title: "RayService (its RayClusters queued by the raycluster integration)"}

// Adapter is the RayService adapter.
type Adapter struct{}

var _ jobframework.Parent = Adapter{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter: a parent's objects are not jobs.
func (Adapter) Decode(runtime.Object) (jobframework.Job, error) {
	return nil, jobframework.ErrParentKind
}

// PodTemplates implements jobframework.Parent: none to label; KubeRay
// labels the RayClusters.
func (Adapter) PodTemplates() [][]string { return nil }

// PodMeta implements jobframework.Parent.
func (Adapter) PodMeta(*unstructured.Unstructured) (map[string]string, map[string]string, error) {
	return nil, nil, nil
}

// Running implements jobframework.Parent: a cluster serves, or one is
// being prepared.
func (Adapter) Running(obj *unstructured.Unstructured) bool {
	for _, s := range []string{"activeServiceStatus", "pendingServiceStatus"} {
		if name, _, _ := unstructured.NestedString(obj.Object, "status", s, "rayClusterName"); name != "" {
			return true
		}
	}
	return false
}

// CheckUpdate implements jobframework.Parent: each cluster holds its own
// quota.
func (Adapter) CheckUpdate(_, _ *unstructured.Unstructured) error { return nil }
