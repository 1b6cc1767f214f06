package queueconfig

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DefaultManagedNamespaces is the namespace selector of
// manageJobsWithoutQueueName and LocalQueue defaulting when the
// Configuration names none: every namespace but the cluster's own and
// those Sluice or Kueue run in by convention, whose pods must never wait
// for a queue.
func DefaultManagedNamespaces() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
		Values: []string{"kube-system", "kueue-system", "sluice-system"},
	}}}
}

// ManagedNamespaces is sel, or DefaultManagedNamespaces when nil.
func ManagedNamespaces(sel *metav1.LabelSelector) *metav1.LabelSelector {
	if sel == nil {
		return DefaultManagedNamespaces()
	}
	return sel.DeepCopy()
}

// ValidateNamespaceSelector refuses a selector the API server would.
func ValidateNamespaceSelector(p *field.Path, sel *metav1.LabelSelector) field.ErrorList {
	if sel == nil {
		return nil
	}
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return field.ErrorList{field.Invalid(p, field.OmitValueType{}, err.Error())}
	}
	return nil
}
