package job

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// created is the creation time every test Job carries.
var created = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// quantityCmp compares quantities by value (1000m == 1).
var quantityCmp = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// jobBuilder builds Jobs fluently. The default Job is managed (queue "lq"),
// suspended, in namespace "team-a", with parallelism 1 and one container
// "main" without resources.
type jobBuilder struct{ job *batchv1.Job }

func makeJob(name string) *jobBuilder {
	return &jobBuilder{job: &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			Namespace:         "team-a",
			UID:               types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(created),
			Labels:            map[string]string{v1beta1.QueueNameLabel: "lq"},
		},
		Spec: batchv1.JobSpec{
			Parallelism: ptrTo[int32](1),
			Suspend:     ptrTo(true),
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
				},
			},
		},
	}}
}

func (b *jobBuilder) obj() *batchv1.Job { return b.job.DeepCopy() }

func (b *jobBuilder) queue(q string) *jobBuilder {
	b.job.Labels[v1beta1.QueueNameLabel] = q
	return b
}

func (b *jobBuilder) noQueue() *jobBuilder {
	delete(b.job.Labels, v1beta1.QueueNameLabel)
	return b
}

// controlledBy gives the Job a controller of the kind.
func (b *jobBuilder) controlledBy(apiVersion, kind string) *jobBuilder {
	b.job.OwnerReferences = append(b.job.OwnerReferences, metav1.OwnerReference{
		APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "uid-owner", Controller: ptrTo(true)})
	return b
}

func (b *jobBuilder) label(k, v string) *jobBuilder {
	b.job.Labels[k] = v
	return b
}

func (b *jobBuilder) workloadPriorityClass(name string) *jobBuilder {
	b.job.Labels[v1beta1.PriorityClassLabel] = name
	return b
}

func (b *jobBuilder) podPriorityClass(name string) *jobBuilder {
	b.job.Spec.Template.Spec.PriorityClassName = name
	return b
}

func (b *jobBuilder) parallelism(n int32) *jobBuilder {
	b.job.Spec.Parallelism = ptrTo(n)
	return b
}

func (b *jobBuilder) noParallelism() *jobBuilder {
	b.job.Spec.Parallelism = nil
	return b
}

func (b *jobBuilder) completions(n int32) *jobBuilder {
	b.job.Spec.Completions = ptrTo(n)
	return b
}

func (b *jobBuilder) annotation(k, v string) *jobBuilder {
	if b.job.Annotations == nil {
		b.job.Annotations = map[string]string{}
	}
	b.job.Annotations[k] = v
	return b
}

func (b *jobBuilder) suspend(s bool) *jobBuilder {
	b.job.Spec.Suspend = ptrTo(s)
	return b
}

func (b *jobBuilder) started() *jobBuilder {
	t := metav1.NewTime(created.Add(time.Minute))
	b.job.Status.StartTime = &t
	return b
}

func (b *jobBuilder) nodeSelector(k, v string) *jobBuilder {
	if b.job.Spec.Template.Spec.NodeSelector == nil {
		b.job.Spec.Template.Spec.NodeSelector = map[string]string{}
	}
	b.job.Spec.Template.Spec.NodeSelector[k] = v
	return b
}

func (b *jobBuilder) toleration(t corev1.Toleration) *jobBuilder {
	b.job.Spec.Template.Spec.Tolerations = append(b.job.Spec.Template.Spec.Tolerations, t)
	return b
}

// containers replaces the app containers.
func (b *jobBuilder) containers(cs ...*containerBuilder) *jobBuilder {
	b.job.Spec.Template.Spec.Containers = nil
	for _, c := range cs {
		b.job.Spec.Template.Spec.Containers = append(b.job.Spec.Template.Spec.Containers, c.c)
	}
	return b
}

// initContainers appends init containers (sidecars included) in order.
func (b *jobBuilder) initContainers(cs ...*containerBuilder) *jobBuilder {
	for _, c := range cs {
		b.job.Spec.Template.Spec.InitContainers = append(b.job.Spec.Template.Spec.InitContainers, c.c)
	}
	return b
}

func (b *jobBuilder) overhead(l corev1.ResourceList) *jobBuilder {
	b.job.Spec.Template.Spec.Overhead = l
	return b
}

func (b *jobBuilder) podResources(requests, limits corev1.ResourceList) *jobBuilder {
	b.job.Spec.Template.Spec.Resources = &corev1.ResourceRequirements{Requests: requests, Limits: limits}
	return b
}

func (b *jobBuilder) condition(t batchv1.JobConditionType, s corev1.ConditionStatus, reason, message string) *jobBuilder {
	b.job.Status.Conditions = append(b.job.Status.Conditions, batchv1.JobCondition{
		Type: t, Status: s, Reason: reason, Message: message,
	})
	return b
}

// containerBuilder builds a container.
type containerBuilder struct{ c corev1.Container }

func ctr(name string) *containerBuilder {
	return &containerBuilder{c: corev1.Container{Name: name, Image: "busybox"}}
}

// sidecar is an init container with restartPolicy Always.
func sidecar(name string) *containerBuilder {
	c := ctr(name)
	c.c.RestartPolicy = ptrTo(corev1.ContainerRestartPolicyAlways)
	return c
}

func (c *containerBuilder) req(kv ...string) *containerBuilder {
	c.c.Resources.Requests = rl(kv...)
	return c
}

func (c *containerBuilder) lim(kv ...string) *containerBuilder {
	c.c.Resources.Limits = rl(kv...)
	return c
}

// rl builds a ResourceList from name, quantity pairs.
func rl(kv ...string) corev1.ResourceList {
	if len(kv)%2 != 0 {
		panic("rl needs name, quantity pairs")
	}
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// Flavors used across tests.
var (
	spotToleration = corev1.Toleration{Key: "sluice.dev/spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	gpuToleration  = corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpEqual, Value: "present", Effect: corev1.TaintEffectNoSchedule}
	userToleration = corev1.Toleration{Key: "team", Operator: corev1.TolerationOpEqual, Value: "a", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrTo[int64](30)}

	testFlavors = map[string]*v1beta1.ResourceFlavor{
		"on-demand": flavor("on-demand", map[string]string{"sluice.dev/capacity": "on-demand"}),
		"spot":      flavor("spot", map[string]string{"sluice.dev/capacity": "spot"}, spotToleration),
		"a100":      flavor("a100", map[string]string{"gpu.model": "a100"}, gpuToleration),
		"default":   flavor("default", nil),
	}
)

func flavor(name string, labels map[string]string, tolerations ...corev1.Toleration) *v1beta1.ResourceFlavor {
	return &v1beta1.ResourceFlavor{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1beta1.ResourceFlavorSpec{NodeLabels: maps.Clone(labels), Tolerations: tolerations},
	}
}

// admit is a one-pod-set assignment to ClusterQueue "cq".
// withUpdate adds what an admission check adds to the pod set.
func withUpdate(a Assignment, u PodSetUpdate) Assignment {
	a.PodSets[0].Update = &u
	return a
}

func (b *jobBuilder) templateLabel(k, v string) *jobBuilder {
	if b.job.Spec.Template.Labels == nil {
		b.job.Spec.Template.Labels = map[string]string{}
	}
	b.job.Spec.Template.Labels[k] = v
	return b
}

func (b *jobBuilder) templateAnnotation(k, v string) *jobBuilder {
	if b.job.Spec.Template.Annotations == nil {
		b.job.Spec.Template.Annotations = map[string]string{}
	}
	b.job.Spec.Template.Annotations[k] = v
	return b
}

func admit(count int32, resourceFlavor ...string) Assignment {
	flavors := map[string]string{}
	for i := 0; i+1 < len(resourceFlavor); i += 2 {
		flavors[resourceFlavor[i]] = resourceFlavor[i+1]
	}
	return Assignment{ClusterQueue: "cq", PodSets: []PodSetAssignment{{Name: MainPodSet, Count: count, Flavors: flavors}}}
}

// applyMergePatch applies an RFC 7386 merge patch to job as the API server
// would (before validation) and returns the result.
func applyMergePatch(t *testing.T, job *batchv1.Job, patch []byte) *batchv1.Job {
	t.Helper()
	doc, err := json.Marshal(job)
	if err != nil {
		t.Fatalf("encode job: %v", err)
	}
	out, err := jsonpatch.MergePatch(doc, patch)
	if err != nil {
		t.Fatalf("apply merge patch %s: %v", patch, err)
	}
	var got batchv1.Job
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decode patched job: %v", err)
	}
	// Stored and read back, as the API server does: an empty map is not
	// kept.
	if out, err = json.Marshal(&got); err != nil {
		t.Fatalf("encode patched job: %v", err)
	}
	got = batchv1.Job{}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decode patched job: %v", err)
	}
	return &got
}
