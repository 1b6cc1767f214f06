// Package ledger is the quota ledger: which workload holds which quota,
// kept in a JetStream KV bucket.
//
// Each reservation has its own key (res.<kind>.<namespace>.<name>), so the
// ledger has no size limit per cohort tree and a reader applies one change
// at a time. Each unit of quota interaction (a cohort tree, or a lone
// ClusterQueue) has a revision key (tree.<name>). Reservations are booked
// in one atomic batch that ends with a write of their tree's revision key,
// checked against the revision the writer decided from: two writers that
// decided from the same state cannot both win; the loser's batch is
// refused whole and it must look again. Because the tree key comes last, a
// reader that has seen a tree's revision has seen every reservation booked
// in the tree up to it. That is how Sluice never over-admits, however
// many admission replicas run. A release deletes one reservation key and
// leaves the tree alone: freeing quota can never over-admit, so it need
// not conflict with admissions.
//
// A tree key written by an older Sluice holds all of the tree's
// reservations in its value; Migrate moves them to their own keys.
package ledger
