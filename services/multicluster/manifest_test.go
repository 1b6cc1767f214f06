package multicluster

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sluice-dev/sluice/services/integration/job"
)

// The copy a worker creates keeps what the user wrote and drops what the
// manager's API server generated or what routes it to the dispatcher.
func TestRemoteCopyOfAJob(t *testing.T) {
	manager := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(`{
	  "apiVersion": "batch/v1", "kind": "Job",
	  "metadata": {"name": "train", "namespace": "team-a", "uid": "u-1", "resourceVersion": "42",
	    "labels": {"sluice.dev/queue-name": "queue", "team": "a"},
	    "annotations": {"note": "keep", "sluice.dev/stopped": "x", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
	    "managedFields": [{"manager": "kubectl"}]},
	  "spec": {
	    "managedBy": "sluice.dev/multicluster", "parallelism": 2, "suspend": false,
	    "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},
	    "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u-1", "controller-uid": "u-1",
	      "batch.kubernetes.io/job-name": "train", "job-name": "train", "app": "x"}},
	      "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
	  "status": {"active": 1}}`), &manager.Object); err != nil {
		t.Fatal(err)
	}
	raw, err := remoteCopy(job.Adapter{}, manager)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "train", "namespace": "team-a",
			"labels": map[string]any{"sluice.dev/queue-name": "queue", "team": "a"}, "annotations": map[string]any{"note": "keep"}},
		"spec": map[string]any{"parallelism": float64(2), "suspend": true,
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "x"}},
				"spec": map[string]any{"restartPolicy": "Never", "containers": []any{map[string]any{"name": "c", "image": "busybox", "resources": map[string]any{}}}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("copy (-want +got):\n%s", diff)
	}
}

func TestMessagesValidate(t *testing.T) {
	ref := func(uid string) Message {
		m := Message{Type: Offer, Admission: "a", Object: json.RawMessage(`{}`)}
		m.Workload.Kind, m.Workload.Namespace, m.Workload.Name, m.Workload.UID = "job", "ns", "n", uid
		return m
	}
	ok := ref("u")
	if err := ok.Validate(); err != nil {
		t.Errorf("a good offer: %v", err)
	}
	for name, m := range map[string]Message{
		"no uid":        ref(""),
		"unknown type":  func() Message { m := ref("u"); m.Type = "take"; return m }(),
		"offer, no obj": func() Message { m := ref("u"); m.Object = nil; return m }(),
	} {
		if err := m.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r := Report{Workload: ok.Workload, State: "Running"}
	if err := r.Validate(); err == nil {
		t.Error("a report in an unknown state accepted")
	}
}
