package kinds

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/job"
	"github.com/sluice-dev/sluice/services/integration/mpijob"
	"github.com/sluice-dev/sluice/services/integration/pytorchjob"
	"github.com/sluice-dev/sluice/services/integration/raycluster"
	"github.com/sluice-dev/sluice/services/integration/trainjob"
)

// TestManagedByInMultiClusterQueues: a job created in a queue that
// dispatches to worker clusters gets its kind's multi-cluster manager in
// its managedBy field (the value its operator accepts), whether it was
// created suspended or not; a job in another queue, or that names a
// manager already, is left as it is.
func TestManagedByInMultiClusterQueues(t *testing.T) {
	dispatches := func(ns, queue string) bool { return ns == "team-a" && queue == "far" }
	cases := []struct {
		name  string
		ad    jobframework.Adapter
		obj   string
		want  string // the managedBy field after the webhook ("" unset)
		field []string
	}{
		{name: "a suspended Job in a multi-cluster queue", ad: job.Adapter{},
			obj:  `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"web","namespace":"team-a","labels":{"sluice.dev/queue-name":"far"}},"spec":{"suspend":true,"template":{"spec":{"containers":[{"name":"c"}]}}}}`,
			want: "sluice.dev/multicluster", field: []string{"spec", "managedBy"}},
		{name: "a running Job in a multi-cluster queue: suspended and managed", ad: job.Adapter{},
			obj:  `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"web","namespace":"team-a","labels":{"sluice.dev/queue-name":"far"}},"spec":{"template":{"spec":{"containers":[{"name":"c"}]}}}}`,
			want: "sluice.dev/multicluster", field: []string{"spec", "managedBy"}},
		{name: "a Job in a local queue is left alone", ad: job.Adapter{},
			obj:   `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"web","namespace":"team-a","labels":{"sluice.dev/queue-name":"near"}},"spec":{"suspend":true,"template":{"spec":{"containers":[{"name":"c"}]}}}}`,
			field: []string{"spec", "managedBy"}},
		{name: "a Job that names its manager keeps it", ad: job.Adapter{},
			obj:  `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"web","namespace":"team-a","labels":{"sluice.dev/queue-name":"far"}},"spec":{"suspend":true,"managedBy":"example.com/mine","template":{"spec":{"containers":[{"name":"c"}]}}}}`,
			want: "example.com/mine", field: []string{"spec", "managedBy"}},
		{name: "a PyTorchJob without runPolicy gets one, with the operator's reserved value", ad: pytorchjob.Adapter{},
			obj:  `{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"web","namespace":"team-a","labels":{"sluice.dev/queue-name":"far"}},"spec":{"pytorchReplicaSpecs":{"Master":{"template":{"spec":{"containers":[{"name":"c"}]}}}}}}`,
			want: "kueue.x-k8s.io/multikueue", field: []string{"spec", "runPolicy", "managedBy"}},
		{name: "an MPIJob created suspended", ad: mpijob.Adapter{},
			obj:  `{"apiVersion":"kubeflow.org/v2beta1","kind":"MPIJob","metadata":{"name":"web","namespace":"team-a","labels":{"sluice.dev/queue-name":"far"}},"spec":{"runPolicy":{"suspend":true},"mpiReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"c"}]}}}}}}`,
			want: "kueue.x-k8s.io/multikueue", field: []string{"spec", "runPolicy", "managedBy"}},
		{name: "a RayCluster", ad: raycluster.Adapter{},
			obj:  `{"apiVersion":"ray.io/v1","kind":"RayCluster","metadata":{"name":"web","namespace":"team-a","labels":{"sluice.dev/queue-name":"far"}},"spec":{"headGroupSpec":{"rayStartParams":{},"template":{"spec":{"containers":[{"name":"c"}]}}}}}`,
			want: "kueue.x-k8s.io/multikueue", field: []string{"spec", "managedBy"}},
		{name: "a TrainJob with the trainer's own default: replaced", ad: trainjob.Adapter{},
			obj:  `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"web","namespace":"team-a","labels":{"sluice.dev/queue-name":"far"}},"spec":{"runtimeRef":{"name":"torch"},"managedBy":"trainer.kubeflow.org/trainjob-controller"}}`,
			want: "kueue.x-k8s.io/multikueue", field: []string{"spec", "managedBy"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := review(t, tc.ad.Kind(), tc.obj, "null", jobframework.WithMultiClusterQueues(dispatches))
			if !r.Allowed {
				t.Fatalf("refused: %s", r.Result.Message)
			}
			var after map[string]any
			if err := json.Unmarshal(patched(t, tc.obj, r), &after); err != nil {
				t.Fatal(err)
			}
			got, _, _ := unstructured.NestedString(after, tc.field...)
			if got != tc.want {
				t.Errorf("managedBy = %q, want %q", got, tc.want)
			}
			j, err := tc.ad.Decode(&unstructured.Unstructured{Object: after})
			if err != nil {
				t.Fatal(err)
			}
			if !j.IsSuspended() {
				t.Error("not suspended")
			}
		})
	}
}
