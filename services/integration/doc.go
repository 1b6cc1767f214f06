// Package integration is the integration service: it runs any set of job
// kinds (adapters built on internal/jobframework) in one process, and any
// number of replicas share the work by workload-key shard.
//
// Per kind it keeps an informer over labelled objects and a work queue
// keyed by namespace/name (namespace/group for a Grouper's members). A
// sync of one key reads the object, its workload record (the workloads
// bucket), its reservation (the ledger bucket) and its fence, and takes
// the one step the difference calls for: store and announce a new or
// changed workload, start an admitted object, stop an evicted one, or
// record its end. The mutating webhook (jobframework.Webhook) suspends
// labelled objects on create so that nothing runs before admission.
//
// The files follow the service's parts:
//
//   - run.go: configuration, construction, Run (open, watch, wait until
//     loaded, take shards, work, stop in order) and the work queues;
//   - state.go: what the watches mirror (configuration, reservations,
//     fences), under one mutex, and the shards this replica owns;
//   - cache.go: what the informers keep of each object;
//   - reconcile.go: one key's sync: its record, its end, its departure;
//   - start.go: an admitted object started, its start announced;
//   - stop.go: a preempted or evicted object stopped, its stop announced;
//   - group.go: the same for a Grouper's members (pod groups);
//   - served.go: kinds started once the API server serves them.
package integration
