package job

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

const (
	// MainPodSet is the name of the only pod set of a batch/v1 Job.
	MainPodSet = "main"

	// MinParallelismAnnotation on a Job allows partial admission: Sluice may
	// start the Job with as few as this many parallel pods (an integer in
	// 1..parallelism) when the full parallelism does not fit.
	MinParallelismAnnotation = "sluice.dev/job-min-parallelism"
)

// Workload is what the queueing core sees of a Job.
type Workload struct {
	Namespace string
	Name      string
	UID       string
	// LocalQueue is the sluice.dev/queue-name label: a LocalQueue in Namespace.
	LocalQueue string
	// PriorityClass names the WorkloadPriorityClass (from the
	// sluice.dev/priority-class label) or, failing that, the Kubernetes
	// PriorityClass of the pod template; empty when neither is set.
	PriorityClass string
	Priority      int32
	CreationTime  time.Time
	PodSets       []PodSet
}

// PodSet is a group of identical pods.
type PodSet struct {
	Name string
	// Count is the number of pods that run at once when fully admitted.
	Count int32
	// MinCount is the least number of pods the workload may be admitted
	// with; it equals Count unless partial admission is allowed.
	MinCount int32
	// Requests are the effective requests of ONE pod.
	Requests     corev1.ResourceList
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
}

// PriorityResolver looks up priority values by class name. Implementations
// should return an error wrapping ErrPriorityClassNotFound for a missing
// class.
type PriorityResolver interface {
	// WorkloadPriorityClass returns the value of a sluice.dev
	// WorkloadPriorityClass.
	WorkloadPriorityClass(name string) (int32, error)
	// PriorityClass returns the value of a scheduling.k8s.io PriorityClass.
	PriorityClass(name string) (int32, error)
}

// StaticPriorityResolver is a PriorityResolver over fixed maps, for tests,
// simulation and callers that keep their own mirror of the classes.
type StaticPriorityResolver struct {
	WorkloadPriorityClasses map[string]int32
	PriorityClasses         map[string]int32
}

// WorkloadPriorityClass implements PriorityResolver.
func (r StaticPriorityResolver) WorkloadPriorityClass(name string) (int32, error) {
	v, ok := r.WorkloadPriorityClasses[name]
	if !ok {
		return 0, fmt.Errorf("WorkloadPriorityClass %q: %w", name, ErrPriorityClassNotFound)
	}
	return v, nil
}

// PriorityClass implements PriorityResolver.
func (r StaticPriorityResolver) PriorityClass(name string) (int32, error) {
	v, ok := r.PriorityClasses[name]
	if !ok {
		return 0, fmt.Errorf("PriorityClass %q: %w", name, ErrPriorityClassNotFound)
	}
	return v, nil
}

// WorkloadFromJob translates a Job into a Workload. It returns an error
// wrapping ErrNotManaged when the Job has no queue label.
//
// The pod count is spec.parallelism (default 1), lowered to spec.completions
// when that is smaller. The per-pod requests follow Kubernetes' effective
// pod request (see PodRequests). When the Job is or was admitted by Sluice,
// the values recorded in the sluice.dev/original annotation are used instead
// of the live template's, so that flavor labels injected at admission and a
// lowered parallelism never leak back into the workload.
func WorkloadFromJob(job *batchv1.Job, prio PriorityResolver) (Workload, error) {
	if job == nil {
		return Workload{}, fmt.Errorf("nil job: %w", ErrInvalidJob)
	}
	queue := job.Labels[v1beta1.QueueNameLabel]
	if queue == "" {
		return Workload{}, fmt.Errorf("job %s: %w", jobKey(job), ErrNotManaged)
	}

	orig, err := originalOrCurrent(job)
	if err != nil {
		return Workload{}, fmt.Errorf("job %s: %w", jobKey(job), err)
	}

	count, minCount, err := podCounts(job, orig.Parallelism)
	if err != nil {
		return Workload{}, fmt.Errorf("job %s: %w", jobKey(job), err)
	}

	className, priority, err := resolvePriority(job, prio)
	if err != nil {
		return Workload{}, fmt.Errorf("job %s: %w", jobKey(job), err)
	}

	ps := PodSet{
		Name:         MainPodSet,
		Count:        count,
		MinCount:     minCount,
		Requests:     PodRequests(&job.Spec.Template.Spec),
		NodeSelector: maps.Clone(orig.NodeSelector),
		Tolerations:  cloneTolerations(orig.Tolerations),
	}
	return Workload{
		Namespace:     job.Namespace,
		Name:          job.Name,
		UID:           string(job.UID),
		LocalQueue:    queue,
		PriorityClass: className,
		Priority:      priority,
		CreationTime:  job.CreationTimestamp.Time,
		PodSets:       []PodSet{ps},
	}, nil
}

// podCounts returns the pod set's count and minimum count. parallelism is
// the Job's own (original) parallelism; nil means the default, 1.
func podCounts(job *batchv1.Job, parallelism *int32) (count, minCount int32, err error) {
	par := int32(1)
	if parallelism != nil {
		par = *parallelism
	}
	if par < 0 {
		return 0, 0, fmt.Errorf("spec.parallelism is %d: %w", par, ErrInvalidJob)
	}
	count = par
	if c := job.Spec.Completions; c != nil {
		if *c < 0 {
			return 0, 0, fmt.Errorf("spec.completions is %d: %w", *c, ErrInvalidJob)
		}
		count = min(count, *c)
	}

	raw, ok := job.Annotations[MinParallelismAnnotation]
	if !ok {
		return count, count, nil
	}
	v, perr := strconv.ParseInt(strings.TrimSpace(raw), 10, 32)
	if perr != nil {
		return 0, 0, fmt.Errorf("annotation %s=%q is not an integer: %w", MinParallelismAnnotation, raw, ErrBadAnnotation)
	}
	if v < 1 || v > int64(par) {
		return 0, 0, fmt.Errorf("annotation %s=%d must be between 1 and parallelism (%d): %w", MinParallelismAnnotation, v, par, ErrBadAnnotation)
	}
	// completions may cap the count below the requested minimum; the
	// minimum can never exceed what the Job runs at once.
	return count, min(int32(v), count), nil
}

// resolvePriority applies Sluice's priority rule: the WorkloadPriorityClass
// label wins; else the pod template's priorityClassName; else 0.
func resolvePriority(job *batchv1.Job, prio PriorityResolver) (string, int32, error) {
	if name := job.Labels[v1beta1.PriorityClassLabel]; name != "" {
		if prio == nil {
			return "", 0, fmt.Errorf("WorkloadPriorityClass %q: %w", name, ErrNoPriorityResolver)
		}
		v, err := prio.WorkloadPriorityClass(name)
		if err != nil {
			return "", 0, fmt.Errorf("label %s: WorkloadPriorityClass %q: %w", v1beta1.PriorityClassLabel, name, err)
		}
		return name, v, nil
	}
	if name := job.Spec.Template.Spec.PriorityClassName; name != "" {
		if prio == nil {
			return "", 0, fmt.Errorf("PriorityClass %q: %w", name, ErrNoPriorityResolver)
		}
		v, err := prio.PriorityClass(name)
		if err != nil {
			return "", 0, fmt.Errorf("spec.template.spec.priorityClassName: PriorityClass %q: %w", name, err)
		}
		return name, v, nil
	}
	return "", 0, nil
}

// PodRequests returns the effective resource requests of one pod built from
// spec, computed the way Kubernetes does for scheduling and quota (see
// https://kubernetes.io/docs/concepts/resource-management/effective-pod-requests-limits/
// and KEP-753 "Resources calculation for scheduling and pod admission"):
//
//   - A container's requests are its resources.requests, with
//     resources.limits standing in for any resource it has a limit but no
//     request for (the API server defaults a pod's requests that way).
//   - Running phase: the sum over app containers and sidecars (init
//     containers with restartPolicy Always).
//   - Init phase: for each regular init container, its requests plus those of
//     the sidecars listed before it (they are already running); for each
//     sidecar, the sum of the sidecars up to and including it. The init
//     phase needs the highest of these.
//   - The pod needs, per resource, the higher of the two phases.
//   - Pod-level resources (spec.resources, for cpu, memory and hugepages-*)
//     replace the container-derived value for those resources; a pod-level
//     limit stands in for a missing pod-level request when no container
//     requests that resource.
//   - spec.overhead is added on top.
func PodRequests(spec *corev1.PodSpec) corev1.ResourceList {
	out := corev1.ResourceList{}
	if spec == nil {
		return out
	}

	running := corev1.ResourceList{}
	for i := range spec.Containers {
		addInto(running, containerRequests(&spec.Containers[i]))
	}

	initPeak := corev1.ResourceList{}
	sidecars := corev1.ResourceList{}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		req := containerRequests(c)
		if isSidecar(c) {
			addInto(sidecars, req)
			maxInto(initPeak, sidecars)
			continue
		}
		phase := cloneList(sidecars)
		addInto(phase, req)
		maxInto(initPeak, phase)
	}
	addInto(running, sidecars)

	maxInto(out, running)
	maxInto(out, initPeak)

	if pl := spec.Resources; pl != nil {
		for name, q := range pl.Requests {
			if podLevelResource(name) {
				out[name] = q.DeepCopy()
			}
		}
		for name, q := range pl.Limits {
			if _, set := pl.Requests[name]; set || !podLevelResource(name) {
				continue
			}
			if _, fromContainers := out[name]; !fromContainers {
				out[name] = q.DeepCopy()
			}
		}
	}

	addInto(out, spec.Overhead)
	return out
}

// containerRequests is a container's requests after API defaulting: limits
// count as requests where a request is missing.
func containerRequests(c *corev1.Container) corev1.ResourceList {
	out := make(corev1.ResourceList, len(c.Resources.Requests)+len(c.Resources.Limits))
	for name, q := range c.Resources.Requests {
		out[name] = q.DeepCopy()
	}
	for name, q := range c.Resources.Limits {
		if _, ok := out[name]; !ok {
			out[name] = q.DeepCopy()
		}
	}
	return out
}

func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func podLevelResource(name corev1.ResourceName) bool {
	return name == corev1.ResourceCPU || name == corev1.ResourceMemory ||
		strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix)
}

// addInto adds src to dst, resource by resource.
func addInto(dst, src corev1.ResourceList) {
	for name, q := range src {
		sum := q.DeepCopy()
		if cur, ok := dst[name]; ok {
			sum = cur.DeepCopy()
			sum.Add(q)
		}
		dst[name] = sum
	}
}

// maxInto raises dst to src, resource by resource.
func maxInto(dst, src corev1.ResourceList) {
	for name, q := range src {
		if cur, ok := dst[name]; !ok || q.Cmp(cur) > 0 {
			dst[name] = q.DeepCopy()
		}
	}
}

func cloneList(l corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(l))
	for name, q := range l {
		out[name] = q.DeepCopy()
	}
	return out
}

func cloneTolerations(in []corev1.Toleration) []corev1.Toleration {
	if in == nil {
		return nil
	}
	out := make([]corev1.Toleration, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

func jobKey(job *batchv1.Job) string {
	return job.Namespace + "/" + job.Name
}
