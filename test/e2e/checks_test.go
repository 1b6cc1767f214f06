package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/events"
)

// TestAdmissionChecks runs an admission check controller (package checks)
// beside `sluice dev`: a Job whose ClusterQueue names the check holds its
// quota suspended until the controller answers; Ready starts it, Retry
// gives the quota up and tries again, Rejected deactivates it.
func TestAdmissionChecks(t *testing.T) {
	ns := "e2e-checks"
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: AdmissionCheck
metadata: {name: %[1]s-budget}
spec: {controllerName: e2e.sluice.dev/budget}
---
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec:
  nodeLabels: {instance-type: a100}
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {}
  admissionChecksStrategy:
    admissionChecks: [{name: %[1]s-budget, onFlavors: [a100]}]
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: %[1]s}
spec: {clusterQueue: %[1]s}
`, ns))
	watchQuota(t)

	// Before the controller runs, the check is not active: the queue
	// admits nothing. The Job may first wait for its LocalQueue to reach
	// admission, and a workload's next pending reason is announced no
	// sooner than the pending interval (30 s) after the one before.
	createJob(t, jobSpec{ns: ns, name: "approved", queue: "q", pods: 1, gpus: 1, runFor: "3s"})
	waitEvent(t, ns, "approved", "Pending", "AdmissionCheck "+ns+"-budget is not active", 60*time.Second)

	var mu sync.Mutex
	tries := map[string]int{}
	var held []string // jobs found holding quota while asked
	decide := checks.DeciderFunc(func(ctx context.Context, r checks.Request) (checks.Answer, error) {
		mu.Lock()
		tries[r.Workload.Name]++
		n := tries[r.Workload.Name]
		mu.Unlock()
		if _, ok := reservations(t)["job/"+ns+"/"+r.Workload.Name]; ok {
			mu.Lock()
			held = append(held, r.Workload.Name)
			mu.Unlock()
		}
		if j := getJob(t, ns, r.Workload.Name); !suspended(j) {
			return checks.Answer{}, fmt.Errorf("%s runs before its check answered", r.Workload.Name)
		}
		switch {
		case r.Workload.Name == "denied":
			return checks.Answer{State: events.CheckRejected, Message: "over budget"}, nil
		case r.Workload.Name == "retried" && n == 1:
			return checks.Answer{State: events.CheckRetry, Message: "budget resets soon", RequeueAfter: 3 * time.Second}, nil
		}
		return checks.Answer{State: events.CheckReady, Message: "within budget"}, nil
	})
	ctl, err := checks.New("e2e.sluice.dev/budget", env.js, env.dyn, decide,
		checks.WithLogger(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("check controller: %v", err)
		}
	})

	waitCheckActive(t, ns+"-budget", 20*time.Second)
	createJob(t, jobSpec{ns: ns, name: "retried", queue: "q", pods: 1, gpus: 1, runFor: "3s"})
	createJob(t, jobSpec{ns: ns, name: "denied", queue: "q", pods: 1, gpus: 1, runFor: "3s"})

	waitRunning(t, ns, "approved", 60*time.Second)
	// While its check had not answered, its quota was held for it, and
	// the Job said so (Kueue's QuotaReserved).
	waitEvent(t, ns, "approved", "QuotaReserved", "waiting for admission checks "+ns+"-budget", 20*time.Second)
	waitEvent(t, ns, "retried", "Evicted", "evicted: AdmissionCheck", 60*time.Second)
	waitRunning(t, ns, "retried", 60*time.Second)
	waitEvent(t, ns, "denied", "Pending", "deactivated: admission check "+ns+"-budget rejected the workload: over budget", 60*time.Second)
	waitComplete(t, ns, "approved", 60*time.Second)
	waitComplete(t, ns, "retried", 60*time.Second)
	if !suspended(getJob(t, ns, "denied")) {
		t.Error("the rejected Job runs")
	}
	eventually(t, 20*time.Second, "the rejected Job's quota released", func() (bool, string) {
		_, ok := reservations(t)["job/"+ns+"/denied"]
		return !ok, "still held"
	})
	mu.Lock()
	defer mu.Unlock()
	if tries["retried"] != 2 || tries["approved"] != 1 || tries["denied"] != 1 {
		t.Errorf("checks asked %v; want approved 1, retried 2, denied 1", tries)
	}
	if len(held) != 4 {
		t.Errorf("jobs holding quota when asked: %v; want every ask (4)", held)
	}
}
