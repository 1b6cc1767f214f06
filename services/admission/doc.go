// Package admission is the admission service: it keeps the pending queues,
// runs the engine over the quota ledger, reserves quota by compare-and-set,
// and publishes admissions, pending reasons and preemption requests.
//
// Its state is level-triggered: it mirrors four KV buckets (configuration,
// workloads, ledger and fences) through watchers, so a restart rebuilds
// everything and any number of replicas stay correct. Replicas race per
// cohort tree; the ledger's compare-and-set lets exactly one win, and the
// loser re-reads.
//
// One goroutine, the loop, owns all of it. The files follow its parts:
//
//   - run.go: configuration, construction and the loop (Run);
//   - mirror.go: the four mirrors, applied entry by entry into the engine;
//   - book.go: the cycle's booking phase (reservations written per tree,
//     admission checks' answers recorded into them);
//   - announce.go: the events the decisions become, and the announcements
//     a restart left out;
//   - pending.go: which pending reasons are news, and when to tell them;
//   - outbox.go: the one way an event leaves (Add, Flush, Retry);
//   - views.go: the pending API, the web view and the metrics, answered
//     from a view the loop takes;
//   - trace.go, metrics.go, shapes.go: spans, metrics, shared pod-set
//     requests.
package admission
