package events

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// WorkloadReservedV1: the workload holds a quota reservation in
// ClusterQueue and waits for the admission checks in Checks before it is
// admitted (then WorkloadAdmittedV1, with the same Admission) and may
// start. A check's controller answers with CheckUpdatedV1.
type WorkloadReservedV1 struct {
	Workload     WorkloadRef          `json:"workload"`
	ClusterQueue string               `json:"clusterQueue"`
	PodSets      []PodSetAssignmentV1 `json:"podSets"`
	// Admission names the reservation, as in WorkloadAdmittedV1.
	Admission string `json:"admission"`
	// Checks are the AdmissionChecks the reservation waits for.
	Checks []string `json:"checks"`
}

// Type implements Event.
func (WorkloadReservedV1) Type() string { return TypeWorkloadReservedV1 }

// NATSSubject implements Event.
func (e WorkloadReservedV1) NATSSubject() string {
	return WorkloadSubject(TypeWorkloadReservedV1, e.Workload)
}

// CESubject implements Event.
func (e WorkloadReservedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e WorkloadReservedV1) Validate() error {
	if err := (WorkloadAdmittedV1{Workload: e.Workload, ClusterQueue: e.ClusterQueue, PodSets: e.PodSets}).Validate(); err != nil {
		return err
	}
	if err := checkRequired("admission", e.Admission); err != nil {
		return err
	}
	if len(e.Checks) == 0 {
		return invalidf("checks: at least one is required")
	}
	for i, c := range e.Checks {
		if err := checkName("checks[]", c); err != nil {
			return invalidf("checks[%d]: %w", i, err)
		}
	}
	return nil
}

// Check states, as Kueue names them.
const (
	CheckPending  = "Pending"
	CheckReady    = "Ready"
	CheckRetry    = "Retry"
	CheckRejected = "Rejected"
)

// CheckUpdatedV1: an admission check's controller decided the check for
// one reservation of a workload: Ready lets it be admitted once every
// check is; Retry gives the reservation up and queues the workload again
// (no sooner than RequeueAfterSeconds); Rejected deactivates it.
type CheckUpdatedV1 struct {
	Workload WorkloadRef `json:"workload"`
	// Admission names the reservation the answer is about (as in
	// WorkloadReservedV1); an answer about another one is ignored.
	Admission string `json:"admission"`
	// Check is the AdmissionCheck's name.
	Check string `json:"check"`
	// Controller is the controllerName of the check's controller, the
	// one answering; it is also the last token of the subject, so that a
	// NATS user may answer only as its own controller, and admission
	// takes the answer only from the controller the check names.
	Controller string `json:"controller"`
	State      string `json:"state"`
	Message    string `json:"message,omitempty"`
	// RequeueAfterSeconds (Retry only) delays the next reservation.
	RequeueAfterSeconds *int32 `json:"requeueAfterSeconds,omitempty"`
	// PodSetUpdates are what the check adds to the workload's pods when
	// it starts (Ready only), e.g. an annotation naming provisioned
	// capacity.
	PodSetUpdates []PodSetUpdateV1 `json:"podSetUpdates,omitempty"`
	// Cluster (Ready only) is the worker cluster a multicluster check
	// dispatched the workload to: its job runs there, while the object
	// here stays suspended and mirrors the worker's status.
	Cluster string `json:"cluster,omitempty"`
}

// PodSetUpdateV1 is what a check adds to the pods of one pod set.
type PodSetUpdateV1 struct {
	Name         string              `json:"name"`
	Labels       map[string]string   `json:"labels,omitempty"`
	Annotations  map[string]string   `json:"annotations,omitempty"`
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
}

// Type implements Event.
func (CheckUpdatedV1) Type() string { return TypeCheckUpdatedV1 }

// NATSSubject implements Event.
func (e CheckUpdatedV1) NATSSubject() string {
	return CheckSubject(e.Workload, e.Controller)
}

// CheckSubject is the subject of a check controller's answer about w.
func CheckSubject(w WorkloadRef, controller string) string {
	return WorkloadSubject(TypeCheckUpdatedV1, w) + "." + ControllerToken(controller)
}

// CheckAnswers is the subject filter of every answer controller may give.
func CheckAnswers(controller string) string {
	return SubjectFilter("check", "updated", "*", "*") + "." + ControllerToken(controller)
}

// ControllerToken is a controllerName as one subject token: every
// character but letters, digits, '-' and '_' becomes '-', as in the
// controller's NATS user and consumer name (checks.Durable), which name
// the same identity.
func ControllerToken(controller string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, controller)
}

// CESubject implements Event.
func (e CheckUpdatedV1) CESubject() string { return e.Workload.String() }

// Validate implements Event.
func (e CheckUpdatedV1) Validate() error {
	if err := e.Workload.Validate(); err != nil {
		return err
	}
	if err := checkRequired("admission", e.Admission); err != nil {
		return err
	}
	if err := checkName("check", e.Check); err != nil {
		return err
	}
	if err := checkRequired("controller", e.Controller); err != nil {
		return err
	}
	if len(e.Controller) > maxNameLength {
		return invalidf("controller: longer than %d characters", maxNameLength)
	}
	switch e.State {
	case CheckPending, CheckReady, CheckRetry, CheckRejected:
	default:
		return invalidf("state %q: must be Pending, Ready, Retry or Rejected", e.State)
	}
	if r := e.RequeueAfterSeconds; r != nil && (*r < 0 || e.State != CheckRetry) {
		return invalidf("requeueAfterSeconds %d: only a Retry has one, and it must not be negative", *r)
	}
	if e.Cluster != "" {
		if e.State != CheckReady {
			return invalidf("cluster %q: only a Ready answer names one", e.Cluster)
		}
		if err := checkName("cluster", e.Cluster); err != nil {
			return err
		}
	}
	for i, u := range e.PodSetUpdates {
		if err := checkRequired("podSetUpdates[].name", u.Name); err != nil {
			return invalidf("podSetUpdates[%d]: %w", i, err)
		}
	}
	return nil
}
