package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDynamicResourceAllocation: Jobs whose pods claim GPUs through a
// ResourceClaimTemplate, not in their requests, are counted against the
// ClusterQueue's example.com/gpu quota by deviceClassMappings: the first,
// claiming 2, is admitted and runs on the devices kube-scheduler
// allocates from the devcluster's ResourceSlices (its stand-in for a DRA
// driver); the second waits for its quota, then runs.
func TestDynamicResourceAllocation(t *testing.T) {
	class := "gpu.devcluster.sluice.dev"
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: sluice.dev/v1beta1
kind: Configuration
resources:
  deviceClassMappings:
  - {name: example.com/gpu, deviceClassNames: [`+class+`]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	withSluiceDevArgs(t, "--config", cfg)
	ns := "e2e-dra"
	queuesWith(t, ns, "Never", `  - coveredResources: [cpu, example.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: example.com/gpu, nominalQuota: 2}
`)
	ctx := context.Background()
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "two-gpus", Namespace: ns}, Spec: resourcev1.ResourceClaimTemplateSpec{
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2},
		}}}},
	}}
	if _, err := env.kube.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ResourceClaimTemplate: %v", err)
	}
	claiming := func(name string) {
		j := jobOf(jobSpec{ns: ns, name: name, queue: "q", pods: 1, runFor: "2s"})
		spec := &j.Spec.Template.Spec
		// The GPUs come from the claim only.
		delete(spec.Containers[0].Resources.Requests, "nvidia.com/gpu")
		delete(spec.Containers[0].Resources.Limits, "nvidia.com/gpu")
		spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &tmpl.Name}}
		if _, err := env.kube.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create job %s: %v", name, err)
		}
	}
	claiming("first")
	waitRunning(t, ns, "first", 30*time.Second)
	if r, ok := reservations(t)["job/"+ns+"/first"]; !ok || r.Requests["main"]["example.com/gpu"] != "2" {
		t.Fatalf("first's reservation %+v (%t), want 2 example.com/gpu per pod", r, ok)
	}
	claiming("second")
	time.Sleep(2 * time.Second)
	if j := getJob(t, ns, "second"); !suspended(j) && !complete(getJob(t, ns, "first")) {
		t.Fatal("second runs while first holds the 2 GPUs of quota")
	}
	waitComplete(t, ns, "first", 60*time.Second)
	waitRunning(t, ns, "second", 30*time.Second)
	waitComplete(t, ns, "second", 60*time.Second)
}
