package job

import (
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// The framework's operations seen from one Job, as the tests use them.

type (
	Assignment       = jobframework.Assignment
	PodSetAssignment = jobframework.PodSetAssignment
	PodSetUpdate     = jobframework.PodSetUpdate
)

const (
	OriginalAnnotation  = jobframework.OriginalAnnotation
	AdmissionAnnotation = jobframework.AdmissionAnnotation
)

var (
	ErrInvalidJob            = jobframework.ErrInvalidJob
	ErrInvalidAssignment     = jobframework.ErrInvalidAssignment
	ErrNodeSelectorConflict  = jobframework.ErrNodeSelectorConflict
	ErrNotSuspended          = jobframework.ErrNotSuspended
	ErrBadAnnotation         = jobframework.ErrBadAnnotation
	ErrNotManaged            = jobframework.ErrNotManaged
	ErrPriorityClassNotFound = jobframework.ErrPriorityClassNotFound
	ErrNoPriorityResolver    = jobframework.ErrNoPriorityResolver
)

// admissionPatch is the merge patch the framework sends to start job under
// a.
func admissionPatch(job *batchv1.Job, a Assignment, flavors map[string]*v1beta1.ResourceFlavor) ([]byte, error) {
	if job == nil {
		return nil, fmt.Errorf("nil job: %w", ErrInvalidJob)
	}
	after := &Job{job.DeepCopy()}
	if err := jobframework.Admit(after, a, flavors); err != nil {
		return nil, fmt.Errorf("job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return jobframework.MergePatch(job, after.Job, string(job.UID), "")
}

// nextStopStep is the framework's next write to stop job.
func nextStopStep(job *batchv1.Job) (jobframework.Step, error) {
	return jobframework.NextStopStep(Adapter{}, &Job{job.DeepCopy()})
}

// originalOf decodes the sluice.dev/original annotation.
func originalOf(job *batchv1.Job) ([]jobframework.Original, bool, error) {
	if job == nil {
		return nil, false, nil
	}
	raw, ok := job.Annotations[OriginalAnnotation]
	if !ok {
		return nil, false, nil
	}
	var o []jobframework.Original
	err := json.Unmarshal([]byte(raw), &o)
	return o, true, err
}

// isAdmitted: running under an admission recorded on the Job.
func isAdmitted(job *batchv1.Job) bool {
	if job == nil {
		return false
	}
	_, ok := job.Annotations[AdmissionAnnotation]
	return ok && !(&Job{job}).IsSuspended()
}

func isSuspended(job *batchv1.Job) bool { return (&Job{job}).IsSuspended() }

func admissionOf(job *batchv1.Job) (Assignment, bool, error) {
	if job == nil {
		return Assignment{}, false, nil
	}
	return jobframework.AdmissionOf(job.Annotations)
}

// workloadFromJob is the workload the framework reads from a Job.
func workloadFromJob(job *batchv1.Job, prio jobframework.PriorityResolver) (jobframework.Workload, error) {
	if job == nil {
		return jobframework.Workload{}, fmt.Errorf("nil job: %w", ErrInvalidJob)
	}
	return jobframework.WorkloadOf("job", &Job{job.DeepCopy()}, prio)
}

func isFinished(job *batchv1.Job) (bool, bool, string) {
	if job == nil {
		return false, false, ""
	}
	return (&Job{job}).Finished()
}
