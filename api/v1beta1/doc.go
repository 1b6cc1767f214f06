// Package v1beta1 holds the user-facing queue configuration API of Sluice
// (group sluice.dev, version v1beta1). Field names and meanings follow Kueue's
// v1beta1 API so that Kueue manifests convert mechanically: change the group,
// keep the spec.
//
// Validation that can be decided from one object alone lives in the CRD schema
// (OpenAPI and CEL rules), never in a webhook.
//
// +kubebuilder:object:generate=true
// +groupName=sluice.dev
package v1beta1
