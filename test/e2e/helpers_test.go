package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/invariant"
	"github.com/sluice-dev/sluice/internal/ledger"
)

// apply creates every object of a multi-document YAML.
func apply(t *testing.T, docs string) {
	t.Helper()
	applyTo(t, env.dyn, docs)
}

// applyTo creates every object of a multi-document YAML in the cluster
// of dyn.
func applyTo(t *testing.T, dyn dynamic.Interface, docs string) {
	t.Helper()
	for _, doc := range strings.Split(docs, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("bad test YAML: %v\n%s", err, doc)
		}
		gvk := u.GroupVersionKind()
		plural := strings.ToLower(gvk.Kind) + "s"
		switch {
		case strings.HasSuffix(gvk.Kind, "s"):
			plural = strings.ToLower(gvk.Kind) + "es" // WorkloadPriorityClass
		case strings.HasSuffix(gvk.Kind, "y"):
			plural = strings.ToLower(strings.TrimSuffix(gvk.Kind, "y")) + "ies" // Topology
		}
		gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: plural}
		var ri interface {
			Create(context.Context, *unstructured.Unstructured, metav1.CreateOptions, ...string) (*unstructured.Unstructured, error)
		} = dyn.Resource(gvr)
		if ns := u.GetNamespace(); ns != "" {
			ri = dyn.Resource(gvr).Namespace(ns)
		}
		if _, err := ri.Create(context.Background(), &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %s: %v", gvk.Kind, u.GetName(), err)
		}
	}
}

// jobSpec describes a test Job.
type jobSpec struct {
	ns, name, queue, priorityClass string
	pods                           int32
	gpus                           int64
	runFor                         string
	// nodeSelector, when set, is the pod template's own.
	nodeSelector map[string]string
	// managedBy, when set, is the Job's spec.managedBy.
	managedBy string
	// labels are added to the Job's own.
	labels map[string]string
}

func createJob(t *testing.T, s jobSpec) *batchv1.Job {
	t.Helper()
	got, err := env.kube.BatchV1().Jobs(s.ns).Create(context.Background(), jobOf(s), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create job %s/%s: %v", s.ns, s.name, err)
	}
	if got.Spec.Suspend == nil || !*got.Spec.Suspend {
		t.Fatalf("job %s/%s was not suspended on create by the webhook", s.ns, s.name)
	}
	return got
}

// jobOf is the Job s describes.
func jobOf(s jobSpec) *batchv1.Job {
	labels := map[string]string{v1beta1.QueueNameLabel: s.queue}
	if s.priorityClass != "" {
		labels[v1beta1.PriorityClassLabel] = s.priorityClass
	}
	maps.Copy(labels, s.labels)
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), "nvidia.com/gpu": *resource.NewQuantity(s.gpus, resource.DecimalSI)}
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns, Labels: labels},
		Spec: batchv1.JobSpec{
			ManagedBy:   ptrOrNil(s.managedBy),
			Parallelism: ptr.To(s.pods),
			Completions: ptr.To(s.pods),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"sluice.dev/run-for": s.runFor}},
				Spec: corev1.PodSpec{
					NodeSelector:  s.nodeSelector,
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: "busybox",
						Resources: corev1.ResourceRequirements{Requests: res, Limits: corev1.ResourceList{"nvidia.com/gpu": res["nvidia.com/gpu"]}}}},
				},
			},
		},
	}
	return j
}

func ptrOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if ok, last := poll(within, cond); !ok {
		t.Fatalf("%s: not within %s; last seen: %s", what, within, last)
	}
}

// poll calls cond until it holds or within has passed, and returns whether
// it held and the state it last told.
func poll(within time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok || time.Now().After(deadline) {
			return ok, state
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func getJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	j, err := env.kube.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get job %s/%s: %v", ns, name, err)
	}
	return j
}

func suspended(j *batchv1.Job) bool { return j.Spec.Suspend != nil && *j.Spec.Suspend }

func complete(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func waitRunning(t *testing.T, ns, name string, within time.Duration) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("job %s/%s unsuspended", ns, name), func() (bool, string) {
		j := getJob(t, ns, name)
		return !suspended(j), fmt.Sprintf("suspend=%v status=%+v", suspended(j), j.Status)
	})
}

func waitComplete(t *testing.T, ns, name string, within time.Duration) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("job %s/%s complete", ns, name), func() (bool, string) {
		j := getJob(t, ns, name)
		return complete(j), fmt.Sprintf("suspend=%v status=%+v", suspended(j), j.Status)
	})
}

// waitEvent waits for a Kubernetes Event on the Job whose reason and
// message contain the given texts.
func waitEvent(t *testing.T, ns, name, reason, text string, within time.Duration) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("event %s %q on job %s/%s", reason, text, ns, name), func() (bool, string) {
		evs, err := env.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Message, text) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, " | ")
	})
}

// noEvent fails if the job has a Kubernetes Event of the reason.
func noEvent(t *testing.T, ns, name, reason string) {
	t.Helper()
	evs, err := env.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == reason {
			t.Errorf("job %s/%s has a %s event: %s", ns, name, reason, e.Message)
		}
	}
}

// reservations reads every reservation in the quota ledger.
func reservations(t *testing.T) map[string]ledger.Reservation {
	t.Helper()
	return reservationsIn(t, env.js)
}

// reservationsIn reads every reservation in the quota ledger of js.
func reservationsIn(t *testing.T, js jetstream.JetStream) map[string]ledger.Reservation {
	t.Helper()
	ctx := context.Background()
	kv, err := bus.OpenKV(ctx, js, ledger.Bucket)
	if err != nil {
		t.Fatalf("open ledger: %v", err)
	}
	snap, err := ledger.Read(ctx, kv)
	if err != nil {
		t.Fatalf("read ledger: %v", err)
	}
	out := map[string]ledger.Reservation{}
	for wk, h := range snap.Reservations {
		out[wk] = h.Reservation
	}
	return out
}

// watchQuota checks, for the rest of the test, that no ClusterQueue or
// cohort ever runs Jobs beyond its quota, in the API server's commit
// order; it fails the test at its end with every violation seen.
func watchQuota(t *testing.T) {
	t.Helper()
	watchQuotaOn(t, env.kube, env.dyn)
}

// watchQuotaOn runs the quota checker on a cluster until the test ends,
// or until the returned function is called, and fails the test on a
// violation.
func watchQuotaOn(t *testing.T, kube kubernetes.Interface, dyn dynamic.Interface) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	type result struct {
		rep *invariant.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := invariant.Watch(ctx, kube, dyn, invariant.WithReady(func() { close(ready) }))
		done <- result{rep, err}
	}()
	select {
	case <-ready:
	case r := <-done:
		cancel()
		t.Fatalf("quota checker did not start: %v", r.err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("quota checker not ready within 30s")
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			r := <-done
			if r.err != nil {
				t.Errorf("quota checker: %v", r.err)
				return
			}
			for i, v := range r.rep.Violations {
				if i == 10 {
					t.Errorf("… and %d more quota violations", len(r.rep.Violations)+r.rep.Dropped-10)
					break
				}
				t.Errorf("quota violated: %s", v)
			}
			t.Logf("quota checker: %d Job events, %d violations", r.rep.Events, len(r.rep.Violations)+r.rep.Dropped)
		})
	}
	t.Cleanup(stop)
	return stop
}
