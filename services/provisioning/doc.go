// Package provisioning is the admission check controller that asks the
// cluster autoscaler for capacity before a workload starts (controllerName
// sluice.dev/provisioning-request; Kueue's ProvisioningRequest check).
//
// For each reservation that waits for one of its checks, it creates an
// autoscaling.x-k8s.io/v1 ProvisioningRequest with pod templates for the
// workload's pod sets, configured by the check's ProvisioningRequestConfig,
// and answers the check from the request's conditions: Provisioned makes it
// Ready (and the pods get the annotations that let them consume the
// capacity), Failed and an expired booking make it Retry with exponential
// backoff until the config's retries are spent, then Rejected; revoked
// capacity makes it Rejected.
//
// Attempts are numbered in the requests' names (<kind>-<workload>-<check>-<n>),
// so a restarted controller knows how many were made. A request serves the
// reservation named in its sluice.dev/admission annotation; a later
// reservation adopts a request that has not failed.
package provisioning
