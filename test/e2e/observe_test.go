package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/visibility"
)

// scrape reads sluice dev's /metrics.
func scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get("http://" + env.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	return parseMetrics(t, res.Body)
}

// parseMetrics reads metrics in Prometheus's text format.
func parseMetrics(t *testing.T, r io.Reader) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return fams
}

// value is the value of the sample of a family whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestMetricsAndPendingAPI(t *testing.T) {
	ns := "e2e-observe"
	queues(t, ns, 4, "Never")
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 4, gpus: 1, runFor: "20s"})
	waitRunning(t, ns, "running", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "waiting", queue: "q", pods: 2, gpus: 1, runFor: "1s"})
	waitEvent(t, ns, "waiting", "Pending", "insufficient unused quota", 45*time.Second)

	// The pending API, by ClusterQueue and by LocalQueue.
	for _, path := range []string{"/clusterqueues/" + ns + "/pendingworkloads", "/namespaces/" + ns + "/localqueues/q/pendingworkloads"} {
		var got visibility.PendingWorkloadsSummary
		eventually(t, 10*time.Second, "pending API "+path, func() (bool, string) {
			res, err := http.Get("http://" + env.httpAddr + visibility.Prefix + path)
			if err != nil {
				return false, err.Error()
			}
			defer res.Body.Close()
			got = visibility.PendingWorkloadsSummary{}
			if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
				return false, err.Error()
			}
			return res.StatusCode == 200 && len(got.Items) == 1, fmt.Sprintf("%d %+v", res.StatusCode, got)
		})
		it := got.Items[0]
		if it.Metadata.Name != "waiting" || it.Metadata.Namespace != ns || it.JobKind != "job" || it.PositionInClusterQueue != 0 ||
			it.PositionInLocalQueue != 0 || !strings.Contains(it.Reason, "insufficient unused quota") || it.WaitingSeconds <= 0 {
			t.Errorf("%s: item %+v", path, it)
		}
	}

	// The metrics of that state.
	cq := map[string]string{"cluster_queue": ns}
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"sluice_admitted_workloads_total", cq, 1},
		{"sluice_admission_wait_time_seconds", cq, 1},
		{"sluice_pending_workloads", map[string]string{"cluster_queue": ns, "status": "inadmissible"}, 1},
		{"sluice_cluster_queue_nominal_quota", map[string]string{"cluster_queue": ns, "flavor": "a100", "resource": "nvidia.com/gpu"}, 4},
		{"sluice_cluster_queue_nominal_quota", map[string]string{"cluster_queue": ns, "flavor": "a100", "resource": "cpu"}, 64},
		{"sluice_cluster_queue_resource_reservation", map[string]string{"cluster_queue": ns, "flavor": "a100", "resource": "nvidia.com/gpu"}, 4},
		{"sluice_cluster_queue_resource_reservation", map[string]string{"cluster_queue": ns, "flavor": "a100", "resource": "cpu"}, 4},
	}
	eventually(t, 10*time.Second, "metrics", func() (bool, string) {
		fams := scrape(t)
		var wrong []string
		for _, w := range want {
			if v, ok := value(fams, w.name, w.labels); !ok || v != w.value {
				wrong = append(wrong, fmt.Sprintf("%s%v = %v (found %v), want %v", w.name, w.labels, v, ok, w.value))
			}
		}
		for _, name := range []string{"sluice_event_publish_duration_seconds", "sluice_admission_cycle_duration_seconds", "go_goroutines",
			"sluice_workqueue_depth", "sluice_workqueue_queue_duration_seconds", "sluice_workqueue_work_duration_seconds"} {
			if fams[name] == nil {
				wrong = append(wrong, name+" missing")
			}
		}
		// Both Jobs went through the Job integration's work queue.
		if v, ok := value(fams, "sluice_workqueue_adds_total", map[string]string{"name": "job"}); !ok || v < 2 {
			wrong = append(wrong, fmt.Sprintf("sluice_workqueue_adds_total{name=job} = %v (found %v), want at least 2", v, ok))
		}
		return len(wrong) == 0, strings.Join(wrong, "; ")
	})
	waitComplete(t, ns, "waiting", 60*time.Second)
}

// sluiceCLI runs the sluice binary with args against the devcluster.
func sluiceCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(env.sluiceBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.kubeconfig, "SLUICE_SERVER=http://"+env.httpAddr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sluice %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestCLI(t *testing.T) {
	ns := "e2e-cli"
	queues(t, ns, 4, "Never")
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 4, gpus: 1, runFor: "15s"})
	waitRunning(t, ns, "running", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "waiting", queue: "q", pods: 2, gpus: 1, runFor: "1s"})
	waitEvent(t, ns, "waiting", "Pending", "insufficient unused quota", 45*time.Second)

	out := sluiceCLI(t, "pending", "-n", ns, "--queue", "q")
	if !strings.Contains(out, ns+"/waiting") || !strings.Contains(out, "insufficient unused quota") || !strings.Contains(out, "(1 of 1 waiting)") {
		t.Errorf("sluice pending:\n%s", out)
	}
	var rows []struct {
		Kind, Name, Namespace string
		Admitted              int32
	}
	eventually(t, 10*time.Second, "sluice queues shows the admitted Job", func() (bool, string) {
		out := sluiceCLI(t, "queues", "-o", "json")
		rows = nil
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return false, err.Error() + "\n" + out
		}
		for _, r := range rows {
			if r.Kind == "ClusterQueue" && r.Name == ns && r.Admitted == 1 {
				return true, ""
			}
		}
		return false, out
	})

	// Stopped, the queue admits nothing: the waiting Job stays suspended
	// after the running one ends; resumed, it runs.
	if out := sluiceCLI(t, "stop", "clusterqueue", ns); !strings.Contains(out, "stopPolicy Hold") {
		t.Errorf("sluice stop: %s", out)
	}
	// The live reason comes from the pending API: pending events about one
	// workload are coalesced (one per 30 s), so the Kubernetes Event may
	// come later.
	eventually(t, 30*time.Second, "the pending API says the queue is stopped", func() (bool, string) {
		out := sluiceCLI(t, "pending", "-n", ns, "--queue", "q")
		return strings.Contains(out, "is stopped (stopPolicy Hold)"), out
	})
	waitComplete(t, ns, "running", 60*time.Second)
	if !suspended(getJob(t, ns, "waiting")) {
		t.Fatal("a stopped ClusterQueue admitted a Job")
	}
	sluiceCLI(t, "resume", "clusterqueue", ns)
	waitRunning(t, ns, "waiting", 30*time.Second)

	// The workload's story, each event with its trace id.
	var story []struct {
		Type    string `json:"type"`
		TraceID string `json:"traceId"`
	}
	out = sluiceCLI(t, "describe", "workload", ns+"/waiting", "--nats", env.nats, "-o", "json")
	if err := json.Unmarshal([]byte(out), &story); err != nil {
		t.Fatalf("describe: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, e := range story {
		seen[strings.TrimPrefix(e.Type, "dev.sluice.workload.v1.")] = true
		if len(e.TraceID) != 32 {
			t.Errorf("event %s has trace id %q", e.Type, e.TraceID)
		}
	}
	for _, want := range []string{"submitted", "pending", "admitted", "started"} {
		if !seen[want] {
			t.Errorf("describe lacks %s: %s", want, out)
		}
	}
}

// Without --server and with nothing at sluice dev's default address, the
// CLI looks for the chart's admission Service and asks the API server to
// proxy to it. (The devcluster's pods do not run, and the API server does
// not proxy to loopback addresses, so the proxy's answer here is that the
// Service has no endpoints: what is checked is that the CLI found the
// Service and went through the API server.)
func TestCLIThroughServiceProxy(t *testing.T) {
	ns := "e2e-proxy"
	pending := func() string {
		t.Helper()
		cmd := exec.Command(env.sluiceBin, "pending", "--cluster-queue", "anything", "--kubeconfig", env.kubeconfig, "--sluice-namespace", ns)
		var kept []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "SLUICE_SERVER=") {
				kept = append(kept, kv)
			}
		}
		cmd.Env = kept
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("sluice pending answered without a reachable service:\n%s", out)
		}
		return string(out)
	}
	if out := pending(); !strings.Contains(out, "no Service labelled app.kubernetes.io/name=sluice,app.kubernetes.io/component=admission in namespace "+ns) {
		t.Errorf("without the chart's Service: %s", out)
	}
	// A Service labelled like the chart's in another namespace (one a
	// tenant controls) is never asked.
	apply(t, `apiVersion: v1
kind: Namespace
metadata: {name: e2e-proxy-tenant}
---
apiVersion: v1
kind: Service
metadata:
  name: impostor
  namespace: e2e-proxy-tenant
  labels: {app.kubernetes.io/name: sluice, app.kubernetes.io/component: admission}
spec:
  ports: [{name: http, port: 8080, protocol: TCP}]
`)
	t.Cleanup(func() {
		_ = env.kube.CoreV1().Namespaces().Delete(context.Background(), "e2e-proxy-tenant", metav1.DeleteOptions{})
	})
	if out := pending(); strings.Contains(out, "impostor") || !strings.Contains(out, "no Service labelled") {
		t.Errorf("with a look-alike Service in a tenant's namespace: %s", out)
	}
	apply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Service
metadata:
  name: sluice-admission
  namespace: %[1]s
  labels: {app.kubernetes.io/name: sluice, app.kubernetes.io/component: admission}
spec:
  ports: [{name: http, port: 8080, protocol: TCP}]
`, ns))
	t.Cleanup(func() {
		_ = env.kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	out := pending()
	t.Logf("through the proxy: %s", out)
	if !strings.Contains(out, "service "+ns+"/sluice-admission through the API server's proxy") {
		t.Errorf("with the chart's Service: %s", out)
	}
}
