package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/services/multicluster"
)

// The worker cluster the suite's Sluice (the manager) lets join.
const (
	e2eWorker         = "e2e-worker"
	e2eWorkerPassword = "e2e-worker-secret"
)

// workerCluster is a second control plane with a Sluice of its own, whose
// NATS joins the suite's as a leaf node.
type workerCluster struct {
	t      *testing.T
	dir    string
	kube   *kubernetes.Clientset
	dyn    dynamic.Interface
	args   []string
	nats   string
	http   string
	sluice *exec.Cmd
	log    *os.File
	js     jetstream.JetStream
}

// startWorkerCluster brings up the worker's control plane, CRDs and
// Sluice; both go when the test ends.
func startWorkerCluster(t *testing.T) *workerCluster {
	t.Helper()
	top := root()
	dc := filepath.Join(top, "bin", "devcluster")
	w := &workerCluster{t: t, dir: t.TempDir()}
	if err := sh(top, dc, "up", "--dir", w.dir); err != nil {
		t.Fatalf("worker devcluster up: %v", err)
	}
	t.Cleanup(func() { _ = sh(top, dc, "down", "--dir", w.dir) })
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(w.dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if err := installCRDs(cfg, filepath.Join(top, "config", "crd")); err != nil {
		t.Fatalf("worker CRDs: %v", err)
	}
	w.kube = kubernetes.NewForConfigOrDie(cfg)
	w.dyn = dynamic.NewForConfigOrDie(cfg)
	natsPort, hookPort, httpPort := freePort(), freePort(), freePort()
	w.nats = fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	w.http = fmt.Sprintf("127.0.0.1:%d", httpPort)
	w.args = []string{"dev", "--kubeconfig", filepath.Join(w.dir, "kubeconfig"),
		"--nats-port", fmt.Sprint(natsPort), "--nats-store", filepath.Join(w.dir, "jetstream"),
		"--webhook-address", fmt.Sprintf("127.0.0.1:%d", hookPort), "--http-address", w.http,
		"--leaf-remote", env.leafURL, "--worker-heartbeat", "1s", "--integrations", "job", "--log-level", logLevel()}
	if w.log, err = os.Create(filepath.Join(w.dir, "sluice.log")); err != nil {
		t.Fatal(err)
	}
	w.start()
	t.Cleanup(func() {
		w.stop(os.Interrupt)
		if t.Failed() {
			b, _ := os.ReadFile(w.log.Name())
			t.Logf("worker's sluice log:\n%s", tail(string(b), 60))
		}
	})
	nc, err := connectNATS(w.nats, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w.js, _ = jetstream.New(nc)
	return w
}

func (w *workerCluster) start() {
	cmd := exec.Command(env.sluiceBin, w.args...)
	cmd.Stdout, cmd.Stderr = w.log, w.log
	if err := cmd.Start(); err != nil {
		w.t.Fatalf("start the worker's sluice: %v", err)
	}
	w.sluice = cmd
	eventually(w.t, 60*time.Second, "the worker's sluice ready", func() (bool, string) {
		code, body, err := httpGet("http://" + w.http + "/readyz")
		return err == nil && code == 200, fmt.Sprint(code, body, err)
	})
}

func (w *workerCluster) stop(sig os.Signal) {
	if w.sluice == nil {
		return
	}
	_ = w.sluice.Process.Signal(sig)
	_, _ = w.sluice.Process.Wait()
	w.sluice = nil
}

// reservations reads the worker's quota ledger.
func (w *workerCluster) reservations() map[string]ledger.Reservation {
	w.t.Helper()
	ctx := context.Background()
	kv, err := bus.OpenKV(ctx, w.js, ledger.Bucket)
	if err != nil {
		w.t.Fatalf("open the worker's ledger: %v", err)
	}
	snap, err := ledger.Read(ctx, kv)
	if err != nil {
		w.t.Fatalf("read the worker's ledger: %v", err)
	}
	out := map[string]ledger.Reservation{}
	for wk, h := range snap.Reservations {
		out[wk] = h.Reservation
	}
	return out
}

// copyOf is the worker's copy of a manager's Job (nil: none).
func (w *workerCluster) copyOf(ns, name string) *batchv1.Job {
	j, err := w.kube.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		w.t.Fatalf("read the worker's job %s/%s: %v", ns, name, err)
	}
	return j
}

// runningPods counts the pods of a copy (by the copy's UID) that run on
// the worker's nodes, and all pods of the Job's name that do.
func (w *workerCluster) runningPods(ns, name string, uid types.UID) (ofCopy, all int) {
	pods, err := w.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
	if err != nil {
		w.t.Fatalf("list the worker's pods: %v", err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		all++
		if p.Labels["batch.kubernetes.io/controller-uid"] == string(uid) {
			ofCopy++
		}
	}
	return ofCopy, all
}

// TestMultiClusterDispatch: a Job created on the manager is dispatched
// to the worker cluster, runs there on the worker's nodes while the
// manager's copy stays suspended and mirrors its status, and finishing
// releases quota on both and deletes the worker's copy. A worker whose
// Sluice is killed mid-run is lost after the config's timeout: the Job is
// given up and dispatched again; when the worker comes back its old copy
// goes before the new one runs, so the Job never runs twice.
func TestMultiClusterDispatch(t *testing.T) {
	ns := "e2e-mc"
	queuesOn := func(dyn dynamic.Interface, check string) {
		checks := ""
		if check != "" {
			checks = "\n  admissionChecks: [" + check + "]"
		}
		applyTo(t, dyn, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: %[1]s-gpu}
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {}%[2]s
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: %[1]s-gpu
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
`, ns, checks))
	}
	w := startWorkerCluster(t)
	queuesOn(w.dyn, "")
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: MultiClusterConfig
metadata: {name: %[1]s}
spec:
  clusters: [%[2]s]
  workerLostTimeout: 8s
---
apiVersion: sluice.dev/v1beta1
kind: AdmissionCheck
metadata: {name: %[1]s}
spec:
  controllerName: sluice.dev/multicluster
  parameters: {apiGroup: sluice.dev, kind: MultiClusterConfig, name: %[1]s}
`, ns, e2eWorker))
	queuesOn(env.dyn, ns)
	watchQuota(t)
	waitCheckActive(t, ns, 60*time.Second)

	// Dispatched, run on the worker, mirrored, finished on both.
	createJob(t, jobSpec{ns: ns, name: "short", queue: "q", pods: 2, gpus: 1, runFor: "4s", managedBy: "sluice.dev/multicluster"})
	var copyUID types.UID
	eventually(t, 60*time.Second, "the worker runs short's copy on its nodes, the manager mirrors it", func() (bool, string) {
		c := w.copyOf(ns, "short")
		if c == nil {
			return false, "no copy in the worker"
		}
		copyUID = c.UID
		running, _ := w.runningPods(ns, "short", c.UID)
		m := getJob(t, ns, "short")
		return running == 2 && suspended(m) && m.Status.Active == 2 && c.Labels[multicluster.OriginLabel] == string(m.UID),
			fmt.Sprintf("pods running %d, manager suspended %v active %d", running, suspended(m), m.Status.Active)
	})
	waitComplete(t, ns, "short", 60*time.Second)
	eventually(t, 30*time.Second, "quota released on both, the worker's copy deleted", func() (bool, string) {
		_, onManager := reservations(t)["job/"+ns+"/short"]
		_, onWorker := w.reservations()["job/"+ns+"/short"]
		c := w.copyOf(ns, "short")
		return !onManager && !onWorker && (c == nil || c.UID != copyUID), fmt.Sprint(onManager, onWorker, c != nil)
	})
	if m := getJob(t, ns, "short"); !suspended(m) || m.Status.Succeeded != 2 {
		t.Errorf("manager's short: suspended %v, succeeded %d; want suspended, 2", suspended(m), m.Status.Succeeded)
	}

	// A worker lost mid-run.
	createJob(t, jobSpec{ns: ns, name: "long", queue: "q", pods: 1, gpus: 1, runFor: "10m", managedBy: "sluice.dev/multicluster"})
	var first *batchv1.Job
	eventually(t, 60*time.Second, "long runs on the worker", func() (bool, string) {
		first = w.copyOf(ns, "long")
		if first == nil {
			return false, "no copy"
		}
		running, _ := w.runningPods(ns, "long", first.UID)
		return running == 1, fmt.Sprint("running ", running)
	})
	admitted := reservations(t)["job/"+ns+"/long"].Admission()
	w.stop(os.Kill)
	eventually(t, 60*time.Second, "long given up on the manager and reserved again", func() (bool, string) {
		r, ok := reservations(t)["job/"+ns+"/long"]
		return ok && r.Admission() != admitted && r.AwaitingChecks, fmt.Sprint(ok, r.Admission(), r.AwaitingChecks)
	})
	// Evicted on the manager for its check, which names the lost worker.
	st, err := env.js.Stream(context.Background(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(context.Background(), events.WorkloadSubject(events.TypeWorkloadEvictedV1, events.WorkloadRef{Kind: "job", Namespace: ns, Name: "long"}))
	if err != nil {
		t.Fatalf("long's eviction: %v", err)
	}
	var evicted events.WorkloadEvictedV1
	if err := json.Unmarshal(msg.Data, &evicted); err != nil {
		t.Fatal(err)
	}
	if want := "worker cluster " + e2eWorker + " lost"; evicted.Reason != "AdmissionCheck" || !strings.Contains(evicted.Message, want) {
		t.Errorf("long evicted with %s: %q; want AdmissionCheck, naming %q", evicted.Reason, evicted.Message, want)
	}
	w.start()
	eventually(t, 90*time.Second, "the worker replaced its copy and runs the new one only", func() (bool, string) {
		c := w.copyOf(ns, "long")
		if c == nil || c.UID == first.UID {
			_, all := w.runningPods(ns, "long", "")
			if all > 1 {
				t.Errorf("long runs twice in the worker: %d pods", all)
			}
			return false, "old copy still there"
		}
		ofNew, all := w.runningPods(ns, "long", c.UID)
		if all > 1 {
			t.Errorf("long runs twice in the worker: %d pods", all)
		}
		r := reservations(t)["job/"+ns+"/long"]
		return ofNew == 1 && all == 1 && !r.AwaitingChecks && r.DispatchedTo == e2eWorker, fmt.Sprint(ofNew, all, r.AwaitingChecks)
	})
	// Deleting it on the manager cleans the worker.
	if err := env.kube.BatchV1().Jobs(ns).Delete(context.Background(), "long", metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the worker's copy of long deleted", func() (bool, string) {
		c := w.copyOf(ns, "long")
		return c == nil || c.DeletionTimestamp != nil, "still there"
	})
}
