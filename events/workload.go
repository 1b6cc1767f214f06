package events

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// WorkloadRef names the job behind a workload. Kind is the lower-case name
// of the job integration ("job", "jobset", "rayjob", …).
type WorkloadRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// String is "namespace/name", the CloudEvents subject of workload events.
func (w WorkloadRef) String() string { return w.Namespace + "/" + w.Name }

// Validate checks that every field is set and names are Kubernetes names.
func (w WorkloadRef) Validate() error {
	if err := checkKind("kind", w.Kind); err != nil {
		return err
	}
	if err := checkName("namespace", w.Namespace); err != nil {
		return err
	}
	if err := checkName("name", w.Name); err != nil {
		return err
	}
	return checkRequired("uid", w.UID)
}

// PodSetV1 is one group of identical pods of a workload.
type PodSetV1 struct {
	Name string `json:"name"`
	// Count is the number of pods.
	Count int32 `json:"count"`
	// MinCount, when set, allows partial admission down to this many pods.
	MinCount int32 `json:"minCount,omitempty"`
	// Requests are the resource requests of one pod, as quantity strings.
	Requests     map[string]string   `json:"requests,omitempty"`
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	// Topology is how the pod set asks to be placed on a topology-aware
	// flavor (its pod template's annotations); absent when it asks nothing.
	Topology *TopologyRequestV1 `json:"topology,omitempty"`
}

// TopologyRequestV1 is a pod set's topology request.
type TopologyRequestV1 struct {
	// Required: all pods in one domain of this level (a node label).
	Required string `json:"required,omitempty"`
	// Preferred: the fewest domains, one of this level if any fits.
	Preferred string `json:"preferred,omitempty"`
	// Unconstrained: anywhere, counted against the nodes' capacity.
	Unconstrained bool `json:"unconstrained,omitempty"`
	// SliceLevel and SliceSize: pods in slices of SliceSize, each slice
	// in one domain of SliceLevel.
	SliceLevel string `json:"sliceLevel,omitempty"`
	SliceSize  int32  `json:"sliceSize,omitempty"`
	// Group names pod sets placed together.
	Group string `json:"group,omitempty"`
}

// TopologyAssignmentV1 is where a pod set's pods go: counts per domain of
// the topology's lowest level, each domain named by its value of every
// level in Levels.
type TopologyAssignmentV1 struct {
	Levels  []string           `json:"levels"`
	Domains []TopologyDomainV1 `json:"domains"`
}

// TopologyDomainV1 is one domain of a TopologyAssignmentV1 and the number
// of pods placed in it.
type TopologyDomainV1 struct {
	Values []string `json:"values"`
	Count  int32    `json:"count"`
}

func (p PodSetV1) validate(i int) error {
	if err := checkRequired("podSets[].name", p.Name); err != nil {
		return err
	}
	if p.Count < 0 {
		return invalidf("podSets[%d].count %d: must not be negative", i, p.Count)
	}
	if p.MinCount < 0 || p.MinCount > p.Count {
		return invalidf("podSets[%d].minCount %d: must be within 0..count (%d)", i, p.MinCount, p.Count)
	}
	return checkQuantities("podSets[].requests", p.Requests)
}

// WorkloadSubmittedV1: a job integration translated a new (suspended) job
// into a workload asking for admission.
type WorkloadSubmittedV1 struct {
	Workload      WorkloadRef `json:"workload"`
	LocalQueue    string      `json:"localQueue"`
	Priority      int32       `json:"priority"`
	PriorityClass string      `json:"priorityClass,omitempty"`
	CreationTime  time.Time   `json:"creationTime"`
	PodSets       []PodSetV1  `json:"podSets"`
	// MaximumExecutionTimeSeconds, when set, is how long the workload may
	// stay admitted in total before it is evicted and deactivated.
	MaximumExecutionTimeSeconds int32 `json:"maximumExecutionTimeSeconds,omitempty"`
	// Elastic: the job's pod counts may change while it is admitted;
	// PodSets say what it asks for now, and ResizedAt when that changed
	// after submission.
	Elastic   bool      `json:"elastic,omitempty"`
	ResizedAt time.Time `json:"resizedAt,omitzero"`
}

// Type implements Event.
func (WorkloadSubmittedV1) Type() string { return TypeWorkloadSubmittedV1 }

// NATSSubject implements Event.
func (e WorkloadSubmittedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadSubmittedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadSubmittedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadSubmittedV1) Validate() error {
	if err := e.Workload.Validate(); err != nil {
		return err
	}
	if err := checkName("localQueue", e.LocalQueue); err != nil {
		return err
	}
	if len(e.PodSets) == 0 {
		return invalidf("podSets: at least one is required")
	}
	for i, p := range e.PodSets {
		if err := p.validate(i); err != nil {
			return err
		}
	}
	if e.MaximumExecutionTimeSeconds < 0 {
		return invalidf("maximumExecutionTimeSeconds: %d is negative", e.MaximumExecutionTimeSeconds)
	}
	return nil
}

// WorkloadPendingV1: admission could not admit the workload now; Reason says
// why. ClusterQueue is empty when the LocalQueue does not resolve to one.
type WorkloadPendingV1 struct {
	Workload     WorkloadRef `json:"workload"`
	ClusterQueue string      `json:"clusterQueue"`
	Reason       string      `json:"reason"`
	// Invalid: the workload as written can never be admitted (Reason
	// says which pod set and resource), whatever quota frees.
	Invalid bool `json:"invalid,omitempty"`
}

// Type implements Event.
func (WorkloadPendingV1) Type() string { return TypeWorkloadPendingV1 }

// NATSSubject implements Event.
func (e WorkloadPendingV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadPendingV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadPendingV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadPendingV1) Validate() error {
	if err := e.Workload.Validate(); err != nil {
		return err
	}
	return checkRequired("reason", e.Reason)
}

// PodSetAssignmentV1 is the admitted shape of one pod set: how many pods and
// which flavor serves each resource.
type PodSetAssignmentV1 struct {
	Name  string `json:"name"`
	Count int32  `json:"count"`
	// Flavors maps a resource name to the ResourceFlavor assigned to it.
	Flavors map[string]string `json:"flavors,omitempty"`
	// TopologyAssignment places the pods of a pod set admitted on a
	// topology-aware flavor.
	TopologyAssignment *TopologyAssignmentV1 `json:"topologyAssignment,omitempty"`
}

// WorkloadAdmittedV1: the workload holds a quota reservation in ClusterQueue
// and may start with the given flavors.
type WorkloadAdmittedV1 struct {
	Workload     WorkloadRef          `json:"workload"`
	ClusterQueue string               `json:"clusterQueue"`
	PodSets      []PodSetAssignmentV1 `json:"podSets"`
	// Admission names this admission (its reservation's admission time,
	// RFC 3339): the name later events about it (started, preempted,
	// evicted, stopped) carry. Empty from senders before the field existed.
	Admission string `json:"admission,omitempty"`
}

// Type implements Event.
func (WorkloadAdmittedV1) Type() string { return TypeWorkloadAdmittedV1 }

// NATSSubject implements Event.
func (e WorkloadAdmittedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadAdmittedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadAdmittedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadAdmittedV1) Validate() error {
	if err := e.Workload.Validate(); err != nil {
		return err
	}
	if err := checkName("clusterQueue", e.ClusterQueue); err != nil {
		return err
	}
	if len(e.PodSets) == 0 {
		return invalidf("podSets: at least one is required")
	}
	for i, p := range e.PodSets {
		if err := checkRequired("podSets[].name", p.Name); err != nil {
			return err
		}
		if p.Count < 0 {
			return invalidf("podSets[%d].count %d: must not be negative", i, p.Count)
		}
	}
	return nil
}

// WorkloadPreemptedV1: the workload lost its reservation to Preemptor.
type WorkloadPreemptedV1 struct {
	Workload     WorkloadRef `json:"workload"`
	ClusterQueue string      `json:"clusterQueue"`
	Reason       string      `json:"reason"`
	Preemptor    WorkloadRef `json:"preemptor"`
	// Admission names the admission that is preempted (its reservation's
	// admission time): the integration stops the job from it and reports
	// it, even before its own view of the ledger shows it.
	Admission string `json:"admission,omitempty"`
}

// Type implements Event.
func (WorkloadPreemptedV1) Type() string { return TypeWorkloadPreemptedV1 }

// NATSSubject implements Event.
func (e WorkloadPreemptedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadPreemptedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadPreemptedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadPreemptedV1) Validate() error {
	if err := e.Workload.Validate(); err != nil {
		return err
	}
	if err := checkName("clusterQueue", e.ClusterQueue); err != nil {
		return err
	}
	if err := checkRequired("reason", e.Reason); err != nil {
		return err
	}
	if err := e.Preemptor.Validate(); err != nil {
		return invalidf("preemptor: %w", err)
	}
	return nil
}

// WorkloadEvictedV1: the workload must stop and give back its reservation
// (preempted, its ClusterQueue stopped, or its quota shrank).
type WorkloadEvictedV1 struct {
	Workload     WorkloadRef `json:"workload"`
	ClusterQueue string      `json:"clusterQueue"`
	Reason       string      `json:"reason"`
	// Message details Reason, e.g. the admission check that asked for
	// the eviction and what it said.
	Message string `json:"message,omitempty"`
	// Admission names the admission that is evicted, as in
	// WorkloadPreemptedV1.
	Admission string `json:"admission,omitempty"`
}

// Type implements Event.
func (WorkloadEvictedV1) Type() string { return TypeWorkloadEvictedV1 }

// NATSSubject implements Event.
func (e WorkloadEvictedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadEvictedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadEvictedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadEvictedV1) Validate() error {
	if err := e.Workload.Validate(); err != nil {
		return err
	}
	if err := checkName("clusterQueue", e.ClusterQueue); err != nil {
		return err
	}
	return checkRequired("reason", e.Reason)
}

// WorkloadMovedV1: nodes under the workload's topology placement failed,
// and its pods there were given other domains (node replacement). The
// workload keeps its reservation and its admission; PodSets are its
// placement now, every pod set's, as in WorkloadAdmittedV1.
type WorkloadMovedV1 struct {
	Workload     WorkloadRef          `json:"workload"`
	ClusterQueue string               `json:"clusterQueue"`
	PodSets      []PodSetAssignmentV1 `json:"podSets"`
	// Reason is NodeReplaced; Message names the failed nodes and says
	// which pods went where.
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	// Admission names the admission that moved, as in
	// WorkloadAdmittedV1.
	Admission string `json:"admission"`
}

// Type implements Event.
func (WorkloadMovedV1) Type() string { return TypeWorkloadMovedV1 }

// NATSSubject implements Event.
func (e WorkloadMovedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadMovedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadMovedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadMovedV1) Validate() error {
	if err := (WorkloadAdmittedV1{Workload: e.Workload, ClusterQueue: e.ClusterQueue, PodSets: e.PodSets}).Validate(); err != nil {
		return err
	}
	if err := checkRequired("reason", e.Reason); err != nil {
		return err
	}
	return checkRequired("admission", e.Admission)
}

// WorkloadResizedV1: an elastic workload's admission changed size while
// it runs, on the same flavors: fewer pods gave their quota back
// (ScaledDown), or a scale-up was admitted (ScaledUp). PodSets are every
// pod set's count and flavors now.
type WorkloadResizedV1 struct {
	Workload     WorkloadRef          `json:"workload"`
	ClusterQueue string               `json:"clusterQueue"`
	PodSets      []PodSetAssignmentV1 `json:"podSets"`
	Reason       string               `json:"reason"`
	// Admission names the admission that changed size, as in
	// WorkloadAdmittedV1.
	Admission string `json:"admission"`
}

// Type implements Event.
func (WorkloadResizedV1) Type() string { return TypeWorkloadResizedV1 }

// NATSSubject implements Event.
func (e WorkloadResizedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadResizedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadResizedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadResizedV1) Validate() error {
	if err := (WorkloadAdmittedV1{Workload: e.Workload, ClusterQueue: e.ClusterQueue, PodSets: e.PodSets}).Validate(); err != nil {
		return err
	}
	if e.Reason != "ScaledUp" && e.Reason != "ScaledDown" {
		return invalidf("reason: %q is neither ScaledUp nor ScaledDown", e.Reason)
	}
	return checkRequired("admission", e.Admission)
}

// WorkloadStartedV1: the integration applied the admission and unsuspended
// the job.
type WorkloadStartedV1 struct {
	Workload     WorkloadRef `json:"workload"`
	ClusterQueue string      `json:"clusterQueue"`
	// Admission names the admission started, as in WorkloadAdmittedV1.
	Admission string `json:"admission,omitempty"`
}

// Type implements Event.
func (WorkloadStartedV1) Type() string { return TypeWorkloadStartedV1 }

// NATSSubject implements Event.
func (e WorkloadStartedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadStartedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadStartedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadStartedV1) Validate() error {
	if err := e.Workload.Validate(); err != nil {
		return err
	}
	return checkName("clusterQueue", e.ClusterQueue)
}

// WorkloadStoppedV1: the integration suspended the job again (after an
// eviction, or because the user suspended it). ClusterQueue is the queue it
// held a reservation in, if any.
type WorkloadStoppedV1 struct {
	Workload     WorkloadRef `json:"workload"`
	ClusterQueue string      `json:"clusterQueue"`
	Reason       string      `json:"reason"`
	// Admission names the admission the job was stopped from (its
	// reservation's admission time), empty if it held none. Quota
	// accounting releases only that admission's reservation, so a late or
	// redelivered stop never frees the quota of a later admission.
	Admission string `json:"admission,omitempty"`
}

// Type implements Event.
func (WorkloadStoppedV1) Type() string { return TypeWorkloadStoppedV1 }

// NATSSubject implements Event.
func (e WorkloadStoppedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadStoppedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadStoppedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadStoppedV1) Validate() error {
	if err := e.Workload.Validate(); err != nil {
		return err
	}
	return checkRequired("reason", e.Reason)
}

// WorkloadFinishedV1: the job completed or failed for good. ClusterQueue is
// the queue it was admitted to, empty if it never was.
type WorkloadFinishedV1 struct {
	Workload     WorkloadRef `json:"workload"`
	ClusterQueue string      `json:"clusterQueue"`
	Succeeded    bool        `json:"succeeded"`
	Message      string      `json:"message,omitempty"`
}

// Type implements Event.
func (WorkloadFinishedV1) Type() string { return TypeWorkloadFinishedV1 }

// NATSSubject implements Event.
func (e WorkloadFinishedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadFinishedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadFinishedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadFinishedV1) Validate() error { return e.Workload.Validate() }

// WorkloadDeletedV1: the job object is gone; any reservation it held is to be
// released and its workload forgotten.
type WorkloadDeletedV1 struct {
	Workload WorkloadRef `json:"workload"`
	// Reason is empty when the object was deleted, and QueueNameRemoved
	// when it lives on but left its queue (its queue label was removed
	// while it was suspended): either way the workload ends.
	Reason string `json:"reason,omitempty"`
}

// Type implements Event.
func (WorkloadDeletedV1) Type() string { return TypeWorkloadDeletedV1 }

// NATSSubject implements Event.
func (e WorkloadDeletedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadDeletedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadDeletedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadDeletedV1) Validate() error { return e.Workload.Validate() }
