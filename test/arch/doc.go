// Package arch holds the architecture test: the one-way layering the
// design promises, read from the Go import graph (go list), so that a
// package imported across a layer fails `make test` instead of a review.
//
// The layers, from the bottom:
//
//   - the decision core, internal/engine: no I/O and no clock (snapshot in,
//     decisions out); it imports no other package of Sluice's;
//   - the public contract and plumbing: api/, events/, schemas/, checks/ and
//     internal/ (the job framework, internal/jobframework, included): they
//     import no service and no command;
//   - the services, services/<name>: each imports no other service, except
//     the job kinds' adapters (services/integration/<kind> and the registry
//     services/integration/kinds), which import the framework and never the
//     integration service itself;
//   - the composition: cmd/, test/, loadtest/, hack/, examples/.
//
// Nothing in the main module may need k8s.io/kubernetes: the design keeps
// Sluice on the published client libraries.
package arch
