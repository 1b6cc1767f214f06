// Package pod is Sluice's adapter for plain Pods: a Pod that carries
// sluice.dev/queue-name and belongs to no other integrated kind is one
// workload of one pod set, "main", of one pod.
//
// A Pod has no suspend field. It is held back by a scheduling gate,
// sluice.dev/admission, which the webhook adds on create: the scheduler
// does not place a gated Pod. Admission is one write: while the stored Pod
// still has scheduling gates, the API server lets an update add to its
// nodeSelector and tolerations and remove gates (KEP-3838, "mutable pod
// scheduling directives"), so the flavor's node labels and tolerations go
// in with the removal of the gate.
//
// A gate cannot be added back to a Pod that was created without it or
// ungated, so a Pod cannot be suspended once admitted: like Kueue, Sluice
// stops it by deleting it (a Deleter). Whoever created it creates it again
// to queue it anew. A Pod whose admission is withdrawn before it was
// ungated simply stays gated and waits again.
//
// A Pod ends when its phase is Succeeded or Failed. Pods owned by an object
// of another integrated kind (a Job's pods, a JobSet's, a Ray cluster's…)
// are left to that kind's integration, even when their template carries
// the queue label.
package pod
