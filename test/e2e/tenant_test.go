package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/visibility"
	"github.com/sluice-dev/sluice/services/integration"
)

// What a careless or hostile tenant can write on its own Jobs, tried
// against the real API server, webhook and services.

// removeQueueLabel patches the queue label away from a Job.
func removeQueueLabel(ctx context.Context, ns, name string) error {
	patch := []byte(`{"metadata":{"labels":{"` + v1beta1.QueueNameLabel + `":null}}}`)
	_, err := env.kube.BatchV1().Jobs(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// pendingNames lists the names the pending API shows waiting in a
// LocalQueue "q" of ns, with their reasons.
func pendingNames(t *testing.T, ns string) (map[string]string, error) {
	t.Helper()
	res, err := http.Get("http://" + env.httpAddr + visibility.Prefix + "/namespaces/" + ns + "/localqueues/q/pendingworkloads")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var got visibility.PendingWorkloadsSummary
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, it := range got.Items {
		out[it.Metadata.Name] = it.Reason
	}
	return out, nil
}

// lastEvent reads the last event of a type stored about a Job.
func lastEvent(t *testing.T, typ, ns, name string, into any) bool {
	t.Helper()
	st, err := env.js.Stream(context.Background(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(context.Background(), events.WorkloadSubject(typ, events.WorkloadRef{Kind: "job", Namespace: ns, Name: name}))
	if err != nil {
		return false
	}
	if err := json.Unmarshal(msg.Data, into); err != nil {
		t.Fatalf("decode %s of %s/%s: %v", typ, ns, name, err)
	}
	return true
}

// TestQueueLabelCannotBeRemovedFromARunningJob: a running Job keeps the
// queue it was admitted by; the API server refuses the change through the
// webhook, naming the label, and the Job keeps running in its queue.
func TestQueueLabelCannotBeRemovedFromARunningJob(t *testing.T) {
	ns := "e2e-tenant-running"
	queues(t, ns, 4, "Never")
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 2, gpus: 1, runFor: "20s"})
	waitRunning(t, ns, "running", 30*time.Second)
	ctx := context.Background()
	err := removeQueueLabel(ctx, ns, "running")
	if err == nil || !strings.Contains(err.Error(), "may not be removed") || !strings.Contains(err.Error(), v1beta1.QueueNameLabel) {
		t.Fatalf("removing the queue label of a running Job: %v; want it refused, naming the label", err)
	}
	patch := []byte(`{"metadata":{"labels":{"` + v1beta1.QueueNameLabel + `":"elsewhere"}}}`)
	if _, err := env.kube.BatchV1().Jobs(ns).Patch(ctx, "running", types.MergePatchType, patch, metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "may not be changed") {
		t.Fatalf("moving a running Job to another queue: %v; want it refused", err)
	}
	// Labelled again with its own queue's name: no change, allowed.
	same := []byte(`{"metadata":{"labels":{"` + v1beta1.QueueNameLabel + `":"q"}}}`)
	if _, err := env.kube.BatchV1().Jobs(ns).Patch(ctx, "running", types.MergePatchType, same, metav1.PatchOptions{}); err != nil {
		t.Fatalf("the same queue label again: %v", err)
	}
	// Other updates of a running Job still go through (and are not sent
	// to the webhook at all).
	other := []byte(`{"metadata":{"labels":{"team":"a"}}}`)
	if _, err := env.kube.BatchV1().Jobs(ns).Patch(ctx, "running", types.MergePatchType, other, metav1.PatchOptions{}); err != nil {
		t.Fatalf("another label on a running Job: %v", err)
	}
	if j := getJob(t, ns, "running"); j.Labels[v1beta1.QueueNameLabel] != "q" || suspended(j) {
		t.Fatalf("the running Job changed: labels %v, suspended %t", j.Labels, suspended(j))
	}
	if _, held := reservations(t)["job/"+ns+"/running"]; !held {
		t.Errorf("the running Job lost its reservation")
	}
	waitComplete(t, ns, "running", 60*time.Second)
}

// TestQueueLabelRemovedFromAQueuedJob: a suspended, queued Job whose label
// is removed leaves its queue cleanly: one deleted event with reason
// QueueNameRemoved, gone from the pending API, no record, no reservation,
// and it stays suspended and unmanaged. Fifty of them at once do not hold
// up another tenant's Jobs. The quota checker watches throughout.
func TestQueueLabelRemovedFromAQueuedJob(t *testing.T) {
	ns, other := "e2e-tenant-leave", "e2e-tenant-other"
	applyQueues(t, other, "Never", `  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: nvidia.com/gpu, nominalQuota: 8}
`)
	queues(t, ns, 1, "Never") // and the quota checker, which knows both
	ctx := context.Background()
	createJob(t, jobSpec{ns: ns, name: "blocker", queue: "q", pods: 1, gpus: 1, runFor: "300s"})
	waitRunning(t, ns, "blocker", 30*time.Second)
	const n = 50
	for i := range n {
		createJob(t, jobSpec{ns: ns, name: fmt.Sprintf("queued-%02d", i), queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	}
	eventually(t, 60*time.Second, "all queued Jobs listed as pending", func() (bool, string) {
		p, err := pendingNames(t, ns)
		return err == nil && len(p) == n, fmt.Sprintf("%d listed, err %v", len(p), err)
	})

	// One alone first, checked in full.
	if err := removeQueueLabel(ctx, ns, "queued-00"); err != nil {
		t.Fatalf("remove the label of a suspended, queued Job: %v", err)
	}
	waitEvent(t, ns, "queued-00", "LeftQueue", "no longer queued in LocalQueue q", 30*time.Second)
	var deleted events.WorkloadDeletedV1
	eventually(t, 10*time.Second, "deleted event", func() (bool, string) {
		ok := lastEvent(t, events.TypeWorkloadDeletedV1, ns, "queued-00", &deleted)
		return ok && deleted.Reason == integration.ReasonQueueNameRemoved, fmt.Sprintf("%+v", deleted)
	})
	eventually(t, 10*time.Second, "queued-00 gone from the pending API", func() (bool, string) {
		p, err := pendingNames(t, ns)
		_, listed := p["queued-00"]
		return err == nil && !listed && len(p) == n-1, fmt.Sprintf("%d listed (queued-00: %t), err %v", len(p), listed, err)
	})

	// Then the other 49 at once, while another tenant submits ten Jobs;
	// their time to start is measured against the same ten submitted
	// while nothing else happens.
	startDelays := func(prefix string, during func()) []time.Duration {
		var wg sync.WaitGroup
		if during != nil {
			wg.Go(during)
		}
		created := map[string]time.Time{}
		for i := range 10 {
			name := fmt.Sprintf("%s-%d", prefix, i)
			created[name] = time.Now()
			createJob(t, jobSpec{ns: other, name: name, queue: "q", pods: 1, gpus: 0, runFor: "1s"})
		}
		started := map[string]time.Duration{}
		eventually(t, 90*time.Second, "the other tenant's "+prefix+" Jobs started", func() (bool, string) {
			for name, at := range created {
				if _, ok := started[name]; ok {
					continue
				}
				if j := getJob(t, other, name); !suspended(j) {
					started[name] = time.Since(at)
				}
			}
			return len(started) == len(created), fmt.Sprintf("%d of %d", len(started), len(created))
		})
		wg.Wait()
		var out []time.Duration
		for _, d := range started {
			out = append(out, d)
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	quiet := startDelays("quiet", nil)
	var removeErrs []string
	var mu sync.Mutex
	burst := startDelays("burst", func() {
		var wg sync.WaitGroup
		for i := 1; i < n; i++ {
			wg.Go(func() {
				if err := removeQueueLabel(ctx, ns, fmt.Sprintf("queued-%02d", i)); err != nil {
					mu.Lock()
					removeErrs = append(removeErrs, err.Error())
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	})
	if len(removeErrs) > 0 {
		t.Fatalf("label removals refused: %v", removeErrs)
	}
	t.Logf("the other tenant's time to start, 10 Jobs: quiet median %v max %v; during %d label removals median %v max %v",
		quiet[len(quiet)/2], quiet[len(quiet)-1], n-1, burst[len(burst)/2], burst[len(burst)-1])

	eventually(t, 60*time.Second, "every queued Job gone from the pending API and the ledger", func() (bool, string) {
		p, err := pendingNames(t, ns)
		if err != nil {
			return false, err.Error()
		}
		held := 0
		for wk := range reservations(t) {
			if strings.HasPrefix(wk, "job/"+ns+"/queued-") {
				held++
			}
		}
		return len(p) == 0 && held == 0, fmt.Sprintf("%d listed, %d reservations", len(p), held)
	})
	// They stay suspended, unmanaged; and the blocker's quota is still
	// its own: freeing it admits nobody from the left Jobs.
	for i := range n {
		if j := getJob(t, ns, fmt.Sprintf("queued-%02d", i)); !suspended(j) {
			t.Errorf("%s started after leaving its queue", j.Name)
		}
	}
	bg := metav1.DeletePropagationBackground
	if err := env.kube.BatchV1().Jobs(ns).Delete(ctx, "blocker", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	for i := range n {
		if j := getJob(t, ns, fmt.Sprintf("queued-%02d", i)); !suspended(j) {
			t.Errorf("%s started after leaving its queue and the quota freeing", j.Name)
		}
	}
	// Labelled again, a Job that left is queued again, as a new workload
	// of the same Job, and runs on the quota the blocker freed.
	patch := []byte(`{"metadata":{"labels":{"` + v1beta1.QueueNameLabel + `":"q"}}}`)
	if _, err := env.kube.BatchV1().Jobs(ns).Patch(ctx, "queued-00", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label a suspended Job again: %v", err)
	}
	waitRunning(t, ns, "queued-00", 45*time.Second)
	var submitted events.WorkloadSubmittedV1
	if !lastEvent(t, events.TypeWorkloadSubmittedV1, ns, "queued-00", &submitted) || submitted.Workload.UID != deleted.Workload.UID+"_1" {
		t.Errorf("the Job's new workload: %+v; want UID %s_1", submitted.Workload, deleted.Workload.UID)
	}
	waitComplete(t, ns, "queued-00", 60*time.Second)
}

// TestQueuedJobMovesToAnotherQueue: a suspended, queued Job whose label
// names another LocalQueue leaves the first (one deleted event, reason
// QueueNameChanged) and queues in the other, where it runs; the first
// queue's pending list no longer has it.
func TestQueuedJobMovesToAnotherQueue(t *testing.T) {
	ns := "e2e-tenant-move"
	applyQueues(t, ns+"-roomy", "Never", `  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: nvidia.com/gpu, nominalQuota: 4}
`)
	queues(t, ns, 1, "Never")
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: roomy, namespace: %[1]s}
spec: {clusterQueue: %[1]s-roomy}
`, ns))
	ctx := context.Background()
	createJob(t, jobSpec{ns: ns, name: "blocker", queue: "q", pods: 1, gpus: 1, runFor: "120s"})
	waitRunning(t, ns, "blocker", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "mover", queue: "q", pods: 2, gpus: 1, runFor: "2s"})
	waitEvent(t, ns, "mover", "Pending", "insufficient quota for nvidia.com/gpu", 45*time.Second)

	patch := []byte(`{"metadata":{"labels":{"` + v1beta1.QueueNameLabel + `":"roomy"}}}`)
	if _, err := env.kube.BatchV1().Jobs(ns).Patch(ctx, "mover", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("move a suspended Job to another queue: %v", err)
	}
	waitEvent(t, ns, "mover", "QueueChanged", "moved from LocalQueue q to roomy", 30*time.Second)
	waitEvent(t, ns, "mover", "Admitted", "ClusterQueue "+ns+"-roomy", 30*time.Second)
	var deleted events.WorkloadDeletedV1
	if !lastEvent(t, events.TypeWorkloadDeletedV1, ns, "mover", &deleted) || deleted.Reason != integration.ReasonQueueNameChanged {
		t.Errorf("the first workload's end: %+v; want reason %s", deleted, integration.ReasonQueueNameChanged)
	}
	if p, err := pendingNames(t, ns); err != nil || len(p) != 0 {
		t.Errorf("queue q still lists %v (%v)", p, err)
	}
	waitComplete(t, ns, "mover", 60*time.Second)
	if j := getJob(t, ns, "blocker"); suspended(j) {
		t.Errorf("the blocker was stopped")
	}
}

// TestOverflowedRequestNeverAdmits: a Job of 3 pods asking 4E GPUs each,
// which the API server accepts, waits as invalid with a reason naming its
// pod set and resource (an InvalidWorkload Event, the pending API, the
// event stream), while a Job beside it in the same queue runs on the
// quota it would have broken.
func TestOverflowedRequestNeverAdmits(t *testing.T) {
	ns := "e2e-tenant-overflow"
	queues(t, ns, 8, "Never")
	huge := jobOf(jobSpec{ns: ns, name: "huge", queue: "q", pods: 3, gpus: 1, runFor: "1s"})
	c := &huge.Spec.Template.Spec.Containers[0]
	c.Resources.Requests["nvidia.com/gpu"] = resource.MustParse("4E")
	c.Resources.Limits["nvidia.com/gpu"] = resource.MustParse("4E")
	if _, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(), huge, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the 4E Job: %v", err)
	}
	const want = "invalid workload: pod set main: request of nvidia.com/gpu per pod is more than Sluice can count"
	waitEvent(t, ns, "huge", "InvalidWorkload", want, 45*time.Second)
	eventually(t, 10*time.Second, "huge in the pending API as invalid", func() (bool, string) {
		p, err := pendingNames(t, ns)
		return err == nil && strings.HasPrefix(p["huge"], want), fmt.Sprintf("%v %v", p, err)
	})
	var pending events.WorkloadPendingV1
	if !lastEvent(t, events.TypeWorkloadPendingV1, ns, "huge", &pending) || !pending.Invalid || !strings.HasPrefix(pending.Reason, want) {
		t.Errorf("last pending event of huge: %+v; want invalid, with the reason", pending)
	}
	createJob(t, jobSpec{ns: ns, name: "fits", queue: "q", pods: 1, gpus: 8, runFor: "2s"})
	waitRunning(t, ns, "fits", 30*time.Second)
	if !suspended(getJob(t, ns, "huge")) {
		t.Fatalf("the 4E Job started")
	}
	waitComplete(t, ns, "fits", 60*time.Second)
	if _, held := reservations(t)["job/"+ns+"/huge"]; held {
		t.Errorf("the 4E Job holds a reservation")
	}
}

// TestInvalidQueueNameIsRefused: a queue name no LocalQueue can have is
// refused at create by the webhook (a Job created running), and reported
// with an Event when the webhook was not asked (a Job created suspended).
func TestInvalidQueueNameIsRefused(t *testing.T) {
	ns := "e2e-tenant-name"
	queues(t, ns, 1, "Never")
	ctx := context.Background()
	running := jobOf(jobSpec{ns: ns, name: "running", queue: "Team_A", pods: 1, gpus: 1, runFor: "1s"})
	if _, err := env.kube.BatchV1().Jobs(ns).Create(ctx, running, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), `"Team_A" cannot name a LocalQueue`) {
		t.Fatalf("create with queue name Team_A: %v; want it refused, naming the value", err)
	}
	// The match condition sends a suspended create with a bad name to the
	// webhook too.
	suspendedJob := jobOf(jobSpec{ns: ns, name: "suspended", queue: "Team_A", pods: 1, gpus: 1, runFor: "1s"})
	suspendedJob.Spec.Suspend = new(bool)
	*suspendedJob.Spec.Suspend = true
	if _, err := env.kube.BatchV1().Jobs(ns).Create(ctx, suspendedJob, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "cannot name a LocalQueue") {
		t.Fatalf("create suspended with queue name Team_A: %v; want it refused", err)
	}
	// A maximum execution time label that is not a number of seconds is
	// refused on a Job created suspended, as on any other.
	bad := jobOf(jobSpec{ns: ns, name: "maxexec", queue: "q", pods: 1, gpus: 1, runFor: "1s",
		labels: map[string]string{v1beta1.MaxExecTimeLabel: "1h"}})
	bad.Spec.Suspend = suspendedJob.Spec.Suspend
	if _, err := env.kube.BatchV1().Jobs(ns).Create(ctx, bad, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), v1beta1.MaxExecTimeLabel) {
		t.Fatalf("create suspended with %s=1h: %v; want it refused", v1beta1.MaxExecTimeLabel, err)
	}
}

// TestRecordTooLargeIsRefused: a Job whose workload record would not fit
// in a NATS message (20,000 node selector entries, about 1.2 MB, which the
// API server accepts) stays suspended with an InvalidWorkload Event that
// says so, and is not retried; a Job beside it runs.
func TestRecordTooLargeIsRefused(t *testing.T) {
	ns := "e2e-tenant-large"
	queues(t, ns, 4, "Never")
	big := jobOf(jobSpec{ns: ns, name: "big", queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	sel := map[string]string{}
	for i := range 20000 {
		sel[fmt.Sprintf("example.com/key-%05d", i)] = strings.Repeat("v", 40)
	}
	big.Spec.Template.Spec.NodeSelector = sel
	if _, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(), big, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a Job with a large node selector: %v", err)
	}
	waitEvent(t, ns, "big", "InvalidWorkload", "more than the 1015808 a record may have", 45*time.Second)
	createJob(t, jobSpec{ns: ns, name: "small", queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	waitComplete(t, ns, "small", 60*time.Second)
	if !suspended(getJob(t, ns, "big")) {
		t.Fatalf("the Job too large to record started")
	}
	// Refused once, not retried: one Event (a repeat would raise its count).
	evs, err := env.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=big,reason=InvalidWorkload"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 || evs.Items[0].Count > 2 {
		var counts []int32
		for _, e := range evs.Items {
			counts = append(counts, e.Count)
		}
		t.Errorf("InvalidWorkload Events on big: %d, counts %v; want one, told once", len(evs.Items), counts)
	}
}
