// Package admission is the admission service: it keeps the pending queues,
// runs the engine over the quota ledger, reserves quota by compare-and-set,
// and publishes admissions, pending reasons and preemption requests.
//
// Its state is level-triggered: it mirrors three KV buckets (configuration,
// workloads, ledger) through watchers, so a restart rebuilds everything and
// any number of replicas stay correct. Replicas race per cohort tree; the
// ledger's compare-and-set lets exactly one win, and the loser re-reads.
package admission
