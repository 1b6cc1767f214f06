package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/services/integration/leaderworkerset"
	"github.com/sluice-dev/sluice/services/integration/pod"
	"github.com/sluice-dev/sluice/services/integration/statefulset"
	"github.com/sluice-dev/sluice/services/multicluster"
)

// The worker clusters the suite's Sluice (the manager) lets join, each
// with the password "<name>-secret".
var e2eWorkers = []string{"e2e-worker1", "e2e-worker2"}

// workerCluster is a second control plane with a Sluice of its own, whose
// NATS joins the suite's as a leaf node.
type workerCluster struct {
	name   string
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
	// leaf carries its NATS's leaf connection to the manager's.
	leaf *leafProxy
}

// startWorkerCluster brings up the worker's control plane, CRDs and
// Sluice; both go when the test ends. Its Sluice integrates batch/v1 Jobs,
// or the kinds named (their CRDs installed first).
func startWorkerCluster(t *testing.T, name string, kinds ...string) *workerCluster {
	t.Helper()
	top := root()
	dc := filepath.Join(top, "bin", "devcluster")
	w := &workerCluster{name: name, t: t, dir: t.TempDir()}
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
	integrations := "job"
	if len(kinds) > 0 {
		if err := installCRDs(cfg, kindCRDDir(t)); err != nil {
			t.Fatalf("worker's kind CRDs: %v", err)
		}
		integrations = strings.Join(kinds, ",")
	}
	w.kube = kubernetes.NewForConfigOrDie(cfg)
	w.dyn = dynamic.NewForConfigOrDie(cfg)
	natsPort, hookPort, httpPort := freePort(), freePort(), freePort()
	w.leaf = startLeafProxy(t, fmt.Sprintf("127.0.0.1:%d", env.leafPort))
	w.nats = fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	w.http = fmt.Sprintf("127.0.0.1:%d", httpPort)
	w.args = []string{"dev", "--kubeconfig", filepath.Join(w.dir, "kubeconfig"),
		"--nats-port", fmt.Sprint(natsPort), "--nats-store", filepath.Join(w.dir, "jetstream"),
		"--webhook-address", fmt.Sprintf("127.0.0.1:%d", hookPort), "--http-address", w.http,
		"--leaf-remote", fmt.Sprintf("nats-leaf://%s:%s-secret@%s", name, name, w.leaf.addr()), "--worker-heartbeat", "1s", "--integrations", integrations, "--log-level", logLevel()}
	if w.log, err = os.Create(filepath.Join(w.dir, "sluice.log")); err != nil {
		t.Fatal(err)
	}
	// Stopped at the end even when it never gets ready.
	t.Cleanup(func() {
		w.stop(os.Interrupt)
		if t.Failed() {
			b, _ := os.ReadFile(w.log.Name())
			t.Logf("%s's sluice log:\n%s", name, tail(string(b), 60))
		}
	})
	w.start()
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
	eventually(w.t, 60*time.Second, w.name+"'s sluice ready", func() (bool, string) {
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
	return reservationsIn(w.t, w.js)
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

// where finds the worker holding a copy of a manager's Job, and fails the
// test if more than one does: a Job is dispatched to one worker only.
func where(t *testing.T, workers []*workerCluster, ns, name string) (*workerCluster, *batchv1.Job) {
	t.Helper()
	var at *workerCluster
	var copy *batchv1.Job
	for _, w := range workers {
		if w.sluice == nil {
			continue // stopped: its API server still runs, its agent not
		}
		c := w.copyOf(ns, name)
		if c == nil || c.DeletionTimestamp != nil {
			continue
		}
		if _, held := c.Annotations["sluice.dev/hold"]; held {
			continue // offered, not picked
		}
		if at != nil {
			t.Errorf("%s/%s released to run in both %s and %s", ns, name, at.name, w.name)
		}
		at, copy = w, c
	}
	return at, copy
}

// runningAnywhere counts the running pods of a Job's name in every worker.
func runningAnywhere(workers []*workerCluster, ns, name string) (total int, per map[string]int) {
	per = map[string]int{}
	for _, w := range workers {
		_, all := w.runningPods(ns, name, "")
		per[w.name] = all
		total += all
	}
	return total, per
}

// multiClusterQueues makes, in the cluster of dyn, the namespace ns, a
// ClusterQueue ns of 64 CPUs and 8 GPUs (preempting lower priorities)
// running the admission check named check (none if ""), and the
// LocalQueue q.
func multiClusterQueues(t *testing.T, dyn dynamic.Interface, ns, check string) {
	t.Helper()
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
  preemption: {withinClusterQueue: LowerPriority}
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

// TestMultiClusterDispatch: a Job created on the manager is offered to
// two worker clusters and runs in the one picked, on its nodes, while the
// manager's copy stays suspended and mirrors its status; finishing
// releases quota on both sides and deletes the worker's copy. A worker
// whose Sluice is killed mid-run is lost after the config's timeout: the
// Job is given up and dispatched again, to the other worker; when the
// lost worker comes back its copy is deleted, so the Job runs once.
func TestMultiClusterDispatch(t *testing.T) {
	ns := "e2e-mc"
	queuesOn := func(dyn dynamic.Interface, check string) { multiClusterQueues(t, dyn, ns, check) }
	var workers []*workerCluster
	for _, name := range e2eWorkers {
		w := startWorkerCluster(t, name)
		queuesOn(w.dyn, "")
		applyTo(t, w.dyn, `apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata: {name: worker-urgent}
value: 10000
`)
		workers = append(workers, w)
	}
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
`, ns, strings.Join(e2eWorkers, ", ")))
	queuesOn(env.dyn, ns)
	watchQuota(t)
	waitCheckActive(t, ns, 60*time.Second)

	// Offered to both, run in one, mirrored, finished on both sides. The
	// webhook gives it spec.managedBy, so the manager's Job controller
	// leaves it (and the status mirrored into it) alone.
	// The integration learns that the queue dispatches to workers from
	// the configuration it watches: a dry run shows when it has.
	eventually(t, 60*time.Second, "the webhook knows q dispatches to workers", func() (bool, string) {
		got, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(), jobOf(jobSpec{ns: ns, name: "short", queue: "q", pods: 2, gpus: 1, runFor: "4s"}),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(got.Spec.ManagedBy, "") == "sluice.dev/multicluster", fmt.Sprint("managedBy ", got.Spec.ManagedBy)
	})
	if got := createJob(t, jobSpec{ns: ns, name: "short", queue: "q", pods: 2, gpus: 1, runFor: "4s"}); ptr.Deref(got.Spec.ManagedBy, "") != "sluice.dev/multicluster" {
		t.Fatalf("short created in a multi-cluster queue with managedBy %v; want sluice.dev/multicluster", got.Spec.ManagedBy)
	}
	var ran *workerCluster
	var copyUID types.UID
	eventually(t, 60*time.Second, "short runs in one worker on its nodes, the manager mirrors it", func() (bool, string) {
		w, c := where(t, workers, ns, "short")
		total, per := runningAnywhere(workers, ns, "short")
		if total > 2 {
			t.Errorf("short runs more pods than it has: %v", per)
		}
		if w == nil {
			return false, fmt.Sprint("not released anywhere yet; pods ", per)
		}
		ran, copyUID = w, c.UID
		running, _ := w.runningPods(ns, "short", c.UID)
		m := getJob(t, ns, "short")
		return running == 2 && suspended(m) && m.Status.Active == 2 && c.Labels[multicluster.OriginLabel] == string(m.UID),
			fmt.Sprintf("in %s: pods running %d, manager suspended %v active %d", w.name, running, suspended(m), m.Status.Active)
	})
	waitComplete(t, ns, "short", 60*time.Second)
	eventually(t, 30*time.Second, "quota released on both sides, the copies deleted", func() (bool, string) {
		_, onManager := reservations(t)["job/"+ns+"/short"]
		var left []string
		for _, w := range workers {
			if _, ok := w.reservations()["job/"+ns+"/short"]; ok {
				left = append(left, w.name+" reservation")
			}
			if c := w.copyOf(ns, "short"); c != nil && c.DeletionTimestamp == nil {
				left = append(left, w.name+" copy")
			}
		}
		return !onManager && len(left) == 0, fmt.Sprint(onManager, left)
	})
	if m := getJob(t, ns, "short"); !suspended(m) || m.Status.Succeeded != 2 {
		t.Errorf("manager's short: suspended %v, succeeded %d; want suspended, 2", suspended(m), m.Status.Succeeded)
	}
	t.Logf("short ran in %s (copy %s)", ran.name, copyUID)

	// A worker lost mid-run. Created suspended, which the webhook of a
	// local queue is not called for: the multi-cluster queues' match
	// condition calls it, and it sets managedBy.
	suspendedLong := jobOf(jobSpec{ns: ns, name: "long", queue: "q", pods: 1, gpus: 1, runFor: "10m"})
	suspendedLong.Spec.Suspend = ptr.To(true)
	if got, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(), suspendedLong, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	} else if ptr.Deref(got.Spec.ManagedBy, "") != "sluice.dev/multicluster" {
		t.Fatalf("long created suspended in a multi-cluster queue with managedBy %v; want sluice.dev/multicluster", got.Spec.ManagedBy)
	}
	var lost *workerCluster
	var first *batchv1.Job
	eventually(t, 60*time.Second, "long runs in one worker", func() (bool, string) {
		lost, first = where(t, workers, ns, "long")
		if lost == nil {
			return false, "not released anywhere"
		}
		running, _ := lost.runningPods(ns, "long", first.UID)
		return running == 1, fmt.Sprint("running ", running)
	})
	admitted := reservations(t)["job/"+ns+"/long"].Admission()
	lost.stop(os.Kill)
	eventually(t, 60*time.Second, "long given up and dispatched again, to the other worker", func() (bool, string) {
		r, ok := reservations(t)["job/"+ns+"/long"]
		return ok && r.Admission() != admitted && !r.AwaitingChecks && r.DispatchedTo != "" && r.DispatchedTo != lost.name,
			fmt.Sprint(ok, r.Admission(), r.AwaitingChecks, r.DispatchedTo)
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
	if want := "worker cluster " + lost.name + " lost"; evicted.Reason != "AdmissionCheck" || !strings.Contains(evicted.Message, want) {
		t.Errorf("long evicted with %s: %q; want AdmissionCheck, naming %q", evicted.Reason, evicted.Message, want)
	}
	var other *workerCluster
	for _, w := range workers {
		if w != lost {
			other = w
		}
	}
	eventually(t, 60*time.Second, "long runs in "+other.name, func() (bool, string) {
		c := other.copyOf(ns, "long")
		if c == nil {
			return false, "no copy"
		}
		running, _ := other.runningPods(ns, "long", c.UID)
		return running == 1, fmt.Sprint("running ", running)
	})
	// The lost worker comes back: its copy goes, and long runs once.
	lost.start()
	eventually(t, 60*time.Second, "the returned worker's copy of long deleted", func() (bool, string) {
		c := lost.copyOf(ns, "long")
		return c == nil || c.UID != first.UID, "old copy still there"
	})
	eventually(t, 60*time.Second, "long's pods run in one worker only", func() (bool, string) {
		total, per := runningAnywhere(workers, ns, "long")
		return total == 1 && per[other.name] == 1, fmt.Sprint(per)
	})
	if w, _ := where(t, workers, ns, "long"); w != other {
		t.Errorf("long released in %v, want %s only", w, other.name)
	}

	// Preempted in its worker by the worker's own urgent Job (all 8 GPUs):
	// the manager takes long back and dispatches it again, to the worker
	// with room.
	admitted = reservations(t)["job/"+ns+"/long"].Admission()
	urgent := jobOf(jobSpec{ns: ns, name: "urgent", queue: "q", priorityClass: "worker-urgent", pods: 8, gpus: 1, runFor: "10m"})
	if _, err := other.kube.BatchV1().Jobs(ns).Create(context.Background(), urgent, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create urgent in %s: %v", other.name, err)
	}
	eventually(t, 90*time.Second, "long, preempted in "+other.name+", dispatched again to "+lost.name, func() (bool, string) {
		r, ok := reservations(t)["job/"+ns+"/long"]
		return ok && r.Admission() != admitted && r.DispatchedTo == lost.name, fmt.Sprint(ok, r.Admission(), r.DispatchedTo)
	})
	msg, err = st.GetLastMsgForSubject(context.Background(), events.WorkloadSubject(events.TypeWorkloadEvictedV1, events.WorkloadRef{Kind: "job", Namespace: ns, Name: "long"}))
	if err != nil {
		t.Fatalf("long's eviction: %v", err)
	}
	if err := json.Unmarshal(msg.Data, &evicted); err != nil {
		t.Fatal(err)
	}
	if want := "the copy in worker cluster " + other.name + " was stopped there"; !strings.Contains(evicted.Message, want) {
		t.Errorf("long evicted with %q; want it to say %q", evicted.Message, want)
	}
	eventually(t, 60*time.Second, "long runs in "+lost.name+" only", func() (bool, string) {
		total, per := runningAnywhere(workers, ns, "long")
		return total == 1 && per[lost.name] == 1, fmt.Sprint(per)
	})
	if err := other.kube.BatchV1().Jobs(ns).Delete(context.Background(), "urgent", metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "urgent's quota in "+other.name+" released", func() (bool, string) {
		_, held := other.reservations()["job/"+ns+"/urgent"]
		return !held, "still held"
	})
	other = lost
	// Cut off from the manager (its leaf connection dropped, all else
	// running), the worker running long removes its copy itself before
	// the manager gives it up and another worker starts long: never in
	// two clusters at once.
	var far *workerCluster
	for _, w := range workers {
		if w != other {
			far = w
		}
	}
	cutCopy := other.copyOf(ns, "long")
	if cutCopy == nil {
		t.Fatal("long has no copy in " + other.name)
	}
	admitted = reservations(t)["job/"+ns+"/long"].Admission()
	other.leaf.cutOff()
	eventually(t, 60*time.Second, "long dispatched again to "+far.name+" after "+other.name+" was cut off", func() (bool, string) {
		total, per := runningAnywhere(workers, ns, "long")
		if total > 1 {
			t.Errorf("long runs in two clusters at once: %v", per)
		}
		r, ok := reservations(t)["job/"+ns+"/long"]
		running := 0
		if c := far.copyOf(ns, "long"); c != nil {
			running, _ = far.runningPods(ns, "long", c.UID)
		}
		return ok && r.Admission() != admitted && r.DispatchedTo == far.name && running == 1, fmt.Sprint(r.DispatchedTo, per)
	})
	if c := other.copyOf(ns, "long"); c != nil && c.UID == cutCopy.UID && c.DeletionTimestamp == nil {
		t.Errorf("the cut-off worker %s still has its copy of long", other.name)
	}
	// The order, from both clusters' own events: the copy's end in the cut
	// worker comes before the new copy's start in the other.
	lastEvent := func(js jetstream.JetStream, typ string) time.Time {
		t.Helper()
		st, err := js.Stream(context.Background(), bus.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(context.Background(), events.WorkloadSubject(typ, events.WorkloadRef{Kind: "job", Namespace: ns, Name: "long"}))
		if err != nil {
			t.Fatalf("%s of long: %v", typ, err)
		}
		e, err := events.DecodeParts(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return e.Time
	}
	gone, started := lastEvent(other.js, events.TypeWorkloadDeletedV1), lastEvent(far.js, events.TypeWorkloadStartedV1)
	if !gone.Before(started) {
		t.Errorf("long's copy in %s went at %s, after the copy in %s started at %s", other.name, gone.Format(time.RFC3339Nano), far.name, started.Format(time.RFC3339Nano))
	}
	t.Logf("self-fence: %s's copy gone at %s, %s's started at %s (%s later)", other.name, gone.Format(time.RFC3339Nano), far.name, started.Format(time.RFC3339Nano), started.Sub(gone))
	other.leaf.restore()
	eventually(t, 60*time.Second, other.name+"'s sluice ready again", func() (bool, string) {
		code, body, err := httpGet("http://" + other.http + "/readyz")
		return err == nil && code == 200, fmt.Sprint(code, body, err)
	})
	other = far

	// Deleting it on the manager cleans the worker.
	if err := env.kube.BatchV1().Jobs(ns).Delete(context.Background(), "long", metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the worker's copy of long deleted", func() (bool, string) {
		c := other.copyOf(ns, "long")
		return c == nil || c.DeletionTimestamp != nil, "still there"
	})
}

// TestMultiClusterKinds: an object of every kind with a CRD of its own
// (JobSet, RayJob, RayCluster, MPIJob, the training operator's jobs,
// AppWrapper) created in a multicluster queue on the manager is given its
// kind's managedBy, copied to the worker, admitted there and released to
// run, in the worker only: the manager's stays suspended. The status the
// kind's operator writes in the worker is mirrored on the manager's
// object, and its end there ends it on the manager: quota released on
// both sides, the copy deleted (a RayCluster, which never ends, is
// deleted on the manager instead). No operator runs: the test writes
// their status in the worker.
func TestMultiClusterKinds(t *testing.T) {
	installKindCRDs(t)
	ns := "e2e-mc-kinds"
	var names []string
	for _, ad := range kinds.All {
		if k := ad.Kind(); k.Module != "" && !k.IsParent() {
			names = append(names, k.Name)
		}
	}
	w := startWorkerCluster(t, e2eWorkers[0], append(names, "pod")...)
	multiClusterQueues(t, w.dyn, ns, "")
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: MultiClusterConfig
metadata: {name: %[1]s}
spec:
  clusters: [%[2]s]
---
apiVersion: sluice.dev/v1beta1
kind: AdmissionCheck
metadata: {name: %[1]s}
spec:
  controllerName: sluice.dev/multicluster
  parameters: {apiGroup: sluice.dev, kind: MultiClusterConfig, name: %[1]s}
`, ns, e2eWorkers[0]))
	multiClusterQueues(t, env.dyn, ns, ns)
	waitCheckActive(t, ns, 60*time.Second)

	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c, ok := kindCases[name]
			if !ok {
				t.Fatalf("kind %s has no case in kindCases", name)
			}
			k := c.adapter.Kind()
			if c.prepare != nil {
				c.prepare(t, env.dyn)
				c.prepare(t, w.dyn)
			}
			var doc map[string]any
			if err := yaml.Unmarshal([]byte(fmt.Sprintf(c.manifest, ns, "far")), &doc); err != nil {
				t.Fatal(err)
			}
			mine := env.dyn.Resource(k.GVR()).Namespace(ns)
			theirs := w.dyn.Resource(k.GVR()).Namespace(ns)
			// The integration learns that the queue dispatches to workers
			// from the configuration it watches: retry a dry run until its
			// webhook says so.
			if len(k.ManagedBy) > 0 {
				eventually(t, 60*time.Second, name+" given its managedBy by the webhook", func() (bool, string) {
					got, err := mine.Create(context.Background(), &unstructured.Unstructured{Object: doc}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
					if err != nil {
						return false, err.Error()
					}
					v, _, _ := unstructured.NestedString(got.Object, k.ManagedBy...)
					return v == k.MultiClusterManagedBy(), fmt.Sprintf("managedBy %q", v)
				})
			}
			created, err := mine.Create(context.Background(), &unstructured.Unstructured{Object: doc}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
			if len(k.ManagedBy) > 0 {
				if got, _, _ := unstructured.NestedString(created.Object, k.ManagedBy...); got != k.MultiClusterManagedBy() {
					t.Errorf("%s created with %s %q; want %q", name, strings.Join(k.ManagedBy, "."), got, k.MultiClusterManagedBy())
				}
			}
			key := name + "/" + ns + "/far"
			eventually(t, 60*time.Second, name+" released to run in the worker, suspended on the manager", func() (bool, string) {
				cp, err := theirs.Get(context.Background(), "far", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				if _, held := cp.GetAnnotations()["sluice.dev/hold"]; held {
					return false, "held in the worker"
				}
				copySuspended, _ := podSetSelectors(t, c.adapter, cp)
				managerSuspended, _ := podSetSelectors(t, c.adapter, getObject(t, k, ns, "far"))
				r := reservations(t)[key]
				return !copySuspended && managerSuspended && r.DispatchedTo == w.name,
					fmt.Sprintf("copy suspended %v, manager's suspended %v, dispatched to %q", copySuspended, managerSuspended, r.DispatchedTo)
			})
			if c.finish == nil {
				if err := mine.Delete(context.Background(), "far", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			} else {
				cp, err := theirs.Get(context.Background(), "far", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.finish(cp); err != nil {
					t.Fatal(err)
				}
				if _, err := theirs.UpdateStatus(context.Background(), cp, metav1.UpdateOptions{}); err != nil {
					t.Fatalf("finish the copy of %s: %v", name, err)
				}
				eventually(t, 60*time.Second, name+"'s end mirrored on the manager", func() (bool, string) {
					j, err := c.adapter.Decode(getObject(t, k, ns, "far"))
					if err != nil {
						return false, err.Error()
					}
					done, _, msg := j.Finished()
					return done, "not finished: " + msg
				})
			}
			eventually(t, 60*time.Second, "quota released on both sides, the copy deleted", func() (bool, string) {
				_, onManager := reservations(t)[key]
				_, onWorker := w.reservations()[key]
				cp, err := theirs.Get(context.Background(), "far", metav1.GetOptions{})
				copyLeft := err == nil && cp.GetDeletionTimestamp() == nil
				return !onManager && !onWorker && !copyLeft, fmt.Sprintf("held on the manager %v, on the worker %v; copy left %v", onManager, onWorker, copyLeft)
			})
			if c.finish != nil {
				_ = mine.Delete(context.Background(), "far", metav1.DeleteOptions{})
			}
		})
	}
	t.Run("deployment", func(t *testing.T) { multiClusterDeployment(t, w, ns) })
	t.Run("statefulset", func(t *testing.T) { multiClusterStatefulSet(t, w, ns) })
	t.Run("leaderworkerset", func(t *testing.T) { multiClusterLeaderWorkerSet(t, w, ns) })
}

// multiClusterDeployment: a Deployment's Pods, each a workload of its own,
// are dispatched one by one: each runs as a copy in the worker while the
// manager's Pod stays gated and mirrors the copy's status (so the
// Deployment counts it ready); scaling down withdraws a copy, deleting
// the Deployment withdraws the rest.
func multiClusterDeployment(t *testing.T, w *workerCluster, ns string) {
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{v1beta1.QueueNameLabel: "q"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: servingTemplate("web")},
	}
	deps := env.kube.AppsV1().Deployments(ns)
	if _, err := deps.Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	theirs := w.dyn.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(ns)
	// state is groupCopies with each mirrored Pod's workload dispatched
	// to the worker.
	state := func() (copies, mirrored []string, msg string) {
		copies, all, msg := groupCopies(t, w, ns, "web")
		held := reservations(t)
		for _, p := range all {
			if r := held["pod/"+ns+"/"+p]; r.DispatchedTo == w.name {
				mirrored = append(mirrored, p)
			}
		}
		return copies, mirrored, msg
	}
	eventually(t, 90*time.Second, "both Pods run as copies in the worker, the manager's gated and mirroring them", func() (bool, string) {
		copies, mirrored, msg := state()
		return len(copies) == 2 && slices.Equal(copies, mirrored), msg
	})
	eventually(t, 30*time.Second, "the Deployment counts the mirrored Pods ready", func() (bool, string) {
		d, err := deps.Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.ReadyReplicas == 2, fmt.Sprintf("ready replicas %d", d.Status.ReadyReplicas)
	})
	if _, err := deps.Patch(context.Background(), "web", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("scale down: %v", err)
	}
	eventually(t, 60*time.Second, "scaled down: one copy withdrawn", func() (bool, string) {
		copies, mirrored, msg := state()
		return len(copies) == 1 && slices.Equal(copies, mirrored), msg
	})
	if err := deps.Delete(context.Background(), "web", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatalf("delete deployment: %v", err)
	}
	eventually(t, 60*time.Second, "deleted: every copy withdrawn, no quota held on either side", func() (bool, string) {
		cps, err := theirs.List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		n, _ := heldIn(t, ns, "web-")
		var worker int
		for key := range w.reservations() {
			if strings.HasPrefix(key, "pod/"+ns+"/web-") {
				worker++
			}
		}
		return len(cps.Items) == 0 && n == 0 && worker == 0, fmt.Sprintf("%d copies left; held on the manager %d, on the worker %d", len(cps.Items), n, worker)
	})
}

// groupCopies are the worker's running copies of the manager's Pods
// labelled app, and the manager's Pods of app that are gated and mirror a
// running copy; msg says what was seen.
func groupCopies(t *testing.T, w *workerCluster, ns, app string) (copies, mirrored []string, msg string) {
	t.Helper()
	cps, err := w.dyn.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, nil, err.Error()
	}
	for _, c := range cps.Items {
		phase, _, _ := unstructured.NestedString(c.Object, "status", "phase")
		gates, _, _ := unstructured.NestedSlice(c.Object, "spec", "schedulingGates")
		if c.GetDeletionTimestamp() == nil && phase == "Running" && len(gates) == 0 && c.GetLabels()["sluice.dev/multicluster-origin"] != "" {
			copies = append(copies, c.GetName())
		}
	}
	pods, err := env.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, nil, err.Error()
	}
	var seen []string
	for _, p := range pods.Items {
		seen = append(seen, fmt.Sprintf("%s gates %d phase %s", p.Name, len(p.Spec.SchedulingGates), p.Status.Phase))
		if p.DeletionTimestamp == nil && len(p.Spec.SchedulingGates) > 0 && p.Status.Phase == corev1.PodRunning {
			mirrored = append(mirrored, p.Name)
		}
	}
	sort.Strings(copies)
	sort.Strings(mirrored)
	return copies, mirrored, fmt.Sprintf("copies %v; manager's pods: %s", copies, strings.Join(seen, "; "))
}

// multiClusterStatefulSet: a StatefulSet's Pods are one pod group,
// admitted on its first Pod and dispatched whole: the first runs as a copy
// in the worker, and once the manager mirrors it ready, the StatefulSet
// makes the next, which is sent to the same worker under the same
// admission; deleting the StatefulSet withdraws the copies.
func multiClusterStatefulSet(t *testing.T, w *workerCluster, ns string) {
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Labels: map[string]string{v1beta1.QueueNameLabel: "q"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: servingTemplate("db")},
	}
	sets := env.kube.AppsV1().StatefulSets(ns)
	if _, err := sets.Create(context.Background(), ss, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create statefulset: %v", err)
	}
	key := "pod/" + ns + "/" + statefulset.GroupName("db")
	eventually(t, 120*time.Second, "both Pods, made one after the other, run as copies in the worker", func() (bool, string) {
		copies, mirrored, msg := groupCopies(t, w, ns, "db")
		r := reservations(t)[key]
		return len(copies) == 2 && slices.Equal(copies, mirrored) && r.DispatchedTo == w.name, fmt.Sprintf("%s; dispatched to %q", msg, r.DispatchedTo)
	})
	if _, onWorker := w.reservations()[key]; !onWorker {
		t.Errorf("the worker holds no quota for the group %s", key)
	}
	if err := sets.Delete(context.Background(), "db", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatalf("delete statefulset: %v", err)
	}
	eventually(t, 60*time.Second, "deleted: the copies withdrawn, no quota held on either side", func() (bool, string) {
		copies, _, msg := groupCopies(t, w, ns, "db")
		_, onManager := reservations(t)[key]
		_, onWorker := w.reservations()[key]
		return len(copies) == 0 && !onManager && !onWorker, fmt.Sprintf("%s; held on the manager %v, on the worker %v", msg, onManager, onWorker)
	})
}

// multiClusterLeaderWorkerSet: each group of a LeaderWorkerSet (its
// controller runs in the manager) is dispatched whole: its leader and
// workers run as copies in one worker.
func multiClusterLeaderWorkerSet(t *testing.T, w *workerCluster, ns string) {
	startLWSController(t, ns)
	res := env.dyn.Resource(leaderworkerset.Kind.GVR()).Namespace(ns)
	if _, err := res.Create(context.Background(), leaderWorkerSet(t, ns, "llm", "LeaderCreated"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create leaderworkerset: %v", err)
	}
	key := "pod/" + ns + "/" + pod.LeaderWorkerSetGroupName("llm", "0")
	eventually(t, 120*time.Second, "the group's leader and 2 workers run as copies in the worker", func() (bool, string) {
		copies, mirrored, msg := groupCopies(t, w, ns, "llm")
		r := reservations(t)[key]
		return len(copies) == 3 && slices.Equal(copies, mirrored) && r.DispatchedTo == w.name, fmt.Sprintf("%s; dispatched to %q", msg, r.DispatchedTo)
	})
	if err := res.Delete(context.Background(), "llm", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatalf("delete leaderworkerset: %v", err)
	}
	eventually(t, 60*time.Second, "deleted: the copies withdrawn, no quota held on either side", func() (bool, string) {
		copies, _, msg := groupCopies(t, w, ns, "llm")
		_, onManager := reservations(t)[key]
		_, onWorker := w.reservations()[key]
		return len(copies) == 0 && !onManager && !onWorker, fmt.Sprintf("%s; held on the manager %v, on the worker %v", msg, onManager, onWorker)
	})
}
