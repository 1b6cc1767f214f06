package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LocalQueueSpec points a namespace's queue at a ClusterQueue.
type LocalQueueSpec struct {
	// clusterQueue cannot change once set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterQueue is immutable"
	ClusterQueue string `json:"clusterQueue"`

	// stopPolicy: None (default), Hold or HoldAndDrain.
	// +optional
	// +kubebuilder:default=None
	StopPolicy *StopPolicy `json:"stopPolicy,omitempty"`

	// fairSharing.weight divides the queue's usage under Admission Fair
	// Sharing (default 1; 0 puts its workloads after every other
	// LocalQueue's of the ClusterQueue).
	// +optional
	FairSharing *FairSharing `json:"fairSharing,omitempty"`
}

// LocalQueueStatus is written by the watcher on a timer.
type LocalQueueStatus struct {
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
	// fairSharing is the queue's Admission Fair Sharing usage, while its
	// ClusterQueue orders by usage.
	// +optional
	FairSharing *LocalQueueFairSharingStatus `json:"fairSharing,omitempty"`
}

// LocalQueueFairSharingStatus is a LocalQueue's fair sharing state, as
// Kueue reports it.
type LocalQueueFairSharingStatus struct {
	// weightedShare is the queue's usage divided by its weight, as
	// admission orders by it, in thousandths.
	// +optional
	WeightedShare int64 `json:"weightedShare"`
	// admissionFairSharingStatus is the decayed usage.
	// +optional
	AdmissionFairSharingStatus *AdmissionFairSharingStatus `json:"admissionFairSharingStatus,omitempty"`
}

// AdmissionFairSharingStatus is a LocalQueue's decayed usage.
type AdmissionFairSharingStatus struct {
	// consumedResources is the usage per resource, decayed with
	// usageHalfLifeTime.
	ConsumedResources corev1.ResourceList `json:"consumedResources"`
	// lastUpdate is when it was last sampled.
	LastUpdate metav1.Time `json:"lastUpdate"`
}

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=lq;queue;queues
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="ClusterQueue",JSONPath=".spec.clusterQueue",type=string
// +kubebuilder:printcolumn:name="Pending",JSONPath=".status.pendingWorkloads",type=integer
// +kubebuilder:printcolumn:name="Admitted",JSONPath=".status.admittedWorkloads",type=integer

// LocalQueue is the namespaced queue that jobs name with the
// sluice.dev/queue-name label.
type LocalQueue struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is required: a LocalQueue without a clusterQueue means nothing.
	// +required
	Spec   LocalQueueSpec   `json:"spec,omitempty"`
	Status LocalQueueStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// LocalQueueList is a list of LocalQueue.
type LocalQueueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LocalQueue `json:"items"`
}
