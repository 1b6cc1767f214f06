// Package rayjob is Sluice's adapter for RayJobs (ray.io/v1): the pod sets
// of its rayClusterSpec (head and worker groups, see raycluster) and, when
// it submits through a Kubernetes Job (the default mode), a "submitter" pod
// set of one pod. A RayJob is suspended through spec.suspend and finishes
// when its jobDeploymentStatus is Complete or Failed. A RayJob that runs on
// an existing cluster (spec.clusterSelector) cannot be queued: Sluice would
// not know what it uses.
package rayjob

import (
	"fmt"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/raycluster"
)

// SubmitterPodSet is the name of the submitter Job's pod set.
const SubmitterPodSet = "submitter"

// Kind is the RayJob's kind.
var Kind = jobframework.Kind{Name: "rayjob", GVK: rayv1.GroupVersion.WithKind("RayJob"), Resource: "rayjobs", SuspendField: []string{"spec", "suspend"},
	ManagedBy: []string{"spec", "managedBy"}, ManagedByValue: v1beta1.KueueMultiKueueManagedBy, Module: raycluster.Module, CRD: "config/crd/bases/ray.io_rayjobs.yaml", Title: "RayJob"}

// Adapter is the RayJob adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[rayv1.RayJob](obj, "RayJob")
	if err != nil {
		return nil, err
	}
	return newRayJob(o), nil
}

// RayJob is a RayJob under the framework.
type RayJob struct {
	*rayv1.RayJob
	// submitter stands in for the submitter pod KubeRay makes when the
	// RayJob has no submitterPodTemplate: its requests count, and what is
	// written into it is not part of the object.
	submitter corev1.PodSpec
}

func newRayJob(rj *rayv1.RayJob) *RayJob {
	return &RayJob{RayJob: rj, submitter: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "ray-job-submitter",
		// KubeRay's default submitter requests.
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("200Mi"),
		}},
	}}}}
}

// Object implements jobframework.Job.
func (r *RayJob) Object() runtime.Object { return r.RayJob }

// Meta implements jobframework.Job.
func (r *RayJob) Meta() metav1.Object { return r.RayJob }

// IsSuspended implements jobframework.Job.
func (r *RayJob) IsSuspended() bool { return r.Spec.Suspend }

// SetSuspended implements jobframework.Job.
func (r *RayJob) SetSuspended(s bool) { r.Spec.Suspend = s }

// PodSets implements jobframework.Job.
func (r *RayJob) PodSets() ([]jobframework.PodSet, error) {
	if len(r.Spec.ClusterSelector) > 0 {
		return nil, fmt.Errorf("spec.clusterSelector is set: a RayJob on an existing RayCluster cannot be queued: %w", jobframework.ErrInvalidJob)
	}
	if r.Spec.RayClusterSpec == nil {
		return nil, fmt.Errorf("spec.rayClusterSpec is missing: %w", jobframework.ErrInvalidJob)
	}
	sets, err := raycluster.PodSets(r.Spec.RayClusterSpec, "spec.rayClusterSpec")
	if err != nil {
		return nil, err
	}
	mode := r.Spec.SubmissionMode
	if mode == "" || mode == rayv1.K8sJobMode {
		ps := jobframework.PodSet{Name: SubmitterPodSet, Count: 1, Spec: &r.submitter}
		if t := r.Spec.SubmitterPodTemplate; t != nil {
			ps.Spec, ps.Meta = &t.Spec, &t.ObjectMeta
		}
		sets = append(sets, ps)
	}
	return sets, nil
}

// Finished implements jobframework.Job: KubeRay's jobDeploymentStatus.
func (r *RayJob) Finished() (finished, succeeded bool, message string) {
	switch r.Status.JobDeploymentStatus {
	case rayv1.JobDeploymentStatusComplete:
		return true, r.Status.JobStatus != rayv1.JobStatusFailed, text(r, "rayjob completed")
	case rayv1.JobDeploymentStatusFailed:
		return true, false, text(r, "rayjob failed")
	}
	return false, false, ""
}

// PodsReady implements jobframework.PodsReadier: the RayJob's cluster is
// ready, as KubeRay reports it.
func (r *RayJob) PodsReady() bool { return r.Status.RayClusterStatus.State == rayv1.Ready }

func text(r *RayJob, fallback string) string {
	switch {
	case r.Status.Message != "":
		return r.Status.Message
	case r.Status.Reason != "":
		return string(r.Status.Reason)
	default:
		return fallback
	}
}
