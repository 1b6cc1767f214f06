package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CohortSpec places a cohort in the cohort tree and may give it quota of its
// own, which its members borrow.
// +kubebuilder:validation:XValidation:rule="has(self.parent) || has(self.parentName) || !has(self.resourceGroups) || self.resourceGroups.all(g, g.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit) && !has(r.lendingLimit))))",message="borrowingLimit and lendingLimit need a parent"
// +kubebuilder:validation:XValidation:rule="!has(self.parent) || !has(self.parentName) || self.parent == self.parentName",fieldPath=".parentName",message="parent and parentName name the same field: give one, or the same value"
type CohortSpec struct {
	// parent is the Cohort above this one. Cycles are reported on the
	// ClusterQueues of the cycle and make them inactive.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Parent string `json:"parent,omitempty"`

	// parentName is Kueue's name for parent (v1beta1 and later); either may
	// be given.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ParentName string `json:"parentName,omitempty"`

	// resourceGroups give the cohort quota of its own. borrowingLimit and
	// lendingLimit apply towards the parent.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	ResourceGroups []ResourceGroup `json:"resourceGroups,omitempty"`

	// +optional
	FairSharing *FairSharing `json:"fairSharing,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Parent",JSONPath=".spec.parent",type=string
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.parent) || self.spec.parent != self.metadata.name",fieldPath=".spec.parent",message="a Cohort cannot be its own parent"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.parentName) || self.spec.parentName != self.metadata.name",fieldPath=".spec.parentName",message="a Cohort cannot be its own parent"

// Cohort groups ClusterQueues (and other Cohorts) that borrow from each other.
type Cohort struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec CohortSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// CohortList is a list of Cohort.
type CohortList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cohort `json:"items"`
}

// ParentOf is the cohort's parent, under either of its names.
func (s CohortSpec) ParentOf() string {
	if s.Parent != "" {
		return s.Parent
	}
	return s.ParentName
}
