// Package checks runs an admission check controller: the service that
// decides, for every reservation of quota that waits for a check of its
// controller, whether the workload may be admitted.
//
// Sluice reserves quota for a workload whose ClusterQueue names admission
// checks and announces the reservation (dev.sluice.workload.v1.reserved).
// A Controller consumes those announcements with a durable consumer of its
// own, asks its Decider about each check of its controller, and publishes
// the answers (dev.sluice.check.v1.updated): Ready admits the workload
// once every check is ready, Retry gives the reservation up and queues the
// workload again, Rejected deactivates it. A Decider that needs time
// answers Pending and later calls Controller.Answer.
//
// The controller also marks each AdmissionCheck of its controllerName
// Active, without which the ClusterQueues naming it admit nothing.
package checks
