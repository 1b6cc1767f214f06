package e2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/job"
)

// webhookExclusions is how many times the API server has not called the
// Job webhook because of its match condition.
func webhookExclusions(t *testing.T) float64 {
	t.Helper()
	raw, err := env.kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("read the API server's metrics: %v", err)
	}
	fams := parseMetrics(t, bytes.NewReader(raw))
	var n float64
	if f := fams["apiserver_admission_match_condition_exclusions_total"]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "name" && l.GetValue() == jobframework.WebhookName(job.Kind) {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestWebhookSkipsJobsCreatedSuspended: the API server evaluates the
// webhook's match condition. A Job created suspended, with none of
// Sluice's annotations, is not sent to the webhook (it would change
// nothing); one that carries a leftover admission annotation still is, and
// loses it; one created running is suspended (createJob checks that).
func TestWebhookSkipsJobsCreatedSuspended(t *testing.T) {
	ns := "e2e-webhook"
	queues(t, ns, 1, "Never")
	ctx := context.Background()
	create := func(name string, annotations map[string]string) *batchv1.Job {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{v1beta1.QueueNameLabel: "q"}, Annotations: annotations},
			Spec: batchv1.JobSpec{
				Suspend: ptr.To(true),
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"sluice.dev/run-for": "1s"}},
					Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}},
			},
		}
		got, err := env.kube.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create job %s: %v", name, err)
		}
		return got
	}

	before := webhookExclusions(t)
	create("suspended", nil)
	if after := webhookExclusions(t); after <= before {
		t.Errorf("a Job created suspended was sent to the webhook: match condition exclusions %v before, %v after", before, after)
	}

	got := create("leftover", map[string]string{jobframework.AdmissionAnnotation: `{"clusterQueue":"elsewhere"}`})
	if _, ok := got.Annotations[jobframework.AdmissionAnnotation]; ok {
		t.Errorf("a suspended Job with a leftover %s annotation kept it: the webhook was not called", jobframework.AdmissionAnnotation)
	}

	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 1, runFor: "1s"})
	// The Job the webhook never saw is queued and runs like any other.
	waitComplete(t, ns, "suspended", 60*time.Second)
}
