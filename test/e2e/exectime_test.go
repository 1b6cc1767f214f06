package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

func TestMaxExecutionTime(t *testing.T) {
	ns := "e2e-maxexec"
	queues(t, ns, 8, "Never")

	// Kueue's label, as Kueue's users set it: a Job that runs longer is
	// stopped after 6 s of running and deactivated; one that ends sooner
	// completes.
	kueueLimit := func(s string) map[string]string { return map[string]string{v1beta1.KueueMaxExecTimeLabel: s} }
	createJob(t, jobSpec{ns: ns, name: "long", queue: "q", pods: 1, gpus: 1, runFor: "10m", labels: kueueLimit("6")})
	createJob(t, jobSpec{ns: ns, name: "short", queue: "q", pods: 1, gpus: 1, runFor: "2s", labels: kueueLimit("120")})
	waitRunning(t, ns, "long", 30*time.Second)
	waitEvent(t, ns, "long", "Evicted", "evicted: DeactivatedDueToMaximumExecutionTimeExceeded: exceeding the maximum execution time (6s)", 60*time.Second)
	waitEvent(t, ns, "long", "Pending", "deactivated: exceeding the maximum execution time", 40*time.Second)
	if !suspended(getJob(t, ns, "long")) {
		t.Errorf("a Job past its maximum execution time runs")
	}
	waitComplete(t, ns, "short", 60*time.Second)

	// A value that is not a whole number of seconds is refused on create,
	// with the label named.
	_, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(),
		jobOf(jobSpec{ns: ns, name: "bad", queue: "q", pods: 1, gpus: 1, runFor: "1s", labels: map[string]string{v1beta1.MaxExecTimeLabel: "1h"}}),
		metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), v1beta1.MaxExecTimeLabel) {
		t.Errorf("create with %s=1h: error %v, want a refusal naming the label", v1beta1.MaxExecTimeLabel, err)
	}
}

// TestReactivateWorkload: a Job deactivated past its maximum execution
// time is queued and runs again after `sluice resume workload`, its time
// counted from nothing, and is deactivated again when that runs out.
func TestReactivateWorkload(t *testing.T) {
	ns := "e2e-reactivate"
	queues(t, ns, 8, "Never")
	createJob(t, jobSpec{ns: ns, name: "long", queue: "q", pods: 1, gpus: 1, runFor: "10m", labels: map[string]string{v1beta1.MaxExecTimeLabel: "4"}})
	waitRunning(t, ns, "long", 30*time.Second)
	waitEvent(t, ns, "long", "Pending", "deactivated: exceeding the maximum execution time", 60*time.Second)
	if !suspended(getJob(t, ns, "long")) {
		t.Fatal("a Job past its maximum execution time runs")
	}
	out, err := exec.Command(env.sluiceBin, "resume", "workload", ns+"/long", "--kubeconfig", env.kubeconfig).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sluice.dev/reactivate=") {
		t.Fatalf("sluice resume workload: %v\n%s", err, out)
	}
	waitEvent(t, ns, "long", "Reactivated", "reactivated (sluice.dev/reactivate=", 30*time.Second)
	waitRunning(t, ns, "long", 30*time.Second)
	// Its new run is bounded as the first was.
	eventually(t, 60*time.Second, "long deactivated again", func() (bool, string) {
		j := getJob(t, ns, "long")
		return suspended(j), "running"
	})
}

// TestDeactivateWorkload: `sluice stop workload` deactivates a running
// Job (evicted, suspended, not admitted again, with its reason), and
// `sluice resume workload` queues it again.
func TestDeactivateWorkload(t *testing.T) {
	ns := "e2e-deactivate"
	queues(t, ns, 8, "Never")
	createJob(t, jobSpec{ns: ns, name: "j", queue: "q", pods: 1, gpus: 1, runFor: "10m"})
	waitRunning(t, ns, "j", 30*time.Second)
	sluice := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(env.sluiceBin, append(args, "--kubeconfig", env.kubeconfig)...).CombinedOutput()
		if err != nil {
			t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sluice("stop", "workload", ns+"/j")
	waitEvent(t, ns, "j", "Evicted", "Deactivated", 30*time.Second)
	waitEvent(t, ns, "j", "Pending", "deactivated: by its user (sluice.dev/active: false)", 30*time.Second)
	time.Sleep(2 * time.Second)
	if !suspended(getJob(t, ns, "j")) {
		t.Fatal("a deactivated Job runs")
	}
	if _, ok := reservations(t)["job/"+ns+"/j"]; ok {
		t.Fatal("a deactivated Job holds a reservation")
	}
	sluice("resume", "workload", ns+"/j")
	waitRunning(t, ns, "j", 30*time.Second)
}
