package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/internal/tracing/tracingtest"
)

// env is what every test uses.
var env struct {
	cfg  *rest.Config
	kube *kubernetes.Clientset
	dyn  dynamic.Interface
	js   jetstream.JetStream
	nats string

	kubeconfig string
	// state is the suite's own directory, removed at its end.
	state string
	// leafPort is where worker clusters' NATS servers join the suite's as
	// leaf nodes (as e2eWorkers), each through a leafProxy of its own.
	leafPort int

	hookAddr string
	httpAddr string // `sluice dev`'s /healthz and /readyz
	// visAddr serves the pending API to users the cluster authorizes,
	// with the certificate sluice dev made, signed by visCA.
	visAddr    string
	visCA      []byte
	sluiceBin  string
	sluiceArgs []string
	sluiceLog  *os.File
	sluice     *exec.Cmd
	// sluiceEnv is added to `sluice dev`'s environment: the OTLP
	// endpoint of traces, the receiver the suite runs.
	sluiceEnv []string
	traces    *tracingtest.Receiver
}

// startSluice starts `sluice dev` with the suite's arguments.
func startSluice() error {
	cmd := exec.Command(env.sluiceBin, env.sluiceArgs...)
	cmd.Env = append(os.Environ(), env.sluiceEnv...)
	cmd.Stdout, cmd.Stderr = env.sluiceLog, env.sluiceLog
	if err := cmd.Start(); err != nil {
		return err
	}
	env.sluice = cmd
	return nil
}

// stopSluice stops it: os.Interrupt for an orderly shutdown, os.Kill for a
// crash.
func stopSluice(sig os.Signal) {
	if env.sluice == nil {
		return
	}
	_ = env.sluice.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- env.sluice.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = env.sluice.Process.Kill()
		<-done
	}
	env.sluice = nil
}

func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_E2E") != "1" {
		fmt.Println("e2e: skipped (set SLUICE_E2E=1, or run make e2e)")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func root() string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func sh(dir string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// run brings the cluster and Sluice up, runs the tests, and takes both down.
func run(m *testing.M) int {
	top := root()
	bin := filepath.Join(top, "bin")
	state, err := os.MkdirTemp("", "sluice-e2e-")
	if err != nil {
		fmt.Println("e2e:", err)
		return 1
	}
	defer os.RemoveAll(state)
	env.state = state
	if err := sh(filepath.Join(top, "hack", "devcluster"), "go", "build", "-o", filepath.Join(bin, "devcluster"), "."); err != nil {
		fmt.Println("e2e: build devcluster:", err)
		return 1
	}
	if err := sh(top, "go", "build", "-o", filepath.Join(bin, "sluice"), "./cmd/sluice"); err != nil {
		fmt.Println("e2e: build sluice:", err)
		return 1
	}
	dc := filepath.Join(bin, "devcluster")
	if err := sh(top, dc, "up", "--dir", state); err != nil {
		fmt.Println("e2e: devcluster up:", err)
		_ = sh(top, dc, "down", "--dir", state)
		return 1
	}
	defer func() { _ = sh(top, dc, "down", "--dir", state) }()
	kubeconfig := filepath.Join(state, "kubeconfig")
	env.kubeconfig = kubeconfig
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Println("e2e:", err)
		return 1
	}
	cfg.QPS, cfg.Burst = 500, 1000
	if err := installCRDs(cfg, filepath.Join(top, "config", "crd")); err != nil {
		fmt.Println("e2e: install CRDs:", err)
		return 1
	}
	env.kube = kubernetes.NewForConfigOrDie(cfg)
	env.cfg = cfg
	env.dyn = dynamic.NewForConfigOrDie(cfg)

	natsPort, hookPort, httpPort, leafPort := freePort(), freePort(), freePort(), freePort()
	env.nats = fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	// The suite's Sluice is also a multicluster manager: two workers may
	// join it as leaf nodes.
	env.leafPort = leafPort
	refuser, stopRefuser, err := startRefuser()
	if err != nil {
		fmt.Println("e2e: leaf refuser:", err)
		return 1
	}
	defer stopRefuser()
	logf, err := os.Create(filepath.Join(state, "sluice.log"))
	if err != nil {
		fmt.Println("e2e:", err)
		return 1
	}
	env.sluiceArgs = []string{"dev", "--kubeconfig", kubeconfig,
		"--nats-port", fmt.Sprint(natsPort), "--nats-store", filepath.Join(state, "jetstream"),
		"--webhook-address", fmt.Sprintf("127.0.0.1:%d", hookPort),
		"--http-address", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"--status-interval", "1s", "--log-level", logLevel(),
		"--leaf-port", fmt.Sprint(leafPort), "--leaf-advertise", refuser}
	for _, w := range e2eWorkers {
		env.sluiceArgs = append(env.sluiceArgs, "--leaf-worker", w+"="+w+"-secret")
	}
	if addr := os.Getenv("SLUICE_E2E_PPROF"); addr != "" {
		// Profiles of `sluice dev` under a load test (e.g. 127.0.0.1:6060).
		env.sluiceArgs = append(env.sluiceArgs, "--pprof-address", addr)
	}
	if limit := os.Getenv("SLUICE_E2E_MEMORY_LIMIT"); limit != "" {
		// `sluice dev`'s soft memory limit in a load test (e.g. 260MiB),
		// without setting GOMEMLIMIT for the test binary too.
		env.sluiceArgs = append(env.sluiceArgs, "--memory-limit", limit)
	}
	env.httpAddr = fmt.Sprintf("127.0.0.1:%d", httpPort)
	visPort := freePort()
	env.visAddr = fmt.Sprintf("127.0.0.1:%d", visPort)
	// `sluice dev` registers the visibility API as `make dev` has it do,
	// with a certificate it makes in visDir.
	visDir := filepath.Join(state, "visibility-cert")
	env.sluiceArgs = append(env.sluiceArgs, "--visibility-apiservice", "--visibility-address", env.visAddr, "--visibility-cert-dir", visDir)
	env.sluiceBin, env.sluiceLog = filepath.Join(bin, "sluice"), logf
	env.hookAddr = fmt.Sprintf("127.0.0.1:%d", hookPort)
	// Every test runs with tracing on, exported to a real OTLP receiver.
	if env.traces, err = tracingtest.Start(context.Background()); err != nil {
		fmt.Println("e2e: trace receiver:", err)
		return 1
	}
	defer env.traces.Close()
	env.sluiceEnv = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + env.traces.HTTP, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=200"}
	if procs := os.Getenv("SLUICE_E2E_GOMAXPROCS"); procs != "" {
		// `sluice dev`'s GOMAXPROCS in a load test, without setting it
		// for the test binary too.
		env.sluiceEnv = append(env.sluiceEnv, "GOMAXPROCS="+procs)
	}
	if err := startSluice(); err != nil {
		fmt.Println("e2e: start sluice:", err)
		return 1
	}
	defer func() {
		stopSluice(os.Interrupt)
		if os.Getenv("SLUICE_E2E_LOG") != "" {
			b, _ := os.ReadFile(logf.Name())
			os.Stderr.Write(b)
		}
	}()
	nc, err := connectNATS(env.nats, 30*time.Second)
	if err != nil {
		fmt.Println("e2e: NATS:", err)
		return 1
	}
	if env.visCA, err = os.ReadFile(filepath.Join(visDir, "ca.crt")); err != nil {
		fmt.Println("e2e: the visibility API's CA, which sluice dev writes before it serves:", err)
		return 1
	}
	defer nc.Close()
	env.js, _ = jetstream.New(nc)
	// The first start on a fresh machine also creates the streams and
	// buckets and waits for the CRDs' discovery: give it time, and say
	// what the process logged when it does not make it.
	sluiceLogTail := func() {
		b, _ := os.ReadFile(logf.Name())
		fmt.Println("e2e: last lines of the sluice log:\n" + tail(string(b), 80))
	}
	if err := waitWebhook(90 * time.Second); err != nil {
		fmt.Println("e2e:", err)
		sluiceLogTail()
		return 1
	}
	if err := waitReady(60 * time.Second); err != nil {
		fmt.Println("e2e:", err)
		sluiceLogTail()
		return 1
	}
	code := m.Run()
	if code != 0 {
		sluiceLogTail()
	}
	return code
}

func connectNATS(url string, within time.Duration) (*nats.Conn, error) {
	deadline := time.Now().Add(within)
	for {
		// `sluice dev`, whose NATS this is, is stopped for minutes while
		// a test runs the services apart: never give up reconnecting.
		nc, err := nats.Connect(url, nats.MaxReconnects(-1))
		if err == nil {
			return nc, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitWebhook waits until the job integration registered its webhook and
// serves it.
func waitWebhook(within time.Duration) error {
	// A server-side dry run of a labelled Job goes through the webhook:
	// it succeeds only once the registered configuration (URL and CA) is
	// the running process's and the API server has picked it up.
	probe := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-probe-", Labels: map[string]string{"sluice.dev/queue-name": "probe"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
		}}},
	}
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		got, err := env.kube.BatchV1().Jobs("default").Create(context.Background(), probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && got.Spec.Suspend != nil && *got.Spec.Suspend {
			return nil
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the job webhook did not suspend a dry-run Job within %s: %v", within, last)
}

// waitReady waits until `sluice dev` says every service is ready.
func waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		code, body, err := httpGet("http://" + env.httpAddr + "/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("%d %s %v", code, body, err)
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("sluice dev not ready within %s: last /readyz: %s", within, last)
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

func installCRDs(cfg *rest.Config, dir string) error {
	cs, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	ctx := context.Background()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(bytes.TrimSpace(b), &crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err == nil && established(got) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established", crd.Name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// headTail returns the first n and the last n lines of s, and how many
// were left out between them.
func headTail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= 2*n {
		return s
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n[… %d lines …]\n", len(lines)-2*n) + strings.Join(lines[len(lines)-n:], "\n")
}

// logLevel is sluice's log level in the suite: SLUICE_E2E_LOG_LEVEL, default
// debug (every event published and handled); full-scale load runs use info.
func logLevel() string {
	if l := os.Getenv("SLUICE_E2E_LOG_LEVEL"); l != "" {
		return l
	}
	return "debug"
}
