// Package mpijob is Sluice's adapter for MPIJobs (kubeflow.org/v2beta1,
// mpi-operator): a pod set "launcher" and a pod set "worker" of their
// replicas (default 1). An MPIJob is suspended through
// spec.runPolicy.suspend (its CRD defaults it to false, so the webhook sets
// it on create) and finishes with its Succeeded or Failed condition.
package mpijob

import (
	"fmt"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Kind is the MPIJob's kind.
var Kind = jobframework.Kind{Name: "mpijob", GVK: mpiv2.SchemeGroupVersion.WithKind("MPIJob"), Resource: "mpijobs", SuspendField: []string{"spec", "runPolicy", "suspend"},
	ManagedBy: []string{"spec", "runPolicy", "managedBy"}, ManagedByValue: v1beta1.KueueMultiKueueManagedBy,
	// v2beta1 comes from mpi-operator (the training operator's MPIJob CRD is
	// the older v1 of the same name).
	Module: "github.com/kubeflow/mpi-operator", CRD: "manifests/base/kubeflow.org_mpijobs.yaml", Title: "MPIJob (mpi-operator)"}

// Adapter is the MPIJob adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[mpiv2.MPIJob](obj, "MPIJob")
	if err != nil {
		return nil, err
	}
	return &MPIJob{o}, nil
}

// MPIJob is an MPIJob under the framework.
type MPIJob struct{ *mpiv2.MPIJob }

// Object implements jobframework.Job.
func (m *MPIJob) Object() runtime.Object { return m.MPIJob }

// Meta implements jobframework.Job.
func (m *MPIJob) Meta() metav1.Object { return m.MPIJob }

// IsSuspended implements jobframework.Job.
func (m *MPIJob) IsSuspended() bool {
	return m.Spec.RunPolicy.Suspend != nil && *m.Spec.RunPolicy.Suspend
}

// SetSuspended implements jobframework.Job.
func (m *MPIJob) SetSuspended(s bool) { m.Spec.RunPolicy.Suspend = &s }

// PodSets implements jobframework.Job: launcher, then worker.
func (m *MPIJob) PodSets() ([]jobframework.PodSet, error) {
	var out []jobframework.PodSet
	for _, t := range []mpiv2.MPIReplicaType{mpiv2.MPIReplicaTypeLauncher, mpiv2.MPIReplicaTypeWorker} {
		rs := m.Spec.MPIReplicaSpecs[t]
		if rs == nil {
			if t == mpiv2.MPIReplicaTypeLauncher {
				return nil, fmt.Errorf("spec.mpiReplicaSpecs.Launcher is missing: %w", jobframework.ErrInvalidJob)
			}
			continue
		}
		n := int32(1)
		if rs.Replicas != nil {
			n = *rs.Replicas
		}
		if n < 0 {
			return nil, fmt.Errorf("spec.mpiReplicaSpecs.%s.replicas is %d: %w", t, n, jobframework.ErrInvalidJob)
		}
		name := "launcher"
		if t == mpiv2.MPIReplicaTypeWorker {
			name = "worker"
		}
		out = append(out, jobframework.PodSet{Name: name, Count: n, Spec: &rs.Template.Spec, Meta: &rs.Template.ObjectMeta})
	}
	for t := range m.Spec.MPIReplicaSpecs {
		if t != mpiv2.MPIReplicaTypeLauncher && t != mpiv2.MPIReplicaTypeWorker {
			return nil, fmt.Errorf("spec.mpiReplicaSpecs.%s: only Launcher and Worker are known: %w", t, jobframework.ErrInvalidJob)
		}
	}
	return out, nil
}

// PodsReady implements jobframework.PodsReadier: the MPIJob's Running
// condition, which the mpi-operator sets once its launcher and workers run.
func (m *MPIJob) PodsReady() bool {
	for _, c := range m.Status.Conditions {
		if c.Type == mpiv2.JobRunning {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Finished implements jobframework.Job.
func (m *MPIJob) Finished() (finished, succeeded bool, message string) {
	for _, c := range m.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		msg := c.Message
		if msg == "" {
			msg = c.Reason
		}
		switch c.Type {
		case mpiv2.JobSucceeded:
			return true, true, msg
		case mpiv2.JobFailed:
			return true, false, msg
		}
	}
	return false, false, ""
}
