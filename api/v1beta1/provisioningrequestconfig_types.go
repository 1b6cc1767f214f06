package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProvisioningRequestController is the controllerName of the admission
// checks that ask the cluster autoscaler for capacity (Kueue's
// kueue.x-k8s.io/provisioning-request).
const ProvisioningRequestController = "sluice.dev/provisioning-request"

// PodSet merge policies of a ProvisioningRequestConfig.
const (
	// IdenticalPodTemplates: pod sets with equal pod templates share one
	// pod template of the ProvisioningRequest.
	IdenticalPodTemplates = "IdenticalPodTemplates"
	// IdenticalWorkloadSchedulingRequirements: pod sets that ask for the
	// same scheduling (requests, node selector, tolerations, affinity,
	// resource claims) share one.
	IdenticalWorkloadSchedulingRequirements = "IdenticalWorkloadSchedulingRequirements"
)

// ProvisioningRequestConfigSpec is how the provisioning check asks for
// capacity. Kueue's field names.
type ProvisioningRequestConfigSpec struct {
	// provisioningClassName is the ProvisioningRequest class, e.g.
	// check-capacity.autoscaling.x-k8s.io.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ProvisioningClassName string `json:"provisioningClassName"`

	// parameters are passed to the ProvisioningRequest as they are. A
	// job's provreq.sluice.dev/<name> (or provreq.kueue.x-k8s.io/<name>)
	// annotation adds or overrides one.
	// +optional
	// +kubebuilder:validation:MaxProperties=100
	Parameters map[string]string `json:"parameters,omitempty"`

	// managedResources: only pod sets that ask for one of these are in
	// the request; a workload none of whose pod sets does passes the check
	// at once. Empty: every pod set.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	ManagedResources []corev1.ResourceName `json:"managedResources,omitempty"`

	// retryStrategy: how often, and after how long, a failed request is
	// tried again. Unset: 3 retries, 60 s doubling up to 1,800 s.
	// +optional
	RetryStrategy *ProvisioningRequestRetryStrategy `json:"retryStrategy,omitempty"`

	// podSetUpdates: node selector terms the pods get from the provisioned
	// request's status.provisioningClassDetails, to land on the new nodes.
	// +optional
	PodSetUpdates *ProvisioningRequestPodSetUpdates `json:"podSetUpdates,omitempty"`

	// podSetMergePolicy merges pod sets into one pod template of the
	// request. Unset: one template per pod set.
	// +optional
	// +kubebuilder:validation:Enum=IdenticalPodTemplates;IdenticalWorkloadSchedulingRequirements
	PodSetMergePolicy string `json:"podSetMergePolicy,omitempty"`
}

// ProvisioningRequestRetryStrategy bounds the retries of a failed request:
// retry n waits backoffBaseSeconds × 2^(n-1), at most backoffMaxSeconds.
type ProvisioningRequestRetryStrategy struct {
	// backoffLimitCount is the number of retries; once spent, the workload
	// is deactivated. 0 turns retries off.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BackoffLimitCount *int32 `json:"backoffLimitCount,omitempty"`
	// backoffBaseSeconds is the first retry's delay.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BackoffBaseSeconds *int32 `json:"backoffBaseSeconds,omitempty"`
	// backoffMaxSeconds caps a retry's delay.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BackoffMaxSeconds *int32 `json:"backoffMaxSeconds,omitempty"`
}

// ProvisioningRequestPodSetUpdates are what a provisioned request adds to
// the pods.
type ProvisioningRequestPodSetUpdates struct {
	// nodeSelector terms, each with its value from the request's status.
	// +optional
	// +listType=map
	// +listMapKey=key
	// +kubebuilder:validation:MaxItems=8
	NodeSelector []ProvisioningRequestPodSetUpdatesNodeSelector `json:"nodeSelector,omitempty"`
}

// ProvisioningRequestPodSetUpdatesNodeSelector is one node selector term.
type ProvisioningRequestPodSetUpdatesNodeSelector struct {
	// key is the node label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`
	Key string `json:"key"`
	// valueFromProvisioningClassDetail names the entry of the request's
	// status.provisioningClassDetails that holds the label's value.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32768
	ValueFromProvisioningClassDetail string `json:"valueFromProvisioningClassDetail"`
}

// Retry defaults, as Kueue's.
const (
	DefaultBackoffLimitCount  = 3
	DefaultBackoffBaseSeconds = 60
	DefaultBackoffMaxSeconds  = 1800
)

// Retries returns the retry strategy with defaults filled in: the number
// of retries, the first delay and the cap, in seconds.
func (s ProvisioningRequestConfigSpec) Retries() (limit, base, maxSeconds int32) {
	limit, base, maxSeconds = DefaultBackoffLimitCount, DefaultBackoffBaseSeconds, DefaultBackoffMaxSeconds
	if r := s.RetryStrategy; r != nil {
		if r.BackoffLimitCount != nil {
			limit = *r.BackoffLimitCount
		}
		if r.BackoffBaseSeconds != nil {
			base = *r.BackoffBaseSeconds
		}
		if r.BackoffMaxSeconds != nil {
			maxSeconds = *r.BackoffMaxSeconds
		}
	}
	return limit, base, maxSeconds
}

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Class",JSONPath=".spec.provisioningClassName",type=string
// +kubebuilder:printcolumn:name="Age",JSONPath=".metadata.creationTimestamp",type=date

// ProvisioningRequestConfig is the parameters of a provisioning admission
// check: Kueue's ProvisioningRequestConfig.
type ProvisioningRequestConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ProvisioningRequestConfigSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// ProvisioningRequestConfigList is a list of ProvisioningRequestConfig.
type ProvisioningRequestConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProvisioningRequestConfig `json:"items"`
}
