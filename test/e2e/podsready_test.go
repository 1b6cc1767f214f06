package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// withSluiceDevArgs restarts the suite's `sluice dev` with extra arguments
// for one test, and with its own again afterwards. The JetStream store is
// kept, so the other tests' workloads are not lost.
func withSluiceDevArgs(t *testing.T, extra ...string) {
	t.Helper()
	base := env.sluiceArgs
	restart := func(args []string) {
		stopSluice(os.Interrupt)
		env.sluiceArgs = args
		if err := startSluice(); err != nil {
			t.Fatalf("start sluice dev: %v", err)
		}
		if err := waitWebhook(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	restart(append(append([]string(nil), base...), extra...))
	t.Cleanup(func() { restart(base) })
}

func TestWaitForPodsReady(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: sluice.dev/v1beta1
kind: Configuration
waitForPodsReady:
  timeout: 8s
  requeuingStrategy:
    backoffBaseSeconds: 2
    backoffLimitCount: 1
`), 0o600); err != nil {
		t.Fatal(err)
	}
	withSluiceDevArgs(t, "--config", cfg)
	ns := "e2e-podsready"
	queues(t, ns, 8, "Never")

	// Pods that no node can take are never ready: the Job is evicted
	// after the timeout, admitted again after the backoff, and past the
	// requeue limit it stays suspended for good.
	createJob(t, jobSpec{ns: ns, name: "stuck", queue: "q", pods: 2, gpus: 1, runFor: "30s",
		nodeSelector: map[string]string{"e2e-pool": "nowhere"}})
	// Pods that run become ready in time and the Job completes.
	createJob(t, jobSpec{ns: ns, name: "fine", queue: "q", pods: 2, gpus: 1, runFor: "20s"})
	waitRunning(t, ns, "stuck", 30*time.Second)
	waitRunning(t, ns, "fine", 30*time.Second)
	waitEvent(t, ns, "stuck", "Evicted", "evicted: PodsReadyTimeout", 30*time.Second)
	waitEvent(t, ns, "stuck", "Evicted", "evicted: DeactivatedDueToRequeuingLimitExceeded", 60*time.Second)
	waitEvent(t, ns, "stuck", "Pending", "deactivated: exceeding the maximum number of re-queuing retries", 40*time.Second)
	if !suspended(getJob(t, ns, "stuck")) {
		t.Errorf("a deactivated Job runs")
	}
	waitComplete(t, ns, "fine", 60*time.Second)
	evs, err := env.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=fine"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "Evicted" {
			t.Errorf("the Job whose pods were ready was evicted: %s", e.Message)
		}
	}
}
