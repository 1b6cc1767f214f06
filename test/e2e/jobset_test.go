package e2e

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	jobsetv1 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/services/integration/jobset"
)

var kindCRDs struct {
	once sync.Once
	dir  string
	err  error
	// installed: in the suite's cluster.
	installed    sync.Once
	installedErr error
}

// installKindCRDs installs the job kinds' CRDs from their upstream modules,
// once, after `sluice dev` started: it must notice them and start their
// integrations.
func installKindCRDs(t *testing.T) {
	t.Helper()
	dir := kindCRDDir(t)
	kindCRDs.installed.Do(func() { kindCRDs.installedErr = installCRDs(env.cfg, dir) })
	if kindCRDs.installedErr != nil {
		t.Fatal(kindCRDs.installedErr)
	}
}

// kindCRDDir writes the job kinds' CRDs from their upstream modules into
// a directory, once, and returns it.
func kindCRDDir(t *testing.T) string {
	t.Helper()
	kindCRDs.once.Do(func() {
		dir := filepath.Join(env.state, "kind-crds")
		cmd := exec.Command("go", "run", "./hack/kindcrds", dir)
		cmd.Dir = root()
		if out, err := cmd.CombinedOutput(); err != nil {
			kindCRDs.err = fmt.Errorf("go run ./hack/kindcrds: %v\n%s", err, out)
			return
		}
		kindCRDs.dir = dir
	})
	if kindCRDs.err != nil {
		t.Fatal(kindCRDs.err)
	}
	return kindCRDs.dir
}

// jobSetSpec describes a test JobSet: a leader of one pod and workers of
// replicas × parallelism pods, one GPU each.
type jobSetSpec struct {
	ns, name, queue, priorityClass string
	workers, parallelism           int32
	workerSelector                 map[string]string
}

func jobSetObject(s jobSetSpec) *jobsetv1.JobSet {
	labels := map[string]string{v1beta1.QueueNameLabel: s.queue}
	if s.priorityClass != "" {
		labels[v1beta1.PriorityClassLabel] = s.priorityClass
	}
	tpl := func(par int32, sel map[string]string) batchv1.JobTemplateSpec {
		res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), "nvidia.com/gpu": resource.MustParse("1")}
		return batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Parallelism: ptr.To(par), Completions: ptr.To(par),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				NodeSelector:  maps.Clone(sel),
				Containers: []corev1.Container{{Name: "main", Image: "busybox",
					Resources: corev1.ResourceRequirements{Requests: res, Limits: corev1.ResourceList{"nvidia.com/gpu": res["nvidia.com/gpu"]}}}},
			}},
		}}
	}
	return &jobsetv1.JobSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: jobsetv1.GroupVersion.String(), Kind: "JobSet"},
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns, Labels: labels},
		Spec: jobsetv1.JobSetSpec{ReplicatedJobs: []jobsetv1.ReplicatedJob{
			{Name: "leader", Replicas: 1, Template: tpl(1, nil)},
			{Name: "workers", Replicas: s.workers, Template: tpl(s.parallelism, s.workerSelector)},
		}},
	}
}

func decodeJobSet(t *testing.T, u *unstructured.Unstructured) *jobsetv1.JobSet {
	t.Helper()
	var js jobsetv1.JobSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &js); err != nil {
		t.Fatalf("decode jobset: %v", err)
	}
	return &js
}

func getJobSet(t *testing.T, ns, name string) *jobsetv1.JobSet {
	t.Helper()
	u, err := env.dyn.Resource(jobset.Kind.GVR()).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get jobset %s/%s: %v", ns, name, err)
	}
	return decodeJobSet(t, u)
}

// waitWebhookFor waits until a dry-run create of obj comes back suspended.
func waitJobSetWebhook(t *testing.T, ns string) {
	t.Helper()
	probe := jobSetObject(jobSetSpec{ns: ns, name: "webhook-probe", queue: "q", workers: 1, parallelism: 1})
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(probe)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the jobset integration suspends a dry-run JobSet (its CRD installed after sluice dev started)", func() (bool, string) {
		got, err := env.dyn.Resource(jobset.Kind.GVR()).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		s, _, _ := unstructured.NestedBool(got.Object, "spec", "suspend")
		return s, fmt.Sprintf("suspend=%v", s)
	})
}

// TestJobSetBadInput: a JobSet whose pod sets cannot be read stays
// suspended, with an Event naming the field.
func TestJobSetBadInput(t *testing.T) {
	installKindCRDs(t)
	ns := "e2e-jobset-bad"
	queues(t, ns, 4, "Never")
	waitJobSetWebhook(t, ns)
	s := jobSetObject(jobSetSpec{ns: ns, name: "bad", queue: "q", workers: 1, parallelism: 1})
	s.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
	s.Spec.ReplicatedJobs[1].Template.Spec.Parallelism = ptr.To[int32](-1)
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.dyn.Resource(jobset.Kind.GVR()).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		// The CRD's own validation may refuse it first: also a clear error.
		if !strings.Contains(err.Error(), "parallelism") {
			t.Fatalf("create bad jobset: %v; want an error naming parallelism", err)
		}
		return
	}
	waitEvent(t, ns, "bad", "InvalidWorkload", "parallelism", 30*time.Second)
	if js := getJobSet(t, ns, "bad"); js.Spec.Suspend == nil || !*js.Spec.Suspend {
		t.Fatal("a jobset that cannot be read was unsuspended")
	}
}
