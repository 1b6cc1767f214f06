// Package job is Sluice's integration for batch/v1 Jobs: the pure parts that
// the job service (its NATS and Kubernetes wiring lives elsewhere) calls.
//
// A Job opts in to queueing with the label sluice.dev/queue-name, naming a
// LocalQueue in the Job's namespace. Its life in Sluice is:
//
//  1. Suspend on create. The mutating admission webhook (webhook.go) answers
//     CREATE of a labelled Job with a JSONPatch that sets spec.suspend=true,
//     so the Job controller creates no pods until Sluice admits it.
//     [EnsureWebhookConfiguration] registers the webhook with
//     failurePolicy=Fail, scoped by an objectSelector to labelled Jobs only.
//
//  2. Translate. [WorkloadFromJob] turns the Job into a [Workload]: one pod
//     set named "main" with the pod count, the effective per-pod requests (as
//     kube-scheduler computes them), the node selector and tolerations the
//     user wrote, the LocalQueue and the priority.
//
//  3. Admit. [AdmissionPatch] builds the single API write that starts an
//     admitted Job: it injects the assigned flavors' node labels and
//     tolerations into the pod template, lowers parallelism for a partial
//     admission, records what it changed (annotation sluice.dev/original)
//     and the admission itself (annotation sluice.dev/admission), and sets
//     spec.suspend=false.
//
//  4. Evict. [EvictionSteps] returns the ordered writes that stop a Job and
//     put its template back as the user wrote it; [EvictionPatch] is the last
//     of them.
//
//  5. Finish. [IsFinished] reads the Job's terminal conditions.
//
// # Patch format
//
// Every patch built here is an RFC 7386 JSON merge patch, to be sent with
// content type application/merge-patch+json (types.MergePatchType). Merge
// patches need no knowledge of list positions, remove map keys with null, and
// replace lists (tolerations) as a whole, which is what we want. Each patch
// also carries metadata.uid when the Job has one: if the Job was deleted and
// recreated under the same name, the API server refuses the patch instead of
// starting a Job that Sluice never admitted.
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
//     kubernetes-sigs/kueue#2566). [EvictionSteps] therefore returns up to
//     three writes: suspend; clear status.startTime; restore the template.
//     Because [AdmissionPatch] always starts from the recorded original
//     values, a crash between these steps loses nothing: the next admission
//     or a retried eviction computes the same result.
package job
