// Package jobset is Sluice's adapter for JobSets (jobset.x-k8s.io/v1alpha2).
// Each replicatedJob is one pod set, named after it, of replicas ×
// min(parallelism (default 1), completions) pods; a JobSet is suspended
// through spec.suspend (its controller then suspends the child Jobs) and
// finishes with its Completed or Failed condition.
package jobset

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	jobsetv1 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Kind is the JobSet's kind.
var Kind = jobframework.Kind{Name: "jobset", GVK: jobsetv1.GroupVersion.WithKind("JobSet"), Resource: "jobsets", SuspendField: []string{"spec", "suspend"},
	ManagedBy: []string{"spec", "managedBy"}, Module: "sigs.k8s.io/jobset", CRD: "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml", Title: "JobSet"}

// Adapter is the JobSet adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[jobsetv1.JobSet](obj, "JobSet")
	if err != nil {
		return nil, err
	}
	return &JobSet{o}, nil
}

// JobSet is a JobSet under the framework.
type JobSet struct{ *jobsetv1.JobSet }

// Object implements jobframework.Job.
func (j *JobSet) Object() runtime.Object { return j.JobSet }

// Meta implements jobframework.Job.
func (j *JobSet) Meta() metav1.Object { return j.JobSet }

// IsSuspended implements jobframework.Job.
func (j *JobSet) IsSuspended() bool { return j.Spec.Suspend != nil && *j.Spec.Suspend }

// SetSuspended implements jobframework.Job.
func (j *JobSet) SetSuspended(s bool) { j.Spec.Suspend = &s }

// PodSets implements jobframework.Job: one pod set per replicatedJob.
func (j *JobSet) PodSets() ([]jobframework.PodSet, error) {
	if len(j.Spec.ReplicatedJobs) == 0 {
		return nil, fmt.Errorf("spec.replicatedJobs is empty: %w", jobframework.ErrInvalidJob)
	}
	out := make([]jobframework.PodSet, 0, len(j.Spec.ReplicatedJobs))
	for i := range j.Spec.ReplicatedJobs {
		rj := &j.Spec.ReplicatedJobs[i]
		field := fmt.Sprintf("spec.replicatedJobs[%d]", i)
		if rj.Name == "" {
			return nil, fmt.Errorf("%s.name is empty: %w", field, jobframework.ErrInvalidJob)
		}
		if rj.Replicas < 0 {
			return nil, fmt.Errorf("%s (%s).replicas is %d: %w", field, rj.Name, rj.Replicas, jobframework.ErrInvalidJob)
		}
		spec := &rj.Template.Spec
		par := int32(1)
		if spec.Parallelism != nil {
			par = *spec.Parallelism
		}
		if par < 0 {
			return nil, fmt.Errorf("%s (%s).template.spec.parallelism is %d: %w", field, rj.Name, par, jobframework.ErrInvalidJob)
		}
		if c := spec.Completions; c != nil {
			if *c < 0 {
				return nil, fmt.Errorf("%s (%s).template.spec.completions is %d: %w", field, rj.Name, *c, jobframework.ErrInvalidJob)
			}
			par = min(par, *c)
		}
		out = append(out, jobframework.PodSet{Name: rj.Name, Count: rj.Replicas * par, Spec: &spec.Template.Spec, Meta: &spec.Template.ObjectMeta})
	}
	return out, nil
}

// Finished implements jobframework.Job: the Completed or Failed condition
// the JobSet controller sets to True.
func (j *JobSet) Finished() (finished, succeeded bool, message string) {
	if c := meta.FindStatusCondition(j.Status.Conditions, string(jobsetv1.JobSetCompleted)); c != nil && c.Status == metav1.ConditionTrue {
		return true, true, jobframework.ConditionText(c, "jobset completed")
	}
	if c := meta.FindStatusCondition(j.Status.Conditions, string(jobsetv1.JobSetFailed)); c != nil && c.Status == metav1.ConditionTrue {
		return true, false, jobframework.ConditionText(c, "jobset failed")
	}
	return false, false, ""
}

// PodsReady implements jobframework.PodsReadier, as Kueue judges a JobSet:
// every child Job of every replicatedJob is ready (its pods ready or done)
// or succeeded.
func (j *JobSet) PodsReady() bool {
	var want, ready int32
	for _, rj := range j.Spec.ReplicatedJobs {
		want += rj.Replicas
	}
	for _, st := range j.Status.ReplicatedJobsStatus {
		ready += st.Ready + st.Succeeded
	}
	return ready >= want
}
