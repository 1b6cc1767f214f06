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

// KueueMinParallelismAnnotation is Kueue's partial admission annotation
// on a Job; Sluice reads it when the Job lacks its own.
const KueueMinParallelismAnnotation = "kueue.x-k8s.io/job-min-parallelism"

// MaxExecTimeLabel on a job bounds, in whole seconds above zero, how long
// it may stay admitted in total over all its admissions; past that it is
// evicted and deactivated. KueueMaxExecTimeLabel is Kueue's name for the
// same; it is read when the job lacks Sluice's.
const (
	MaxExecTimeLabel      = "sluice.dev/max-exec-time-seconds"
	KueueMaxExecTimeLabel = "kueue.x-k8s.io/max-exec-time-seconds"
)
