package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MultiClusterController is the controllerName of the admission checks
// that dispatch workloads to worker clusters (Kueue's
// kueue.x-k8s.io/multikueue).
const MultiClusterController = "sluice.dev/multicluster"

// KueueMultiKueueManagedBy is the managedBy value the Kubeflow, MPI and Ray
// operators reserve for an outside dispatcher (Kueue's MultiKueue): the
// only value other than their own they accept, so Sluice writes it into
// those kinds' managedBy field for a job it dispatches to worker clusters.
const KueueMultiKueueManagedBy = "kueue.x-k8s.io/multikueue"

// Dispatching modes of a MultiClusterConfig.
const (
	// DispatchAllAtOnce offers a workload to every worker at once; the
	// first to admit it wins.
	DispatchAllAtOnce = "AllAtOnce"
	// DispatchIncremental offers it to a few workers at a time, in the
	// order listed, adding more after each round without an admission.
	DispatchIncremental = "Incremental"
)

// MultiClusterConfigSpec names the worker clusters a multicluster
// admission check dispatches to, and how.
type MultiClusterConfigSpec struct {
	// clusters are the worker clusters, by the name each joins the
	// manager's NATS with (its leaf node user), most preferred first.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=63
	Clusters []string `json:"clusters"`

	// dispatching: AllAtOnce (the default) or Incremental.
	// +optional
	Dispatching *MultiClusterDispatching `json:"dispatching,omitempty"`

	// workerLostTimeout is how long a worker may be silent (no heartbeat
	// reaches the manager) before the workloads it admitted are given up
	// and dispatched again. Default 15m, as Kueue's.
	// +optional
	WorkerLostTimeout *metav1.Duration `json:"workerLostTimeout,omitempty"`
}

// MultiClusterDispatching is how workers are chosen for a workload.
type MultiClusterDispatching struct {
	// mode: AllAtOnce or Incremental.
	// +optional
	// +kubebuilder:validation:Enum=AllAtOnce;Incremental
	Mode string `json:"mode,omitempty"`
	// stepSize (Incremental): workers added per round. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	StepSize *int32 `json:"stepSize,omitempty"`
	// roundTimeout (Incremental): how long a round waits for an
	// admission before the next workers are added. Default 5m.
	// +optional
	RoundTimeout *metav1.Duration `json:"roundTimeout,omitempty"`
}

// Dispatching defaults.
const (
	DefaultWorkerLostTimeout = 15 * 60 // seconds
	DefaultStepSize          = 3
	DefaultRoundTimeout      = 5 * 60 // seconds
)

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Clusters",JSONPath=".spec.clusters",type=string
// +kubebuilder:printcolumn:name="Age",JSONPath=".metadata.creationTimestamp",type=date

// MultiClusterConfig is the parameters of a sluice.dev/multicluster
// admission check: the worker clusters it dispatches workloads to.
type MultiClusterConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MultiClusterConfigSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// MultiClusterConfigList is a list of MultiClusterConfigs.
type MultiClusterConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MultiClusterConfig `json:"items"`
}
