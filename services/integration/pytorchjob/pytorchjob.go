// Package pytorchjob is Sluice's adapter for Kubeflow PyTorchJobs
// (kubeflow.org/v1, training-operator): one pod set per replica type,
// "master" then "worker", of its replicas (default 1). A PyTorchJob is
// suspended through spec.runPolicy.suspend (the webhook adds runPolicy when
// the manifest has none) and finishes with its Succeeded or Failed
// condition.
package pytorchjob

import (
	"fmt"
	"sort"
	"strings"

	kftov1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/services/integration"
)

// Kind is the PyTorchJob's kind.
var Kind = integration.Kind{Name: "pytorchjob", GVK: kftov1.GroupVersion.WithKind("PyTorchJob"), Resource: "pytorchjobs", SuspendField: []string{"spec", "runPolicy", "suspend"}}

// Adapter is the PyTorchJob adapter.
type Adapter struct{}

// Kind implements integration.Adapter.
func (Adapter) Kind() integration.Kind { return Kind }

// Decode implements integration.Adapter.
func (Adapter) Decode(obj runtime.Object) (integration.Job, error) {
	o, err := integration.DecodeAs[kftov1.PyTorchJob](obj, "PyTorchJob")
	if err != nil {
		return nil, err
	}
	return &PyTorchJob{o}, nil
}

// PyTorchJob is a PyTorchJob under the framework.
type PyTorchJob struct{ *kftov1.PyTorchJob }

// Object implements integration.Job.
func (p *PyTorchJob) Object() runtime.Object { return p.PyTorchJob }

// Meta implements integration.Job.
func (p *PyTorchJob) Meta() metav1.Object { return p.PyTorchJob }

// IsSuspended implements integration.Job.
func (p *PyTorchJob) IsSuspended() bool {
	return p.Spec.RunPolicy.Suspend != nil && *p.Spec.RunPolicy.Suspend
}

// SetSuspended implements integration.Job.
func (p *PyTorchJob) SetSuspended(s bool) { p.Spec.RunPolicy.Suspend = &s }

// PodSets implements integration.Job.
func (p *PyTorchJob) PodSets() ([]integration.PodSet, error) {
	specs := map[string]replica{}
	for t, rs := range p.Spec.PyTorchReplicaSpecs {
		if rs == nil {
			continue
		}
		specs[string(t)] = replica{rs.Replicas, &rs.Template.Spec, &rs.Template.ObjectMeta}
	}
	return replicaPodSets(specs, "spec.pytorchReplicaSpecs", []string{string(kftov1.PyTorchJobReplicaTypeMaster), string(kftov1.PyTorchJobReplicaTypeWorker)})
}

// PodsReady implements integration.PodsReadier: the PyTorchJob's Running
// condition, which the training-operator sets once its pods run.
func (p *PyTorchJob) PodsReady() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == kftov1.JobRunning {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Finished implements integration.Job.
func (p *PyTorchJob) Finished() (finished, succeeded bool, message string) {
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case kftov1.JobSucceeded:
			return true, true, orElse(c.Message, c.Reason, "pytorchjob succeeded")
		case kftov1.JobFailed:
			return true, false, orElse(c.Message, c.Reason, "pytorchjob failed")
		}
	}
	return false, false, ""
}

type replica struct {
	replicas *int32
	spec     *corev1.PodSpec
	meta     *metav1.ObjectMeta
}

// replicaPodSets orders a Kubeflow job's replica types (known ones first,
// the rest by name) into pod sets named in lower case.
func replicaPodSets(specs map[string]replica, field string, order []string) ([]integration.PodSet, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s is empty: %w", field, integration.ErrInvalidJob)
	}
	rank := map[string]int{}
	for i, t := range order {
		rank[t] = i + 1
	}
	types := make([]string, 0, len(specs))
	for t := range specs {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool {
		ri, rj := rank[types[i]], rank[types[j]]
		if ri == 0 {
			ri = len(order) + 1
		}
		if rj == 0 {
			rj = len(order) + 1
		}
		if ri != rj {
			return ri < rj
		}
		return types[i] < types[j]
	})
	out := make([]integration.PodSet, 0, len(types))
	for _, t := range types {
		r := specs[t]
		n := int32(1)
		if r.replicas != nil {
			n = *r.replicas
		}
		if n < 0 {
			return nil, fmt.Errorf("%s.%s.replicas is %d: %w", field, t, n, integration.ErrInvalidJob)
		}
		out = append(out, integration.PodSet{Name: strings.ToLower(t), Count: n, Spec: r.spec, Meta: r.meta})
	}
	return out, nil
}

func orElse(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
