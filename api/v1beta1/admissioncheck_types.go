package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdmissionCheckActive is the condition type an admission check's
// controller sets to True once it handles the check. A ClusterQueue that
// names a check which is missing or not active admits nothing.
const AdmissionCheckActive = "Active"

// QueueActive is the condition type a ClusterQueue's and a LocalQueue's
// status carry: True when the queue admits work (Kueue's Active).
const QueueActive = "Active"

// AdmissionCheckSpec says which controller decides a check, and with which
// parameters.
type AdmissionCheckSpec struct {
	// controllerName names the controller that decides this check, e.g.
	// sluice.dev/provisioning-request.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="controllerName is immutable"
	ControllerName string `json:"controllerName"`

	// retryDelayMinutes is accepted for Kueue manifests and ignored, as
	// Kueue deprecated it: a check that says Retry gives its own delay.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RetryDelayMinutes *int64 `json:"retryDelayMinutes,omitempty"`

	// parameters points at an object with the controller's settings for
	// this check.
	// +optional
	Parameters *AdmissionCheckParametersReference `json:"parameters,omitempty"`
}

// AdmissionCheckParametersReference points at a cluster-scoped object.
type AdmissionCheckParametersReference struct {
	// apiGroup of the object, e.g. sluice.dev.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`
	APIGroup string `json:"apiGroup"`
	// kind of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^(?i)[a-z]([-a-z0-9]*[a-z0-9])?$`
	Kind string `json:"kind"`
	// name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// AdmissionCheckStatus is written by the check's controller.
type AdmissionCheckStatus struct {
	// conditions: Active is True while the controller handles the check.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ac
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Controller",JSONPath=".spec.controllerName",type=string
// +kubebuilder:printcolumn:name="Active",JSONPath=".status.conditions[?(@.type==\"Active\")].status",type=string
// +kubebuilder:printcolumn:name="Age",JSONPath=".metadata.creationTimestamp",type=date

// AdmissionCheck is a condition an admission must meet, decided by a
// controller, before its workload starts: Kueue's AdmissionCheck.
type AdmissionCheck struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AdmissionCheckSpec   `json:"spec,omitempty"`
	Status AdmissionCheckStatus `json:"status,omitempty"`
}

// IsActive reports whether the check's controller set Active to True.
func (ac *AdmissionCheck) IsActive() bool {
	for _, c := range ac.Status.Conditions {
		if c.Type == AdmissionCheckActive {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// +kubebuilder:object:root=true

// AdmissionCheckList is a list of AdmissionCheck.
type AdmissionCheckList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AdmissionCheck `json:"items"`
}
