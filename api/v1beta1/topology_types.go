package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TopologyLevel is one level of a topology: the node label whose values
// name its domains.
type TopologyLevel struct {
	// nodeLabel is the label a node carries with the name of its domain
	// at this level (a block, a rack, or kubernetes.io/hostname).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`
	NodeLabel string `json:"nodeLabel"`
}

// TopologySpec lists a topology's levels.
type TopologySpec struct {
	// levels go from the widest domain (a block) to the narrowest (a rack,
	// then a node). A node belongs to the topology only if it carries
	// every level's label.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="size(self.filter(i, size(self.filter(j, j.nodeLabel == i.nodeLabel)) > 1)) == 0",message="each level needs its own nodeLabel"
	// +kubebuilder:validation:XValidation:rule="size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'",message="kubernetes.io/hostname can only be the last level"
	Levels []TopologyLevel `json:"levels"`
}

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:storageversion

// Topology describes how the nodes of a data center nest (blocks of racks
// of nodes), so that a ResourceFlavor naming it places each job's pods
// close together.
type Topology struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TopologySpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// TopologyList is a list of Topology.
type TopologyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Topology `json:"items"`
}
