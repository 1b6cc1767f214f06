package integration_test

import (
	goruntime "runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration"
	"github.com/sluice-dev/sluice/services/integration/job"
	"github.com/sluice-dev/sluice/services/integration/jobset"
	"github.com/sluice-dev/sluice/services/integration/pod"
)

// cachedJob is a Job as the API server hands it to an informer: managed
// fields, kubectl's manifest, generated labels, a container with all its
// settings, a status.
func cachedJob() *batchv1.Job {
	at := metav1.NewTime(time.Date(2026, 11, 27, 18, 0, 0, 0, time.UTC))
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "team-a", Name: "train", UID: "0b6f0a55-2b55-4b1e-9d9c-1f0c6e9b2f11", ResourceVersion: "4711",
			Generation: 2, CreationTimestamp: at,
			Labels:        map[string]string{v1beta1.QueueNameLabel: "lq-a"},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"big":"manifest"}`, "team": "a"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
		},
		Spec: batchv1.JobSpec{
			Parallelism: ptr(int32(4)), Completions: ptr(int32(8)), Suspend: ptr(true),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: "0b6f"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{batchv1.JobNameLabel: "train", "app": "train"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					NodeSelector:  map[string]string{"pool": "gpu"},
					Tolerations:   []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "main", Image: "trainer:1", Command: []string{"train", "--epochs=3"},
						Env: []corev1.EnvVar{{Name: "RANK", Value: "0"}},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("2"), "nvidia.com/gpu": resource.MustParse("1")}},
					}},
				},
			},
		},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{
			Type: batchv1.JobSuspended, Status: corev1.ConditionTrue, LastTransitionTime: at, Reason: "JobSuspended"}}},
	}
}

func ptr[T any](v T) *T { return &v }

func TestCacheKeepsTypedObjectsPacked(t *testing.T) {
	ad := job.Adapter{}
	// What the cache must give back: the Job as trimmed for the cache.
	want := cachedJob()
	ad.TrimForCache(want)
	want.ManagedFields = nil
	want.Annotations = map[string]string{"team": "a"}

	kept, err := integration.CacheTransform(ad)(cachedJob())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := kept.(*batchv1.Job); ok {
		t.Fatalf("the cache keeps a typed Job; want it packed")
	}
	m, ok := kept.(metav1.Object)
	if !ok {
		t.Fatalf("the cache keeps a %T, which has no metadata", kept)
	}
	key, err := cache.MetaNamespaceKeyFunc(kept)
	if err != nil || key != "team-a/train" {
		t.Errorf("key %q, %v; want team-a/train", key, err)
	}
	if m.GetResourceVersion() != "4711" || m.GetUID() != want.UID {
		t.Errorf("resource version %q, UID %q: want 4711, %s", m.GetResourceVersion(), m.GetUID(), want.UID)
	}

	for _, obj := range []runtime.Object{kept.(runtime.Object), kept.(runtime.Object).DeepCopyObject()} {
		got, err := ad.Decode(obj)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got.Object()); d != "" {
			t.Errorf("decoded from the cache (-want +got):\n%s", d)
		}
		// The framework changes decoded Jobs in place: the cache must not
		// see it.
		got.Meta().GetAnnotations()["sluice.dev/held"] = "x"
		got.Meta().GetLabels()["changed"] = "x"
		got.SetSuspended(false)
	}
	again, err := ad.Decode(kept.(runtime.Object))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, again.Object()); d != "" {
		t.Errorf("the cache changed with a decoded copy (-want +got):\n%s", d)
	}
}

func TestCacheTransformLeavesOtherObjects(t *testing.T) {
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/j", Obj: "not an object"}
	out, err := integration.CacheTransform(job.Adapter{})(tomb)
	if err != nil || out != any(tomb) {
		t.Errorf("a tombstone must pass unchanged: %v, %v", out, err)
	}

	// A kind watched unstructured is trimmed, not packed.
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("jobset.x-k8s.io/v1alpha2")
	u.SetKind("JobSet")
	u.SetName("js")
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
	out, err = integration.CacheTransform(jobset.Adapter{})(u)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := out.(*unstructured.Unstructured)
	if !ok {
		t.Fatalf("an unstructured object became a %T", out)
	}
	if len(got.GetManagedFields()) != 0 {
		t.Errorf("managed fields kept: %v", got.GetManagedFields())
	}
}

func TestPackedPodsKeepTheirGroup(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-0", Labels: map[string]string{pod.GroupNameLabel: "sweep"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	kept, err := integration.CacheTransform(pod.Adapter{})(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := kept.(*corev1.Pod); ok {
		t.Fatalf("the cache keeps a typed Pod; want it packed")
	}
	if key, ok := jobframework.WorkKey(pod.Adapter{}, kept); key != "ns/sweep" || !ok {
		t.Errorf("work key %q, %v; want ns/sweep", key, ok)
	}
	j, err := pod.Adapter{}.Decode(kept.(runtime.Object))
	if err != nil {
		t.Fatal(err)
	}
	if got := j.Object().(*corev1.Pod).Status.Phase; got != corev1.PodRunning {
		t.Errorf("phase %q after the cache; want Running", got)
	}
	// A member's labels are kept decoded for the group index; a decoded
	// copy's are its own.
	j.Meta().GetLabels()[pod.GroupNameLabel] = "other"
	if key, ok := jobframework.WorkKey(pod.Adapter{}, kept); key != "ns/sweep" || !ok {
		t.Errorf("after a decoded copy changed: work key %q, %v; want ns/sweep", key, ok)
	}
}

// BenchmarkCachedJob reports the memory one Job takes in the informer's
// cache (heap-B/job), kept typed and trimmed as before and packed, and the
// cost of decoding it back. Jobs come from their protobuf encoding, as the
// informer decodes them.
func BenchmarkCachedJob(b *testing.B) {
	raw, err := cachedJob().Marshal()
	if err != nil {
		b.Fatal(err)
	}
	ad := job.Adapter{}
	typedOnly := func(obj any) (any, error) {
		j := obj.(*batchv1.Job)
		ad.TrimForCache(j)
		j.ManagedFields = nil
		return j, nil
	}
	for _, bc := range []struct {
		name      string
		transform cache.TransformFunc
	}{{"typed", typedOnly}, {"packed", integration.CacheTransform(ad)}} {
		b.Run(bc.name+"/memory", func(b *testing.B) {
			const n = 10000
			kept := make([]any, n)
			var before, after goruntime.MemStats
			goruntime.GC()
			goruntime.ReadMemStats(&before)
			for i := range kept {
				j := &batchv1.Job{}
				if err := j.Unmarshal(raw); err != nil {
					b.Fatal(err)
				}
				if kept[i], err = bc.transform(j); err != nil {
					b.Fatal(err)
				}
			}
			goruntime.GC()
			goruntime.ReadMemStats(&after)
			goruntime.KeepAlive(kept)
			for b.Loop() {
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/job")
		})
		b.Run(bc.name+"/decode", func(b *testing.B) {
			j := &batchv1.Job{}
			if err := j.Unmarshal(raw); err != nil {
				b.Fatal(err)
			}
			obj, err := bc.transform(j)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := ad.Decode(obj.(runtime.Object)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
