package events

// SpecVersion is the CloudEvents version every event uses.
const SpecVersion = "1.0"

// CloudEvents types of the events on the bus. Each is the value returned by
// the Type method of the Go struct of the same name without the Type prefix.
const (
	TypeWorkloadSubmittedV1   = "dev.sluice.workload.v1.submitted"
	TypeWorkloadPendingV1     = "dev.sluice.workload.v1.pending"
	TypeWorkloadReservedV1    = "dev.sluice.workload.v1.reserved"
	TypeWorkloadAdmittedV1    = "dev.sluice.workload.v1.admitted"
	TypeWorkloadPreemptedV1   = "dev.sluice.workload.v1.preempted"
	TypeWorkloadEvictedV1     = "dev.sluice.workload.v1.evicted"
	TypeWorkloadMovedV1       = "dev.sluice.workload.v1.moved"
	TypeWorkloadResizedV1     = "dev.sluice.workload.v1.resized"
	TypeWorkloadStartedV1     = "dev.sluice.workload.v1.started"
	TypeWorkloadStoppedV1     = "dev.sluice.workload.v1.stopped"
	TypeWorkloadFinishedV1    = "dev.sluice.workload.v1.finished"
	TypeWorkloadDeletedV1     = "dev.sluice.workload.v1.deleted"
	TypePreemptionRequestedV1 = "dev.sluice.preemption.v1.requested"
	TypeQuotaReleasedV1       = "dev.sluice.quota.v1.released"
	TypeQuotaUsageV1          = "dev.sluice.quota.v1.usage"
	TypeConfigChangedV1       = "dev.sluice.config.v1.changed"
	TypeCheckUpdatedV1        = "dev.sluice.check.v1.updated"
)

// TypeSimulationSummaryV1 closes the output of `sluice simulate`. It is a
// record of the simulator's output file, never published on the bus, so it
// has no Go struct, no subject and no schema here.
const TypeSimulationSummaryV1 = "dev.sluice.simulation.v1.summary"

// TypePrefix starts every CloudEvents type Sluice declares.
const TypePrefix = "dev.sluice."
