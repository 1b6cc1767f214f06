// Package job is Sluice's adapter for batch/v1 Jobs, the worked example of
// docs/integrations.md. A Job is one pod set, "main", of
// min(parallelism, completions) pods; it is suspended through
// spec.suspend, finishes with its Complete or Failed condition, may be
// admitted with fewer pods than it asks for (sluice.dev/job-min-parallelism
// makes it a Scaler of spec.parallelism), and needs status.startTime
// cleared before its template can be restored (an Unlocker).
//
// # The Kubernetes rule this relies on
//
// The pod template of a Job is immutable, except that its node affinity,
// nodeSelector, tolerations, labels, annotations and scheduling gates may be
// changed while the Job, as stored before the update, is suspended and has
// never started (status.startTime is nil). This is KEP-2926 "Mutable
// scheduling directives for Jobs" (beta 1.23, GA 1.27,
// https://www.kubernetes.dev/resources/keps/2926/), and in the v1.34.4 API
// server it is the check in pkg/registry/batch/job/strategy.go:
//
//	suspended := oldJob.Spec.Suspend != nil && *oldJob.Spec.Suspend
//	notStarted := oldJob.Status.StartTime == nil
//	opts.AllowMutableSchedulingDirectives = suspended && notStarted
//
// The check looks at the old object only. Therefore:
//
//   - Admission is one write: the stored Job is suspended, so one patch may
//     both change the template and set spec.suspend=false.
//   - Eviction of a running Job cannot be one write: the stored Job is not
//     suspended, so a template change in the same patch is rejected. And the
//     Job controller never clears status.startTime on suspension (it only
//     resets it on resume), so after suspending, the template stays locked
//     until status.startTime is cleared through the status subresource, which
//     the API server allows for a suspended Job (kubernetes/kubernetes#113221
//     describes the rule and the gap; Kueue works around it the same way, see
//     kubernetes-sigs/kueue#2566). The framework therefore stops a running
//     Job in three writes: suspend; clear status.startTime; restore the
//     template. Because admission always starts from the recorded original
//     values, a crash between these steps loses nothing: the next admission
//     or a retried eviction computes the same result.
package job
