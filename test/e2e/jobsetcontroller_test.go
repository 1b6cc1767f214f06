package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/services/integration/jobset"
)

// The JobSet controller is built from the JobSet module Sluice's go.mod
// pins, cached next to the devcluster's binaries. It runs on the host with
// its own webhooks registered by URL (its defaulting webhook fills fields
// the controller needs), limited to the test's namespace.

// jobSetControllerBinary builds the controller once and returns its path.
func jobSetControllerBinary(t *testing.T) string {
	t.Helper()
	return moduleBinary(t, "sigs.k8s.io/jobset", ".", "jobset-controller")
}

// moduleBinary builds the command in package pkg (relative to the module's
// root) of a module at the version Sluice's go.mod pins, once, into the
// devcluster's binary cache, and returns its path.
func moduleBinary(t *testing.T, module, pkg, name string) string {
	t.Helper()
	dl := exec.Command("go", "mod", "download", "-json", module)
	dl.Dir = root() // the version Sluice's go.mod pins
	out, err := dl.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", module, err)
	}
	var mod struct{ Dir, Version string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: %v (%s)", module, err, out)
	}
	// Where the devcluster caches its binaries (hack/devcluster's default).
	cache := os.Getenv("DEVCLUSTER_CACHE")
	if cache == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(d, "sluice-devcluster")
	}
	bin := filepath.Join(cache, "bin", name+"-"+mod.Version)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	t.Logf("building %s %s (once; a few minutes on 2 cores)", name, mod.Version)
	tmp := bin + ".tmp"
	cmd := exec.Command("go", "build", "-o", tmp, pkg)
	cmd.Dir = mod.Dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// componentConfig writes into dir, and returns the path of, the
// configuration file that the JobSet and LeaderWorkerSet controllers share
// the shape of (apiVersion tells which): webhooks on 127.0.0.1:port with
// the certificate in dir, no metrics, probes or leader election.
func componentConfig(t *testing.T, dir, apiVersion string, port int) string {
	t.Helper()
	config := fmt.Sprintf(`apiVersion: %s
kind: Configuration
internalCertManagement: {enable: false}
webhook: {port: %d, host: 127.0.0.1, certDir: %q}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "0"}
leaderElection: {leaderElect: false}
`, apiVersion, port, dir)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runController runs an upstream controller (what names it) for the
// test: killed when the test ends or stop is called, the start and end of
// its log shown if the test failed.
func runController(t *testing.T, what, bin string, args ...string) (logs *lockedBuffer, stop func()) {
	t.Helper()
	logs = &lockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the %s: %v", what, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-done
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s log (first and last 40 lines):\n%s", what, headTail(logs.String(), 40))
		}
	})
	return logs, stop
}

// lockedBuffer is a buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// servingCert writes a self-signed certificate for 127.0.0.1 into dir as
// tls.crt and tls.key and returns the certificate's PEM.
func servingCert(t *testing.T, dir string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "jobset-e2e"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return crt
}

// startJobSetController runs the JobSet controller for the test, with its
// JobSet webhooks registered for namespace ns only.
func startJobSetController(t *testing.T, ns string) {
	t.Helper()
	bin := jobSetControllerBinary(t)
	dir := t.TempDir()
	ca := servingCert(t, dir)
	port := freePort()
	_, _ = runController(t, "JobSet controller", bin, "--config", componentConfig(t, dir, "config.jobset.x-k8s.io/v1alpha1", port), "--kubeconfig", env.kubeconfig)

	url := func(path string) *string { return ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, path)) }
	scope := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	rule := func(ops ...admissionv1.OperationType) []admissionv1.RuleWithOperations {
		return []admissionv1.RuleWithOperations{{Operations: ops, Rule: admissionv1.Rule{
			APIGroups: []string{"jobset.x-k8s.io"}, APIVersions: []string{"v1alpha2"}, Resources: []string{"jobsets"}}}}
	}
	none := admissionv1.SideEffectClassNone
	fail := admissionv1.Fail
	reg := env.kube.AdmissionregistrationV1()
	name := "jobset-e2e"
	if _, err := reg.MutatingWebhookConfigurations().Create(context.Background(), &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionv1.MutatingWebhook{{Name: "mjobset.kb.io", AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionv1.WebhookClientConfig{URL: url("/mutate-jobset-x-k8s-io-v1alpha2-jobset"), CABundle: ca},
			Rules:        rule(admissionv1.Create), FailurePolicy: &fail, SideEffects: &none, NamespaceSelector: scope}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the JobSet mutating webhook: %v", err)
	}
	if _, err := reg.ValidatingWebhookConfigurations().Create(context.Background(), &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionv1.ValidatingWebhook{{Name: "vjobset.kb.io", AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionv1.WebhookClientConfig{URL: url("/validate-jobset-x-k8s-io-v1alpha2-jobset"), CABundle: ca},
			Rules:        rule(admissionv1.Create, admissionv1.Update), FailurePolicy: &fail, SideEffects: &none, NamespaceSelector: scope}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the JobSet validating webhook: %v", err)
	}
	t.Cleanup(func() {
		_ = reg.MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = reg.ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})

}

// jobSetPods lists the pods of a JobSet's child Jobs.
func jobSetPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	l, err := env.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestJobSetWithItsController runs the real JobSet controller: a queued
// JobSet admitted by Sluice gets child Jobs whose pods run on nodes of the
// assigned flavor; preempted, the controller takes its pods away; admitted
// again, it runs to completion, which the controller reports and Sluice
// turns into a released quota.
func TestJobSetWithItsController(t *testing.T) {
	installKindCRDs(t)
	ns := "e2e-jobset-ctrl"
	queues(t, ns, 4, "LowerPriority")
	startJobSetController(t, ns)
	waitJobSetWebhook(t, ns)

	s := jobSetObject(jobSetSpec{ns: ns, name: "train", queue: "q", workers: 1, parallelism: 2})
	for i := range s.Spec.ReplicatedJobs {
		s.Spec.ReplicatedJobs[i].Template.Spec.Template.Annotations = map[string]string{"sluice.dev/run-for": "15s"}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		t.Fatal(err)
	}
	ri := env.dyn.Resource(jobset.Kind.GVR()).Namespace(ns)
	if _, err := ri.Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create jobset: %v", err)
	}
	running := func(what string) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() (bool, string) {
			pods := jobSetPods(t, ns, "train")
			var state []string
			n := 0
			for _, p := range pods {
				if p.DeletionTimestamp != nil {
					continue
				}
				state = append(state, fmt.Sprintf("%s on %q with %v", p.Name, p.Spec.NodeName, p.Spec.NodeSelector))
				if p.Spec.NodeName != "" && strings.HasPrefix(p.Spec.NodeName, "a100") && p.Spec.NodeSelector["instance-type"] == "a100" {
					n++
				}
			}
			return n == 3, strings.Join(state, "; ")
		})
	}
	running("the JobSet's 3 pods bound to a100 nodes with the flavor's selector")

	createJob(t, jobSpec{ns: ns, name: "urgent", queue: "q", priorityClass: "high", pods: 2, gpus: 1, runFor: "4s"})
	eventually(t, 30*time.Second, "the preempted JobSet suspended and its pods gone", func() (bool, string) {
		js := getJobSet(t, ns, "train")
		live := 0
		for _, p := range jobSetPods(t, ns, "train") {
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				live++
			}
		}
		suspended := js.Spec.Suspend != nil && *js.Spec.Suspend
		return suspended && live == 0, fmt.Sprintf("suspended %v, %d pods left", suspended, live)
	})
	waitEvent(t, ns, "train", "Preempted", "urgent", 10*time.Second)
	waitComplete(t, ns, "urgent", 60*time.Second)
	running("the JobSet's pods back on a100 nodes once the preemptor finished")

	eventually(t, 90*time.Second, "the JobSet completed, as its controller reports", func() (bool, string) {
		js := getJobSet(t, ns, "train")
		for _, c := range js.Status.Conditions {
			if c.Type == "Completed" && c.Status == metav1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %v", js.Status.Conditions)
	})
	eventually(t, 30*time.Second, "quota of the completed JobSet released", func() (bool, string) {
		_, held := reservations(t)["jobset/"+ns+"/train"]
		return !held, "still reserved"
	})
	jobs, err := env.kube.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=train"})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if !complete(&j) {
			t.Errorf("child Job %s not complete: %+v", j.Name, j.Status.Conditions)
		}
	}
}
