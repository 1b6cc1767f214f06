// Package invariant checks Sluice's first guarantee, no over-admission, the
// way a user of the cluster sees it: from the Jobs in the API server rather
// than from Sluice's own ledger. The ledger can be right while the Jobs are
// not (a Job left running after its reservation was released, a Job started
// twice), and only the Jobs use the cluster; so the checker reads nothing
// but the queue configuration and the Jobs, in the order the API server
// committed their changes.
//
// The invariant: at every point of that commit order, for every ClusterQueue
// and every cohort, the requests of its running Jobs fit its quota, nominal
// plus what it may borrow, within the lending limits of the others. A Job is
// running when it carries the sluice.dev/queue-name label, is not suspended,
// has no Complete=True or Failed=True condition and has not been deleted (a
// Job with a deletionTimestamp still counts: its pods may still run). It
// uses, per pod set of its sluice.dev/admission annotation, the admitted pod
// count times the per-pod request, booked under the flavor the admission
// assigned to each resource. The admitted count is read from the annotation,
// not from spec.parallelism, so a partial admission is counted as admitted.
// A running labelled Job without an admission, with one that cannot be read,
// naming a ClusterQueue that does not exist, or leaving a requested resource
// without a flavor, is a violation of its own: nothing bounds what it uses.
//
// The arithmetic is Kueue's hierarchical model, per flavor and resource, in
// integer milli-units so that equal amounts compare equal:
//
//	quota(cq)        = nominal
//	quota(cohort)    = own nominal + Σ lendable(child)
//	lendable(n)      = min(lendingLimit, quota(n)), or quota(n) without a limit
//	guaranteed(n)    = quota(n) − lendable(n)
//	usage(cq)        = Σ usage of its running Jobs
//	usage(cohort)    = Σ max(0, usage(child) − guaranteed(child))
//
// A child's guaranteed quota is its own: what it uses of it takes nothing from
// the cohort, which is why only the excess is carried up. The limits are then
// checked at two kinds of node only, because everything else is implied by
// them: at a root (a cohort without parent, or a ClusterQueue without cohort)
// usage ≤ quota, and at any node with a borrowingLimit b, usage ≤ quota + b.
// A cohort named by a ClusterQueue or a Cohort but without an object of its
// own is a root with no quota of its own.
//
// [Checker] is the pure part: it holds the configuration and each Job's
// current booking and is fed one Job state at a time. [Watch] feeds it from
// one list and one watch of all Jobs, which the API server delivers in commit
// order, and collects a [Report].
package invariant
