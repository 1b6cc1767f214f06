package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestAdmissionFairSharing: two teams' LocalQueues share a ClusterQueue
// whose admissionScope orders by usage. While team-a's first Job holds
// every GPU, team-a queues a second Job and team-b, later, one of its
// own: team-b's goes first once the GPUs are free, and team-a's
// LocalQueue reports its usage in status.fairSharing.
func TestAdmissionFairSharing(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: sluice.dev/v1beta1
kind: Configuration
admissionFairSharing:
  usageHalfLifeTime: 10m
  usageSamplingInterval: 2s
`), 0o600); err != nil {
		t.Fatal(err)
	}
	withSluiceDevArgs(t, "--config", cfg)
	a, b := "e2e-afs-a", "e2e-afs-b"
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec:
  nodeLabels: {instance-type: a100}
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: e2e-afs}
spec:
  namespaceSelector: {}
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: nvidia.com/gpu, nominalQuota: 2}
---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Namespace
metadata: {name: %[2]s}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: %[1]s}
spec: {clusterQueue: e2e-afs}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: %[2]s}
spec: {clusterQueue: e2e-afs, fairSharing: {weight: 2}}
`, a, b))
	watchQuota(t)
	t.Cleanup(func() {
		for _, ns := range []string{a, b} {
			bg := metav1.DeletePropagationBackground
			if err := env.kube.BatchV1().Jobs(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{}); err != nil {
				t.Errorf("delete the Jobs of %s: %v", ns, err)
			}
		}
	})

	createJob(t, jobSpec{ns: a, name: "first", queue: "q", pods: 1, gpus: 2, runFor: "6s"})
	waitRunning(t, a, "first", 30*time.Second)
	createJob(t, jobSpec{ns: a, name: "second", queue: "q", pods: 1, gpus: 2, runFor: "1s"})
	time.Sleep(time.Second) // team-b's Job is the younger
	createJob(t, jobSpec{ns: b, name: "late", queue: "q", pods: 1, gpus: 2, runFor: "1s"})
	waitRunning(t, b, "late", 60*time.Second)
	if j := getJob(t, a, "second"); !suspended(j) {
		t.Fatal("team-a's second Job started before team-b's, though team-a had used the GPUs")
	}
	waitComplete(t, b, "late", 60*time.Second)
	waitRunning(t, a, "second", 60*time.Second)

	lqs := env.dyn.Resource(schema.GroupVersionResource{Group: "sluice.dev", Version: "v1beta1", Resource: "localqueues"})
	eventually(t, 30*time.Second, "team-a's LocalQueue reports its GPU usage", func() (bool, string) {
		u, err := lqs.Namespace(a).Get(context.Background(), "q", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		gpus, _, _ := unstructured.NestedString(u.Object, "status", "fairSharing", "admissionFairSharingStatus", "consumedResources", "nvidia.com/gpu")
		last, _, _ := unstructured.NestedString(u.Object, "status", "fairSharing", "admissionFairSharingStatus", "lastUpdate")
		q, err := resource.ParseQuantity(gpus)
		return err == nil && q.Sign() > 0 && last != "", fmt.Sprintf("consumed gpu %q, lastUpdate %q", gpus, last)
	})
}
