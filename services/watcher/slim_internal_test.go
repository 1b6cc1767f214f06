package watcher

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"
)

func TestSlimConfigObject(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "a ClusterQueue keeps its spec and its conditions, not its usage or managed fields",
			in: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata:
  name: team-a
  generation: 3
  managedFields: [{manager: sluice, operation: Update}]
spec: {cohort: all, namespaceSelector: {}}
status:
  admittedWorkloads: 4
  pendingWorkloads: 9
  flavorsUsage: [{name: a100, resources: [{name: nvidia.com/gpu, total: "4"}]}]
  conditions: [{type: Active, status: "True", lastTransitionTime: "2026-12-07T10:00:00Z"}]
`,
			want: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: team-a, generation: 3}
spec: {cohort: all, namespaceSelector: {}}
status:
  conditions: [{type: Active, status: "True", lastTransitionTime: "2026-12-07T10:00:00Z"}]
`,
		},
		{
			name: "a status without conditions is dropped",
			in: `apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
status: {phase: Active}
`,
			want: `apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
`,
		},
		{
			name: "an object without status or managed fields is left as it is",
			in: `apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {instance-type: a100}}
`,
			want: `apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {instance-type: a100}}
`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := slimConfigObject(object(t, tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(object(t, tc.want).Object, got.(*unstructured.Unstructured).Object); diff != "" {
				t.Errorf("slimmed object (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a deletion's tombstone passes untouched", func(t *testing.T) {
		tomb := cache.DeletedFinalStateUnknown{Key: "team-a"}
		got, err := slimConfigObject(tomb)
		if err != nil || got != tomb {
			t.Errorf("slimConfigObject(tombstone) = %v, %v; want it unchanged", got, err)
		}
	})
}

func object(t *testing.T, src string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(src), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}
