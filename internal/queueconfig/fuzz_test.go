package queueconfig

import (
	"encoding/json"
	"testing"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// FuzzToEngine converts any ClusterQueue and ResourceFlavor that pass the
// API's validation (as the watcher sees them) into the engine's
// configuration: it must never panic, and a refusal must say why.
func FuzzToEngine(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"cq"},"spec":{"cohort":"all","namespaceSelector":{},"resourceGroups":[{"coveredResources":["cpu"],"flavors":[{"name":"default","resources":[{"name":"cpu","nominalQuota":"2","borrowingLimit":"1","lendingLimit":"500m"}]}]}],"preemption":{"withinClusterQueue":"LowerPriority","reclaimWithinCohort":"Any"},"fairSharing":{"weight":"0.5"}}}`),
		[]byte(`{"metadata":{"name":"default"},"spec":{"nodeLabels":{"gpu":"a100"},"nodeTaints":[{"key":"spot","value":"true","effect":"NoSchedule"}]}}`))
	f.Add([]byte(`{"metadata":{"name":"cq"},"spec":{"namespaceSelector":{"matchExpressions":[{"key":"team","operator":"In","values":["a"]}]}}}`), []byte(`{}`))
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
		if _, err := ToEngine(o); err != nil && err.Error() == "" {
			t.Fatal("conversion refused without a message")
		}
	})
}
