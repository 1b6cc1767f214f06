package events

// SpecVersion is the CloudEvents version every event uses.
const SpecVersion = "1.0"

// Workload transitions.
const (
	WorkloadSubmittedV1 = "dev.sluice.workload.v1.submitted"
	WorkloadPendingV1   = "dev.sluice.workload.v1.pending"
	WorkloadAdmittedV1  = "dev.sluice.workload.v1.admitted"
	WorkloadPreemptedV1 = "dev.sluice.workload.v1.preempted"
	WorkloadEvictedV1   = "dev.sluice.workload.v1.evicted"
	WorkloadFinishedV1  = "dev.sluice.workload.v1.finished"
)

// SimulationSummaryV1 closes the output of `sluice simulate`.
const SimulationSummaryV1 = "dev.sluice.simulation.v1.summary"
