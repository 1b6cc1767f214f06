// Package kubeflow is what Sluice's adapters for the Kubeflow training
// operator's jobs (kubeflow.org/v1: PyTorchJob, TFJob, XGBoostJob,
// PaddleJob, JAXJob) share. Each of those kinds keeps its replicas in a map by
// replica type, its suspension in spec.runPolicy.suspend and its end in
// Kubeflow job conditions; only the map's field and the order of the
// replica types differ. An adapter decodes its typed object and hands
// those parts to New.
package kubeflow

import (
	"fmt"
	"sort"
	"strings"

	kftov1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Object is a typed Kubeflow job.
type Object interface {
	runtime.Object
	metav1.Object
}

// Shape says where a kind keeps its replicas: the JSON path of its
// replica map, for errors, and the order of its known replica types (pod
// sets come in that order, then unknown types by name).
type Shape struct {
	// Kind names the kind in messages, e.g. "tfjob".
	Kind  string
	Field string
	Order []kftov1.ReplicaType
}

// Job is a Kubeflow job under the framework: its parts point into the
// typed object, so the framework's changes land there.
type Job struct {
	obj      Object
	replicas map[kftov1.ReplicaType]*kftov1.ReplicaSpec
	run      *kftov1.RunPolicy
	status   *kftov1.JobStatus
	shape    *Shape
}

// New wraps a decoded Kubeflow job: its replica map, its run policy and
// its status, all inside obj.
func New(obj Object, replicas map[kftov1.ReplicaType]*kftov1.ReplicaSpec, run *kftov1.RunPolicy, status *kftov1.JobStatus, shape *Shape) *Job {
	return &Job{obj: obj, replicas: replicas, run: run, status: status, shape: shape}
}

// Object implements jobframework.Job.
func (j *Job) Object() runtime.Object { return j.obj }

// Meta implements jobframework.Job.
func (j *Job) Meta() metav1.Object { return j.obj }

// IsSuspended implements jobframework.Job.
func (j *Job) IsSuspended() bool { return j.run.Suspend != nil && *j.run.Suspend }

// SetSuspended implements jobframework.Job.
func (j *Job) SetSuspended(s bool) { j.run.Suspend = &s }

// PodSets implements jobframework.Job: one pod set per replica type, named
// in lower case, of its replicas (default 1).
func (j *Job) PodSets() ([]jobframework.PodSet, error) {
	if len(j.replicas) == 0 {
		return nil, fmt.Errorf("%s is empty: %w", j.shape.Field, jobframework.ErrInvalidJob)
	}
	rank := func(t kftov1.ReplicaType) int {
		for i, o := range j.shape.Order {
			if o == t {
				return i
			}
		}
		return len(j.shape.Order)
	}
	types := make([]kftov1.ReplicaType, 0, len(j.replicas))
	for t, rs := range j.replicas {
		if rs != nil {
			types = append(types, t)
		}
	}
	sort.Slice(types, func(a, b int) bool {
		if ra, rb := rank(types[a]), rank(types[b]); ra != rb {
			return ra < rb
		}
		return types[a] < types[b]
	})
	out := make([]jobframework.PodSet, 0, len(types))
	for _, t := range types {
		rs := j.replicas[t]
		n := int32(1)
		if rs.Replicas != nil {
			n = *rs.Replicas
		}
		if n < 0 {
			return nil, fmt.Errorf("%s.%s.replicas is %d: %w", j.shape.Field, t, n, jobframework.ErrInvalidJob)
		}
		out = append(out, jobframework.PodSet{Name: strings.ToLower(string(t)), Count: n, Spec: &rs.Template.Spec, Meta: &rs.Template.ObjectMeta})
	}
	return out, nil
}

// PodsReady implements jobframework.PodsReadier: the job's Running
// condition, which the training operator sets once its pods run.
func (j *Job) PodsReady() bool {
	for _, c := range j.status.Conditions {
		if c.Type == kftov1.JobRunning {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Finished implements jobframework.Job: a True Succeeded or Failed
// condition.
func (j *Job) Finished() (finished, succeeded bool, message string) {
	for _, c := range j.status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case kftov1.JobSucceeded:
			return true, true, orElse(c.Message, c.Reason, j.shape.Kind+" succeeded")
		case kftov1.JobFailed:
			return true, false, orElse(c.Message, c.Reason, j.shape.Kind+" failed")
		}
	}
	return false, false, ""
}

func orElse(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Module is the training operator's module: the API types and CRDs of
// its jobs.
const Module = "github.com/kubeflow/training-operator"

// CRD is the path of the CRD of a training operator's kind inside Module,
// by its plural resource name.
func CRD(resource string) string { return "manifests/base/crds/kubeflow.org_" + resource + ".yaml" }

// SuspendField is where every Kubeflow job keeps its suspension.
var SuspendField = []string{"spec", "runPolicy", "suspend"}

// ManagedByField is where the training operator's jobs name their
// manager (the operator acts only on its own name, or on none).
var ManagedByField = []string{"spec", "runPolicy", "managedBy"}
