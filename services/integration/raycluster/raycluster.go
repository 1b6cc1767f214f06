// Package raycluster is Sluice's adapter for RayClusters (ray.io/v1): a
// pod set "head" of one pod and one pod set per worker group, named after
// it, of replicas × numOfHosts pods (an autoscaling group is counted at its
// declared replicas). A RayCluster is suspended through spec.suspend and
// never finishes by itself: deleting it releases its quota.
package raycluster

import (
	"fmt"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// HeadPodSet is the name of the head's pod set.
const HeadPodSet = "head"

// maxWorkerGroups keeps a workload within 8 pod sets, as Kueue does.
const maxWorkerGroups = 7

// Kind is the RayCluster's kind.
var Kind = jobframework.Kind{Name: "raycluster", GVK: rayv1.GroupVersion.WithKind("RayCluster"), Resource: "rayclusters", SuspendField: []string{"spec", "suspend"},
	ManagedBy: []string{"spec", "managedBy"}, ManagedByValue: v1beta1.KueueMultiKueueManagedBy, Module: Module, CRD: "config/crd/bases/ray.io_rayclusters.yaml", Title: "RayCluster",
	Elastic: true}

// Module is KubeRay's operator module, the API of RayJob too.
const Module = "github.com/ray-project/kuberay/ray-operator"

// Adapter is the RayCluster adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[rayv1.RayCluster](obj, "RayCluster")
	if err != nil {
		return nil, err
	}
	return &RayCluster{o}, nil
}

// RayCluster is a RayCluster under the framework.
type RayCluster struct{ *rayv1.RayCluster }

// Object implements jobframework.Job.
func (r *RayCluster) Object() runtime.Object { return r.RayCluster }

// Meta implements jobframework.Job.
func (r *RayCluster) Meta() metav1.Object { return r.RayCluster }

// IsSuspended implements jobframework.Job.
func (r *RayCluster) IsSuspended() bool { return r.Spec.Suspend != nil && *r.Spec.Suspend }

// SetSuspended implements jobframework.Job.
func (r *RayCluster) SetSuspended(s bool) { r.Spec.Suspend = &s }

// PodSets implements jobframework.Job.
func (r *RayCluster) PodSets() ([]jobframework.PodSet, error) {
	return PodSets(&r.Spec, "spec")
}

// Resizable implements jobframework.Resizable: an elastic RayCluster's
// worker groups may change size while it runs (the autoscaler's).
func (r *RayCluster) Resizable() {}

// Autoscales implements jobframework.Autoscaler: KubeRay's in-tree
// autoscaler changes the worker groups' replicas while it runs.
func (r *RayCluster) Autoscales() bool {
	return r.Spec.EnableInTreeAutoscaling != nil && *r.Spec.EnableInTreeAutoscaling
}

// Finished implements jobframework.Job: a RayCluster runs until deleted.
func (r *RayCluster) Finished() (bool, bool, string) { return false, false, "" }

// PodsReady implements jobframework.PodsReadier: KubeRay reports the
// cluster ready once its head and workers run.
func (r *RayCluster) PodsReady() bool { return r.Status.State == rayv1.Ready }

// PodSets reads a Ray cluster's pod sets; field names where the spec is in
// the object, for errors. RayJob reads its cluster with it too.
func PodSets(spec *rayv1.RayClusterSpec, field string) ([]jobframework.PodSet, error) {
	if len(spec.WorkerGroupSpecs) > maxWorkerGroups {
		return nil, fmt.Errorf("%s.workerGroupSpecs has %d groups, at most %d are supported: %w", field, len(spec.WorkerGroupSpecs), maxWorkerGroups, jobframework.ErrInvalidJob)
	}
	out := []jobframework.PodSet{{Name: HeadPodSet, Count: 1, Spec: &spec.HeadGroupSpec.Template.Spec, Meta: &spec.HeadGroupSpec.Template.ObjectMeta}}
	seen := map[string]bool{HeadPodSet: true}
	for i := range spec.WorkerGroupSpecs {
		g := &spec.WorkerGroupSpecs[i]
		at := fmt.Sprintf("%s.workerGroupSpecs[%d]", field, i)
		if g.GroupName == "" || seen[g.GroupName] {
			return nil, fmt.Errorf("%s.groupName %q is empty or repeated (\"head\" is taken): %w", at, g.GroupName, jobframework.ErrInvalidJob)
		}
		seen[g.GroupName] = true
		replicas := int32(1)
		if g.Replicas != nil {
			replicas = *g.Replicas
		}
		if replicas < 0 {
			return nil, fmt.Errorf("%s (%s).replicas is %d: %w", at, g.GroupName, replicas, jobframework.ErrInvalidJob)
		}
		hosts := max(g.NumOfHosts, 1)
		out = append(out, jobframework.PodSet{Name: g.GroupName, Count: replicas * hosts, Spec: &g.Template.Spec, Meta: &g.Template.ObjectMeta})
	}
	return out, nil
}
