package watcher

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestFlavorsUsageBorrowed(t *testing.T) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(`
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: on-demand
      resources: [{name: cpu, nominalQuota: 4}, {name: memory, nominalQuota: 8Gi}]
`), &obj); err != nil {
		t.Fatal(err)
	}
	nominal := nominalOf(&unstructured.Unstructured{Object: obj})
	got := map[string][2]string{}
	for _, fu := range flavorsUsage(map[string]map[string]int64{"on-demand": {"cpu": 6500, "memory": 4 << 30}}, nominal) {
		for _, r := range fu.Resources {
			got[fu.Name+"/"+string(r.Name)] = [2]string{r.Total.String(), r.Borrowed.String()}
		}
	}
	want := map[string][2]string{
		"on-demand/cpu":    {"6500m", "2500m"}, // 2.5 cores above its 4
		"on-demand/memory": {"4Gi", "0"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("usage (-want +got):\n%s", d)
	}
}
