// Package trainjob is Sluice's adapter for Kubeflow Trainer v2's TrainJobs
// (trainer.kubeflow.org/v1alpha1). A TrainJob's pods are described by the
// runtime it references (a ClusterTrainingRuntime, or a TrainingRuntime in
// its namespace): one pod set per replicatedJob of the runtime's JobSet
// template, named after it, as the trainer counts them: the trainer's
// (the replicatedJob labelled trainer.kubeflow.org/trainjob-ancestor-step:
// trainer) runs numNodes pods (the TrainJob's spec.trainer.numNodes, else
// the runtime's mlPolicy.numNodes, else 1; one fewer for the "node" job of
// an MPI runtime that runs its launcher as a node), with the TrainJob's
// resourcesPerNode on its "node" container; the others run replicas ×
// parallelism pods. The TrainJob's own podSpecOverrides are applied to the
// templates first, as the trainer applies them.
//
// The runtime's templates are not the TrainJob's, so admission does not
// write into them: the flavor's node labels and tolerations go into
// podSpecOverrides of the TrainJob, one per pod set Sluice changed,
// appended after the user's (their number is recorded in
// sluice.dev/pod-spec-overrides); a stop removes them. The trainer refuses
// a change of podSpecOverrides in the write that resumes a TrainJob, so
// admission writes them first and resumes in a second write (a Stager).
// A TrainJob is suspended through spec.suspend, finishes with its Complete
// or Failed condition, and its pods are ready when every job of its
// jobsStatus has its pods ready or done.
package trainjob

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	trainerv1 "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/dynamic"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

const (
	// OverridesAnnotation counts the podSpecOverrides at the end of
	// spec.podSpecOverrides that Sluice wrote.
	OverridesAnnotation = "sluice.dev/pod-spec-overrides"
	// ancestorLabel marks a runtime's replicatedJob with its step.
	ancestorLabel = "trainer.kubeflow.org/trainjob-ancestor-step"
	// trainerStep is the step of the trainer's replicatedJob.
	trainerStep = "trainer"
	// nodeName is the name of the trainer's job and container.
	nodeName = "node"
	// runtimeTTL is how long a runtime read is used before it is read
	// again: a runtime's change reaches the TrainJobs queued after it.
	runtimeTTL = 30 * time.Second
)

var (
	clusterRuntimes = trainerv1.GroupVersion.WithResource("clustertrainingruntimes")
	runtimes        = trainerv1.GroupVersion.WithResource("trainingruntimes")
)

// Kind is the TrainJob's kind.
var Kind = jobframework.Kind{Name: "trainjob", GVK: trainerv1.GroupVersion.WithKind("TrainJob"), Resource: "trainjobs", SuspendField: []string{"spec", "suspend"},
	ManagedBy: []string{"spec", "managedBy"}, ManagedByValue: v1beta1.KueueMultiKueueManagedBy, ManagedByDefault: "trainer.kubeflow.org/trainjob-controller",
	Module: "github.com/kubeflow/trainer/v2", CRD: "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
	Title: "TrainJob (Kubeflow Trainer v2)",
	References: []jobframework.Reference{
		{GVR: clusterRuntimes, CRD: "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml"},
		{GVR: runtimes, CRD: "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml"},
	}}

// RuntimeReader reads the spec of the runtime a TrainJob in namespace ns
// references.
type RuntimeReader interface {
	Runtime(ns string, ref trainerv1.RuntimeRef) (*trainerv1.TrainingRuntimeSpec, error)
}

// Adapter is the TrainJob adapter. Unbound (no Runtimes), a TrainJob's
// pod sets cannot be read.
type Adapter struct {
	Runtimes RuntimeReader
}

var _ jobframework.Binder = Adapter{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Bind implements jobframework.Binder: runtimes read from the API server,
// each kept for runtimeTTL.
func (Adapter) Bind(dyn dynamic.Interface) jobframework.Adapter {
	return Adapter{Runtimes: &apiRuntimes{dyn: dyn, ttl: runtimeTTL, now: time.Now, cache: map[string]cachedRuntime{}}}
}

// Decode implements jobframework.Adapter.
func (a Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[trainerv1.TrainJob](obj, "TrainJob")
	if err != nil {
		return nil, err
	}
	return &TrainJob{TrainJob: o, runtimes: a.Runtimes}, nil
}

// TrainJob is a TrainJob under the framework. Its pod sets are made once,
// from its runtime's templates with its own overrides applied; what the
// framework writes into them goes back into Sluice's podSpecOverrides
// when the object is read (Object).
type TrainJob struct {
	*trainerv1.TrainJob
	runtimes RuntimeReader
	sets     []jobframework.PodSet
	// base is each pod set's spec before Sluice's overrides.
	base []corev1.PodSpec
	// own is the number of the user's podSpecOverrides.
	own int
}

var (
	_ jobframework.PodsReadier = (*TrainJob)(nil)
	_ jobframework.Stager      = (*TrainJob)(nil)
)

// Object implements jobframework.Job: Sluice's podSpecOverrides written
// first.
func (j *TrainJob) Object() runtime.Object {
	j.flush()
	return j.TrainJob
}

// Meta implements jobframework.Job.
func (j *TrainJob) Meta() metav1.Object { return j.TrainJob }

// IsSuspended implements jobframework.Job.
func (j *TrainJob) IsSuspended() bool { return j.Spec.Suspend != nil && *j.Spec.Suspend }

// SetSuspended implements jobframework.Job.
func (j *TrainJob) SetSuspended(s bool) { j.Spec.Suspend = &s }

// StagesStart implements jobframework.Stager.
func (j *TrainJob) StagesStart() bool { return true }

// PodSets implements jobframework.Job.
func (j *TrainJob) PodSets() ([]jobframework.PodSet, error) {
	if j.sets != nil {
		return j.sets, nil
	}
	own, err := j.userOverrides()
	if err != nil {
		return nil, err
	}
	if j.runtimes == nil {
		return nil, fmt.Errorf("spec.runtimeRef: the runtime of a TrainJob cannot be read here (the adapter is not bound to a client)")
	}
	rt, err := j.runtimes.Runtime(j.Namespace, j.Spec.RuntimeRef)
	if err != nil {
		return nil, fmt.Errorf("spec.runtimeRef: %w", err)
	}
	rjs := rt.Template.Spec.ReplicatedJobs
	if len(rjs) == 0 {
		return nil, fmt.Errorf("spec.runtimeRef: runtime %q has no replicatedJobs in spec.template.spec: %w", j.Spec.RuntimeRef.Name, jobframework.ErrInvalidJob)
	}
	var sets []jobframework.PodSet
	var base []corev1.PodSpec
	for i := range rjs {
		rj := &rjs[i]
		spec, err := overridden(rj.Template.Spec.Template.Spec, rj.Name, j.Spec.PodSpecOverrides[:own])
		if err != nil {
			return nil, fmt.Errorf("spec.podSpecOverrides for job %q: %w: %w", rj.Name, err, jobframework.ErrInvalidJob)
		}
		count := int32(1)
		if p := rj.Template.Spec.Parallelism; p != nil {
			count = *p
		}
		switch step := rj.Template.Labels[ancestorLabel]; {
		case step == trainerStep:
			count = j.numNodes(rt, rj.Name)
			if t := j.Spec.Trainer; t != nil && t.ResourcesPerNode != nil && (t.ResourcesPerNode.Requests != nil || t.ResourcesPerNode.Limits != nil) {
				for c := range spec.Containers {
					if spec.Containers[c].Name == nodeName {
						spec.Containers[c].Resources = *t.ResourcesPerNode.DeepCopy()
					}
				}
			}
		case step != "":
			// An initializer: the trainer runs one replica.
		default:
			count *= max(rj.Replicas, 1)
		}
		if count < 0 {
			return nil, fmt.Errorf("job %q of runtime %q: %d pods: %w", rj.Name, j.Spec.RuntimeRef.Name, count, jobframework.ErrInvalidJob)
		}
		base = append(base, *spec.DeepCopy())
		// Sluice's overrides, as the trainer would apply them.
		withOwn, err := overridden(spec, rj.Name, j.Spec.PodSpecOverrides[own:])
		if err != nil {
			return nil, fmt.Errorf("spec.podSpecOverrides (Sluice's) for job %q: %w: %w", rj.Name, err, jobframework.ErrInvalidJob)
		}
		sets = append(sets, jobframework.PodSet{Name: rj.Name, Count: count, Spec: &withOwn})
	}
	j.sets, j.base, j.own = sets, base, own
	return sets, nil
}

// numNodes is the trainer's pod count, as the trainer's plugins count it.
func (j *TrainJob) numNodes(rt *trainerv1.TrainingRuntimeSpec, job string) int32 {
	n := int32(1)
	if p := rt.MLPolicy; p != nil && p.NumNodes != nil {
		n = *p.NumNodes
	}
	if t := j.Spec.Trainer; t != nil && t.NumNodes != nil {
		n = *t.NumNodes
		if p := rt.MLPolicy; job == nodeName && p != nil && p.MPI != nil && p.MPI.RunLauncherAsNode != nil && *p.MPI.RunLauncherAsNode {
			n = max(n-1, 1) // the launcher is one of the nodes
		}
	}
	return n
}

// userOverrides is the number of podSpecOverrides that are the user's.
func (j *TrainJob) userOverrides() (int, error) {
	raw, ok := j.Annotations[OverridesAnnotation]
	if !ok {
		return len(j.Spec.PodSpecOverrides), nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > len(j.Spec.PodSpecOverrides) {
		return 0, fmt.Errorf("metadata.annotations[%s]: %q is not a count of the %d podSpecOverrides: %w", OverridesAnnotation, raw, len(j.Spec.PodSpecOverrides), jobframework.ErrInvalidJob)
	}
	return len(j.Spec.PodSpecOverrides) - n, nil
}

// overridden is spec with the overrides that target job applied, as the
// trainer applies them (a strategic merge patch of each, in order).
func overridden(spec corev1.PodSpec, job string, overrides []trainerv1.PodSpecOverride) (corev1.PodSpec, error) {
	out := *spec.DeepCopy()
	for _, o := range overrides {
		if !slices.ContainsFunc(o.TargetJobs, func(t trainerv1.PodSpecOverrideTargetJob) bool { return t.Name == job }) {
			continue
		}
		patch, err := json.Marshal(o)
		if err != nil {
			return out, err
		}
		src, err := json.Marshal(out)
		if err != nil {
			return out, err
		}
		merged, err := strategicpatch.StrategicMergePatch(src, patch, corev1.PodSpec{})
		if err != nil {
			return out, err
		}
		out = corev1.PodSpec{}
		if err := json.Unmarshal(merged, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// flush writes Sluice's podSpecOverrides: for each pod set whose node
// selector or tolerations are not its base's, one that targets its job
// with the node selector entries it adds and its whole list of
// tolerations (an override's list replaces the template's).
func (j *TrainJob) flush() {
	if j.sets == nil {
		return
	}
	var mine []trainerv1.PodSpecOverride
	for k, ps := range j.sets {
		b := &j.base[k]
		added := map[string]string{}
		for key, v := range ps.Spec.NodeSelector {
			if bv, ok := b.NodeSelector[key]; !ok || bv != v {
				added[key] = v
			}
		}
		sameTolerations := equality.Semantic.DeepEqual(ps.Spec.Tolerations, b.Tolerations) || len(ps.Spec.Tolerations)+len(b.Tolerations) == 0
		if len(added) == 0 && sameTolerations {
			continue
		}
		o := trainerv1.PodSpecOverride{TargetJobs: []trainerv1.PodSpecOverrideTargetJob{{Name: ps.Name}}}
		if len(added) > 0 {
			o.NodeSelector = added
		}
		if !sameTolerations {
			o.Tolerations = slices.Clone(ps.Spec.Tolerations)
		}
		mine = append(mine, o)
	}
	all := slices.Clone(j.Spec.PodSpecOverrides[:j.own])
	all = append(all, mine...)
	if len(all) == 0 {
		all = nil
	}
	j.Spec.PodSpecOverrides = all
	if len(mine) == 0 {
		delete(j.Annotations, OverridesAnnotation)
		if len(j.Annotations) == 0 {
			j.Annotations = nil
		}
		return
	}
	if j.Annotations == nil {
		j.Annotations = map[string]string{}
	}
	j.Annotations[OverridesAnnotation] = strconv.Itoa(len(mine))
}

// Finished implements jobframework.Job: the Complete or Failed condition.
func (j *TrainJob) Finished() (finished, succeeded bool, message string) {
	if c := meta.FindStatusCondition(j.Status.Conditions, trainerv1.TrainJobComplete); c != nil && c.Status == metav1.ConditionTrue {
		return true, true, jobframework.ConditionText(c, "trainjob completed")
	}
	if c := meta.FindStatusCondition(j.Status.Conditions, trainerv1.TrainJobFailed); c != nil && c.Status == metav1.ConditionTrue {
		return true, false, jobframework.ConditionText(c, "trainjob failed")
	}
	return false, false, ""
}

// PodsReady implements jobframework.PodsReadier: every job the trainer
// reports has its pods ready or done, and it reports every pod set's.
func (j *TrainJob) PodsReady() bool {
	sets, err := j.PodSets()
	if err != nil || len(j.Status.JobsStatus) == 0 {
		return false
	}
	byName := map[string]trainerv1.JobStatus{}
	for _, s := range j.Status.JobsStatus {
		byName[s.Name] = s
	}
	for _, ps := range sets {
		s, ok := byName[ps.Name]
		if !ok || s.Ready+s.Succeeded < 1 {
			return false
		}
	}
	return true
}

// apiRuntimes reads runtimes from the API server, keeping each for ttl.
type apiRuntimes struct {
	dyn   dynamic.Interface
	ttl   time.Duration
	now   func() time.Time
	mu    sync.Mutex
	cache map[string]cachedRuntime
}

type cachedRuntime struct {
	spec *trainerv1.TrainingRuntimeSpec
	at   time.Time
}

// Runtime implements RuntimeReader. A ref without a kind names a
// ClusterTrainingRuntime, as the trainer reads it.
func (r *apiRuntimes) Runtime(ns string, ref trainerv1.RuntimeRef) (*trainerv1.TrainingRuntimeSpec, error) {
	kind := "ClusterTrainingRuntime"
	if ref.Kind != nil && *ref.Kind != "" {
		kind = *ref.Kind
	}
	if ref.APIGroup != nil && *ref.APIGroup != "" && *ref.APIGroup != trainerv1.GroupVersion.Group {
		return nil, fmt.Errorf("apiGroup %q: a runtime is of %s: %w", *ref.APIGroup, trainerv1.GroupVersion.Group, jobframework.ErrInvalidJob)
	}
	var res dynamic.ResourceInterface
	key := kind + "/" + ref.Name
	switch kind {
	case "ClusterTrainingRuntime":
		res = r.dyn.Resource(clusterRuntimes)
	case "TrainingRuntime":
		res = r.dyn.Resource(runtimes).Namespace(ns)
		key = kind + "/" + ns + "/" + ref.Name
	default:
		return nil, fmt.Errorf("kind %q: a runtime is a ClusterTrainingRuntime or a TrainingRuntime: %w", kind, jobframework.ErrInvalidJob)
	}
	r.mu.Lock()
	c, ok := r.cache[key]
	r.mu.Unlock()
	if ok && r.now().Sub(c.at) < r.ttl {
		return c.spec, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := res.Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read %s %q: %w", kind, ref.Name, err)
	}
	var rt trainerv1.TrainingRuntime // a ClusterTrainingRuntime has the same spec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &rt); err != nil {
		return nil, fmt.Errorf("%s %q: %w", kind, ref.Name, err)
	}
	r.mu.Lock()
	r.cache[key] = cachedRuntime{spec: &rt.Spec, at: r.now()}
	r.mu.Unlock()
	return &rt.Spec, nil
}
