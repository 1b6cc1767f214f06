// Package ledger is the quota ledger: which workload holds which quota,
// kept in a JetStream KV bucket with one key per unit of quota interaction
// (a cohort tree, or a lone ClusterQueue).
//
// Every change is a compare-and-set on that key's revision, so two writers
// that decided from the same state cannot both win: the loser's write fails
// and it must look again. That is how Sluice never over-admits, however many
// admission replicas run.
package ledger
