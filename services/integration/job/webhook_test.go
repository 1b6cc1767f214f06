package job

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

func newTestWebhook(t *testing.T, opts ...jobframework.WebhookOption) *jobframework.Webhook {
	t.Helper()
	opts = append([]jobframework.WebhookOption{jobframework.WithAddress("127.0.0.1:0"), jobframework.WithLogger(zerolog.New(io.Discard))}, opts...)
	w, err := jobframework.NewWebhook([]jobframework.Adapter{Adapter{}}, opts...)
	if err != nil {
		t.Fatalf("NewWebhook() unexpected error: %v", err)
	}
	return w
}

// reviewFor builds the AdmissionReview the API server sends for op on job.
func reviewFor(t *testing.T, op admissionv1.Operation, kind metav1.GroupVersionKind, object []byte, old ...[]byte) []byte {
	t.Helper()
	var oldObject runtime.RawExtension
	if len(old) > 0 {
		oldObject.Raw = old[0]
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "7a6f1f0e-0000-4000-8000-000000000001",
			Kind:      kind,
			Resource:  metav1.GroupVersionResource{Group: kind.Group, Version: kind.Version, Resource: strings.ToLower(kind.Kind) + "s"},
			Namespace: "team-a",
			Name:      "j",
			Operation: op,
			Object:    runtime.RawExtension{Raw: object},
			OldObject: oldObject,
		},
	}
	b, err := json.Marshal(review)
	if err != nil {
		t.Fatalf("encode review: %v", err)
	}
	return b
}

func jobJSON(t *testing.T, job *batchv1.Job) []byte {
	t.Helper()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatalf("encode job: %v", err)
	}
	return b
}

var batchJobKind = metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}

func TestWebhookMutate(t *testing.T) {
	cases := []struct {
		name   string
		op     admissionv1.Operation
		kind   metav1.GroupVersionKind
		object func(t *testing.T) []byte
		// old is an update's old object; the object itself when nil.
		old         func(t *testing.T) []byte
		wantAllowed bool
		wantPatched bool
		wantJob     *jobBuilder // the object after the patch, when patched
		wantCode    int32       // Result.Code when denied
		wantMessage string      // in Result.Message when denied
		kueueLabels bool        // the webhook honours Kueue's labels
		// unqueued picks a webhook that queues unlabelled objects in a
		// default LocalQueue ("default": team-a has one) or holds them
		// ("hold": no namespace has one).
		unqueued string
		// wantWarnings are what the client is told (Kueue's settings
		// Sluice does not read).
		wantWarnings []string
	}{
		{
			name: "Kueue settings Sluice does not read are warned of, those it reads are not",
			op:   admissionv1.Create,
			kind: batchJobKind,
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").suspend(false).
					label("kueue.x-k8s.io/max-exec-time-seconds", "60").
					label("kueue.x-k8s.io/prebuilt-workload-name", "w").
					annotation(KueueMinParallelismAnnotation, "1").
					templateAnnotation("kueue.x-k8s.io/podset-required-topology", "rack").
					templateAnnotation("kueue.x-k8s.io/pod-group-fast-admission", "true").obj())
			},
			wantAllowed: true,
			wantPatched: true,
			wantJob: makeJob("j").label("kueue.x-k8s.io/max-exec-time-seconds", "60").
				label("kueue.x-k8s.io/prebuilt-workload-name", "w").
				annotation(KueueMinParallelismAnnotation, "1").
				templateAnnotation("kueue.x-k8s.io/podset-required-topology", "rack").
				templateAnnotation("kueue.x-k8s.io/pod-group-fast-admission", "true"),
			wantWarnings: []string{
				"label kueue.x-k8s.io/prebuilt-workload-name is Kueue's; Sluice does not read it (docs/migrate-from-kueue.md)",
				"pod set main: annotation kueue.x-k8s.io/pod-group-fast-admission is Kueue's; Sluice does not read it (docs/migrate-from-kueue.md)",
			},
		},
		{
			name:        "a maximum execution time that is not a whole number of seconds above 0 is refused, naming the label",
			op:          admissionv1.Create,
			kind:        batchJobKind,
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").label(v1beta1.MaxExecTimeLabel, "1h").obj()) },
			wantCode:    http.StatusBadRequest,
			wantMessage: `label sluice.dev/max-exec-time-seconds: "1h" is not a whole number of seconds above 0`,
		},
		{
			name: "a topology annotation with a bad value is refused, naming the pod set and the annotation",
			op:   admissionv1.Create,
			kind: batchJobKind,
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").templateAnnotation(v1beta1.PodSetSliceRequiredTopologyAnnotation, "rack").
					templateAnnotation(v1beta1.PodSetSliceSizeAnnotation, "two").obj())
			},
			wantCode:    http.StatusBadRequest,
			wantMessage: `pod set "main": annotation sluice.dev/podset-slice-size: "two" is not a whole number above zero`,
		},
		{
			name: "Kueue's maximum execution time label is checked too",
			op:   admissionv1.Create,
			kind: batchJobKind,
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").label(v1beta1.KueueMaxExecTimeLabel, "0").obj())
			},
			wantCode:    http.StatusBadRequest,
			wantMessage: `label kueue.x-k8s.io/max-exec-time-seconds: "0" is not a whole number of seconds above 0`,
		},
		{
			name:        "a managed job is suspended on create",
			op:          admissionv1.Create,
			kind:        batchJobKind,
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").suspend(false).obj()) },
			wantAllowed: true,
			wantPatched: true,
			wantJob:     makeJob("j"),
		},
		{
			name: "a managed job without spec.suspend is suspended on create",
			op:   admissionv1.Create,
			kind: batchJobKind,
			object: func(t *testing.T) []byte {
				j := makeJob("j").obj()
				j.Spec.Suspend = nil
				return jobJSON(t, j)
			},
			wantAllowed: true,
			wantPatched: true,
			wantJob:     makeJob("j"),
		},
		{
			name: "copied sluice annotations are stripped from a new job",
			op:   admissionv1.Create,
			kind: batchJobKind,
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").suspend(false).annotation(AdmissionAnnotation, "{}").annotation(OriginalAnnotation, "{}").annotation("keep", "me").obj())
			},
			wantAllowed: true,
			wantPatched: true,
			wantJob:     makeJob("j").annotation("keep", "me"),
		},
		{
			name:        "an already suspended managed job needs no patch",
			op:          admissionv1.Create,
			kind:        batchJobKind,
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").obj()) },
			wantAllowed: true,
		},
		{
			name:        "an unmanaged job passes unchanged",
			op:          admissionv1.Create,
			kind:        batchJobKind,
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().suspend(false).obj()) },
			wantAllowed: true,
		},
		{
			name: "Kueue's labels, honoured: Sluice's labels added, suspended",
			op:   admissionv1.Create,
			kind: batchJobKind,
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").noQueue().label(v1beta1.KueueQueueNameLabel, "lq").label(v1beta1.KueuePriorityClassLabel, "high").suspend(false).obj())
			},
			kueueLabels: true,
			wantAllowed: true,
			wantPatched: true,
			wantJob: makeJob("j").label(v1beta1.KueueQueueNameLabel, "lq").label(v1beta1.KueuePriorityClassLabel, "high").
				workloadPriorityClass("high"),
		},
		{
			name: "Kueue's labels, honoured: Sluice's own labels win",
			op:   admissionv1.Create,
			kind: batchJobKind,
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").queue("mine").workloadPriorityClass("low").label(v1beta1.KueueQueueNameLabel, "lq").
					label(v1beta1.KueuePriorityClassLabel, "high").suspend(false).obj())
			},
			kueueLabels: true,
			wantAllowed: true,
			wantPatched: true,
			wantJob: makeJob("j").queue("mine").workloadPriorityClass("low").label(v1beta1.KueueQueueNameLabel, "lq").
				label(v1beta1.KueuePriorityClassLabel, "high"),
		},
		{
			name: "Kueue's labels, not honoured (the default): unchanged",
			op:   admissionv1.Create,
			kind: batchJobKind,
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").noQueue().label(v1beta1.KueueQueueNameLabel, "lq").suspend(false).obj())
			},
			wantAllowed: true,
		},
		{
			name:        "an update of a managed job passes unchanged",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").suspend(false).obj()) },
			wantAllowed: true,
		},
		{
			name:        "removing the queue label from a running job is refused",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").suspend(false).obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().suspend(false).obj()) },
			wantCode:    http.StatusBadRequest,
			wantMessage: `metadata.labels[sluice.dev/queue-name]: may not be removed (it was "lq") while the job is not suspended`,
		},
		{
			name:        "moving a running job to another queue is refused",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").suspend(false).obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").queue("other").suspend(false).obj()) },
			wantCode:    http.StatusBadRequest,
			wantMessage: `may not be changed from "lq" to "other" while the job is not suspended`,
		},
		{
			name:        "adding the queue label to a running job is refused",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().suspend(false).obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").suspend(false).obj()) },
			wantCode:    http.StatusBadRequest,
			wantMessage: `may not be added ("lq") while the job is not suspended`,
		},
		{
			name:        "unsuspending and removing the label at once is refused",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().suspend(false).obj()) },
			wantCode:    http.StatusBadRequest,
			wantMessage: `may not be removed`,
		},
		{
			name:        "removing the queue label from a suspended job is allowed: it leaves its queue",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().obj()) },
			wantAllowed: true,
		},
		{
			name:        "a suspended job may move to another queue",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").queue("other").obj()) },
			wantAllowed: true,
		},
		{
			name: "a finished job's label may go",
			op:   admissionv1.Update,
			kind: batchJobKind,
			old: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").suspend(false).condition(batchv1.JobComplete, "True", "", "").obj())
			},
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").noQueue().suspend(false).condition(batchv1.JobComplete, "True", "", "").obj())
			},
			wantAllowed: true,
		},
		{
			name:        "a queue name that cannot name a LocalQueue is refused on update",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").queue("Team_A").obj()) },
			wantCode:    http.StatusBadRequest,
			wantMessage: `label sluice.dev/queue-name: "Team_A" cannot name a LocalQueue`,
		},
		{
			name:        "a queue name that cannot name a LocalQueue is refused on create",
			op:          admissionv1.Create,
			kind:        batchJobKind,
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").queue("Team_A").obj()) },
			wantCode:    http.StatusBadRequest,
			wantMessage: `label sluice.dev/queue-name: "Team_A" cannot name a LocalQueue`,
		},
		{
			name:        "another kind passes unchanged",
			op:          admissionv1.Create,
			kind:        metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			object:      func(t *testing.T) []byte { return []byte(`{"metadata":{"labels":{"sluice.dev/queue-name":"lq"}}}`) },
			wantAllowed: true,
		},
		{
			name:        "an object that is not a job is refused with 400",
			op:          admissionv1.Create,
			kind:        batchJobKind,
			object:      func(t *testing.T) []byte { return []byte(`{"spec":{"parallelism":"many"}}`) },
			wantAllowed: false,
			wantCode:    http.StatusBadRequest,
		},
		{
			name:         "a create without a queue in a namespace with a default LocalQueue goes to it, suspended",
			op:           admissionv1.Create,
			kind:         batchJobKind,
			unqueued:     "default",
			object:       func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().suspend(false).obj()) },
			wantAllowed:  true,
			wantPatched:  true,
			wantJob:      makeJob("j").queue("default"),
			wantWarnings: nil,
		},
		{
			name:     "a create without a queue whose controller Sluice queues is left alone, default LocalQueue or not",
			op:       admissionv1.Create,
			kind:     batchJobKind,
			unqueued: "default",
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").noQueue().controlledBy("jobset.x-k8s.io/v1alpha2", "JobSet").suspend(false).obj())
			},
			wantAllowed: true,
		},
		{
			name:     "a create without a queue whose controller Sluice does not queue goes to the default LocalQueue",
			op:       admissionv1.Create,
			kind:     batchJobKind,
			unqueued: "default",
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").noQueue().controlledBy("batch/v1", "CronJob").suspend(false).obj())
			},
			wantAllowed: true,
			wantPatched: true,
			wantJob:     makeJob("j").controlledBy("batch/v1", "CronJob").queue("default"),
		},
		{
			name:     "a create without a queue where jobs are held is suspended, and told why",
			op:       admissionv1.Create,
			kind:     batchJobKind,
			unqueued: "hold",
			object: func(t *testing.T) []byte {
				return jobJSON(t, makeJob("j").noQueue().label("team", "a").suspend(false).obj())
			},
			wantAllowed:  true,
			wantPatched:  true,
			wantJob:      makeJob("j").noQueue().label("team", "a"),
			wantWarnings: []string{"held: a job without the sluice.dev/queue-name label does not run in namespace team-a; give it a LocalQueue with that label"},
		},
		{
			name:        "a held job may not be let run without a queue",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			unqueued:    "hold",
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().suspend(false).obj()) },
			wantAllowed: false,
			wantCode:    http.StatusBadRequest,
			wantMessage: "spec.suspend: may not be lifted while the job has no sluice.dev/queue-name label",
		},
		{
			name:        "a held job given a queue while suspended is let through",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			unqueued:    "hold",
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").queue("lq").obj()) },
			wantAllowed: true,
		},
		{
			name:        "without held jobs, one without a queue may run",
			op:          admissionv1.Update,
			kind:        batchJobKind,
			unqueued:    "default",
			old:         func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().obj()) },
			object:      func(t *testing.T) []byte { return jobJSON(t, makeJob("j").noQueue().suspend(false).obj()) },
			wantAllowed: true,
		},
	}
	srv := httptest.NewServer(newTestWebhook(t).Handler())
	defer srv.Close()
	kueueSrv := httptest.NewServer(newTestWebhook(t, jobframework.WithKueueLabels()).Handler())
	defer kueueSrv.Close()
	owners := []schema.GroupKind{{Group: "batch", Kind: "Job"}, {Group: "jobset.x-k8s.io", Kind: "JobSet"}}
	defaultSrv := httptest.NewServer(newTestWebhook(t, jobframework.WithUnqueued(jobframework.Unqueued{
		DefaultQueue: func(ns string) bool { return ns == "team-a" }, Owners: owners})).Handler())
	defer defaultSrv.Close()
	holdSrv := httptest.NewServer(newTestWebhook(t, jobframework.WithUnqueued(jobframework.Unqueued{
		DefaultQueue: func(string) bool { return false }, Hold: true, Owners: owners})).Handler())
	defer holdSrv.Close()

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			object := tc.object(t)
			url := srv.URL
			if tc.kueueLabels {
				url = kueueSrv.URL
			}
			switch tc.unqueued {
			case "default":
				url = defaultSrv.URL
			case "hold":
				url = holdSrv.URL
			}
			var old []byte
			switch {
			case tc.old != nil:
				old = tc.old(t)
			case tc.op == admissionv1.Update:
				old = object
			}
			resp, err := http.Post(url+jobframework.MutatePath(Kind), "application/json", bytes.NewReader(reviewFor(t, tc.op, tc.kind, object, old)))
			if err != nil {
				t.Fatalf("POST: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var review admissionv1.AdmissionReview
			if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
				t.Fatalf("decode response: %v", err)
			}
			if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" {
				t.Errorf("response apiVersion/kind = %q/%q", review.APIVersion, review.Kind)
			}
			r := review.Response
			if r == nil {
				t.Fatalf("response has no response")
			}
			if r.UID != "7a6f1f0e-0000-4000-8000-000000000001" {
				t.Errorf("response uid = %q, want the request's", r.UID)
			}
			if r.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", r.Allowed, tc.wantAllowed, r.Result)
			}
			if d := cmp.Diff(tc.wantWarnings, r.Warnings); d != "" {
				t.Errorf("warnings (-want +got):\n%s", d)
			}
			if !tc.wantAllowed {
				if r.Result == nil || r.Result.Code != tc.wantCode || r.Result.Message == "" || !strings.Contains(r.Result.Message, tc.wantMessage) {
					t.Errorf("result = %+v, want code %d with a message containing %q", r.Result, tc.wantCode, tc.wantMessage)
				}
				return
			}
			if !tc.wantPatched {
				if len(r.Patch) != 0 || r.PatchType != nil {
					t.Errorf("unexpected patch %s", r.Patch)
				}
				return
			}
			if r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
				t.Fatalf("patchType = %v, want JSONPatch", r.PatchType)
			}
			p, err := jsonpatch.DecodePatch(r.Patch)
			if err != nil {
				t.Fatalf("decode JSON patch %s: %v", r.Patch, err)
			}
			patched, err := p.Apply(object)
			if err != nil {
				t.Fatalf("apply JSON patch %s: %v", r.Patch, err)
			}
			var got batchv1.Job
			if err := json.Unmarshal(patched, &got); err != nil {
				t.Fatalf("decode patched job: %v", err)
			}
			if diff := cmp.Diff(tc.wantJob.obj(), &got, quantityCmp); diff != "" {
				t.Errorf("patched job mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWebhookRealReview feeds a review as kube-apiserver writes it, byte for
// byte in shape, rather than one marshalled from Go types.
func TestWebhookRealReview(t *testing.T) {
	const body = `{
  "kind": "AdmissionReview",
  "apiVersion": "admission.k8s.io/v1",
  "request": {
    "uid": "3c5a2b51-7c0a-4c6e-9d43-0e2d7f2b9a11",
    "kind": {"group": "batch", "version": "v1", "kind": "Job"},
    "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
    "requestKind": {"group": "batch", "version": "v1", "kind": "Job"},
    "requestResource": {"group": "batch", "version": "v1", "resource": "jobs"},
    "name": "sample",
    "namespace": "team-a",
    "operation": "CREATE",
    "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
    "object": {
      "kind": "Job",
      "apiVersion": "batch/v1",
      "metadata": {"name": "sample", "namespace": "team-a", "labels": {"sluice.dev/queue-name": "lq"}},
      "spec": {
        "parallelism": 2,
        "completions": 2,
        "futureField": {"kept": true},
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}
      }
    },
    "oldObject": null,
    "dryRun": false,
    "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-create"}
  }
}`
	w := newTestWebhook(t)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, jobframework.MutatePath(Kind), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil {
		t.Fatalf("decode response: %v", err)
	}
	want := &admissionv1.AdmissionResponse{
		UID:     "3c5a2b51-7c0a-4c6e-9d43-0e2d7f2b9a11",
		Allowed: true,
		// The whole spec, suspended, with a field Sluice's types do not
		// know kept as sent.
		Patch: []byte(`[{"op":"add","path":"/spec","value":{"completions":2,"futureField":{"kept":true},"parallelism":2,"suspend":true,` +
			`"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"busybox","resources":{"requests":{"cpu":"1"}}}]}}}}]`),
		PatchType: ptrTo(admissionv1.PatchTypeJSONPatch),
	}
	if diff := cmp.Diff(want, review.Response); diff != "" {
		t.Errorf("response mismatch (-want +got):\n%s", diff)
	}
}

func TestWebhookRefusesMalformedRequests(t *testing.T) {
	cases := []struct {
		name        string
		method      string
		contentType string
		body        string
		wantStatus  int
		wantText    string
	}{
		{
			name:        "garbage body",
			method:      http.MethodPost,
			contentType: "application/json",
			body:        "this is not json",
			wantStatus:  http.StatusBadRequest,
			wantText:    "malformed AdmissionReview",
		},
		{
			name:        "truncated json",
			method:      http.MethodPost,
			contentType: "application/json",
			body:        `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{`,
			wantStatus:  http.StatusBadRequest,
			wantText:    "malformed AdmissionReview",
		},
		{
			name:        "an old review version",
			method:      http.MethodPost,
			contentType: "application/json",
			body:        `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`,
			wantStatus:  http.StatusBadRequest,
			wantText:    "want apiVersion",
		},
		{
			name:        "not a review",
			method:      http.MethodPost,
			contentType: "application/json",
			body:        `{"apiVersion":"batch/v1","kind":"Job"}`,
			wantStatus:  http.StatusBadRequest,
			wantText:    "want apiVersion",
		},
		{
			name:        "no request",
			method:      http.MethodPost,
			contentType: "application/json",
			body:        `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
			wantStatus:  http.StatusBadRequest,
			wantText:    "no request",
		},
		{
			name:        "no request uid",
			method:      http.MethodPost,
			contentType: "application/json",
			body:        `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}`,
			wantStatus:  http.StatusBadRequest,
			wantText:    "no uid",
		},
		{
			name:       "GET",
			method:     http.MethodGet,
			wantStatus: http.StatusMethodNotAllowed,
			wantText:   "POST",
		},
		{
			name:        "wrong content type",
			method:      http.MethodPost,
			contentType: "text/plain",
			body:        "{}",
			wantStatus:  http.StatusUnsupportedMediaType,
			wantText:    "application/json",
		},
	}
	w := newTestWebhook(t)
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+jobframework.MutatePath(Kind), strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status = %d, want %d (body %q)", resp.StatusCode, tc.wantStatus, body)
			}
			if !strings.Contains(string(body), tc.wantText) {
				t.Errorf("body %q does not contain %q", body, tc.wantText)
			}
		})
	}
}

// runWebhook starts w.Run and returns a stop function that cancels it and
// returns Run's result.
func runWebhook(t *testing.T, w *jobframework.Webhook) (stop func() error) {
	t.Helper()
	if _, err := w.Listen(); err != nil {
		t.Fatalf("Listen() unexpected error: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("Run did not return after cancel")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func clientTrusting(t *testing.T, caPEM []byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("CA bundle holds no certificate: %q", caPEM)
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
}

func mustListen(t *testing.T, w *jobframework.Webhook) string {
	t.Helper()
	addr, err := w.Listen()
	if err != nil {
		t.Fatal(err)
	}
	return addr.String()
}

func TestEnsureWebhookConfiguration(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	const name = "sluice-job"
	const url1 = "https://127.0.0.1:9443/mutate-batch-v1-job"
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

	if err := jobframework.EnsureWebhookConfiguration(ctx, client, Kind, url1, ca, false); err != nil {
		t.Fatalf("create: %v", err)
	}
	got, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(got.Webhooks) != 1 {
		t.Fatalf("webhooks = %d, want 1", len(got.Webhooks))
	}
	wh := got.Webhooks[0]
	type summary struct {
		Name           string
		URL            string
		CABundle       string
		Operations     []admissionregistrationv1.OperationType
		Resources      []string
		FailurePolicy  admissionregistrationv1.FailurePolicyType
		SideEffects    admissionregistrationv1.SideEffectClass
		ReviewVersions []string
		ObjectSelector []metav1.LabelSelectorRequirement
	}
	gotSummary := summary{
		Name:           wh.Name,
		URL:            *wh.ClientConfig.URL,
		CABundle:       string(wh.ClientConfig.CABundle),
		Operations:     wh.Rules[0].Operations,
		Resources:      append(append(wh.Rules[0].APIGroups, wh.Rules[0].APIVersions...), wh.Rules[0].Resources...),
		FailurePolicy:  *wh.FailurePolicy,
		SideEffects:    *wh.SideEffects,
		ReviewVersions: wh.AdmissionReviewVersions,
		ObjectSelector: wh.ObjectSelector.MatchExpressions,
	}
	wantSummary := summary{
		Name:           jobframework.WebhookName(Kind),
		URL:            url1,
		CABundle:       string(ca),
		Operations:     []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Resources:      []string{"batch", "v1", "jobs"},
		FailurePolicy:  admissionregistrationv1.Fail,
		SideEffects:    admissionregistrationv1.SideEffectClassNone,
		ReviewVersions: []string{"v1"},
		ObjectSelector: []metav1.LabelSelectorRequirement{{Key: v1beta1.QueueNameLabel, Operator: metav1.LabelSelectorOpExists}},
	}
	if diff := cmp.Diff(wantSummary, gotSummary); diff != "" {
		t.Errorf("webhook configuration mismatch (-want +got):\n%s", diff)
	}

	// Same inputs: no write.
	client.ClearActions()
	if err := jobframework.EnsureWebhookConfiguration(ctx, client, Kind, url1, ca, false); err != nil {
		t.Fatalf("ensure again: %v", err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("unchanged configuration caused a %s", a.GetVerb())
		}
	}

	// New URL: one update.
	const url2 = "https://10.0.0.7:9443/mutate-batch-v1-job"
	client.ClearActions()
	if err := jobframework.EnsureWebhookConfiguration(ctx, client, Kind, url2, ca, false); err != nil {
		t.Fatalf("update: %v", err)
	}
	got, _ = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if u := *got.Webhooks[0].ClientConfig.URL; u != url2 {
		t.Errorf("url after update = %q, want %q", u, url2)
	}
	var verbs []string
	for _, a := range client.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	if diff := cmp.Diff([]string{"get", "update", "get"}, verbs); diff != "" {
		t.Errorf("actions mismatch (-want +got):\n%s", diff)
	}
}

func TestEnsureWebhookConfigurationRefusesBadInput(t *testing.T) {
	cases := []struct {
		name string
		kind jobframework.Kind
		url  string
	}{
		{name: "http url", kind: Kind, url: "http://127.0.0.1:9443/mutate-batch-v1-job"},
		{name: "no host", kind: Kind, url: "https:///mutate-batch-v1-job"},
		{name: "query", kind: Kind, url: "https://127.0.0.1/mutate?x=1"},
		{name: "fragment", kind: Kind, url: "https://127.0.0.1/mutate#x"},
		{name: "user info", kind: Kind, url: "https://u:p@127.0.0.1/mutate"},
		{name: "unparsable", kind: Kind, url: "https://[::1"},
		{name: "empty kind", url: "https://127.0.0.1/mutate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if err := jobframework.EnsureWebhookConfiguration(context.Background(), client, tc.kind, tc.url, nil, false); err == nil {
				t.Errorf("jobframework.EnsureWebhookConfiguration() succeeded, want an error")
			}
			if n := len(client.Actions()); n != 0 {
				t.Errorf("bad input reached the API (%d actions)", n)
			}
		})
	}
}
