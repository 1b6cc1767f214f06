package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// elasticPods counts the live pods of a Job, and those of them the
// elastic gate still holds.
func elasticPods(t *testing.T, ns, job string) (live, gated int) {
	t.Helper()
	pods, err := env.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		live++
		if slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1beta1.ElasticSchedulingGate }) {
			gated++
		}
	}
	return live, gated
}

func scaleJob(t *testing.T, ns, name string, parallelism int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"parallelism":%d}}`, parallelism)
	if _, err := env.kube.BatchV1().Jobs(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("scale job %s/%s to %d: %v", ns, name, parallelism, err)
	}
}

// TestElasticJob: a running Job with Kueue's elastic-job annotation is
// scaled up while quota is short: it keeps running, its new pods stay
// gated and its reservation unchanged; once quota frees, the scale-up is
// admitted in place (same admission) and the new pods run. Scaled down,
// it gives quota back at once.
func TestElasticJob(t *testing.T) {
	ns := "e2e-elastic"
	queues(t, ns, 4, "Never")
	s := jobSpec{ns: ns, name: "grow", queue: "q", pods: 2, gpus: 1, runFor: "10m"}
	j := jobOf(s)
	j.Annotations = map[string]string{v1beta1.KueueElasticJobAnnotation: "true"}
	j.Spec.Completions = ptr.To[int32](20)
	if _, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, "grow", 30*time.Second)
	key := "job/" + ns + "/grow"
	held := func() int32 {
		r, ok := reservations(t)[key]
		if !ok {
			return -1
		}
		return r.PodSets[0].Count
	}
	eventually(t, 30*time.Second, "2 pods running ungated", func() (bool, string) {
		live, gated := elasticPods(t, ns, "grow")
		return live == 2 && gated == 0, fmt.Sprintf("live %d gated %d", live, gated)
	})
	admission := reservations(t)[key].Admission()
	createJob(t, jobSpec{ns: ns, name: "other", queue: "q", pods: 1, gpus: 1, runFor: "10m"})
	waitRunning(t, ns, "other", 30*time.Second)

	// 3 of 4 GPUs held: 2 more pods do not fit.
	scaleJob(t, ns, "grow", 4)
	eventually(t, 30*time.Second, "4 pods, 2 of them gated", func() (bool, string) {
		live, gated := elasticPods(t, ns, "grow")
		return live == 4 && gated == 2, fmt.Sprintf("live %d gated %d", live, gated)
	})
	eventually(t, 20*time.Second, "sluice pending lists the scale-up", func() (bool, string) {
		out := sluiceCLI(t, "pending", "-n", ns, "--queue", "q")
		return strings.Contains(out, ns+"/grow (scale-up)") && strings.Contains(out, "insufficient unused quota"), out
	})
	if n := held(); n != 2 {
		t.Fatalf("the reservation holds %d pods before quota frees, want 2", n)
	}
	if suspended(getJob(t, ns, "grow")) {
		t.Fatal("the Job was stopped to scale up")
	}
	if err := env.kube.BatchV1().Jobs(ns).Delete(context.Background(), "other", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the scale-up admitted and its pods ungated", func() (bool, string) {
		live, gated := elasticPods(t, ns, "grow")
		return held() == 4 && live == 4 && gated == 0, fmt.Sprintf("held %d live %d gated %d", held(), live, gated)
	})
	if got := reservations(t)[key].Admission(); got != admission {
		t.Errorf("admission %s after the scale-up, want %s (the same)", got, admission)
	}
	waitEvent(t, ns, "grow", "Resized", "main 2→4", 10*time.Second)

	scaleJob(t, ns, "grow", 1)
	eventually(t, 30*time.Second, "the scale-down gives quota back", func() (bool, string) {
		return held() == 1, fmt.Sprint(held())
	})
	// The quota given back admits another Job at once.
	createJob(t, jobSpec{ns: ns, name: "after", queue: "q", pods: 3, gpus: 1, runFor: "10m"})
	waitRunning(t, ns, "after", 30*time.Second)
}

// TestScalingARunningJobThatIsNotElastic: raising the parallelism of a
// running Job that is not elastic is refused, with the reason; one that
// gets past the webhook (the elastic annotation added after it was
// queued) is stopped and queued again as it is now.
func TestScalingARunningJobThatIsNotElastic(t *testing.T) {
	ns := "e2e-not-elastic"
	queues(t, ns, 4, "Never")
	j := jobOf(jobSpec{ns: ns, name: "fixed", queue: "q", pods: 2, gpus: 1, runFor: "10m"})
	j.Spec.Completions = ptr.To[int32](20)
	if _, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, "fixed", 30*time.Second)
	_, err := env.kube.BatchV1().Jobs(ns).Patch(context.Background(), "fixed", types.MergePatchType, []byte(`{"spec":{"parallelism":4}}`), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.parallelism: may not change from 2 to 4 pods while the job runs") {
		t.Fatalf("raising the parallelism of a running Job: %v, want a refusal that says why", err)
	}
	// Elastic only from now on: the workload was queued as it was.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, v1beta1.ElasticJobAnnotation)
	if _, err := env.kube.BatchV1().Jobs(ns).Patch(context.Background(), "fixed", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	scaleJob(t, ns, "fixed", 4)
	waitEvent(t, ns, "fixed", "PodSetsChanged", "changed after it was queued", 30*time.Second)
	eventually(t, 60*time.Second, "queued again as it is now, and running", func() (bool, string) {
		j := getJob(t, ns, "fixed")
		r, ok := reservations(t)["job/"+ns+"/fixed"]
		return ok && !suspended(j) && r.PodSets[0].Count == *j.Spec.Parallelism,
			fmt.Sprintf("suspended %t parallelism %d reserved %t %+v", suspended(j), *j.Spec.Parallelism, ok, r.PodSets)
	})
}
