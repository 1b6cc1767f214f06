package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ResourceFlavorSpec describes one kind of capacity: the nodes that carry it
// and what a workload needs to land there.
// +kubebuilder:validation:XValidation:rule="!has(self.topologyName) || (has(self.nodeLabels) && size(self.nodeLabels) > 0)",message="a flavor with topologyName needs nodeLabels to say which nodes are its own"
type ResourceFlavorSpec struct {
	// nodeLabels are injected as a nodeSelector into admitted pods, and a
	// workload whose own nodeSelector contradicts them cannot use the flavor.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`

	// nodeTaints are the taints of this flavor's nodes. A workload must
	// tolerate every NoSchedule and NoExecute taint to be assigned the flavor.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	NodeTaints []corev1.Taint `json:"nodeTaints,omitempty"`

	// tolerations are injected into admitted pods, and count as tolerated
	// when matching nodeTaints.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// topologyName names a Topology: the flavor is topology-aware, its
	// pods are placed on the domains of the nodes that carry nodeLabels,
	// within their free capacity, as each pod set asks.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	TopologyName string `json:"topologyName,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=flavor;flavors;rf
// +kubebuilder:storageversion

// ResourceFlavor is a kind of capacity (a GPU model, spot or on-demand nodes).
type ResourceFlavor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ResourceFlavorSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// ResourceFlavorList is a list of ResourceFlavor.
type ResourceFlavorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ResourceFlavor `json:"items"`
}
