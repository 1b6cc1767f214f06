package jobframework

import (
	"errors"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Sentinel errors. Functions in this package wrap them with %w and context;
// test with errors.Is.
var (
	// ErrNotManaged: the Job has no sluice.dev/queue-name label, so Sluice
	// leaves it alone.
	ErrNotManaged = errors.New("job is not managed by sluice: it has no " + v1beta1.QueueNameLabel + " label")

	// ErrInvalidJob: the Job cannot be turned into a workload (nil job, bad
	// annotation, negative counts...).
	ErrInvalidJob = errors.New("invalid job")
	// ErrInvalidGroup: a group's members disagree (total count, queue) or
	// more of them exist than its total count.
	ErrInvalidGroup = errors.New("invalid group")
	// ErrParentKind: a Parent's objects (a Deployment) are not jobs; its
	// Pods are.
	ErrParentKind = errors.New("objects of a parent kind are not queued themselves: their pods are")

	// ErrPriorityClassNotFound: a PriorityResolver could not find the named
	// class. Resolvers should wrap it so callers can tell "missing" from
	// "lookup failed".
	ErrPriorityClassNotFound = errors.New("not found")

	// ErrNoPriorityResolver: the Job names a priority class but no resolver
	// was given.
	ErrNoPriorityResolver = errors.New("no priority resolver")

	// ErrInvalidAssignment: the assignment does not fit the Job (unknown pod
	// set, count out of range, unknown flavor).
	ErrInvalidAssignment = errors.New("invalid assignment")

	// ErrNodeSelectorConflict: a flavor's node label contradicts the pod
	// template's nodeSelector or another assigned flavor's label.
	ErrNodeSelectorConflict = errors.New("node selector conflict")

	// ErrPodSetUpdateConflict: two admission checks, or a check and the
	// pod template, want different values for one label, annotation or
	// node selector key.
	ErrPodSetUpdateConflict = errors.New("admission check update conflict")

	// ErrNotSuspended: admission needs a suspended Job.
	ErrNotSuspended = errors.New("job is not suspended")

	// ErrTemplateLocked: the patch changes the pod template's scheduling
	// directives, but the API server would refuse it because the stored Job
	// is not suspended or has status.startTime set. Run the earlier
	// EvictionSteps (suspend, clear startTime) first.
	ErrTemplateLocked = errors.New("job pod template is locked: the job is running or has started")

	// ErrBadAnnotation: a sluice.dev/* annotation on the Job holds a value
	// that cannot be parsed.
	ErrBadAnnotation = errors.New("bad annotation")

	// ErrNotYet: something the workload is built from cannot be read yet
	// (a ResourceClaimTemplate created after its job): try again later.
	ErrNotYet = errors.New("not readable yet")
)
