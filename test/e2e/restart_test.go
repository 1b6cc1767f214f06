package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/ledger"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCrashAndRestartLosesNothing kills Sluice (SIGKILL, so nothing is
// flushed) twice in the middle of a stream of submissions. Every Job must
// still run to completion, none may start twice, and the queue's quota is
// never exceeded at any moment, as read from the ledger and from the Jobs.
func TestCrashAndRestartLosesNothing(t *testing.T) {
	ns := "e2e-restart"
	const quota, jobs = 4, 16
	queues(t, ns, quota, "Never")

	stop := make(chan struct{})
	var violations []string
	var mu sync.Mutex
	var checker sync.WaitGroup
	checker.Add(1)
	go func() {
		defer checker.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if v := overQuota(ns, quota); v != "" {
				mu.Lock()
				violations = append(violations, v)
				mu.Unlock()
			}
		}
	}()

	for i := range jobs {
		createJob(t, jobSpec{ns: ns, name: fmt.Sprintf("w-%02d", i), queue: "q", pods: 1, gpus: 1, runFor: "3s"})
		switch i {
		case 5, 11:
			stopSluice(os.Kill)
			time.Sleep(500 * time.Millisecond)
			if err := startSluice(); err != nil {
				t.Fatalf("restart sluice: %v", err)
			}
			if err := waitWebhook(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			// A restarted process says when it is ready again: its
			// integrations list and watch every kind and read the
			// buckets, which on a machine busy with the rest of the suite
			// has taken longer than 30 s.
			if err := waitReady(90 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range jobs {
		waitComplete(t, ns, fmt.Sprintf("w-%02d", i), 3*time.Minute)
	}
	close(stop)
	checker.Wait()
	if len(violations) > 0 {
		t.Fatalf("quota exceeded %d times, first: %s", len(violations), violations[0])
	}
	// No Job was started twice. Every one ran (it completed); a crash may
	// swallow the Admitted event of the start it interrupted, since
	// Events are sent asynchronously, so the count is at most one.
	evs, err := env.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Admitted"})
	if err != nil {
		t.Fatal(err)
	}
	admitted := map[string]int32{}
	for _, e := range evs.Items {
		admitted[e.InvolvedObject.Name] += max(e.Count, 1)
	}
	for i := range jobs {
		name := fmt.Sprintf("w-%02d", i)
		if admitted[name] > 1 {
			t.Errorf("job %s admitted %d times, want once", name, admitted[name])
		}
	}
}

// overQuota describes a moment the namespace's running Jobs or its ledger
// reservations hold more GPUs than the quota, or "".
func overQuota(ns string, quota int64) string {
	ctx := context.Background()
	jobs, err := env.kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var running int64
	for _, j := range jobs.Items {
		if suspended(&j) || complete(&j) {
			continue
		}
		q := j.Spec.Template.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]
		running += q.Value() * int64(*j.Spec.Parallelism)
	}
	if running > quota {
		return fmt.Sprintf("%d GPUs in unsuspended, unfinished Jobs, quota %d", running, quota)
	}
	var reserved int64
	if kv, err := bus.OpenKV(ctx, env.js, ledger.Bucket); err == nil {
		if snap, err := ledger.Read(ctx, kv); err == nil {
			for _, h := range snap.Reservations {
				if h.ClusterQueue != ns {
					continue
				}
				for _, ps := range h.PodSets {
					reserved += int64(ps.Count)
				}
			}
		}
	}
	if reserved > quota {
		return fmt.Sprintf("%d GPUs reserved in the ledger, quota %d", reserved, quota)
	}
	return ""
}
