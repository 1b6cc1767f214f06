package v1beta1

const (
	// QueueNameLabel on a job names the LocalQueue in the job's namespace.
	QueueNameLabel = "sluice.dev/queue-name"
	// PriorityClassLabel on a job names a WorkloadPriorityClass.
	PriorityClassLabel = "sluice.dev/priority-class"
)
