package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// workloadImage is the main module's workload image as hack/images tags it
// by default.
const workloadImage = "sluice-workload:dev"

// TestRealNode brings a cluster up with the real node, runs a Job there,
// checks a pod's view of the cluster (the API server through the kubernetes
// Service, cluster DNS for a Service and a headless Service's pod, kubectl
// logs), and checks that down leaves nothing behind. It needs root.
//
//	cd hack/devcluster && sudo DEVCLUSTER_E2E=1 go test ./e2e/ -run RealNode -v
func TestRealNode(t *testing.T) {
	if os.Getenv("DEVCLUSTER_E2E") != "1" {
		t.Skip("set DEVCLUSTER_E2E=1 to run (the first run builds Kubernetes, about 10 minutes)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the real node needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Minute)
	defer cancel()

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "devcluster")
	run(ctx, t, 10*time.Minute, "go", "build", "-o", bin, "..")
	images := filepath.Join(tmp, "images")
	mainModule, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	runIn(ctx, t, mainModule, 20*time.Minute, "go", "run", "./hack/images", "-out", images, "-only", "pause,workload")
	t.Logf("images built in %s", time.Since(t0).Round(100*time.Millisecond))
	dir := filepath.Join(tmp, "state")

	t0 = time.Now()
	out := run(ctx, t, 70*time.Minute, bin, "up", "--real-node", "--images", images, "--dir", dir)
	t.Logf("devcluster up --real-node took %s:\n%s", time.Since(t0).Round(100*time.Millisecond), out)
	downDone := false
	t.Cleanup(func() {
		if !downDone {
			cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, _ = runErr(cctx, 3*time.Minute, bin, "down", "--dir", dir)
		}
	})
	if out := run(ctx, t, time.Minute, bin, "up", "--real-node", "--images", images, "--dir", dir); !strings.Contains(out, "already running") {
		t.Errorf("second up did not say the cluster is already running:\n%s", out)
	}
	status := run(ctx, t, time.Minute, bin, "status", "--dir", dir)
	for _, want := range []string{"kubelet", "containerd", "kube-proxy", "coredns", "5 Ready"} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}

	cs := client(t, filepath.Join(dir, "kubeconfig"))
	node, err := cs.CoreV1().Nodes().Get(ctx, "realnode-0", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the real node: %v", err)
	}
	if !nodeIsReady(node) || node.Labels["sluice.dev/real-node"] != "true" {
		t.Errorf("real node: ready=%v labels=%v", nodeIsReady(node), node.Labels)
	}
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != "sluice.dev/real-node" || node.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("real node taints = %v, want sluice.dev/real-node NoSchedule", node.Spec.Taints)
	}

	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "realnode-e2e-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	waitDefaultSA(ctx, t, cs, ns.Name)
	realNodeJob(ctx, t, cs, ns.Name)
	inCluster(ctx, t, cs, bin, dir, ns.Name)

	pids := recordedPIDs(t, dir)
	if len(pids) != 9 {
		t.Errorf("state records %d processes, want 9", len(pids))
	}
	t0 = time.Now()
	out = run(ctx, t, 3*time.Minute, bin, "down", "--dir", dir)
	downDone = true
	t.Logf("devcluster down took %s:\n%s", time.Since(t0).Round(100*time.Millisecond), out)
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("pid %d still runs after down", pid)
		}
	}
	if left := processesUsing(dir); len(left) > 0 {
		t.Errorf("processes still run with %s in their command line: %v", dir, left)
	}
	if _, err := os.Stat("/sys/class/net/sluice0"); err == nil {
		t.Error("bridge sluice0 is still there after down")
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(data), dir) {
		t.Errorf("mounts under %s are left after down", dir)
	}
}

func realNodePod(name string, labels map[string]string, args ...string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{"sluice.dev/real-node": "true"},
			Tolerations: []corev1.Toleration{{
				Key: "sluice.dev/real-node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
			}},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           workloadImage,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
			}},
		},
	}
}

// realNodeJob runs a Job of two pods in real containers on the real node.
func realNodeJob(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	two := int32(2)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "real", Namespace: ns},
		Spec: batchv1.JobSpec{
			Parallelism: &two,
			Completions: &two,
			Template:    realNodePod("", nil, "-run-for=2s"),
		},
	}
	t0 := time.Now()
	if _, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create job: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := cs.BatchV1().Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range j.Status.Conditions {
			if c.Status == corev1.ConditionTrue && c.Type == batchv1.JobFailed {
				return false, fmt.Errorf("job failed: %s: %s", c.Reason, c.Message)
			}
			if c.Status == corev1.ConditionTrue && c.Type == batchv1.JobComplete {
				return true, nil
			}
		}
		return false, nil
	})
	pods := listPods(ctx, t, cs, ns)
	if err != nil {
		for _, p := range pods {
			t.Logf("pod %s: node=%q phase=%s statuses=%+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.ContainerStatuses)
		}
		t.Fatalf("job on the real node did not complete: %v", err)
	}
	t.Logf("job of 2 pods on the real node completed after %s", time.Since(t0).Round(10*time.Millisecond))
	for _, p := range pods {
		if p.Spec.NodeName != "realnode-0" || p.Status.Phase != corev1.PodSucceeded || !strings.HasPrefix(p.Status.PodIP, "10.88.0.") {
			t.Errorf("pod %s: node %q phase %s IP %q; want Succeeded on realnode-0 with a bridge IP", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
		}
	}
}

// inCluster checks what a pod sees: the API server through the kubernetes
// Service with its token, the cluster DNS for a Service and for a headless
// Service's pod, and that kubectl logs reaches the kubelet.
func inCluster(ctx context.Context, t *testing.T, cs kubernetes.Interface, bin, dir, ns string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": "web"},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 8080}},
		},
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create headless service: %v", err)
	}
	target := realNodePod("web-0", map[string]string{"app": "web"}, "-run-for=10m", "-listen=:8080")
	target.Spec.Hostname, target.Spec.Subdomain = "web-0", "web"
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: target.ObjectMeta, Spec: target.Spec}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod web-0: %v", err)
	}
	// The name resolves once the endpointslice controller lists the pod.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, nil
		}
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("headless service web has no ready endpoint: %v", err)
	}

	names := []string{"kubernetes.default.svc.cluster.local", "web-0.web." + ns + ".svc.cluster.local"}
	check := realNodePod("check", nil, "-run-for=0s", "-check-api", "-resolve="+names[0], "-resolve="+names[1])
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: check.ObjectMeta, Spec: check.Spec}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod check: %v", err)
	}
	var phase corev1.PodPhase
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "check", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	logs, lerr := runErr(ctx, time.Minute, bin, "kubectl", "--dir", dir, "-n", ns, "logs", "check")
	if err != nil || phase != corev1.PodSucceeded {
		t.Fatalf("pod check ended %s (%v); logs (%v):\n%s", phase, err, lerr, logs)
	}
	if lerr != nil {
		t.Fatalf("kubectl logs: %v\n%s", lerr, logs)
	}
	for _, want := range []string{names[0] + " resolves to 10.96.0.1", names[1] + " resolves to 10.88.0.", "/version: {", `"gitVersion": "v1.34.4"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs of pod check lack %q:\n%s", want, logs)
		}
	}
}

func waitDefaultSA(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no default service account in %s: %v", ns, err)
	}
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func runIn(ctx context.Context, t *testing.T, dir string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := commandIn(ctx, dir, name, args...)
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return out
}

func commandIn(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return buf.String(), err
}
