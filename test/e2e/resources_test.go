package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestQuotaResources: with Kueue's resources block in the Configuration,
// Jobs are queued by their transformed requests (here every GPU also costs
// 10 credits, of which the ClusterQueue has 30), while their pods keep
// asking for what they ask and run as usual.
func TestQuotaResources(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: sluice.dev/v1beta1
kind: Configuration
resources:
  excludeResourcePrefixes: [example.com/nic]
  transformations:
  - {input: nvidia.com/gpu, strategy: Retain, outputs: {example.com/credits: "10"}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	withSluiceDevArgs(t, "--config", cfg)
	ns := "e2e-credits"
	// A budget of credits beside the GPUs.
	apply(t, "apiVersion: sluice.dev/v1beta1\nkind: ResourceFlavor\nmetadata: {name: budget}\n")
	queuesWith(t, ns, "Never", `  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: nvidia.com/gpu, nominalQuota: 8}
  - coveredResources: [example.com/credits]
    flavors:
    - name: budget
      resources:
      - {name: example.com/credits, nominalQuota: 30}
`)
	// Two GPUs cost 20 credits: the first Job fits, the second waits for
	// credits though GPUs are free, and runs once the first is done.
	createJob(t, jobSpec{ns: ns, name: "first", queue: "q", pods: 2, gpus: 1, runFor: "3s"})
	waitRunning(t, ns, "first", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "second", queue: "q", pods: 2, gpus: 1, runFor: "2s"})
	waitEvent(t, ns, "second", "Pending", "insufficient unused quota for example.com/credits in flavor budget: requested 20, available 10", 30*time.Second)
	if r, ok := reservations(t)["job/"+ns+"/first"]; !ok || r.Requests["main"]["example.com/credits"] != "10" {
		t.Errorf("first's reservation = %+v, %v; want 10 credits per pod", r, ok)
	}
	waitComplete(t, ns, "first", 60*time.Second)
	waitComplete(t, ns, "second", 60*time.Second)
}
