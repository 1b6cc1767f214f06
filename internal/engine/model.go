package engine

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// QueueingStrategy of a ClusterQueue.
type QueueingStrategy string

// Queueing strategies.
const (
	StrictFIFO     QueueingStrategy = "StrictFIFO"
	BestEffortFIFO QueueingStrategy = "BestEffortFIFO"
)

// StopPolicy of a ClusterQueue or LocalQueue.
type StopPolicy string

// Stop policies.
const (
	StopNone     StopPolicy = "None"
	Hold         StopPolicy = "Hold"
	HoldAndDrain StopPolicy = "HoldAndDrain"
)

// FlavorPreference is Kueue's flavorFungibility.preference.
type FlavorPreference string

const (
	// BorrowingOverPreemption prefers the flavor that needs no preemption
	// (or the gentler kind), then the one that borrows least far up.
	BorrowingOverPreemption FlavorPreference = "BorrowingOverPreemption"
	// PreemptionOverBorrowing prefers the flavor that borrows least far
	// up, then the gentler preemption.
	PreemptionOverBorrowing FlavorPreference = "PreemptionOverBorrowing"
)

// PreemptionPolicy names whom a workload may preempt.
type PreemptionPolicy string

// Preemption policies.
const (
	Never                     PreemptionPolicy = "Never"
	LowerPriority             PreemptionPolicy = "LowerPriority"
	LowerOrNewerEqualPriority PreemptionPolicy = "LowerOrNewerEqualPriority"
	Any                       PreemptionPolicy = "Any"
)

// FungibilityPolicy decides whether flavor search stops at a flavor that
// needs borrowing or preemption.
type FungibilityPolicy string

// Flavor fungibility policies.
const (
	Borrow        FungibilityPolicy = "Borrow"
	Preempt       FungibilityPolicy = "Preempt"
	TryNextFlavor FungibilityPolicy = "TryNextFlavor"
)

// Preemption reasons, as Kueue names them.
const (
	ReasonInClusterQueue                = "InClusterQueue"
	ReasonInCohortReclamation           = "InCohortReclamation"
	ReasonInCohortReclaimWhileBorrowing = "InCohortReclaimWhileBorrowing"
	ReasonInCohortFairSharing           = "InCohortFairSharing"
)

// Eviction reasons other than preemption.
const (
	ReasonClusterQueueStopped = "ClusterQueueStopped"
	ReasonLocalQueueStopped   = "LocalQueueStopped"
)

// Limit is an optional quota bound.
type Limit struct {
	Set   bool
	Value int64
}

// Limited returns a set limit.
func Limited(v int64) Limit { return Limit{Set: true, Value: v} }

// Quota is the quota of one resource in one flavor.
type Quota struct {
	Resource       string
	Nominal        int64
	BorrowingLimit Limit
	LendingLimit   Limit
}

// FlavorQuotas is a flavor and the quota of each covered resource in it.
type FlavorQuotas struct {
	Name      string
	Resources []Quota
}

// ResourceGroup is a set of resources assigned one flavor together.
type ResourceGroup struct {
	CoveredResources []string
	Flavors          []FlavorQuotas
}

// Preemption is a ClusterQueue's preemption policy.
type Preemption struct {
	WithinClusterQueue   PreemptionPolicy
	ReclaimWithinCohort  PreemptionPolicy
	BorrowWithinCohort   PreemptionPolicy // Never or LowerPriority
	MaxPriorityThreshold *int32
}

// ClusterQueue is the engine's view of a ClusterQueue.
type ClusterQueue struct {
	Name             string
	Cohort           string
	ResourceGroups   []ResourceGroup
	QueueingStrategy QueueingStrategy
	// NamespaceSelector nil selects no namespace, as in Kueue.
	NamespaceSelector labels.Selector
	WhenCanBorrow     FungibilityPolicy
	WhenCanPreempt    FungibilityPolicy
	// FlavorPreference ranks flavors when none can be taken as it is;
	// empty means BorrowingOverPreemption.
	FlavorPreference FlavorPreference
	Preemption       Preemption
	StopPolicy       StopPolicy
	// FairWeight is the fair-sharing weight in milli-units (1000 = 1).
	FairWeight int64
	// AdmissionChecks an admission must pass before it is admitted; its
	// quota is reserved meanwhile.
	AdmissionChecks []AdmissionCheckRule
	// UsageBasedAdmission: admissionScope.admissionMode is
	// UsageBasedAdmissionFairSharing (see AdmissionFairSharing).
	UsageBasedAdmission bool
}

// AdmissionCheckRule names an admission check a ClusterQueue runs: for
// every admission, or, with OnFlavors, only for admissions assigned one of
// those flavors.
type AdmissionCheckRule struct {
	Name      string
	OnFlavors []string
}

// AdmissionCheck is an AdmissionCheck object as the engine sees it.
type AdmissionCheck struct {
	Name string
	// Controller is its controllerName: only that controller's answers
	// count.
	Controller string
	// Active: its controller runs. A ClusterQueue naming a check that is
	// missing or not active admits nothing, as in Kueue.
	Active bool
}

// CheckState is the state of one admission check for one reservation,
// as Kueue names them.
type CheckState string

// Check states.
const (
	// CheckPending: the check has not answered yet.
	CheckPending CheckState = "Pending"
	// CheckReady: the check passed.
	CheckReady CheckState = "Ready"
	// CheckRetry: the check cannot pass now: the reservation is given up
	// and the workload queues again, after RequeueAfter if set.
	CheckRetry CheckState = "Retry"
	// CheckRejected: the check will not pass: the workload is deactivated.
	CheckRejected CheckState = "Rejected"
)

// Valid reports whether s is one of the four states.
func (s CheckState) Valid() bool {
	switch s {
	case CheckPending, CheckReady, CheckRetry, CheckRejected:
		return true
	}
	return false
}

// CheckStatus is one admission check's state for a reservation.
type CheckStatus struct {
	Name    string     `json:"name"`
	State   CheckState `json:"state"`
	Message string     `json:"message,omitempty"`
	// RequeueAfter (Retry only): the workload queues again no sooner than
	// this long after its eviction; the longest of its checks' wins.
	RequeueAfter time.Duration `json:"requeueAfter,omitempty"`
}

// Cohort is the engine's view of a Cohort. Cohorts named by a ClusterQueue
// or a parent field exist implicitly, with no quota of their own.
type Cohort struct {
	Name           string
	Parent         string
	ResourceGroups []ResourceGroup
	FairWeight     int64
}

// Flavor is a ResourceFlavor.
type Flavor struct {
	Name        string
	NodeLabels  map[string]string
	NodeTaints  []corev1.Taint
	Tolerations []corev1.Toleration
	// TopologyName makes the flavor topology-aware: its pods are placed
	// on the domains of that Topology, within its nodes' free capacity.
	TopologyName string
}

// LocalQueue is a namespaced queue pointing at a ClusterQueue.
type LocalQueue struct {
	Namespace    string
	Name         string
	ClusterQueue string
	StopPolicy   StopPolicy
	// FairWeight is the LocalQueue's Admission Fair Sharing weight
	// (spec.fairSharing.weight): its usage counts divided by it. nil
	// means 1; 0 puts its workloads after every other LocalQueue's.
	FairWeight *float64
}

// Config is all configuration the engine decides on.
type Config struct {
	Flavors        []Flavor
	ClusterQueues  []ClusterQueue
	Cohorts        []Cohort
	LocalQueues    []LocalQueue
	NamespaceLabel map[string]map[string]string // namespace → labels
	FairSharing    bool
	// WaitForPodsReady, when set, times out admitted workloads whose pods
	// are not ready (see WaitForPodsReady).
	WaitForPodsReady *WaitForPodsReady
	// FairStrategies are fair sharing's preemption strategies, in order;
	// empty means Kueue's default, both.
	FairStrategies FairStrategies
	// AdmissionChecks are the AdmissionCheck objects.
	AdmissionChecks []AdmissionCheck
	// Topologies are the Topology objects topology-aware flavors name.
	Topologies []Topology
	// AdmissionFairSharing, when set, orders the workloads of the
	// ClusterQueues with UsageBasedAdmission by their LocalQueues' usage.
	AdmissionFairSharing *AdmissionFairSharing
}

// Fair sharing's preemption strategies, as Kueue names them.
const (
	// LessThanOrEqualToFinalShare: preempt a workload if the preemptor's
	// queue's share with it admitted is at most the target queue's share
	// without the victim.
	LessThanOrEqualToFinalShare = "LessThanOrEqualToFinalShare"
	// LessThanInitialShare: preempt if the preemptor's queue's share with
	// it admitted is below the target queue's share now.
	LessThanInitialShare = "LessThanInitialShare"
)

// FairStrategies is an ordered list of fair sharing preemption strategies:
// [LessThanOrEqualToFinalShare], [LessThanInitialShare] or both in that
// order (Kueue's default and only other choice).
type FairStrategies []string

func (f FairStrategies) firstIsInitialShare() bool {
	return len(f) > 0 && f[0] == LessThanInitialShare
}

// hasSecond: after the first strategy, a second pass takes one workload per
// queue whose share is above the preemptor's (LessThanInitialShare).
func (f FairStrategies) hasSecond() bool { return len(f) == 0 || len(f) == 2 }

// PodSet is a group of identical pods.
type PodSet struct {
	Name     string
	Count    int32
	MinCount int32 // 0 or Count: no partial admission
	// Requests per pod, in canonical units.
	Requests     map[string]int64
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// Topology is how the pod set asks to be placed on a topology-aware
	// flavor.
	Topology TopologyRequest
	// pinned holds, for a scale-up's pod set, the flavor of each
	// resource its workload's admission has: more pods of an admitted
	// pod set go on the flavors it was admitted on.
	pinned map[string]string
}

// PodSetAssignment is what a pod set was admitted with.
type PodSetAssignment struct {
	Name    string            `json:"name"`
	Count   int32             `json:"count"`
	Flavors map[string]string `json:"flavors"` // resource → flavor
	// Topology places the pods of a pod set admitted on a
	// topology-aware flavor.
	Topology *TopologyAssignment `json:"topologyAssignment,omitempty"`
}

// Admission records where and when a workload holds quota.
type Admission struct {
	ClusterQueue string
	PodSets      []PodSetAssignment
	At           time.Time
	// Checks are the admission checks of the reservation and their
	// states; AwaitingChecks: they have not all been ready yet, so the
	// quota is reserved but the workload is not admitted.
	Checks         []CheckStatus
	AwaitingChecks bool
	// PastExecution is how long the workload ran in its earlier
	// admissions, toward its maximum execution time.
	PastExecution time.Duration
}

// Workload is one job as the engine sees it.
type Workload struct {
	// Kind names the job integration (e.g. "job"); empty in the simulator.
	Kind      string
	Namespace string
	Name      string
	Queue     string // LocalQueue name in Namespace
	Priority  int32
	// Submitted orders the queue (older first within a priority).
	Submitted time.Time
	PodSets   []PodSet
	// MaxExecution, when above zero, is how long the workload may stay
	// admitted in total before it is evicted and deactivated (Kueue's
	// maximumExecutionTimeSeconds).
	MaxExecution time.Duration
	// Admission is set for a workload that already holds quota.
	Admission *Admission
	// Elastic: the workload's pod counts may change while it is admitted
	// (Resize): fewer pods give quota back at once; more are admitted as
	// a scale-up that queues like a workload of its own.
	Elastic bool
	// ResizedAt is when an elastic workload's counts last changed: its
	// scale-up queues as if submitted then.
	ResizedAt time.Time
}

// Key is namespace/name, prefixed with kind/ when Kind is set.
func (w *Workload) Key() string {
	if w.Kind != "" {
		return w.Kind + "/" + w.Namespace + "/" + w.Name
	}
	return w.Namespace + "/" + w.Name
}
