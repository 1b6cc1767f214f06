package v1beta1

const (
	// QueueNameLabel on a job names the LocalQueue in the job's namespace.
	QueueNameLabel = "sluice.dev/queue-name"
	// PriorityClassLabel on a job names a WorkloadPriorityClass.
	PriorityClassLabel = "sluice.dev/priority-class"
)

// Kueue's labels for the same two things. With the integrations'
// --kueue-labels, a job created with these (and not Sluice's) is given
// Sluice's labels with the same values on create, for clusters moving off
// Kueue.
const (
	KueueQueueNameLabel     = "kueue.x-k8s.io/queue-name"
	KueuePriorityClassLabel = "kueue.x-k8s.io/priority-class"
)

// MinParallelismAnnotation on a Job allows partial admission (the least
// parallelism it may run with); KueueMinParallelismAnnotation is Kueue's
// name for the same, read when the Job lacks Sluice's.
const (
	MinParallelismAnnotation      = "sluice.dev/job-min-parallelism"
	KueueMinParallelismAnnotation = "kueue.x-k8s.io/job-min-parallelism"
)

// MaxExecTimeLabel on a job bounds, in whole seconds above zero, how long
// it may stay admitted in total over all its admissions; past that it is
// evicted and deactivated. KueueMaxExecTimeLabel is Kueue's name for the
// same; it is read when the job lacks Sluice's.
const (
	MaxExecTimeLabel      = "sluice.dev/max-exec-time-seconds"
	KueueMaxExecTimeLabel = "kueue.x-k8s.io/max-exec-time-seconds"
)

// Topology-aware scheduling annotations on a pod set's pod template, and
// Kueue's names for the same (read with --kueue-labels; the simulator reads
// both). Sluice's win when both are given.
const (
	// PodSetRequiredTopologyAnnotation: all pods in one domain of the
	// level (a node label of the flavor's Topology).
	PodSetRequiredTopologyAnnotation = "sluice.dev/podset-required-topology"
	// PodSetPreferredTopologyAnnotation: as few domains as possible, one
	// of the level if any fits.
	PodSetPreferredTopologyAnnotation = "sluice.dev/podset-preferred-topology"
	// PodSetUnconstrainedTopologyAnnotation "true": counted against the
	// nodes' capacity, placed anywhere.
	PodSetUnconstrainedTopologyAnnotation = "sluice.dev/podset-unconstrained-topology"
	// PodSetSliceRequiredTopologyAnnotation with PodSetSliceSizeAnnotation:
	// pods in slices of that size, each slice in one domain of the level.
	PodSetSliceRequiredTopologyAnnotation = "sluice.dev/podset-slice-required-topology"
	PodSetSliceSizeAnnotation             = "sluice.dev/podset-slice-size"
	// PodSetGroupNameAnnotation: pod sets with the same group name are
	// placed together (a leader and its workers).
	PodSetGroupNameAnnotation = "sluice.dev/podset-group-name"

	KueuePodSetRequiredTopologyAnnotation      = "kueue.x-k8s.io/podset-required-topology"
	KueuePodSetPreferredTopologyAnnotation     = "kueue.x-k8s.io/podset-preferred-topology"
	KueuePodSetUnconstrainedTopologyAnnotation = "kueue.x-k8s.io/podset-unconstrained-topology"
	KueuePodSetSliceRequiredTopologyAnnotation = "kueue.x-k8s.io/podset-slice-required-topology"
	KueuePodSetSliceSizeAnnotation             = "kueue.x-k8s.io/podset-slice-size"
	KueuePodSetGroupNameAnnotation             = "kueue.x-k8s.io/podset-group-name"
)

// TopologySchedulingGate holds every pod of a pod set admitted on a
// topology-aware flavor until the integration gives it the node selector
// of its domain.
const TopologySchedulingGate = "sluice.dev/topology"

// TopologyPodLabel marks a pod of a topology-aware workload: its usage is
// counted through its workload's placement, not as another pod's.
const TopologyPodLabel = "sluice.dev/tas"

// Annotations on the pod template of a pod set admitted on a
// topology-aware flavor, which its pods carry: where the pod set's pods go
// (the topology assignment at admission, as JSON), which object and pod
// set they are of (TopologyOwnerAnnotation is the object's
// namespace/name), and which admission placed them. The integration
// removes TopologySchedulingGate from each pod with the node selector of
// a domain that still has room for one: a domain of the admission's
// placement as the ledger holds it now (pods on failed nodes move), or of
// the annotation's.
const (
	TopologyAssignmentAnnotation = "sluice.dev/topology-assignment"
	TopologyOwnerAnnotation      = "sluice.dev/topology-owner"
	TopologyPodSetAnnotation     = "sluice.dev/topology-podset"
	TopologyAdmissionAnnotation  = "sluice.dev/topology-admission"
)

// Pod groups: Pods queued and admitted together as one workload, named
// after the group.
const (
	// PodGroupNameLabel names the pod group a Pod belongs to.
	PodGroupNameLabel = "sluice.dev/pod-group-name"
	// PodGroupTotalCountAnnotation says how many Pods the group has in
	// all; the group is queued once that many exist.
	PodGroupTotalCountAnnotation = "sluice.dev/pod-group-total-count"
	// PodGroupServingAnnotation, "true", makes a group a serving one: it
	// runs until its Pods are deleted, and a Pod that ends does not end
	// it (its owner replaces it, and the replacement starts under the
	// group's admission).
	PodGroupServingAnnotation = "sluice.dev/pod-group-serving"
	// PodGroupFastAdmissionAnnotation, "true", queues a group on its first
	// Pod, for the group's total count of Pods shaped as that one.
	PodGroupFastAdmissionAnnotation = "sluice.dev/pod-group-fast-admission"
	// PodGroupLeaderWorkerSetAnnotation, "true", marks a Pod of a queued
	// LeaderWorkerSet: its group is its leader-worker group, and the pod
	// webhook names it after the set and the group's index
	// (leaderworkerset-<set>-<index>) when the Pod is created.
	PodGroupLeaderWorkerSetAnnotation = "sluice.dev/pod-group-leaderworkerset"
)

// ElasticJobAnnotation "true" on a batch/v1 Job makes it elastic (Kueue's
// workload slices): its parallelism may change while it runs. More pods
// are admitted as a scale-up of the same admission, which never stops
// the pods that run; fewer give their quota back at once.
// KueueElasticJobAnnotation is Kueue's name for the same.
const (
	ElasticJobAnnotation      = "sluice.dev/elastic-job"
	KueueElasticJobAnnotation = "kueue.x-k8s.io/elastic-job"
)

// ElasticSchedulingGate holds each pod of an elastic job until its
// admission has room for it: the integration lifts it from as many pods
// as each pod set's admitted count allows. ElasticPodLabel marks those
// pods (its value is the kind), ElasticOwnerAnnotation names their object
// (namespace/name) and ElasticPodSetAnnotation their pod set.
const (
	ElasticSchedulingGate   = "sluice.dev/elastic-job"
	ElasticPodLabel         = "sluice.dev/elastic"
	ElasticOwnerAnnotation  = "sluice.dev/elastic-owner"
	ElasticPodSetAnnotation = "sluice.dev/elastic-podset"
)
