package queueconfig

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// FuzzToEngine converts any ClusterQueue and ResourceFlavor that pass the
// API's validation (as the watcher sees them) into the engine's
// configuration: it must never panic, and a refusal must say why.
func FuzzToEngine(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"cq"},"spec":{"cohort":"all","namespaceSelector":{},"resourceGroups":[{"coveredResources":["cpu"],"flavors":[{"name":"default","resources":[{"name":"cpu","nominalQuota":"2","borrowingLimit":"1","lendingLimit":"500m"}]}]}],"preemption":{"withinClusterQueue":"LowerPriority","reclaimWithinCohort":"Any"},"fairSharing":{"weight":"0.5"}}}`),
		[]byte(`{"metadata":{"name":"default"},"spec":{"nodeLabels":{"gpu":"a100"},"nodeTaints":[{"key":"spot","value":"true","effect":"NoSchedule"}]}}`))
	f.Add([]byte(`{"metadata":{"name":"cq"},"spec":{"namespaceSelector":{"matchExpressions":[{"key":"team","operator":"In","values":["a"]}]}}}`), []byte(`{"metadata":{"name":"default"}}`))
	f.Fuzz(func(t *testing.T, cqJSON, flavorJSON []byte) {
		var cq v1beta1.ClusterQueue
		var fl v1beta1.ResourceFlavor
		if json.Unmarshal(cqJSON, &cq) != nil || json.Unmarshal(flavorJSON, &fl) != nil {
			return
		}
		if len(ValidateClusterQueue(&cq)) > 0 || len(ValidateResourceFlavor(&fl)) > 0 {
			return
		}
		o := Objects{ClusterQueues: []v1beta1.ClusterQueue{cq}, Flavors: []v1beta1.ResourceFlavor{fl}}
		cfg, err := ToEngine(o)
		if err != nil {
			if !strings.Contains(err.Error(), cq.Name) {
				t.Fatalf("refusal %q does not name ClusterQueue %s", err, cq.Name)
			}
			return
		}
		if len(cfg.ClusterQueues) != 1 || cfg.ClusterQueues[0].Name != cq.Name {
			t.Fatalf("accepted ClusterQueue %s converted to %d queues", cq.Name, len(cfg.ClusterQueues))
		}
	})
}
