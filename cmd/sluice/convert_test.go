package main

import (
	"strings"
	"testing"
)

// A converted Kueue manifest is a scenario `sluice simulate` runs.
func TestConvertThenSimulate(t *testing.T) {
	dir := t.TempDir()
	kueue := writeFile(t, dir, "kueue.yaml", `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  cohortName: research
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 2}]
status: {pendingWorkloads: 0}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: ns}
spec: {clusterQueue: cq}
`)
	code, out, errOut := runSluice(t, "convert", "-f", kueue)
	if code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errOut)
	}
	converted := writeFile(t, dir, "sluice.yaml", out+"---\n"+`apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: w, namespace: ns}
spec:
  queueName: lq
  podSets: [{name: main, count: 1, requests: {cpu: "1"}}]
  runtime: 5s
`)
	code, out, errOut = runSluice(t, "simulate", "-f", converted)
	if code != 0 {
		t.Fatalf("simulate of the converted manifest: exit %d: %s\n%s", code, errOut, out)
	}
	if !strings.Contains(out, `"type":"dev.sluice.workload.v1.finished"`) {
		t.Errorf("the workload did not finish:\n%s", out)
	}
}

func TestConvertRefusesWhatSluiceLacks(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "cq.yaml", "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: cq}\nspec: {flavorFungibility: {whenCanBorrow: Borrow, futurePolicy: Sometimes}}\n")
	code, out, errOut := runSluice(t, "convert", "-f", f)
	if code != 2 || out != "" || !strings.Contains(errOut, "cq.yaml: document 1 (ClusterQueue cq): spec.flavorFungibility.futurePolicy: not supported by Sluice") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing, the file, document, object and field", code, out, errOut)
	}
	code, out, errOut = runSluice(t, "convert", "-f", f, "--drop-unsupported")
	if code != 0 || !strings.Contains(out, "kind: ClusterQueue") || strings.Contains(out, "futurePolicy") ||
		!strings.Contains(errOut, "warning: dropped") {
		t.Errorf("with --drop-unsupported: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
