package events

import (
	"maps"
	"slices"
)

// VictimV1 is one workload chosen for eviction.
type VictimV1 struct {
	Workload     WorkloadRef `json:"workload"`
	ClusterQueue string      `json:"clusterQueue"`
	Reason       string      `json:"reason"`
	// Admission is the victim's admission that is to be preempted (see
	// ledger.Reservation.Admission): a later admission of the same
	// workload is not preempted by this request. Empty from senders before
	// the field existed: then whichever admission the victim holds.
	Admission string `json:"admission,omitempty"`
}

// PreemptionRequestedV1: admission needs Victims evicted to admit Preemptor.
// Its subject is the preemptor's.
type PreemptionRequestedV1 struct {
	Preemptor    WorkloadRef `json:"preemptor"`
	ClusterQueue string      `json:"clusterQueue"`
	Victims      []VictimV1  `json:"victims"`
}

// Type implements Event.
func (PreemptionRequestedV1) Type() string { return TypePreemptionRequestedV1 }

// NATSSubject implements Event.
func (e PreemptionRequestedV1) NATSSubject() string {
	return WorkloadSubject(TypePreemptionRequestedV1, e.Preemptor)
}

// CESubject implements Event.
func (e PreemptionRequestedV1) CESubject() string { return e.Preemptor.String() }

// Validate implements Event.
func (e PreemptionRequestedV1) Validate() error {
	if err := e.Preemptor.Validate(); err != nil {
		return invalidf("preemptor: %w", err)
	}
	if err := checkName("clusterQueue", e.ClusterQueue); err != nil {
		return err
	}
	if len(e.Victims) == 0 {
		return invalidf("victims: at least one is required")
	}
	for i, v := range e.Victims {
		if err := v.Workload.Validate(); err != nil {
			return invalidf("victims[%d]: %w", i, err)
		}
		if err := checkName("victims[].clusterQueue", v.ClusterQueue); err != nil {
			return err
		}
		if err := checkRequired("victims[].reason", v.Reason); err != nil {
			return err
		}
	}
	return nil
}

// QuotaReleasedV1: the ledger no longer holds a reservation for the workload
// in ClusterQueue.
type QuotaReleasedV1 struct {
	Workload     WorkloadRef `json:"workload"`
	ClusterQueue string      `json:"clusterQueue"`
	// Admission is the admission whose reservation was released (as in
	// admitted); absent for a reservation of an older Sluice.
	Admission string `json:"admission,omitempty"`
}

// Type implements Event.
func (QuotaReleasedV1) Type() string { return TypeQuotaReleasedV1 }

// NATSSubject implements Event.
func (e QuotaReleasedV1) NATSSubject() string {
	return WorkloadSubject(TypeQuotaReleasedV1, e.Workload)
}

// CESubject implements Event.
func (e QuotaReleasedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e QuotaReleasedV1) Validate() error {
	if err := e.Workload.Validate(); err != nil {
		return err
	}
	return checkName("clusterQueue", e.ClusterQueue)
}

// QuotaUsageV1 is a snapshot of one ClusterQueue's usage and workload counts.
type QuotaUsageV1 struct {
	ClusterQueue string `json:"clusterQueue"`
	// Usage maps flavor → resource → quantity string.
	Usage    map[string]map[string]string `json:"usage,omitempty"`
	Pending  int32                        `json:"pending"`
	Admitted int32                        `json:"admitted"`
}

// Type implements Event.
func (QuotaUsageV1) Type() string { return TypeQuotaUsageV1 }

// NATSSubject implements Event: sluice.quota.v1.usage.<clusterqueue>.
func (e QuotaUsageV1) NATSSubject() string {
	return subjectBase(TypeQuotaUsageV1) + "." + EncodeToken(e.ClusterQueue)
}

// CESubject implements Event.
func (e QuotaUsageV1) CESubject() string { return e.ClusterQueue }

// Validate implements Event.
func (e QuotaUsageV1) Validate() error {
	if err := checkName("clusterQueue", e.ClusterQueue); err != nil {
		return err
	}
	if e.Pending < 0 || e.Admitted < 0 {
		return invalidf("pending %d, admitted %d: must not be negative", e.Pending, e.Admitted)
	}
	for _, flavor := range slices.Sorted(maps.Keys(e.Usage)) {
		res := e.Usage[flavor]
		if err := checkRequired("usage flavor", flavor); err != nil {
			return err
		}
		if err := checkQuantities("usage["+flavor+"]", res); err != nil {
			return err
		}
	}
	return nil
}

// ConfigChangedV1: a queue-configuration object (ClusterQueue, LocalQueue,
// ResourceFlavor, Cohort, WorkloadPriorityClass) changed in the sluice-config
// bucket at Revision. Kind is lower-case; Namespace is empty for
// cluster-scoped kinds.
type ConfigChangedV1 struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Deleted   bool   `json:"deleted"`
	Revision  uint64 `json:"revision"`
}

// Type implements Event.
func (ConfigChangedV1) Type() string { return TypeConfigChangedV1 }

// NATSSubject implements Event: sluice.config.v1.changed.<kind>.<namespace or _>.<name>.
func (e ConfigChangedV1) NATSSubject() string {
	return subjectBase(TypeConfigChangedV1) + "." + EncodeToken(e.Kind) + "." + EncodeToken(e.Namespace) + "." + EncodeToken(e.Name)
}

// CESubject implements Event: "namespace/name", or "name" when cluster-scoped.
func (e ConfigChangedV1) CESubject() string {
	if e.Namespace == "" {
		return e.Name
	}
	return e.Namespace + "/" + e.Name
}

// Validate implements Event.
func (e ConfigChangedV1) Validate() error {
	if err := checkKind("kind", e.Kind); err != nil {
		return err
	}
	if e.Namespace != "" {
		if err := checkName("namespace", e.Namespace); err != nil {
			return err
		}
	}
	return checkName("name", e.Name)
}
