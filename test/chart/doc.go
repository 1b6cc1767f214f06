// Package chart tests the Helm chart (charts/sluice) by rendering it with
// the real helm binary (hack/helm.sh builds it from its Go module): it
// lints, every value is checked with its path named, the webhooks and RBAC
// match what each integration serves and writes, and only the services that
// talk to the API server get a token. The end-to-end tests apply the same
// rendering to a real API server (test/e2e, TestChart…).
package chart
