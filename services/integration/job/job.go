package job

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

const (
	// MainPodSet is the name of the only pod set of a Job.
	MainPodSet = "main"

	// MinParallelismAnnotation on a Job allows partial admission: Sluice
	// may start the Job with as few as this many parallel pods (an integer
	// in 1..parallelism) when the full parallelism does not fit.
	MinParallelismAnnotation = v1beta1.MinParallelismAnnotation
	// KueueMinParallelismAnnotation is Kueue's name for the same; it is
	// read when the Job does not carry Sluice's, so Jobs written for Kueue
	// keep their partial admission.
	KueueMinParallelismAnnotation = v1beta1.KueueMinParallelismAnnotation
)

// Kind is the Job's kind.
var Kind = jobframework.Kind{Name: "job", GVK: batchv1.SchemeGroupVersion.WithKind("Job"), Resource: "jobs", SuspendField: []string{"spec", "suspend"},
	ManagedBy: []string{"spec", "managedBy"}, Title: "Job", EnabledByDefault: true, Elastic: true,
	CountField: []string{"spec", "parallelism"}}

// Adapter is the batch/v1 Job adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[batchv1.Job](obj, "batch/v1 Job")
	if err != nil {
		return nil, err
	}
	return &Job{o}, nil
}

// NewInformer implements jobframework.InformerSource: a typed informer keeps
// Jobs in far less memory than unstructured ones.
func (Adapter) NewInformer(kube kubernetes.Interface, resync time.Duration, labelSelector string) cache.SharedIndexInformer {
	return informers.NewSharedInformerFactoryWithOptions(kube, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelSelector })).Batch().V1().Jobs().Informer()
}

// Get implements jobframework.InformerSource.
func (Adapter) Get(ctx context.Context, kube kubernetes.Interface, namespace, name string) (runtime.Object, error) {
	return kube.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
}

// generatedLabels are the labels the API server puts on a Job's pod
// template (and its spec.selector) when the Job is created.
var generatedLabels = []string{"controller-uid", batchv1.ControllerUidLabel, "job-name", batchv1.JobNameLabel}

// TrimForCache implements jobframework.CacheTrimmer: besides the pod
// spec's unread parts, the generated selector and template labels go, and
// a finished Job's whole template.
func (Adapter) TrimForCache(obj runtime.Object) {
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	j.Spec.Selector = nil
	if l := j.Spec.Template.Labels; l != nil {
		for _, k := range generatedLabels {
			delete(l, k)
		}
		if len(l) == 0 {
			j.Spec.Template.Labels = nil
		}
	}
	if done, _, _ := (&Job{j}).Finished(); done {
		// A finished Job is only ever looked at for its end: its pod
		// template is dead weight, and finished Jobs stay in the cache
		// until they are deleted (most of it, late in a large run).
		j.Spec.Template = corev1.PodTemplateSpec{}
		return
	}
	jobframework.TrimPodSpec(&j.Spec.Template.Spec)
}

// Job is a batch/v1 Job under the framework.
type Job struct{ *batchv1.Job }

// Object implements jobframework.Job.
func (j *Job) Object() runtime.Object { return j.Job }

// Meta implements jobframework.Job.
func (j *Job) Meta() metav1.Object { return j.Job }

// IsSuspended implements jobframework.Job.
func (j *Job) IsSuspended() bool { return j.Spec.Suspend != nil && *j.Spec.Suspend }

// SetSuspended implements jobframework.Job.
func (j *Job) SetSuspended(s bool) { j.Spec.Suspend = &s }

// PodSets implements jobframework.Job: one pod set of
// min(parallelism (default 1), completions) pods.
func (j *Job) PodSets() ([]jobframework.PodSet, error) {
	par := int32(1)
	if j.Spec.Parallelism != nil {
		par = *j.Spec.Parallelism
	}
	if par < 0 {
		return nil, fmt.Errorf("spec.parallelism is %d: %w", par, jobframework.ErrInvalidJob)
	}
	count := par
	if c := j.Spec.Completions; c != nil {
		if *c < 0 {
			return nil, fmt.Errorf("spec.completions is %d: %w", *c, jobframework.ErrInvalidJob)
		}
		count = min(count, *c)
	}
	minCount := count
	key := MinParallelismAnnotation
	raw, ok := j.Annotations[key]
	if !ok {
		key = KueueMinParallelismAnnotation
		raw, ok = j.Annotations[key]
	}
	if ok {
		v, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("annotation %s=%q is not an integer: %w", key, raw, jobframework.ErrBadAnnotation)
		}
		if v < 1 || v > int64(par) {
			return nil, fmt.Errorf("annotation %s=%d must be between 1 and parallelism (%d): %w", key, v, par, jobframework.ErrBadAnnotation)
		}
		// completions may cap the count below the requested minimum; the
		// minimum can never exceed what the Job runs at once.
		minCount = min(int32(v), count)
	}
	return []jobframework.PodSet{{Name: MainPodSet, Count: count, MinCount: minCount, Spec: &j.Spec.Template.Spec, Meta: &j.Spec.Template.ObjectMeta}}, nil
}

// Scale implements jobframework.Scaler: a partial admission lowers
// spec.parallelism.
func (j *Job) Scale(string) *int32 { return j.Spec.Parallelism }

// Resizable implements jobframework.Resizable: an elastic Job's
// parallelism may change while it runs.
func (j *Job) Resizable() {}

// SetScale implements jobframework.Scaler.
func (j *Job) SetScale(_ string, n *int32) { j.Spec.Parallelism = n }

// UnlockPatch implements jobframework.Unlocker. The API server lets a Job's
// pod template change only while the stored Job is suspended and has no
// status.startTime (KEP-2926, "mutable scheduling directives"), and the Job
// controller never clears startTime on suspension; the status subresource
// may clear it for a suspended Job.
func (j *Job) UnlockPatch() []byte {
	if j.Status.StartTime == nil {
		return nil
	}
	return []byte(`{"status":{"startTime":null}}`)
}

// PodsReady implements jobframework.PodsReadier, as Kueue judges a Job:
// the pods that are ready or already succeeded cover the pods it runs at
// once (parallelism, or completions when that is smaller).
func (j *Job) PodsReady() bool {
	want := int32(1)
	if j.Spec.Parallelism != nil {
		want = *j.Spec.Parallelism
	}
	if c := j.Spec.Completions; c != nil {
		want = min(want, *c)
	}
	var ready int32
	if j.Status.Ready != nil {
		ready = *j.Status.Ready
	}
	return ready+j.Status.Succeeded >= want
}

// Finished implements jobframework.Job: a Complete or Failed condition set
// to True.
func (j *Job) Finished() (finished, succeeded bool, message string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true, conditionText(c, "job completed")
		case batchv1.JobFailed:
			return true, false, conditionText(c, "job failed")
		}
	}
	return false, false, ""
}

func conditionText(c batchv1.JobCondition, fallback string) string {
	switch {
	case c.Message != "":
		return c.Message
	case c.Reason != "":
		return c.Reason
	default:
		return fallback
	}
}
