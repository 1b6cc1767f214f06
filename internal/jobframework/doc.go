// Package jobframework is Sluice's framework for job kinds: everything an
// integration does that does not depend on the kind. An [Adapter] teaches it
// one kind (see services/integration/job for batch/v1 Job, and
// docs/integrations.md for adding one); the integration service
// (services/integration) runs any set of adapters in one process, and any
// number of replicas share the work. This package does no I/O of its own
// beyond the admission webhook's server: it turns objects into workloads
// and admissions into patches.
//
// An object opts in to queueing with the label sluice.dev/queue-name,
// naming a LocalQueue in its namespace. Its life in Sluice is:
//
//  1. Suspend on create. The mutating admission webhook (webhook.go)
//     answers CREATE of a labelled object with a JSON patch that applies
//     the adapter's suspension, so no pod starts before admission.
//     [EnsureWebhookConfiguration] registers one webhook per kind with
//     failurePolicy=Fail and sideEffects=None, scoped by an objectSelector
//     to labelled objects only.
//
//  2. Queue. [WorkloadOf] turns the object into a [Workload]: one pod set
//     per adapter pod set, with its count, the effective per-pod requests
//     (as kube-scheduler computes them), the node selector and tolerations
//     the user wrote, the LocalQueue and the priority. It is stored in the
//     workloads bucket and announced.
//
//  3. Admit. When the ledger holds a reservation for the workload,
//     [Admit] changes the object in memory: the assigned flavors' node
//     labels and tolerations go into each pod set's template, a Scaler's
//     count is lowered for a partial admission, the user's own values
//     (annotation sluice.dev/original) and the admission (annotation
//     sluice.dev/admission) are recorded, and the object resumes.
//     [MergePatch] turns the change into one API write, fenced by the
//     object's uid and resourceVersion.
//
//  4. Stop. A preempted or evicted object is stopped by the writes
//     [NextStopStep] returns in turn: suspend, unlock (a kind that needs
//     it), restore its templates as the user wrote them.
//
//  5. Finish. The adapter reads the end from the kind's own status; the
//     record is deleted and the end announced, and quota accounting
//     releases the reservation.
//
// # Patch format
//
// Writes to objects are RFC 7386 JSON merge patches computed by diffing
// the object before and after the in-memory change, so an adapter never
// builds a patch. Merge patches remove map keys with null and replace lists
// as a whole, which is what we want for tolerations. Each carries
// metadata.uid: if the object was deleted and recreated under the same
// name, the API server refuses the patch instead of changing an object
// Sluice never admitted.
package jobframework
