package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	fams, err := scrapeAt(env.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// scrapeAt reads the /metrics of the process serving them at addr.
func scrapeAt(addr string) (map[string]*dto.MetricFamily, error) {
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("parse metrics of %s: %w", addr, err)
	}
	return fams, nil
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
// CLI asks the cluster's API server, which serves the pending API as an
// aggregated API, as the kubeconfig's user: the admin reads any queue, a
// tenant only what RBAC grants it, and is told why not.
func TestCLIThroughTheAPIServer(t *testing.T) {
	registerVisibility(t)
	ns, other := "e2e-cli-api", "e2e-cli-api-other"
	oneWaiting(t, ns, other)

	pending := func(kubeconfig string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(env.sluiceBin, append([]string{"pending", "--kubeconfig", kubeconfig}, args...)...)
		var kept []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "SLUICE_SERVER=") {
				kept = append(kept, kv)
			}
		}
		cmd.Env = kept
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	eventually(t, 20*time.Second, "the admin's sluice pending", func() (bool, string) {
		out, err := pending(env.kubeconfig, "-n", ns, "--queue", "q")
		return err == nil && strings.Contains(out, ns+"/waiting"), out
	})

	// A tenant of ns, with a kubeconfig holding its token only.
	token := tenant(t, ns)
	kc := filepath.Join(t.TempDir(), "tenant.kubeconfig")
	ca := env.cfg.CAData
	if len(ca) == 0 {
		b, err := os.ReadFile(env.cfg.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		ca = b
	}
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: tenant, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: tenant}}]
current-context: c
`, env.cfg.Host, base64.StdEncoding.EncodeToString(ca), token)
	if err := os.WriteFile(kc, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := pending(kc, "-n", ns, "--queue", "q"); err != nil || !strings.Contains(out, ns+"/waiting") {
		t.Errorf("the tenant reads its own LocalQueue: %v\n%s", err, out)
	}
	out, err := pending(kc, "-n", other, "--queue", "q")
	if err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("the tenant reads another namespace's LocalQueue: %v\n%s", err, out)
	}
	out, err = pending(kc, "--cluster-queue", ns)
	if err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("the tenant reads a ClusterQueue: %v\n%s", err, out)
	}
}

// TestLocalQueueAndCohortMetrics: Kueue's LocalQueue and cohort metrics,
// scraped with their values, for a ClusterQueue in a cohort under a root
// cohort.
func TestLocalQueueAndCohortMetrics(t *testing.T) {
	ns, cohort, root := "e2e-lqmetrics", "e2e-lqm-team", "e2e-lqm-org"
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec:
  nodeLabels: {instance-type: a100}
---
apiVersion: sluice.dev/v1beta1
kind: Cohort
metadata: {name: %[2]s}
spec: {parentName: %[3]s}
---
apiVersion: sluice.dev/v1beta1
kind: Cohort
metadata: {name: %[3]s}
---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: %[1]s}
spec: {clusterQueue: %[1]s}
`, ns, cohort, root))
	cohortQueue(t, ns, cohort, 4)
	watchQuota(t)
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = env.kube.BatchV1().Jobs(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
	})
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 4, gpus: 1, runFor: "120s"})
	waitRunning(t, ns, "running", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "waiting", queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	waitEvent(t, ns, "waiting", "Pending", "insufficient unused quota", 45*time.Second)

	lq := map[string]string{"name": "q", "namespace": ns}
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	gpu := []string{"flavor", "a100", "resource", "nvidia.com/gpu"}
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"sluice_local_queue_admitted_workloads_total", lq, 1},
		{"sluice_local_queue_quota_reserved_workloads_total", lq, 1},
		{"sluice_local_queue_quota_reserved_wait_time_seconds", lq, 1},
		{"sluice_quota_reserved_workloads_total", map[string]string{"cluster_queue": ns}, 1},
		{"sluice_local_queue_status", with(lq, "active", "True"), 1},
		{"sluice_local_queue_status", with(lq, "active", "False"), 0},
		{"sluice_cluster_queue_status", map[string]string{"cluster_queue": ns, "status": "active"}, 1},
		{"sluice_cluster_queue_status", map[string]string{"cluster_queue": ns, "status": "pending"}, 0},
		{"sluice_local_queue_admission_wait_time_seconds", lq, 1},
		{"sluice_local_queue_pending_workloads", with(lq, "status", "inadmissible"), 1},
		{"sluice_local_queue_pending_workloads", with(lq, "status", "active"), 0},
		{"sluice_local_queue_reserving_active_workloads", lq, 1},
		{"sluice_local_queue_admitted_active_workloads", lq, 1},
		{"sluice_local_queue_resource_reservation", with(lq, gpu...), 4},
		{"sluice_local_queue_resource_usage", with(lq, gpu...), 4},
		{"sluice_local_queue_resource_usage", with(lq, "flavor", "a100", "resource", "cpu"), 4},
		{"sluice_cohort_subtree_quota", with(map[string]string{"cohort": cohort}, gpu...), 4},
		{"sluice_cohort_subtree_quota", with(map[string]string{"cohort": root}, gpu...), 4},
		{"sluice_cohort_subtree_resource_reservations", with(map[string]string{"cohort": root}, gpu...), 4},
		{"sluice_cohort_subtree_admitted_active_workloads", map[string]string{"cohort": cohort}, 1},
		{"sluice_cohort_subtree_admitted_workloads_total", map[string]string{"cohort": root}, 1},
		{"sluice_cohort_info", map[string]string{"cohort": cohort, "parent_cohort": root, "root_cohort": root}, 1},
		{"sluice_cohort_info", map[string]string{"cohort": root, "parent_cohort": "", "root_cohort": root}, 1},
		{"sluice_cluster_queue_info", map[string]string{"cluster_queue": ns, "parent_cohort": cohort, "root_cohort": root}, 1},
	}
	eventually(t, 15*time.Second, "LocalQueue and cohort metrics", func() (bool, string) {
		fams := scrape(t)
		var wrong []string
		for _, w := range want {
			if v, ok := value(fams, w.name, w.labels); !ok || v != w.value {
				wrong = append(wrong, fmt.Sprintf("%s%v = %v (found %v), want %v", w.name, w.labels, v, ok, w.value))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, "; ")
	})
}
