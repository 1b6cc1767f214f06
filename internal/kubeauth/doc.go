// Package kubeauth lets an HTTP server of Sluice answer only whom the
// cluster says it may: it authenticates a request as the Kubernetes API
// server would (the API server's front proxy, for requests it forwards to
// an aggregated API, or a bearer token, checked with a TokenReview) and
// authorizes it with a SubjectAccessReview, so RBAC decides who reads
// what.
//
// The front proxy's CA, allowed names and headers come from the ConfigMap
// kube-system/extension-apiserver-authentication, which the API server
// publishes for aggregated API servers and which Guard re-reads every
// minute.
package kubeauth
