package convert

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/queueconfig"
)

// processOnly are the fields of Kueue's manager Configuration that set up
// Kueue's own process, not queueing decisions: Sluice's services take
// theirs as flags, so they are dropped with a warning, never refused.
var processOnly = map[string]bool{
	"namespace": true, "health": true, "metrics": true, "webhook": true, "leaderElection": true,
	"controller": true, "clientConnection": true, "internalCertManagement": true, "pprofBindAddress": true,
	"integrations": true, "featureGates": true,
}

// sameAsSluice are Kueue settings whose value here means what Sluice does
// anyway: dropped without a word.
var sameAsSluice = map[string]any{"manageJobsWithoutQueueName": false}

// configuration is what Sluice reads of a Configuration document, with
// Kueue's names (the same document `sluice simulate` and `--config` read).
type configuration struct {
	APIVersion  string `json:"apiVersion"`
	Kind        string `json:"kind"`
	FairSharing *struct {
		Enable               *bool    `json:"enable,omitempty"`
		PreemptionStrategies []string `json:"preemptionStrategies,omitempty"`
	} `json:"fairSharing,omitempty"`
	WaitForPodsReady             *queueconfig.WaitForPodsReady     `json:"waitForPodsReady,omitempty"`
	Resources                    *queueconfig.Resources            `json:"resources,omitempty"`
	ManageJobsWithoutQueueName   bool                              `json:"manageJobsWithoutQueueName,omitempty"`
	ManagedJobsNamespaceSelector *metav1.LabelSelector             `json:"managedJobsNamespaceSelector,omitempty"`
	AdmissionFairSharing         *queueconfig.AdmissionFairSharing `json:"admissionFairSharing,omitempty"`
}

// convertConfiguration turns Kueue's manager Configuration
// (config.kueue.x-k8s.io) into Sluice's Configuration document: fair
// sharing, admissionFairSharing, waitForPodsReady, resources,
// manageJobsWithoutQueueName and managedJobsNamespaceSelector are kept
// under their names; what configures
// Kueue's process is dropped with a warning; any other setting of queueing
// decisions Sluice lacks is refused unless DropUnsupported.
func convertConfiguration(loc string, obj map[string]any, opts Options) ([]byte, []string, error) {
	loc += " (Configuration)"
	var warnings []string
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var process []string
	for _, k := range keys {
		switch {
		case k == "apiVersion" || k == "kind" || k == "fairSharing" || k == "waitForPodsReady" || k == "resources" ||
			k == "managedJobsNamespaceSelector" || k == "admissionFairSharing" || k == "manageJobsWithoutQueueName" && obj[k] == true:
		case processOnly[k]:
			process = append(process, k)
			delete(obj, k)
		case sameAsSluice[k] != nil && obj[k] == sameAsSluice[k]:
			delete(obj, k)
		default:
			err := fmt.Errorf("%s: %s: %w", loc, k, ErrUnsupported)
			if !opts.DropUnsupported {
				return nil, nil, err
			}
			warnings = append(warnings, "dropped "+err.Error())
			delete(obj, k)
		}
	}
	if len(process) > 0 {
		warnings = append(warnings, fmt.Sprintf("dropped %s: %s: settings of Kueue's own process (Sluice's services take flags)", loc, strings.Join(process, ", ")))
	}
	// Sluice turns a block without enable on. In Kueue v1beta1 enable
	// defaults to false; v1beta2 has no enable, the block turns the feature
	// on. The converted block says which, so it means what it meant.
	v1beta1Config := obj["apiVersion"] == "config.kueue.x-k8s.io/v1beta1"
	for _, k := range []string{"fairSharing", "waitForPodsReady"} {
		if block, ok := obj[k].(map[string]any); ok {
			if _, set := block["enable"]; !set {
				block["enable"] = !v1beta1Config
			}
		}
	}
	obj["apiVersion"], obj["kind"] = v1beta1.GroupVersion.String(), "Configuration"
	return finish(loc, obj, func() any { return &configuration{} }, opts, warnings)
}
