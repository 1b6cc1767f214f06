package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natsconn"
	"github.com/sluice-dev/sluice/loadtest/baseline"
	"github.com/sluice-dev/sluice/test/chart"
)

// The release TestHelmInstall installs, as the README's commands do.
const (
	helmRelease   = "sluice"
	helmNamespace = "sluice-system"
	// realNode is the devcluster's real node, and the label and taint
	// (key) it carries.
	realNode      = "realnode-0"
	realNodeLabel = "sluice.dev/real-node"
)

// helmCluster is a devcluster with a real node and Sluice installed on it
// by helm.
type helmCluster struct {
	t          *testing.T
	dir        string
	kubeconfig string
	kube       *kubernetes.Clientset
	dyn        dynamic.Interface
	helm       string
	tag        string
}

// TestHelmInstall installs Sluice as a platform team would: images built
// without Docker and imported into a real node's containerd, `helm
// install` of charts/sluice with its defaults (the NATS server inside the
// release, each service its own user over TLS), and only what the
// devcluster needs on top (charts/examples/devcluster.yaml). Then Jobs
// through the webhook's Service, one in a real container, the Job
// integration scaled out, two admission replicas sharing the trees and
// killed under load, an upgrade and an uninstall, and every pod's log read
// back.
func TestHelmInstall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root (containerd, the bridge, iptables)")
	}
	h := startHelmCluster(t)

	start := time.Now()
	h.run("helm", "install", helmRelease, chart.Dir(), "--namespace", helmNamespace, "--create-namespace",
		"-f", filepath.Join(root(), "charts", "examples", "devcluster.yaml"),
		"--set", "watcher.statusInterval=2s", "--wait", "--timeout", "8m")
	t.Logf("helm install --wait: %s", time.Since(start).Round(time.Second))
	t.Cleanup(func() {
		if t.Failed() {
			h.dumpLogs()
		}
	})
	h.everythingAvailable()

	// A Job on the kwok nodes, through the webhook's Service.
	h.apply(helmQueues)
	checker := watchQuotaOn(t, h.kube, h.dyn)
	ns := "helm-e2e"
	h.createJob(ns, "first", "gpus", 1, "2s")
	h.waitComplete(ns, "first", 2*time.Minute)

	// A Job whose pod runs in a container on the real node.
	real := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "real", Namespace: ns, Labels: map[string]string{"sluice.dev/queue-name": "real"}},
		Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "work", Image: "sluice-workload:" + h.tag, ImagePullPolicy: corev1.PullNever,
					Args: []string{"-run-for=2s"},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")}}}},
			}},
		},
	}
	if _, err := h.kube.BatchV1().Jobs(ns).Create(context.Background(), real, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the real Job: %v", err)
	}
	h.waitComplete(ns, "real", 3*time.Minute)
	pods, err := h.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=real"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the real Job: %v, %v", pods, err)
	}
	if p := pods.Items[0]; p.Spec.NodeName != realNode {
		t.Errorf("the real Job's pod ran on %s, want %s", p.Spec.NodeName, realNode)
	}
	if log := h.podLog(ns, pods.Items[0].Name, ""); !strings.Contains(log, "workload: done") {
		t.Errorf("the real Job's container log: %q, want it to say it is done", log)
	}

	// Both Jobs as Workloads of the chart's aggregated API, as the
	// cluster's admin sees them with kubectl.
	eventually(t, 60*time.Second, "kubectl get workloads through the chart's APIService", func() (bool, string) {
		cmd := exec.Command(filepath.Join(root(), "bin", "devcluster"), "kubectl", "--dir", h.dir, "get", "workloads", "-n", ns)
		out, err := cmd.CombinedOutput()
		ok := err == nil && regexp.MustCompile(`(?m)^job\.first\s+gpus\s+Finished\s`).Match(out) &&
			regexp.MustCompile(`(?m)^job\.real\s+real\s+Finished\s`).Match(out)
		return ok, fmt.Sprintf("%v\n%s", err, out)
	})

	// Three replicas of the Job integration share the shards; a Job
	// created after is started exactly once.
	h.scale("integration-job", 3)
	js := h.natsAs("integration")
	eventually(t, 90*time.Second, "job shards split among three replicas", func() (bool, string) {
		holders := shardHolders(t, js, "job")
		return len(holders) == 3, fmt.Sprint(holders)
	})
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("scaled-%d", i)
		h.createJob(ns, name, "gpus", 1, "1s")
		names = append(names, name)
	}
	for _, n := range names {
		h.waitComplete(ns, n, 2*time.Minute)
	}

	// Two admission replicas split the cohort trees (here the two lone
	// ClusterQueues), one each; the load below runs on both.
	h.scale("admission", 2)
	eventually(t, 90*time.Second, "cohort trees split between two admission replicas", func() (bool, string) {
		holders := shardHolders(t, js, "admission")
		return len(holders) == 2, fmt.Sprint(holders)
	})

	// Admission's pods deleted under load: nothing lost, no quota broken.
	var load []string
	for i := range 20 {
		name := fmt.Sprintf("load-%02d", i)
		h.createJob(ns, name, "gpus", 1, "2s")
		load = append(load, name)
		if i == 8 {
			h.deletePods("admission")
		}
	}
	for _, n := range load {
		h.waitComplete(ns, n, 4*time.Minute)
	}

	// An upgrade with a changed value rolls every service's pods, with
	// Jobs on the way.
	var upgraded []string
	for i := range 6 {
		name := fmt.Sprintf("upgrade-%d", i)
		h.createJob(ns, name, "gpus", 1, "3s")
		upgraded = append(upgraded, name)
	}
	before := h.podUIDs()
	h.run("helm", "upgrade", helmRelease, chart.Dir(), "--namespace", helmNamespace, "--reuse-values",
		"--set", "logLevel=debug", "--wait", "--timeout", "8m")
	after := h.podUIDs()
	for dep, uids := range before {
		if len(slices.DeleteFunc(slices.Clone(uids), func(u string) bool { return !slices.Contains(after[dep], u) })) != 0 {
			t.Errorf("Deployment %s kept pods %v across the upgrade that changed its arguments", dep, uids)
		}
	}
	for _, n := range upgraded {
		h.waitComplete(ns, n, 4*time.Minute)
	}
	all := slices.Concat([]string{"first", "real"}, names, load, upgraded)
	h.startedOnce(ns, all)
	h.auditEvents(ns)
	checker()
	h.logsClean()

	// What each ServiceAccount may read, asked by a pod that runs as it
	// with the token the kubelet mounts (not one the test mints).
	h.rbacAsMounted(map[string][]string{
		"quota":           {"/apis/batch/v1/jobs=403", "/api/v1/namespaces/" + helmNamespace + "/secrets=403"},
		"admission":       {"/apis/batch/v1/jobs=403", "/api/v1/secrets=403"},
		"watcher":         {"/apis/sluice.dev/v1beta1/clusterqueues=200", "/api/v1/secrets=403", "/apis/batch/v1/jobs=403", "/api/v1/nodes=200"},
		"integration-job": {"/apis/batch/v1/jobs=200", "/api/v1/secrets=403", "/api/v1/pods=200", "/api/v1/nodes=403"},
	})

	// Uninstall: nothing of the release is left but the CRDs.
	h.run("helm", "uninstall", helmRelease, "--namespace", helmNamespace, "--wait", "--timeout", "3m")
	h.nothingLeft()
}

// helmQueues: one ClusterQueue on the kwok nodes (GPUs) and one on the
// real node, whose flavor lets its pods onto the tainted node.
const helmQueues = `apiVersion: v1
kind: Namespace
metadata: {name: helm-e2e}
---
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec:
  nodeLabels: {instance-type: a100}
---
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: real-node}
spec:
  nodeLabels: {sluice.dev/real-node: "true"}
  tolerations: [{key: sluice.dev/real-node, operator: Exists, effect: NoSchedule}]
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: helm-gpus}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: nvidia.com/gpu, nominalQuota: 4}
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: helm-real}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: real-node
      resources:
      - {name: cpu, nominalQuota: 1}
      - {name: memory, nominalQuota: 1Gi}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: gpus, namespace: helm-e2e}
spec: {clusterQueue: helm-gpus}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: real, namespace: helm-e2e}
spec: {clusterQueue: helm-real}
`

// startHelmCluster builds the images as `make images` does and brings up
// a devcluster with a real node that has them; it goes when the test
// ends.
func startHelmCluster(t *testing.T) *helmCluster {
	t.Helper()
	top := root()
	helm, err := chart.Helm()
	if err != nil {
		t.Fatal(err)
	}
	h := &helmCluster{t: t, dir: t.TempDir(), helm: helm, tag: appVersion(t)}
	images := filepath.Join(top, "bin", "images")
	start := time.Now()
	if err := sh(top, "go", "run", "./hack/images", "-out", images, "-sluice-tag", h.tag); err != nil {
		t.Fatalf("build the images: %v", err)
	}
	t.Logf("images built in %s", time.Since(start).Round(time.Second))
	dc := filepath.Join(top, "bin", "devcluster")
	start = time.Now()
	if err := sh(top, dc, "up", "--real-node", "--images", images, "--dir", h.dir); err != nil {
		_ = sh(top, dc, "down", "--dir", h.dir)
		t.Fatalf("devcluster up --real-node: %v", err)
	}
	t.Logf("devcluster with its real node up in %s", time.Since(start).Round(time.Second))
	t.Cleanup(func() { _ = sh(top, dc, "down", "--dir", h.dir) })
	h.kubeconfig = filepath.Join(h.dir, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", h.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	h.kube = kubernetes.NewForConfigOrDie(cfg)
	h.dyn = dynamic.NewForConfigOrDie(cfg)
	return h
}

// appVersion is the chart's appVersion, the sluice image's default tag.
func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chart.Dir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no appVersion in Chart.yaml")
	}
	return string(m[1])
}

// run runs helm (or kubectl, through the devcluster) on the cluster.
func (h *helmCluster) run(tool string, args ...string) string {
	h.t.Helper()
	var cmd *exec.Cmd
	switch tool {
	case "helm":
		cmd = exec.Command(h.helm, append([]string{"--kubeconfig", h.kubeconfig}, args...)...)
	case "kubectl":
		cmd = exec.Command(filepath.Join(root(), "bin", "devcluster"), append([]string{"kubectl", "--dir", h.dir}, args...)...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		h.t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func (h *helmCluster) apply(docs string) {
	h.t.Helper()
	applyTo(h.t, h.dyn, docs)
}

// everythingAvailable: every Deployment of the release is Available, the
// NATS server ready, and every pod of the release on the real node.
func (h *helmCluster) everythingAvailable() {
	h.t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + helmRelease}
	deps, err := h.kube.AppsV1().Deployments(helmNamespace).List(ctx, sel)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(deps.Items) < 6 {
		h.t.Errorf("%d Deployments, want every service's", len(deps.Items))
	}
	for _, d := range deps.Items {
		available := false
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
				available = true
			}
		}
		if !available || d.Status.ReadyReplicas != *d.Spec.Replicas {
			h.t.Errorf("Deployment %s: available %t, %d/%d ready", d.Name, available, d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
	}
	sts, err := h.kube.AppsV1().StatefulSets(helmNamespace).Get(ctx, helmRelease+"-nats", metav1.GetOptions{})
	if err != nil || sts.Status.ReadyReplicas != *sts.Spec.Replicas {
		h.t.Errorf("NATS StatefulSet: %v, %v", sts.Status, err)
	}
	pods, err := h.kube.CoreV1().Pods(helmNamespace).List(ctx, sel)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != realNode {
			h.t.Errorf("pod %s on node %q, want %s", p.Name, p.Spec.NodeName, realNode)
		}
	}
}

// createJob creates a Job through the webhook's Service, which must
// suspend it.
func (h *helmCluster) createJob(ns, name, queue string, gpus int64, runFor string) {
	h.t.Helper()
	j := jobOf(jobSpec{ns: ns, name: name, queue: queue, pods: 1, gpus: gpus, runFor: runFor})
	got, err := h.kube.BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create job %s/%s: %v", ns, name, err)
	}
	if !suspended(got) {
		h.t.Fatalf("job %s/%s not suspended on create: the webhook behind its Service did not answer", ns, name)
	}
}

func (h *helmCluster) waitComplete(ns, name string, within time.Duration) {
	h.t.Helper()
	eventually(h.t, within, "job "+ns+"/"+name+" complete", func() (bool, string) {
		j, err := h.kube.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return complete(j), fmt.Sprintf("suspend %v, status %+v", j.Spec.Suspend, j.Status.Conditions)
	})
}

// scale sets a Deployment of the release to n replicas and waits until
// all are ready, as `kubectl scale` does.
func (h *helmCluster) scale(component string, n int32) {
	h.t.Helper()
	name := helmRelease + "-" + component
	h.run("kubectl", "-n", helmNamespace, "scale", "deployment/"+name, fmt.Sprintf("--replicas=%d", n))
	eventually(h.t, 3*time.Minute, name+" at "+fmt.Sprint(n)+" ready replicas", func() (bool, string) {
		d, err := h.kube.AppsV1().Deployments(helmNamespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == n, fmt.Sprintf("%d ready", d.Status.ReadyReplicas)
	})
}

// deletePods deletes a component's pods, as `kubectl delete pod` does.
func (h *helmCluster) deletePods(component string) {
	h.t.Helper()
	if err := h.kube.CoreV1().Pods(helmNamespace).DeleteCollection(context.Background(), metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + helmRelease + ",app.kubernetes.io/component=" + component}); err != nil {
		h.t.Fatalf("delete the %s pods: %v", component, err)
	}
}

// podUIDs lists each Deployment's pods (by component).
func (h *helmCluster) podUIDs() map[string][]string {
	h.t.Helper()
	pods, err := h.kube.CoreV1().Pods(helmNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + helmRelease})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range pods.Items {
		c := p.Labels["app.kubernetes.io/component"]
		if c == "setup" || c == "nats" || p.DeletionTimestamp != nil {
			continue
		}
		out[c] = append(out[c], string(p.UID))
	}
	return out
}

// natsAs connects to the release's NATS server from the host (the real
// node's pods are reachable on its bridge) as one of the release's users,
// over TLS verified with the release's CA for the name the services use.
func (h *helmCluster) natsAs(user string) jetstream.JetStream {
	h.t.Helper()
	nc := h.natsConn(user)
	js, err := jetstream.New(nc)
	if err != nil {
		h.t.Fatal(err)
	}
	return js
}

func (h *helmCluster) natsConn(user string) *nats.Conn {
	h.t.Helper()
	ctx := context.Background()
	secrets := h.kube.CoreV1().Secrets(helmNamespace)
	users, err := secrets.Get(ctx, helmRelease+"-nats-users", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	certs, err := secrets.Get(ctx, helmRelease+"-nats-tls", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certs.Data["ca.crt"])
	pod, err := h.kube.CoreV1().Pods(helmNamespace).Get(ctx, helmRelease+"-nats-0", metav1.GetOptions{})
	if err != nil || pod.Status.PodIP == "" {
		h.t.Fatalf("NATS pod: %v (IP %q)", err, pod.Status.PodIP)
	}
	nc, err := nats.Connect("tls://"+pod.Status.PodIP+":4222",
		nats.Secure(&tls.Config{RootCAs: pool, ServerName: helmRelease + "-nats." + helmNamespace + ".svc", MinVersion: tls.VersionTLS12}),
		nats.UserInfo(user, string(users.Data[user])), nats.Name("sluice-"+user),
		// The replies a user may receive: its own inbox prefix only.
		nats.CustomInboxPrefix(natsconn.InboxPrefix("sluice-"+user)))
	if err != nil {
		h.t.Fatalf("connect to the release's NATS as %s: %v", user, err)
	}
	h.t.Cleanup(nc.Close)
	return nc
}

// rbacAsMounted runs, for each component, a pod as its ServiceAccount on
// the real node whose GETs through the kubernetes Service must answer as
// listed (PATH=STATUS), and deletes the pods after.
func (h *helmCluster) rbacAsMounted(gets map[string][]string) {
	h.t.Helper()
	ctx := context.Background()
	pods := h.kube.CoreV1().Pods(helmNamespace)
	for component, want := range gets {
		args := []string{"-run-for=0s"}
		for _, w := range want {
			args = append(args, "-api-get="+w)
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "rbac-" + component, Namespace: helmNamespace},
			Spec: corev1.PodSpec{
				ServiceAccountName:           helmRelease + "-" + component,
				AutomountServiceAccountToken: ptr.To(true),
				RestartPolicy:                corev1.RestartPolicyNever,
				NodeSelector:                 map[string]string{realNodeLabel: "true"},
				Tolerations:                  []corev1.Toleration{{Key: realNodeLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Containers:                   []corev1.Container{{Name: "check", Image: "sluice-workload:" + h.tag, ImagePullPolicy: corev1.PullNever, Args: args}},
			},
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			h.t.Fatalf("create the RBAC check pod of %s: %v", component, err)
		}
	}
	for component := range gets {
		name := "rbac-" + component
		eventually(h.t, 2*time.Minute, name+" ended", func() (bool, string) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, string(p.Status.Phase)
		})
		p, _ := pods.Get(ctx, name, metav1.GetOptions{})
		log := h.podLog(helmNamespace, name, "")
		if p.Status.Phase != corev1.PodSucceeded {
			h.t.Errorf("ServiceAccount %s-%s, with its mounted token: %s", helmRelease, component, strings.TrimSpace(log))
		} else if n := strings.Count(log, "as wanted"); n != len(gets[component]) {
			h.t.Errorf("ServiceAccount %s-%s: %d of %d answers checked:\n%s", helmRelease, component, n, len(gets[component]), log)
		}
		_ = pods.Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// startedOnce: each Job has exactly one started event, read as the reader
// user reads the stream (no consumer).
func (h *helmCluster) startedOnce(ns string, names []string) {
	h.t.Helper()
	count := map[string]int{}
	h.readEvents(events.SubjectFilter("workload", "started", "job", ns), func(subject string, _ events.Envelope) {
		parts := strings.Split(subject, ".")
		count[parts[len(parts)-1]]++
	})
	exactlyOnce(h.t, count, names)
}

// auditEvents checks the order of every workload's events in ns, as an
// outside subscriber would see them.
func (h *helmCluster) auditEvents(ns string) {
	h.t.Helper()
	var records []baseline.Record
	h.readEvents("sluice.workload.>", func(_ string, env events.Envelope) {
		var refs struct {
			Workload  *events.WorkloadRef
			Admission string
		}
		if json.Unmarshal(env.Data, &refs) != nil || refs.Workload == nil || refs.Workload.Namespace != ns {
			return
		}
		parts := strings.Split(strings.TrimPrefix(env.Type, events.TypePrefix), ".")
		if len(parts) != 3 || parts[0] != "workload" {
			return
		}
		transition := parts[2]
		records = append(records, baseline.Record{Workload: refs.Workload.Kind + "/" + ns + "/" + refs.Workload.Name,
			Transition: transition, Time: env.Time, Admission: refs.Admission})
	})
	if len(records) == 0 {
		h.t.Fatal("no workload events read")
	}
	for _, v := range baseline.Audit(records) {
		h.t.Errorf("event order: %s", v)
	}
}

func (h *helmCluster) readEvents(filter string, fn func(subject string, env events.Envelope)) {
	h.t.Helper()
	nc := h.natsConn("reader")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := bus.Page(ctx, nc, bus.StreamEvents, filter, 1, func(s bus.Stored) error {
		env, err := events.DecodeParts(s.Subject, s.Header, s.Data)
		if err != nil {
			return fmt.Errorf("event %d (%s): %w", s.Sequence, s.Subject, err)
		}
		fn(s.Subject, env)
		return nil
	}); err != nil {
		h.t.Fatalf("read the events as reader: %v", err)
	}
}

// podLog is a container's log, read through the API server from the
// kubelet.
func (h *helmCluster) podLog(ns, pod, container string) string {
	h.t.Helper()
	opts := &corev1.PodLogOptions{}
	if container != "" {
		opts.Container = container
	}
	b, err := h.kube.CoreV1().Pods(ns).GetLogs(pod, opts).DoRaw(context.Background())
	if err != nil {
		h.t.Errorf("logs of %s/%s %s: %v", ns, pod, container, err)
	}
	return string(b)
}

// logsClean: no pod of the release logged a refusal by the API server or
// a panic.
func (h *helmCluster) logsClean() {
	h.t.Helper()
	pods, err := h.kube.CoreV1().Pods(helmNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	read := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue // replaced by the upgrade; its log may be gone
		}
		for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
			log := h.podLog(helmNamespace, p.Name, c.Name)
			read++
			for _, bad := range []string{"forbidden", "panic"} {
				if strings.Contains(strings.ToLower(log), bad) {
					h.t.Errorf("pod %s, container %s logged %q:\n%s", p.Name, c.Name, bad, tail(log, 20))
				}
			}
		}
	}
	if read < 8 {
		h.t.Errorf("read %d containers' logs, want every service's", read)
	}
}

// dumpLogs logs the end of every pod's log, for a failed test.
func (h *helmCluster) dumpLogs() {
	pods, err := h.kube.CoreV1().Pods(helmNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
			b, _ := h.kube.CoreV1().Pods(helmNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(context.Background())
			h.t.Logf("pod %s (%s) container %s:\n%s", p.Name, p.Status.Phase, c.Name, tail(string(b), 15))
		}
	}
}

// nothingLeft: after uninstall, no object of the release remains, in its
// namespace or the cluster's, but the CRDs.
func (h *helmCluster) nothingLeft() {
	h.t.Helper()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + helmRelease}
	gone := func(gvr schema.GroupVersionResource, namespaced bool) (bool, string) {
		var list interface{ UnstructuredContent() map[string]any }
		var err error
		if namespaced {
			list, err = h.dyn.Resource(gvr).Namespace(helmNamespace).List(context.Background(), sel)
		} else {
			list, err = h.dyn.Resource(gvr).List(context.Background(), sel)
		}
		if err != nil {
			return false, err.Error()
		}
		items, _ := list.UnstructuredContent()["items"].([]any)
		var left []string
		for _, it := range items {
			md, _ := it.(map[string]any)["metadata"].(map[string]any)
			left = append(left, fmt.Sprint(md["name"]))
		}
		return len(left) == 0, gvr.Resource + ": " + strings.Join(left, ", ")
	}
	for _, r := range []struct {
		gvr        schema.GroupVersionResource
		namespaced bool
	}{
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, true},
		{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, true},
		{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, true},
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, true},
		{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, true},
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, true},
		{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, true},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false},
		{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}, false},
		{schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}, false},
	} {
		eventually(h.t, 2*time.Minute, "no "+r.gvr.Resource+" of the release left", func() (bool, string) { return gone(r.gvr, r.namespaced) })
	}
	if _, err := h.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Get(context.Background(), "clusterqueues.sluice.dev", metav1.GetOptions{}); err != nil {
		h.t.Errorf("the CRDs go with the release (helm keeps them): %v", err)
	}
}
