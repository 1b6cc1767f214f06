// Package e2e tests devcluster end to end: it builds the devcluster
// command, brings a cluster up, runs a suspended Job to completion on the
// fake nodes, and brings the cluster down again.
//
// It runs only with DEVCLUSTER_E2E=1, because its first run builds
// Kubernetes (about 10 minutes on 2 cores; later runs use the cache):
//
//	cd hack/devcluster && DEVCLUSTER_E2E=1 go test ./e2e/ -v -timeout 60m
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const runFor = 2 * time.Second

func TestUpJobDown(t *testing.T) {
	if os.Getenv("DEVCLUSTER_E2E") != "1" {
		t.Skip("set DEVCLUSTER_E2E=1 to run (the first run builds Kubernetes, about 10 minutes)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Minute)
	defer cancel()

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "devcluster")
	run(ctx, t, 10*time.Minute, "go", "build", "-o", bin, "..")
	dir := filepath.Join(tmp, "state")

	// up: builds on first use, then starts and waits until ready.
	t0 := time.Now()
	out := run(ctx, t, 70*time.Minute, bin, "up", "--dir", dir)
	t.Logf("devcluster up took %s:\n%s", time.Since(t0).Round(time.Second), out)
	downDone := false
	t.Cleanup(func() {
		if !downDone {
			cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, _ = runErr(cctx, 3*time.Minute, bin, "down", "--dir", dir)
		}
	})

	// A second up finds it running.
	if out := run(ctx, t, time.Minute, bin, "up", "--dir", dir); !strings.Contains(out, "already running") {
		t.Errorf("second up did not say the cluster is already running:\n%s", out)
	}
	if out := run(ctx, t, time.Minute, bin, "status", "--dir", dir); !strings.Contains(out, "4 Ready") {
		t.Errorf("status does not report 4 Ready nodes:\n%s", out)
	}

	kubeconfig := strings.TrimSpace(run(ctx, t, time.Minute, bin, "kubeconfig", "--dir", dir))
	if kubeconfig != filepath.Join(dir, "kubeconfig") {
		t.Errorf("kubeconfig path = %s, want %s", kubeconfig, filepath.Join(dir, "kubeconfig"))
	}
	cs := client(t, kubeconfig)
	runJob(ctx, t, cs)

	pids := recordedPIDs(t, dir)
	if len(pids) != 5 {
		t.Errorf("state records %d processes, want 5", len(pids))
	}
	run(ctx, t, 3*time.Minute, bin, "down", "--dir", dir)
	downDone = true
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("pid %d still runs after down", pid)
		}
	}
	if left := processesUsing(dir); len(left) > 0 {
		t.Errorf("processes still run with %s in their command line: %v", dir, left)
	}
	if out, err := runErr(ctx, time.Minute, bin, "status", "--dir", dir); err == nil || !strings.Contains(out, "not running") {
		t.Errorf("status after down: err=%v, output:\n%s", err, out)
	}
}

// runJob creates a suspended Job whose pods run for runFor on H100 nodes,
// unsuspends it and checks that the scheduler binds its pods to kwok nodes,
// that they run for their time and that the Job controller completes it.
func runJob(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "devcluster-e2e-"}}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	two := int32(2)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: ns.Name},
		Spec: batchv1.JobSpec{
			Suspend:     ptr(true),
			Parallelism: &two,
			Completions: &two,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"sluice.dev/run-for": runFor.String()}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					NodeSelector:  map[string]string{"instance-type": "h100"},
					Containers: []corev1.Container{{
						Name:  "main",
						Image: "sleeper:latest",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse("4"),
							"nvidia.com/gpu":      resource.MustParse("8"),
							corev1.ResourceMemory: resource.MustParse("16Gi"),
						}, Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
					}},
				},
			},
		},
	}
	if _, err := cs.BatchV1().Jobs(ns.Name).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create job: %v", err)
	}
	// Suspended: no pods.
	time.Sleep(2 * time.Second)
	if pods := listPods(ctx, t, cs, ns.Name); len(pods) != 0 {
		t.Fatalf("suspended job has %d pods", len(pods))
	}

	unsuspended := time.Now()
	patch := []byte(`{"spec":{"suspend":false}}`)
	if _, err := cs.BatchV1().Jobs(ns.Name).Patch(ctx, job.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("unsuspend job: %v", err)
	}

	var done *batchv1.Job
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		j, err := cs.BatchV1().Jobs(ns.Name).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				done = j
				return true, nil
			case batchv1.JobFailed:
				return false, fmt.Errorf("job failed: %s: %s", c.Reason, c.Message)
			}
		}
		return false, nil
	})
	if err != nil {
		for _, p := range listPods(ctx, t, cs, ns.Name) {
			t.Logf("pod %s: node=%q phase=%s conditions=%v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
		}
		t.Fatalf("job did not complete: %v", err)
	}
	took := time.Since(unsuspended)
	t.Logf("job completed %s after it was unsuspended (succeeded=%d)", took.Round(10*time.Millisecond), done.Status.Succeeded)
	if done.Status.Succeeded != 2 {
		t.Errorf("job succeeded = %d, want 2", done.Status.Succeeded)
	}
	if took < runFor {
		t.Errorf("job completed after %s, before its pods' run time %s", took, runFor)
	}

	pods := listPods(ctx, t, cs, ns.Name)
	if len(pods) != 2 {
		t.Fatalf("job has %d pods, want 2", len(pods))
	}
	nodes := map[string]bool{}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s phase %s, want Succeeded", p.Name, p.Status.Phase)
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s is on node %q: %v", p.Name, p.Spec.NodeName, err)
			continue
		}
		nodes[node.Name] = true
		if node.Annotations["kwok.x-k8s.io/node"] != "fake" || node.Labels["instance-type"] != "h100" {
			t.Errorf("pod %s is on node %s, which is not a kwok h100 node (labels %v)", p.Name, node.Name, node.Labels)
		}
		if !scheduledByScheduler(p) {
			t.Errorf("pod %s has no PodScheduled=True condition: %v", p.Name, p.Status.Conditions)
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil {
			t.Errorf("pod %s: container not terminated: %+v", p.Name, p.Status.ContainerStatuses)
			continue
		}
		term := p.Status.ContainerStatuses[0].State.Terminated
		ran := term.FinishedAt.Sub(term.StartedAt.Time)
		// Timestamps in the API have whole seconds.
		if term.ExitCode != 0 || ran < runFor-time.Second {
			t.Errorf("pod %s: exit code %d after %s, want 0 after %s", p.Name, term.ExitCode, ran, runFor)
		}
	}
	// Each pod takes a whole node's 8 GPUs, so they must be on the two H100 nodes.
	if len(nodes) != 2 {
		t.Errorf("pods are on nodes %v, want the two h100 nodes", nodes)
	}
}

func scheduledByScheduler(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func listPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) []corev1.Pod {
	t.Helper()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	return list.Items
}

func client(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cfg.Timeout = 30 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return cs
}

func run(ctx context.Context, t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := runErr(ctx, timeout, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return buf.String(), err
}

func recordedPIDs(t *testing.T, dir string) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatalf("read state: %v", err)
	}
	var st struct {
		Processes []struct {
			PID int `json:"pid"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("parse state: %v", err)
	}
	var pids []int
	for _, p := range st.Processes {
		pids = append(pids, p.PID)
	}
	return pids
}

// running reports whether pid is a live process (not a zombie waiting for
// its new parent to reap it).
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || (data[i+2] != 'Z' && data[i+2] != 'X')
}

// processesUsing lists live processes with dir in their command line.
func processesUsing(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !running(pid) {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(cmdline, []byte(dir)) {
			out = append(out, fmt.Sprintf("%d: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }
