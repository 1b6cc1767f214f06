package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// QueueingStrategy decides what happens behind a workload that does not fit.
// +kubebuilder:validation:Enum=StrictFIFO;BestEffortFIFO
type QueueingStrategy string

const (
	// StrictFIFO admits strictly in order: the head blocks the queue.
	StrictFIFO QueueingStrategy = "StrictFIFO"
	// BestEffortFIFO lets later workloads that fit go ahead of a head that
	// does not.
	BestEffortFIFO QueueingStrategy = "BestEffortFIFO"
)

// StopPolicy stops a queue.
// +kubebuilder:validation:Enum=None;Hold;HoldAndDrain
type StopPolicy string

const (
	// None keeps the queue running.
	None StopPolicy = "None"
	// Hold admits nothing new; admitted workloads keep running.
	Hold StopPolicy = "Hold"
	// HoldAndDrain admits nothing new and evicts what is admitted.
	HoldAndDrain StopPolicy = "HoldAndDrain"
)

// Validation notes (not part of the API documentation):
//
// Quantities are int-or-string in the schema (`5`, `"5"`, `"36Gi"`), so their
// CEL rules branch on the type. The string branch only judges strings that
// parse as a quantity; anything else is already refused by the schema's
// quantity pattern, and one error per mistake reads better than two. MaxLength
// bounds the estimated CEL cost of parsing (without it the estimator assumes a
// string as large as a whole request, and the CRD goes over budget).
//
// The rules sit on the struct, pointed at their field with fieldPath, because
// the API server reports a failing rule with the schema type as the value, and
// an int-or-string has none: "Invalid value: \"\"" would read as if the field
// were empty.
//
// Resource names are a named string type from another package, so MinLength
// and MaxLength need Type=string to be accepted by controller-gen; 317 is the
// longest qualified name (a 253-character prefix, "/", 63 characters).
// +kubebuilder:validation:XValidation:rule="type(self.nominalQuota) == int ? self.nominalQuota >= 0 : (!isQuantity(self.nominalQuota) || !quantity(self.nominalQuota).isLessThan(quantity('0')))",fieldPath=".nominalQuota",message="nominalQuota must not be negative"
// +kubebuilder:validation:XValidation:rule="!has(self.borrowingLimit) || (type(self.borrowingLimit) == int ? self.borrowingLimit >= 0 : (!isQuantity(self.borrowingLimit) || !quantity(self.borrowingLimit).isLessThan(quantity('0'))))",fieldPath=".borrowingLimit",message="borrowingLimit must not be negative"
// +kubebuilder:validation:XValidation:rule="!has(self.lendingLimit) || (type(self.lendingLimit) == int ? self.lendingLimit >= 0 : (!isQuantity(self.lendingLimit) || !quantity(self.lendingLimit).isLessThan(quantity('0'))))",fieldPath=".lendingLimit",message="lendingLimit must not be negative"
// +kubebuilder:validation:XValidation:rule="!has(self.lendingLimit) || !isQuantity(string(self.lendingLimit)) || !isQuantity(string(self.nominalQuota)) || !quantity(string(self.nominalQuota)).isLessThan(quantity(string(self.lendingLimit)))",fieldPath=".lendingLimit",message="lendingLimit must not be more than nominalQuota"

// ResourceQuota is the quota of one resource in one flavor.
type ResourceQuota struct {
	// name of the resource, e.g. cpu, memory, nvidia.com/gpu.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	Name corev1.ResourceName `json:"name"`

	// nominalQuota is what the queue is guaranteed (when lendingLimit allows
	// its cohort to borrow it, it is guaranteed once reclaimed).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	NominalQuota resource.Quantity `json:"nominalQuota"`

	// borrowingLimit caps how much more than nominalQuota the queue may take
	// from its cohort. Unset means no cap. Requires a cohort.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	BorrowingLimit *resource.Quantity `json:"borrowingLimit,omitempty"`

	// lendingLimit caps how much of nominalQuota the cohort may borrow.
	// Unset means all of it. Requires a cohort.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	LendingLimit *resource.Quantity `json:"lendingLimit,omitempty"`
}

// FlavorQuotas is the quota of every covered resource in one flavor.
type FlavorQuotas struct {
	// name of a ResourceFlavor.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// resources lists one quota per covered resource of the group.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Resources []ResourceQuota `json:"resources"`
}

// Every flavor lists exactly the coveredResources, in any order: as many
// entries, each one covered (resources is a map keyed by name, so none
// repeats). The messageExpression cannot name the offending flavor: filter()
// has an unbounded estimated cost.
// +kubebuilder:validation:XValidation:rule="self.flavors.all(f, size(f.resources) == size(self.coveredResources) && f.resources.all(r, r.name in self.coveredResources))",fieldPath=".flavors",message="every flavor must list a quota for exactly the coveredResources of its group",messageExpression="'every flavor must list a quota for exactly the coveredResources of its group: ' + self.coveredResources.join(', ')"

// ResourceGroup is a set of resources that are assigned flavors together:
// a pod set gets one flavor for all of them.
type ResourceGroup struct {
	// coveredResources are the resources this group gives quota for.
	// +listType=set
	// +kubebuilder:validation:items:Type=string
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	CoveredResources []corev1.ResourceName `json:"coveredResources"`

	// flavors are tried in this order.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Flavors []FlavorQuotas `json:"flavors"`
}

// Each field of this type carries its own enum: an enum on the type too would
// make the schema an allOf, and a bad value would get an extra, unclear error.

// FlavorFungibilityPolicy is what to do when a flavor fits only by borrowing
// or by preempting.
type FlavorFungibilityPolicy string

const (
	// Borrow takes the flavor even if it means borrowing.
	Borrow FlavorFungibilityPolicy = "Borrow"
	// Preempt takes the flavor even if it means preempting.
	Preempt FlavorFungibilityPolicy = "Preempt"
	// TryNextFlavor looks at the next flavor first and comes back only if
	// none fits better.
	TryNextFlavor FlavorFungibilityPolicy = "TryNextFlavor"
	// MayStopSearch is Kueue's current name for Borrow (in whenCanBorrow)
	// and Preempt (in whenCanPreempt): the search may stop at this flavor.
	MayStopSearch FlavorFungibilityPolicy = "MayStopSearch"
)

// FlavorFungibilityPreference ranks flavors when every one needs borrowing,
// preemption or both.
type FlavorFungibilityPreference string

const (
	// BorrowingOverPreemption (the default) prefers a flavor that needs no
	// preemption, or a gentler one (reclaiming lent quota over preempting
	// in the own queue), and then the one that borrows least far up the
	// cohort tree.
	BorrowingOverPreemption FlavorFungibilityPreference = "BorrowingOverPreemption"
	// PreemptionOverBorrowing prefers the flavor that borrows least far up
	// the cohort tree, and then the gentler preemption.
	PreemptionOverBorrowing FlavorFungibilityPreference = "PreemptionOverBorrowing"
)

// FlavorFungibility decides whether to move on to the next flavor.
// +kubebuilder:validation:XValidation:rule="!has(self.preference) || (has(self.whenCanBorrow) && self.whenCanBorrow == 'TryNextFlavor' && has(self.whenCanPreempt) && self.whenCanPreempt == 'TryNextFlavor')",message="preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor"
type FlavorFungibility struct {
	// whenCanBorrow: Borrow (default) or its Kueue name MayStopSearch, or
	// TryNextFlavor.
	// +optional
	// +kubebuilder:default=Borrow
	// +kubebuilder:validation:Enum=Borrow;MayStopSearch;TryNextFlavor
	WhenCanBorrow FlavorFungibilityPolicy `json:"whenCanBorrow,omitempty"`
	// whenCanPreempt: Preempt or its Kueue name MayStopSearch, or
	// TryNextFlavor (default).
	// +optional
	// +kubebuilder:default=TryNextFlavor
	// +kubebuilder:validation:Enum=Preempt;MayStopSearch;TryNextFlavor
	WhenCanPreempt FlavorFungibilityPolicy `json:"whenCanPreempt,omitempty"`
	// preference: how to rank flavors when all need borrowing, preemption
	// or both; only with whenCanBorrow and whenCanPreempt both
	// TryNextFlavor, since otherwise the search stops at the first such
	// flavor. BorrowingOverPreemption when unset.
	// +optional
	// +kubebuilder:validation:Enum=BorrowingOverPreemption;PreemptionOverBorrowing
	Preference *FlavorFungibilityPreference `json:"preference,omitempty"`
}

// As with FlavorFungibilityPolicy, the enum is on each field of this type.

// PreemptionPolicy names which workloads may be preempted.
type PreemptionPolicy string

const (
	PreemptionNever                     PreemptionPolicy = "Never"
	PreemptionLowerPriority             PreemptionPolicy = "LowerPriority"
	PreemptionLowerOrNewerEqualPriority PreemptionPolicy = "LowerOrNewerEqualPriority"
	PreemptionAny                       PreemptionPolicy = "Any"
)

// BorrowWithinCohort allows preempting in the cohort while borrowing.
type BorrowWithinCohort struct {
	// policy: Never (default) or LowerPriority.
	// +optional
	// +kubebuilder:default=Never
	// +kubebuilder:validation:Enum=Never;LowerPriority
	Policy PreemptionPolicy `json:"policy,omitempty"`
	// maxPriorityThreshold: only workloads at or below this priority may be
	// preempted while borrowing.
	// +optional
	MaxPriorityThreshold *int32 `json:"maxPriorityThreshold,omitempty"`
}

// ClusterQueuePreemption says whom a pending workload may preempt.
// Preempting while borrowing is reclaiming too, so it needs reclaiming on.
// +kubebuilder:validation:XValidation:rule="!has(self.borrowWithinCohort) || !has(self.borrowWithinCohort.policy) || self.borrowWithinCohort.policy == 'Never' || (has(self.reclaimWithinCohort) && self.reclaimWithinCohort != 'Never')",fieldPath=".borrowWithinCohort",message="borrowWithinCohort needs reclaimWithinCohort other than Never"
type ClusterQueuePreemption struct {
	// withinClusterQueue: Never (default), LowerPriority or
	// LowerOrNewerEqualPriority.
	// +optional
	// +kubebuilder:default=Never
	// +kubebuilder:validation:Enum=Never;LowerPriority;LowerOrNewerEqualPriority
	WithinClusterQueue PreemptionPolicy `json:"withinClusterQueue,omitempty"`
	// reclaimWithinCohort: Never (default), LowerPriority or Any.
	// +optional
	// +kubebuilder:default=Never
	// +kubebuilder:validation:Enum=Never;LowerPriority;Any
	ReclaimWithinCohort PreemptionPolicy `json:"reclaimWithinCohort,omitempty"`
	// +optional
	BorrowWithinCohort *BorrowWithinCohort `json:"borrowWithinCohort,omitempty"`
}

// The rule on weight follows ResourceQuota's.
// +kubebuilder:validation:XValidation:rule="!has(self.weight) || (type(self.weight) == int ? self.weight >= 0 : (!isQuantity(self.weight) || !quantity(self.weight).isLessThan(quantity('0'))))",fieldPath=".weight",message="weight must not be negative"

// FairSharing holds a node's weight in dominant-resource-share fair sharing.
type FairSharing struct {
	// weight divides the share; 0 means the node only borrows when nobody
	// else needs the capacity. Default 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	Weight *resource.Quantity `json:"weight,omitempty"`
}

// AdmissionScope turns on Admission Fair Sharing for a ClusterQueue:
// with UsageBasedAdmissionFairSharing (and the Configuration's
// admissionFairSharing block), its pending workloads are ordered first by
// their LocalQueue's recent usage divided by the LocalQueue's
// fairSharing.weight, then by priority and submission.
type AdmissionScope struct {
	// admissionMode: UsageBasedAdmissionFairSharing or
	// NoAdmissionFairSharing.
	// +kubebuilder:validation:Enum=UsageBasedAdmissionFairSharing;NoAdmissionFairSharing
	AdmissionMode AdmissionMode `json:"admissionMode"`
}

// AdmissionMode is how a ClusterQueue orders its pending workloads.
type AdmissionMode string

// The admission modes, as Kueue names them.
const (
	UsageBasedAdmissionFairSharing AdmissionMode = "UsageBasedAdmissionFairSharing"
	NoAdmissionFairSharing         AdmissionMode = "NoAdmissionFairSharing"
)

// AdmissionChecksStrategy lists the admission checks a ClusterQueue runs,
// each for every admission or for some flavors only.
type AdmissionChecksStrategy struct {
	// admissionChecks are the checks and the flavors they run for.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	AdmissionChecks []AdmissionCheckStrategyRule `json:"admissionChecks,omitempty"`
}

// AdmissionCheckStrategyRule names an admission check and the flavors it
// runs for.
type AdmissionCheckStrategyRule struct {
	// name of the AdmissionCheck.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// onFlavors: the check runs only for admissions assigned one of these
	// ResourceFlavors; empty, for every admission.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	OnFlavors []string `json:"onFlavors,omitempty"`
}

// ClusterQueueSpec is the quota and policy of one ClusterQueue.
// +kubebuilder:validation:XValidation:rule="!(has(self.admissionChecks) && has(self.admissionChecksStrategy))",message="either admissionChecks or admissionChecksStrategy can be set, not both"
// +kubebuilder:validation:XValidation:rule="has(self.cohort) || !has(self.resourceGroups) || self.resourceGroups.all(g, g.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit) && !has(r.lendingLimit))))",message="borrowingLimit and lendingLimit need a cohort"
type ClusterQueueSpec struct {
	// resourceGroups give the quota, by flavor.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ResourceGroups []ResourceGroup `json:"resourceGroups,omitempty"`

	// cohort is the Cohort this queue borrows from and lends to.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Cohort string `json:"cohort,omitempty"`

	// queueingStrategy: BestEffortFIFO (default) or StrictFIFO.
	// +optional
	// +kubebuilder:default=BestEffortFIFO
	QueueingStrategy QueueingStrategy `json:"queueingStrategy,omitempty"`

	// namespaceSelector limits which namespaces may submit to this queue.
	// Unset means none; an empty selector means all.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// +optional
	FlavorFungibility *FlavorFungibility `json:"flavorFungibility,omitempty"`

	// +optional
	Preemption *ClusterQueuePreemption `json:"preemption,omitempty"`

	// stopPolicy: None (default), Hold or HoldAndDrain.
	// +optional
	// +kubebuilder:default=None
	StopPolicy *StopPolicy `json:"stopPolicy,omitempty"`

	// +optional
	FairSharing *FairSharing `json:"fairSharing,omitempty"`

	// admissionScope turns on Admission Fair Sharing (see AdmissionScope).
	// +optional
	AdmissionScope *AdmissionScope `json:"admissionScope,omitempty"`

	// admissionChecks every admission to this queue must pass before the
	// workload starts; its quota is reserved meanwhile. Not together with
	// admissionChecksStrategy.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	AdmissionChecks []string `json:"admissionChecks,omitempty"`

	// admissionChecksStrategy is admissionChecks with per-flavor rules.
	// +optional
	AdmissionChecksStrategy *AdmissionChecksStrategy `json:"admissionChecksStrategy,omitempty"`
}

// CheckRules returns the queue's admission checks, from either field.
func (s *ClusterQueueSpec) CheckRules() []AdmissionCheckStrategyRule {
	if s.AdmissionChecksStrategy != nil {
		return s.AdmissionChecksStrategy.AdmissionChecks
	}
	out := make([]AdmissionCheckStrategyRule, 0, len(s.AdmissionChecks))
	for _, n := range s.AdmissionChecks {
		out = append(out, AdmissionCheckStrategyRule{Name: n})
	}
	return out
}

// FlavorUsage is the usage of one flavor.
type FlavorUsage struct {
	Name string `json:"name"`
	// +listType=map
	// +listMapKey=name
	Resources []ResourceUsage `json:"resources"`
}

// ResourceUsage is the usage of one resource in a flavor.
type ResourceUsage struct {
	Name corev1.ResourceName `json:"name"`
	// total is what admitted workloads use.
	Total resource.Quantity `json:"total,omitempty"`
	// borrowed is the part of total above nominalQuota.
	Borrowed resource.Quantity `json:"borrowed,omitempty"`
}

// ClusterQueueStatus is written by the watcher on a timer, not per workload.
type ClusterQueueStatus struct {
	// +optional
	PendingWorkloads int32 `json:"pendingWorkloads,omitempty"`
	// +optional
	AdmittedWorkloads int32 `json:"admittedWorkloads,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=name
	FlavorsUsage []FlavorUsage `json:"flavorsUsage,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cq
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Cohort",JSONPath=".spec.cohort",type=string
// +kubebuilder:printcolumn:name="Strategy",JSONPath=".spec.queueingStrategy",type=string,priority=1
// +kubebuilder:printcolumn:name="Pending",JSONPath=".status.pendingWorkloads",type=integer
// +kubebuilder:printcolumn:name="Admitted",JSONPath=".status.admittedWorkloads",type=integer

// ClusterQueue is a pool of quota with its admission and preemption policy.
type ClusterQueue struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterQueueSpec   `json:"spec,omitempty"`
	Status ClusterQueueStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterQueueList is a list of ClusterQueue.
type ClusterQueueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterQueue `json:"items"`
}
