// Package integration runs Sluice's JetStream services together against a
// real embedded JetStream server (no Kubernetes): two admission replicas
// racing on one cohort tree, restarts of the services and of NATS itself.
// The tests stand in for the job integration by writing workload records
// and publishing finished and stopped events, and check the design's
// guarantees (no over-admission, nothing lost) on every ledger revision.
package integration
