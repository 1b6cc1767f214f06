package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// unqueuedJob is a Job of s without any queue label.
func unqueuedJob(s jobSpec) *batchv1.Job {
	j := jobOf(s)
	delete(j.Labels, v1beta1.QueueNameLabel)
	return j
}

// waitUnqueuedEntry waits until the webhook configurations of the kinds
// have the entry for objects without a queue label, and, when ns is
// given, call it for creates in ns.
func waitUnqueuedEntry(t *testing.T, ns string, kinds ...string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("webhook entries of %v for objects without a queue", kinds), func() (bool, string) {
		cfgs, err := env.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		have := map[string]bool{}
		for _, c := range cfgs.Items {
			for _, w := range c.Webhooks {
				names = append(names, w.Name)
				for _, k := range kinds {
					if strings.HasPrefix(w.Name, "unqueued.") && strings.Contains(w.Name, "."+k+".") &&
						(ns == "" || len(w.MatchConditions) == 1 && strings.Contains(w.MatchConditions[0].Expression, fmt.Sprintf("%q", ns))) {
						have[k] = true
					}
				}
			}
		}
		return len(have) == len(kinds), strings.Join(names, ", ")
	})
}

// TestDefaultLocalQueue: a Job created without a queue label in a
// namespace with a LocalQueue named "default" is labelled for it,
// suspended, admitted and run (Kueue's LocalQueue defaulting); in a
// namespace without one it is left alone.
func TestDefaultLocalQueue(t *testing.T) {
	ns, other := "e2e-default-lq", "e2e-no-default-lq"
	queues(t, ns, 8, "Never")
	apply(t, fmt.Sprintf("apiVersion: sluice.dev/v1beta1\nkind: LocalQueue\nmetadata: {name: default, namespace: %[1]s}\nspec: {clusterQueue: %[1]s}\n", ns))
	queues(t, other, 8, "Never")
	waitUnqueuedEntry(t, ns, "job")

	got, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(), unqueuedJob(jobSpec{ns: ns, name: "plain", pods: 2, gpus: 1, runFor: "2s"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a Job without a queue: %v", err)
	}
	if q := got.Labels[v1beta1.QueueNameLabel]; q != "default" || !suspended(got) {
		t.Fatalf("created Job: queue label %q, suspended %v; want the default LocalQueue, suspended", q, suspended(got))
	}
	waitRunning(t, ns, "plain", 30*time.Second)
	waitEvent(t, ns, "plain", "Admitted", "ClusterQueue "+ns, 10*time.Second)
	if r, ok := reservations(t)["job/"+ns+"/plain"]; ok && r.LocalQueue != "default" {
		t.Errorf("reservation in LocalQueue %q, want default", r.LocalQueue)
	}
	waitComplete(t, ns, "plain", 60*time.Second)

	// A parent kind too: a Deployment without a queue label goes to the
	// default LocalQueue, and its Pods queue there.
	waitUnqueuedEntry(t, ns, "deployment")
	d, err := env.kube.AppsV1().Deployments(ns).Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: servingTemplate("web")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a Deployment without a queue: %v", err)
	}
	if q, tq := d.Labels[v1beta1.QueueNameLabel], d.Spec.Template.Labels[v1beta1.QueueNameLabel]; q != "default" || tq != "default" {
		t.Fatalf("created Deployment: queue label %q, pod template's %q; want the default LocalQueue on both", q, tq)
	}
	eventually(t, 60*time.Second, "the Deployment's pod admitted in the default LocalQueue", func() (bool, string) {
		_, admitted := podsOf(t, ns, "web")
		return len(admitted) == 1, fmt.Sprint(admitted)
	})

	// Without a LocalQueue named default, nothing is done to it.
	got, err = env.kube.BatchV1().Jobs(other).Create(context.Background(), unqueuedJob(jobSpec{ns: other, name: "plain", pods: 1, runFor: "1s"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a Job without a queue: %v", err)
	}
	if q, ok := got.Labels[v1beta1.QueueNameLabel]; ok || suspended(got) {
		t.Errorf("a Job without a queue where there is no default LocalQueue: label %q, suspended %v; want neither", q, suspended(got))
	}
}

// TestManageJobsWithoutQueueName: with manageJobsWithoutQueueName, a Job
// created without a queue label in a namespace the selector picks is
// held: suspended, not admitted, refused when someone lifts the
// suspension, and queued like any other once given a queue. Elsewhere it
// runs as it is.
func TestManageJobsWithoutQueueName(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: sluice.dev/v1beta1
kind: Configuration
manageJobsWithoutQueueName: true
managedJobsNamespaceSelector:
  matchLabels: {e2e.sluice.dev/batch: "true"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	managed, free := "e2e-held", "e2e-not-held"
	for _, n := range []string{managed, free} {
		labels := map[string]string{}
		if n == managed {
			labels["e2e.sluice.dev/batch"] = "true"
		}
		if _, err := env.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", n, err)
		}
	}
	withSluiceDevArgs(t, "--config", cfg)
	queues(t, managed, 8, "Never")
	waitUnqueuedEntry(t, "", "job", "pod")

	jobs := env.kube.BatchV1().Jobs(managed)
	got, err := jobs.Create(context.Background(), unqueuedJob(jobSpec{ns: managed, name: "held", pods: 1, gpus: 1, runFor: "1s"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a Job without a queue: %v", err)
	}
	if !suspended(got) {
		t.Fatal("a Job without a queue in a managed namespace was not held (suspended)")
	}
	// Lifting the suspension is refused, by name.
	got.Spec.Suspend = new(bool)
	if _, err := jobs.Update(context.Background(), got, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.suspend: may not be lifted") {
		t.Fatalf("unsuspending a held Job: %v, want a refusal naming spec.suspend", err)
	}
	time.Sleep(3 * time.Second)
	if j := getJob(t, managed, "held"); !suspended(j) {
		t.Fatal("the held Job runs")
	}
	if _, ok := reservations(t)["job/"+managed+"/held"]; ok {
		t.Fatal("the held Job has a reservation")
	}
	// Given a queue, it is queued and runs.
	j := getJob(t, managed, "held")
	if j.Labels == nil {
		j.Labels = map[string]string{}
	}
	j.Labels[v1beta1.QueueNameLabel] = "q"
	if _, err := jobs.Update(context.Background(), j, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("give the held Job a queue: %v", err)
	}
	waitRunning(t, managed, "held", 30*time.Second)
	waitComplete(t, managed, "held", 60*time.Second)

	// A Pod without a queue is held by its scheduling gate, whose removal
	// is refused by name.
	pods := env.kube.CoreV1().Pods(managed)
	pod, err := pods.Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "held-pod"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a Pod without a queue: %v", err)
	}
	if len(pod.Spec.SchedulingGates) == 0 {
		t.Fatal("a Pod without a queue in a managed namespace was not held (gated)")
	}
	pod.Spec.SchedulingGates = nil
	if _, err := pods.Update(context.Background(), pod, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.schedulingGates: sluice.dev/admission may not be removed") {
		t.Fatalf("ungating a held Pod: %v, want a refusal naming spec.schedulingGates", err)
	}

	// A namespace the selector leaves out: the Job runs as it is.
	got, err = env.kube.BatchV1().Jobs(free).Create(context.Background(), unqueuedJob(jobSpec{ns: free, name: "free", pods: 1, runFor: "1s"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a Job without a queue: %v", err)
	}
	if suspended(got) {
		t.Error("a Job without a queue in a namespace the selector leaves out was held")
	}
}
