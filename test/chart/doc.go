// Package chart renders the Helm chart (charts/sluice) with the real helm
// binary (hack/helm.sh builds it from its Go module), for its own tests and
// the end-to-end tests (Render). Its tests check that it lints, that every
// value is checked with its path named, that the webhooks and RBAC match
// what each integration serves and writes, and that only the services that
// talk to the API server get a token. The end-to-end tests apply the same
// rendering to a real API server (test/e2e, TestChart…).
package chart
