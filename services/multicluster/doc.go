// Package multicluster dispatches workloads to worker clusters over NATS:
// the sluice.dev/multicluster admission check.
//
// A manager cluster's Sluice reserves quota for a workload as usual. When
// its ClusterQueue names a multicluster check, the Dispatcher (a check
// controller in the manager) offers the workload, a copy of its job
// object, to the worker clusters its MultiClusterConfig names. Each worker
// runs a whole Sluice of its own, and a Worker agent beside it: the agent
// creates the copy in its cluster, where the worker's Sluice queues and
// admits it against the worker's own quotas, and reports the copy's state
// and status back. The first worker to admit it wins: the check turns
// Ready naming that cluster, the other workers withdraw their copies, and
// the manager's object stays suspended, mirroring the winner's status
// until it finishes.
//
// Managers and workers share no Kubernetes credentials. They talk through
// one JetStream stream in the manager (Stream), reached by each worker's
// NATS server as a leaf node whose user may only read its own offers and
// write its own reports. The stream keeps the last message per subject:
// an offer and a withdrawal about one workload replace each other, a
// report replaces the previous one, so a worker that was away reads only
// what holds now.
//
// A worker whose heartbeats stop for the config's workerLostTimeout loses
// its workloads: the check asks to retry, the workload is evicted and
// reserved again, and offered to the workers still heard from. The copy
// on the lost worker is withdrawn; its agent deletes it before anything
// else when it comes back, so the job never runs in two places once the
// worker is back.
package multicluster
