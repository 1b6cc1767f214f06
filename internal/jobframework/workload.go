package jobframework

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/queueconfig"
)

// Workload is what the queueing core sees of an object of any kind.
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
	PodSets       []WorkloadPodSet
	// MaxExecutionSeconds, when above zero, is the job's maximum
	// execution time (see MaxExecution).
	MaxExecutionSeconds int32
	// Elastic: the job's pod counts may change while it runs (IsElastic).
	Elastic bool
}

// WorkloadPodSet is a group of identical pods as the queueing core sees it.
type WorkloadPodSet struct {
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
	// Topology is the pod template's topology request (nil: none).
	Topology *events.TopologyRequestV1
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
	// DefaultPriorityClass names the PriorityClass marked globalDefault, if
	// any: the priority of a job that names no class, as in Kueue.
	DefaultPriorityClass string
}

// DefaultPriority implements defaulter.
func (r StaticPriorityResolver) DefaultPriority() (string, int32, bool) {
	if r.DefaultPriorityClass == "" {
		return "", 0, false
	}
	v, ok := r.PriorityClasses[r.DefaultPriorityClass]
	return r.DefaultPriorityClass, v, ok
}

// defaulter is a PriorityResolver that knows the cluster's default
// priority: the PriorityClass marked globalDefault.
type defaulter interface {
	DefaultPriority() (name string, value int32, ok bool)
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

// WorkloadOption tunes WorkloadOf.
type WorkloadOption func(*workloadOptions)

type workloadOptions struct {
	requests func(corev1.ResourceList) corev1.ResourceList
	devices  DeviceCounter
	kueue    bool
}

// A DeviceCounter says what one pod's device claims count as against
// quota (queueconfig.Resources.DeviceRequests, with the claims looked up).
type DeviceCounter func(namespace string, claims []corev1.PodResourceClaim) (corev1.ResourceList, error)

// WithDevices counts each pod set's Dynamic Resource Allocation claims
// with f, added to its requests after WithRequests' changes. An error of
// f wrapping queueconfig's ErrUnmappedDeviceClass or
// ErrUnsupportedDeviceRequest makes the job invalid; any other (a claim
// template not there yet) is ErrNotYet.
func WithDevices(f DeviceCounter) WorkloadOption {
	return func(o *workloadOptions) { o.devices = f }
}

// WithKueueAnnotations reads Kueue's topology annotations on pod templates
// where Sluice's are absent (--kueue-labels).
func WithKueueAnnotations() WorkloadOption {
	return func(o *workloadOptions) { o.kueue = true }
}

// WithRequests has f turn each pod set's per-pod requests into those the
// workload is queued with (Kueue's resources block: excluded prefixes and
// transformations). The pods themselves keep asking for what they ask.
func WithRequests(f func(corev1.ResourceList) corev1.ResourceList) WorkloadOption {
	return func(o *workloadOptions) { o.requests = f }
}

// WorkloadOf translates an object of a kind into a Workload. It returns an
// error wrapping ErrNotManaged when the object has no queue label, and one
// wrapping ErrInvalidJob naming the field when its pod sets cannot be read.
//
// The pod sets are read with what Sluice's admission injected taken out
// again (see Pristine), so flavor labels and a lowered count never leak
// back into the workload. The per-pod requests follow Kubernetes' effective
// pod request (see PodRequests).
func WorkloadOf(kind string, j Job, prio PriorityResolver, opts ...WorkloadOption) (Workload, error) {
	var o workloadOptions
	for _, opt := range opts {
		opt(&o)
	}
	m := j.Meta()
	key := m.GetNamespace() + "/" + m.GetName()
	queue := m.GetLabels()[v1beta1.QueueNameLabel]
	if queue == "" {
		return Workload{}, fmt.Errorf("%s %s: %w", kind, key, ErrNotManaged)
	}
	if err := CheckQueueName(queue); err != nil {
		return Workload{}, fmt.Errorf("%s %s: %w", kind, key, err)
	}
	if err := Pristine(j); err != nil {
		return Workload{}, fmt.Errorf("%s %s: %w", kind, key, err)
	}
	sets, err := j.PodSets()
	if err != nil {
		return Workload{}, fmt.Errorf("%s %s: %w", kind, key, err)
	}
	if len(sets) == 0 {
		return Workload{}, fmt.Errorf("%s %s: no pod sets: %w", kind, key, ErrInvalidJob)
	}
	if len(sets) > MaxPodSets {
		return Workload{}, fmt.Errorf("%s %s: %d pod sets, more than the %d a workload may have: %w", kind, key, len(sets), MaxPodSets, ErrInvalidJob)
	}
	className, priority, err := resolvePriority(m.GetLabels(), sets, prio)
	if err != nil {
		return Workload{}, fmt.Errorf("%s %s: %w", kind, key, err)
	}
	maxExec, err := MaxExecution(m.GetLabels())
	if err != nil {
		return Workload{}, fmt.Errorf("%s %s: %w", kind, key, err)
	}
	w := Workload{
		Namespace:           m.GetNamespace(),
		Name:                m.GetName(),
		UID:                 string(m.GetUID()),
		LocalQueue:          queue,
		PriorityClass:       className,
		Priority:            priority,
		CreationTime:        m.GetCreationTimestamp().Time,
		MaxExecutionSeconds: maxExec,
	}
	for _, ps := range sets {
		if ps.Count < 0 {
			return Workload{}, fmt.Errorf("%s %s: pod set %q: count %d is negative: %w", kind, key, ps.Name, ps.Count, ErrInvalidJob)
		}
		minCount := ps.MinCount
		if minCount == 0 || minCount > ps.Count {
			minCount = ps.Count
		}
		wps := askOf(ps.Spec)
		if o.requests != nil {
			wps.Requests = o.requests(wps.Requests)
		}
		if o.devices != nil && len(ps.Spec.ResourceClaims) > 0 {
			devs, err := o.devices(m.GetNamespace(), ps.Spec.ResourceClaims)
			switch {
			case errors.Is(err, queueconfig.ErrUnmappedDeviceClass) || errors.Is(err, queueconfig.ErrUnsupportedDeviceRequest):
				return Workload{}, fmt.Errorf("%s %s: pod set %q: %w: %w", kind, key, ps.Name, err, ErrInvalidJob)
			case err != nil:
				return Workload{}, fmt.Errorf("%s %s: pod set %q: %w: %w", kind, key, ps.Name, err, ErrNotYet)
			}
			wps.Requests = queueconfig.AddRequests(wps.Requests, devs)
		}
		wps.Name, wps.Count, wps.MinCount = ps.Name, ps.Count, minCount
		if ps.Meta != nil {
			t, err := queueconfig.TopologyRequest(ps.Meta.Annotations, o.kueue)
			if err != nil {
				return Workload{}, fmt.Errorf("%s %s: pod set %q: %w: %w", kind, key, ps.Name, err, ErrInvalidJob)
			}
			wps.Topology = topologyV1(t)
		}
		w.PodSets = append(w.PodSets, wps)
	}
	if IsElastic(m) {
		if err := elasticAllowed(j, w.PodSets); err != nil {
			return Workload{}, fmt.Errorf("%s %s: %w: %w", kind, key, err, ErrInvalidJob)
		}
		w.Elastic = true
	} else if a, ok := j.(Autoscaler); ok && a.Autoscales() {
		// Its pods would change in number outside its admission.
		return Workload{}, fmt.Errorf("%s %s: it autoscales, which a queued %s may do only as an elastic job (annotation %s: \"true\"): %w",
			kind, key, kind, v1beta1.ElasticJobAnnotation, ErrInvalidJob)
	}
	return w, nil
}

// Autoscaler is a Job whose own controller may change its pod counts
// while it runs (a RayCluster with KubeRay's autoscaler): queued, it must
// be elastic.
type Autoscaler interface {
	Autoscales() bool
}

// Resizable is a Job whose pod counts may change while it runs, so its
// elastic annotation is honored (batch/v1 Job, as in Kueue).
type Resizable interface {
	Job
	Resizable()
}

// IsElastic reports whether an object asks to be elastic:
// v1beta1.ElasticJobAnnotation or Kueue's name for it is "true".
func IsElastic(m metav1.Object) bool {
	a := m.GetAnnotations()
	return a[v1beta1.ElasticJobAnnotation] == "true" || a[v1beta1.KueueElasticJobAnnotation] == "true"
}

// elasticAllowed says why a job asking to be elastic cannot be: its kind
// cannot change size while it runs, it allows partial admission, or it
// asks for a topology (the rules Kueue has).
func elasticAllowed(j Job, sets []WorkloadPodSet) error {
	if _, ok := j.(Resizable); !ok {
		return fmt.Errorf("annotation %s: only a batch/v1 Job or a RayCluster can be elastic", v1beta1.ElasticJobAnnotation)
	}
	for _, ps := range sets {
		if ps.MinCount < ps.Count {
			return fmt.Errorf("annotation %s: pod set %q allows partial admission, which an elastic job cannot", v1beta1.ElasticJobAnnotation, ps.Name)
		}
		if t := ps.Topology; t != nil && (t.Required != "" || t.Preferred != "" || t.SliceLevel != "") {
			return fmt.Errorf("annotation %s: pod set %q asks for a topology, which an elastic job cannot", v1beta1.ElasticJobAnnotation, ps.Name)
		}
	}
	return nil
}

// A job that left its queue (or moved to another) and is queued again
// has a new workload: the same object, told apart by its workload UID,
// which is the object's UID with "_n" after it for the nth time it came
// back ("_" is in no UID, and is allowed in label values, KV keys and
// subjects, where workload UIDs go). Events, reservations and fences name the workload UID, so nothing
// of the earlier workload (a late release, a late start) touches it; a
// Kubernetes Event names the object's.
const incarnationSep = "_"

// WorkloadUID is the UID of the nth workload of an object (n = 0: the
// object's UID).
func WorkloadUID(objectUID string, n int) string {
	if n == 0 {
		return objectUID
	}
	return objectUID + incarnationSep + strconv.Itoa(n)
}

// ObjectUID is the UID of the object behind a workload UID.
func ObjectUID(workloadUID string) string {
	if i := strings.LastIndex(workloadUID, incarnationSep); i >= 0 {
		return workloadUID[:i]
	}
	return workloadUID
}

// IncarnationOf is n of a workload UID made by WorkloadUID.
func IncarnationOf(workloadUID string) int {
	i := strings.LastIndex(workloadUID, incarnationSep)
	if i < 0 {
		return 0
	}
	n, err := strconv.Atoi(workloadUID[i+1:])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// MaxPodSets is the most pod sets a workload may have, as in Kueue: a
// JobSet's replicated jobs, a pod group's roles.
const MaxPodSets = 8

// MaxGroupSize is the most members a group (of Pods) may have. A group's
// workload is built from all of its members at once.
const MaxGroupSize = 10000

// queueNamePattern is what a LocalQueue's name looks like (a DNS-1123
// subdomain; a label value is at most 63 characters anyway).
const queueNamePattern = `^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`

// CheckQueueName checks a queue label's value: it must be a name a
// LocalQueue can have. The error wraps ErrInvalidJob and says what is
// wrong.
func CheckQueueName(v string) error {
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return fmt.Errorf("label %s: %q cannot name a LocalQueue: %s: %w", v1beta1.QueueNameLabel, v, strings.Join(errs, "; "), ErrInvalidJob)
	}
	return nil
}

// MaxExecution reads a job's maximum execution time in seconds from its
// labels: sluice.dev/max-exec-time-seconds, or else Kueue's
// kueue.x-k8s.io/max-exec-time-seconds; 0 when neither is set. A value that
// is not a whole number of seconds above zero is an error wrapping
// ErrInvalidJob that names the label.
func MaxExecution(labels map[string]string) (int32, error) {
	key := v1beta1.MaxExecTimeLabel
	v, ok := labels[key]
	if !ok {
		key = v1beta1.KueueMaxExecTimeLabel
		if v, ok = labels[key]; !ok {
			return 0, nil
		}
	}
	n, err := strconv.ParseInt(v, 10, 32)
	switch {
	case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v, "-"):
		return 0, fmt.Errorf("label %s: %q is more than %d seconds: %w", key, v, math.MaxInt32, ErrInvalidJob)
	case err != nil || n <= 0:
		return 0, fmt.Errorf("label %s: %q is not a whole number of seconds above 0: %w", key, v, ErrInvalidJob)
	}
	return int32(n), nil
}

// askOf is what one pod built from spec asks for: its effective requests,
// node selector and tolerations (copies).
func askOf(spec *corev1.PodSpec) WorkloadPodSet {
	return WorkloadPodSet{
		Requests:     PodRequests(spec),
		NodeSelector: maps.Clone(spec.NodeSelector),
		Tolerations:  cloneTolerations(spec.Tolerations),
	}
}

// resolvePriority applies Sluice's priority rule, Kueue's: the
// WorkloadPriorityClass label wins; else the priorityClassName of the first
// pod set that has one; else the PriorityClass marked globalDefault; else 0.
func resolvePriority(labels map[string]string, sets []PodSet, prio PriorityResolver) (string, int32, error) {
	if name := labels[v1beta1.PriorityClassLabel]; name != "" {
		if prio == nil {
			return "", 0, fmt.Errorf("WorkloadPriorityClass %q: %w", name, ErrNoPriorityResolver)
		}
		v, err := prio.WorkloadPriorityClass(name)
		if err != nil {
			return "", 0, fmt.Errorf("label %s: %w", v1beta1.PriorityClassLabel, err)
		}
		return name, v, nil
	}
	for _, ps := range sets {
		name := ps.Spec.PriorityClassName
		if name == "" {
			continue
		}
		if prio == nil {
			return "", 0, fmt.Errorf("PriorityClass %q: %w", name, ErrNoPriorityResolver)
		}
		v, err := prio.PriorityClass(name)
		if err != nil {
			return "", 0, fmt.Errorf("pod set %q: priorityClassName: %w", ps.Name, err)
		}
		return name, v, nil
	}
	if d, ok := prio.(defaulter); ok {
		if name, v, ok := d.DefaultPriority(); ok {
			return name, v, nil
		}
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

// CheckTopology reads every pod set's topology request (CheckTopology of
// a job the webhook admits), so that a bad annotation is refused on create,
// naming the pod set and the annotation. kueue: Kueue's are read too.
func CheckTopology(j Job, kueue bool) error {
	sets, err := j.PodSets()
	if err != nil {
		return nil // what cannot be read is refused where it is read
	}
	for _, ps := range sets {
		if ps.Meta == nil {
			continue
		}
		if _, err := queueconfig.TopologyRequest(ps.Meta.Annotations, kueue); err != nil {
			return fmt.Errorf("pod set %q: %w: %w", ps.Name, err, ErrInvalidJob)
		}
	}
	return nil
}

// topologyV1 is a topology request as events carry it; nil for none.
func topologyV1(t engine.TopologyRequest) *events.TopologyRequestV1 {
	if t.IsZero() {
		return nil
	}
	return &events.TopologyRequestV1{Required: t.Required, Preferred: t.Preferred, Unconstrained: t.Unconstrained,
		SliceLevel: t.SliceLevel, SliceSize: t.SliceSize, Group: t.Group}
}
