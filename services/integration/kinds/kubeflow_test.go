package kinds_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/jaxjob"
	"github.com/sluice-dev/sluice/services/integration/paddlejob"
	"github.com/sluice-dev/sluice/services/integration/pytorchjob"
	"github.com/sluice-dev/sluice/services/integration/tfjob"
	"github.com/sluice-dev/sluice/services/integration/xgboostjob"
)

// TestTrainingOperatorKinds decodes a manifest of each of the training
// operator's kinds, as the API server sends it, and reads its pod sets in
// the kind's order of replica types.
func TestTrainingOperatorKinds(t *testing.T) {
	pod := `{spec: {containers: [{name: main, image: trainer}]}}`
	cases := []struct {
		name       string
		adapter    jobframework.Adapter
		manifest   string
		wantNames  []string
		wantCounts []int32
	}{
		{name: "PyTorchJob: master, then workers", adapter: pytorchjob.Adapter{}, manifest: `apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: p, namespace: ns}
spec:
  pytorchReplicaSpecs:
    Worker: {replicas: 3, template: ` + pod + `}
    Master: {template: ` + pod + `}
`, wantNames: []string{"master", "worker"}, wantCounts: []int32{1, 3}},
		{name: "TFJob: chief, parameter servers, workers, evaluator", adapter: tfjob.Adapter{}, manifest: `apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t, namespace: ns}
spec:
  tfReplicaSpecs:
    Evaluator: {replicas: 1, template: ` + pod + `}
    Worker: {replicas: 4, template: ` + pod + `}
    PS: {replicas: 2, template: ` + pod + `}
    Chief: {replicas: 1, template: ` + pod + `}
`, wantNames: []string{"chief", "ps", "worker", "evaluator"}, wantCounts: []int32{1, 2, 4, 1}},
		{name: "XGBoostJob: master, then workers", adapter: xgboostjob.Adapter{}, manifest: `apiVersion: kubeflow.org/v1
kind: XGBoostJob
metadata: {name: x, namespace: ns}
spec:
  xgbReplicaSpecs:
    Worker: {replicas: 2, template: ` + pod + `}
    Master: {replicas: 1, template: ` + pod + `}
`, wantNames: []string{"master", "worker"}, wantCounts: []int32{1, 2}},
		{name: "PaddleJob: master, then workers", adapter: paddlejob.Adapter{}, manifest: `apiVersion: kubeflow.org/v1
kind: PaddleJob
metadata: {name: d, namespace: ns}
spec:
  paddleReplicaSpecs:
    Worker: {replicas: 2, template: ` + pod + `}
    Master: {replicas: 1, template: ` + pod + `}
`, wantNames: []string{"master", "worker"}, wantCounts: []int32{1, 2}},
		{name: "JAXJob: workers only", adapter: jaxjob.Adapter{}, manifest: `apiVersion: kubeflow.org/v1
kind: JAXJob
metadata: {name: j, namespace: ns}
spec:
  jaxReplicaSpecs:
    Worker: {replicas: 4, template: ` + pod + `}
`, wantNames: []string{"worker"}, wantCounts: []int32{4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(tc.manifest), &obj); err != nil {
				t.Fatal(err)
			}
			j, err := tc.adapter.Decode(&unstructured.Unstructured{Object: obj})
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			sets, err := j.PodSets()
			if err != nil {
				t.Fatalf("PodSets: %v", err)
			}
			var names []string
			var counts []int32
			for _, ps := range sets {
				names, counts = append(names, ps.Name), append(counts, ps.Count)
			}
			if diff := cmp.Diff(tc.wantNames, names); diff != "" {
				t.Errorf("pod set names (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCounts, counts); diff != "" {
				t.Errorf("pod set counts (-want +got):\n%s", diff)
			}
			if j.IsSuspended() {
				t.Errorf("suspended without runPolicy.suspend")
			}
			j.SetSuspended(true)
			if !j.IsSuspended() {
				t.Errorf("SetSuspended(true) did not suspend")
			}
			if _, ok := j.(jobframework.PodsReadier); !ok {
				t.Errorf("%s is not a PodsReadier: waitForPodsReady could not read it", tc.adapter.Kind().Name)
			}
		})
	}
}
