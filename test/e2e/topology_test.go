package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	jobsetv1 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/services/integration/jobset"
)

// The topology tests run on a data center of their own: kwok nodes in 2
// blocks × 2 racks × 2 nodes of 4 GPUs (a rack holds 8 one-GPU pods, a
// block 16), tainted so no other test's pods land on them, labelled under
// e2e.sluice.dev/ so the Topology "e2e-dc" sees only them.
const (
	tasBlock  = "e2e.sluice.dev/block"
	tasRack   = "e2e.sluice.dev/rack"
	tasTaint  = "e2e.sluice.dev/tas"
	tasFlavor = "e2e-tas"
)

// tasNodes creates the data center, the Topology and the flavor, and
// deletes the nodes when the test ends.
func tasNodes(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	var names []string
	for b := 1; b <= 2; b++ {
		for r := 1; r <= 2; r++ {
			for n := 0; n < 2; n++ {
				name := fmt.Sprintf("e2e-tas-b%d-r%d-%d", b, r, n)
				names = append(names, name)
				tasNode(t, name)
			}
		}
	}
	t.Cleanup(func() {
		for _, n := range names {
			_ = env.kube.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	apply(t, `apiVersion: sluice.dev/v1beta1
kind: Topology
metadata: {name: e2e-dc}
spec:
  levels:
  - nodeLabel: `+tasBlock+`
  - nodeLabel: `+tasRack+`
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: `+tasFlavor+`}
spec:
  nodeLabels: {node-group: `+tasFlavor+`}
  topologyName: e2e-dc
  tolerations: [{key: `+tasTaint+`, operator: Exists, effect: NoSchedule}]
`)
	eventually(t, 60*time.Second, "the data center's nodes Ready", func() (bool, string) {
		ready := 0
		for _, n := range names {
			node, err := env.kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == len(names), fmt.Sprintf("%d of %d ready", ready, len(names))
	})
}

// tasNode creates one node of the data center, named e2e-tas-bB-rR-N.
func tasNode(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	var b, r, n int
	if _, err := fmt.Sscanf(name, "e2e-tas-b%d-r%d-%d", &b, &r, &n); err != nil {
		t.Fatalf("node name %s: %v", name, err)
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("4")}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{"type": "kwok", corev1.LabelHostname: name, "node-group": tasFlavor,
				tasBlock: fmt.Sprintf("b%d", b), tasRack: fmt.Sprintf("b%d-r%d", b, r)}},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: tasTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
	if _, err := env.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create node %s: %v", name, err)
	}
	// kwok writes the status too: retry on its conflicts.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := env.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity, cur.Status.Allocatable = res, res
		_, err = env.kube.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("node %s status: %v", name, err)
	}
}

// tasQueue is a ClusterQueue (and namespace, LocalQueue "q") with quota
// for the whole data center on the topology-aware flavor.
func tasQueue(t *testing.T, ns, preemption string) {
	t.Helper()
	queuesWith(t, ns, preemption, `  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: `+tasFlavor+`
      resources:
      - {name: cpu, nominalQuota: 256}
      - {name: nvidia.com/gpu, nominalQuota: 32}
`)
}

// tasJob creates a Job of one-GPU pods whose template carries the given
// annotations, at the given WorkloadPriorityClass ("" for none).
func tasJob(t *testing.T, ns, name string, pods int32, class string, annotations map[string]string) {
	t.Helper()
	j := jobOf(jobSpec{ns: ns, name: name, queue: "q", priorityClass: class, pods: pods, gpus: 1, runFor: "10m"})
	maps.Copy(j.Spec.Template.Annotations, annotations)
	if _, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create job %s/%s: %v", ns, name, err)
	}
}

// placedPods lists the live pods matching selector, once all want of them
// are bound, as node name per pod.
func placedPods(t *testing.T, ns, selector string, want int) []string {
	t.Helper()
	var nodes []string
	eventually(t, 90*time.Second, fmt.Sprintf("%d pods of %s bound", want, selector), func() (bool, string) {
		l, err := env.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		nodes = nodes[:0]
		var state []string
		for _, p := range l.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				continue
			}
			state = append(state, fmt.Sprintf("%s on %q gates %v", p.Name, p.Spec.NodeName, p.Spec.SchedulingGates))
			if p.Spec.NodeName != "" {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		return len(nodes) == want && len(state) == want, strings.Join(state, "; ")
	})
	sort.Strings(nodes)
	return nodes
}

// rackOf and blockOf read a data center node's name (e2e-tas-b1-r2-0).
func rackOf(node string) string {
	parts := strings.Split(node, "-")
	if len(parts) < 5 {
		return "not a data center node: " + node
	}
	return parts[2] + "-" + parts[3]
}

func blockOf(node string) string { return strings.SplitN(rackOf(node), "-", 2)[0] }

// distinct counts each value.
func distinct(nodes []string, of func(string) string) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		out[of(n)]++
	}
	return out
}

func TestTopologyAwareScheduling(t *testing.T) {
	tasNodes(t)
	apply(t, `apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata: {name: e2e-tas-low}
value: 1
---
apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata: {name: e2e-tas-mid}
value: 10
---
apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata: {name: e2e-tas-urgent}
value: 50
---
apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata: {name: e2e-tas-keep}
value: 60
`)
	rack := map[string]string{v1beta1.PodSetRequiredTopologyAnnotation: tasRack}

	t.Run("a required-rack Job's pods all land in one rack, gated until given their node", func(t *testing.T) {
		ns := "e2e-tas-rack"
		tasQueue(t, ns, "Never")
		tasJob(t, ns, "rack", 6, "", rack)
		nodes := placedPods(t, ns, "job-name=rack", 6)
		if racks := distinct(nodes, rackOf); len(racks) != 1 {
			t.Errorf("pods on %v: %d racks, want one", nodes, len(racks))
		}
		l, err := env.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=rack"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			if p.Spec.NodeSelector[corev1.LabelHostname] != p.Spec.NodeName || p.Labels[v1beta1.TopologyPodLabel] != "job" {
				t.Errorf("pod %s on %s has node selector %v and labels %v: want its node's hostname and the topology label", p.Name, p.Spec.NodeName, p.Spec.NodeSelector, p.Labels)
			}
		}
	})

	t.Run("a preferred-rack Job too big for a rack spreads over the fewest racks of one block", func(t *testing.T) {
		ns := "e2e-tas-preferred"
		tasQueue(t, ns, "Never")
		tasJob(t, ns, "wide", 12, "", map[string]string{v1beta1.PodSetPreferredTopologyAnnotation: tasRack})
		nodes := placedPods(t, ns, "job-name=wide", 12)
		racks, blocks := distinct(nodes, rackOf), distinct(nodes, blockOf)
		if len(racks) != 2 || len(blocks) != 1 {
			t.Errorf("pods on %v: racks %v, blocks %v; want 2 racks of one block", nodes, racks, blocks)
		}
	})

	t.Run("slices of a rack each fill one whole rack, in one block", func(t *testing.T) {
		ns := "e2e-tas-slices"
		tasQueue(t, ns, "Never")
		tasJob(t, ns, "sliced", 16, "", map[string]string{
			v1beta1.PodSetRequiredTopologyAnnotation: tasBlock, v1beta1.PodSetSliceRequiredTopologyAnnotation: tasRack, v1beta1.PodSetSliceSizeAnnotation: "8"})
		nodes := placedPods(t, ns, "job-name=sliced", 16)
		racks, blocks := distinct(nodes, rackOf), distinct(nodes, blockOf)
		if len(blocks) != 1 || len(racks) != 2 || slices.ContainsFunc(slices.Collect(maps.Values(racks)), func(n int) bool { return n != 8 }) {
			t.Errorf("pods on %v: racks %v, blocks %v; want 2 racks of 8 in one block", nodes, racks, blocks)
		}
	})

	t.Run("a Job too big for any rack waits with the reason, a smaller one behind it runs", func(t *testing.T) {
		ns := "e2e-tas-too-big"
		tasQueue(t, ns, "Never")
		tasJob(t, ns, "too-big", 10, "", rack)
		waitEvent(t, ns, "too-big", "Pending",
			"pod set main: 10 pods need one rack (level "+tasRack+") of flavor "+tasFlavor+"; the best rack has room for 8 pods", 45*time.Second)
		tasJob(t, ns, "small", 4, "", rack)
		nodes := placedPods(t, ns, "job-name=small", 4)
		if racks := distinct(nodes, rackOf); len(racks) != 1 {
			t.Errorf("small's pods on %v, want one rack", nodes)
		}
		if !suspended(getJob(t, ns, "too-big")) {
			t.Error("too-big runs")
		}
	})

	t.Run("preemption frees the rack that makes room, and only it", func(t *testing.T) {
		ns := "e2e-tas-preempt"
		tasQueue(t, ns, "LowerPriority")
		dataCenterEmpty(t)
		// Rack b1-r1: a low-priority Job of 4 pods beside one that is
		// not preemptible; the other three racks each hold a Job of 8.
		for _, j := range []struct {
			name, class string
			pods        int32
		}{{"low", "e2e-tas-low", 4}, {"keep", "e2e-tas-keep", 4}, {"fill-1", "e2e-tas-mid", 8}, {"fill-2", "e2e-tas-mid", 8}, {"fill-3", "e2e-tas-mid", 8}} {
			tasJob(t, ns, j.name, j.pods, j.class, rack)
			placedPods(t, ns, "job-name="+j.name, int(j.pods))
		}
		lowRack := rackOf(placedPods(t, ns, "job-name=low", 4)[0])
		if keepRack := rackOf(placedPods(t, ns, "job-name=keep", 4)[0]); keepRack != lowRack {
			t.Fatalf("keep went to %s, low to %s: want them in one rack (the tightest fit)", keepRack, lowRack)
		}
		tasJob(t, ns, "urgent", 8, "e2e-tas-urgent", rack)
		nodes := placedPods(t, ns, "job-name=urgent", 8)
		urgentRack := rackOf(nodes[0])
		if racks := distinct(nodes, rackOf); len(racks) != 1 {
			t.Errorf("urgent's pods on %v, want one rack", nodes)
		}
		if urgentRack == lowRack {
			t.Errorf("urgent runs in %s, the rack where preempting low could not make room", lowRack)
		}
		if suspended(getJob(t, ns, "low")) {
			t.Error("low was preempted: freeing its 4 GPUs could not fit urgent")
		}
		preempted := 0
		for _, f := range []string{"fill-1", "fill-2", "fill-3"} {
			if suspended(getJob(t, ns, f)) {
				preempted++
				waitEvent(t, ns, f, "Preempted", "urgent", 10*time.Second)
			}
		}
		if preempted != 1 {
			t.Errorf("%d of the full racks' Jobs preempted, want exactly 1", preempted)
		}
	})

	t.Run("a JobSet's leader and workers share one rack", func(t *testing.T) {
		installKindCRDs(t)
		ns := "e2e-tas-jobset"
		tasQueue(t, ns, "Never")
		startJobSetController(t, ns)
		waitJobSetWebhook(t, ns)
		s := jobSetObject(jobSetSpec{ns: ns, name: "train", queue: "q", workers: 1, parallelism: 6})
		for i := range s.Spec.ReplicatedJobs {
			s.Spec.ReplicatedJobs[i].Template.Spec.Template.Annotations = map[string]string{"sluice.dev/run-for": "10m",
				v1beta1.PodSetRequiredTopologyAnnotation: tasRack, v1beta1.PodSetGroupNameAnnotation: "train"}
		}
		createJobSet(t, s)
		t.Cleanup(func() {
			bg := metav1.DeletePropagationBackground
			_ = env.dyn.Resource(jobset.Kind.GVR()).Namespace(ns).Delete(context.Background(), "train", metav1.DeleteOptions{PropagationPolicy: &bg})
		})
		nodes := placedPods(t, ns, "jobset.sigs.k8s.io/jobset-name=train", 7)
		if racks := distinct(nodes, rackOf); len(racks) != 1 {
			t.Errorf("the JobSet's pods on %v: racks %v, want one", nodes, racks)
		}
	})

	t.Run("a node deleted under a running Job: the Job is evicted, naming the node, and placed again", func(t *testing.T) {
		ns := "e2e-tas-node-gone"
		tasQueue(t, ns, "Never")
		dataCenterEmpty(t)
		tasJob(t, ns, "survivor", 6, "", rack)
		nodes := placedPods(t, ns, "job-name=survivor", 6)
		gone := nodes[0]
		if err := env.kube.CoreV1().Nodes().Delete(context.Background(), gone, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tasNode(t, gone) })
		waitEvent(t, ns, "survivor", "Evicted", "node "+gone+" of its placement is gone; its pods there fit nowhere else", 45*time.Second)
		again := placedPods(t, ns, "job-name=survivor", 6)
		if slices.Contains(again, gone) || len(distinct(again, rackOf)) != 1 {
			t.Errorf("placed again on %v: want one rack, without %s", again, gone)
		}
	})

	t.Run("a node not Ready under a running Job with room left in its block: its pods there move, the Job keeps running", func(t *testing.T) {
		ns := "e2e-tas-node-replaced"
		tasQueue(t, ns, "Never")
		dataCenterEmpty(t)
		tasJob(t, ns, "mover", 6, "", map[string]string{v1beta1.PodSetRequiredTopologyAnnotation: tasBlock})
		nodes := placedPods(t, ns, "job-name=mover", 6)
		if len(distinct(nodes, blockOf)) != 1 {
			t.Fatalf("placed on %v: want one block", nodes)
		}
		before := reservations(t)["job/"+ns+"/mover"]
		// The node holding most of its pods (4 of them) stops being
		// Ready; the other rack of the block has room for them.
		on := distinct(nodes, func(n string) string { return n })
		gone := nodes[0]
		for n, c := range on {
			if c > on[gone] {
				gone = n
			}
		}
		notReady(t, gone)
		t.Cleanup(func() {
			_ = env.kube.CoreV1().Nodes().Delete(context.Background(), gone, metav1.DeleteOptions{})
			eventually(t, 30*time.Second, gone+" deleted", func() (bool, string) {
				_, err := env.kube.CoreV1().Nodes().Get(context.Background(), gone, metav1.GetOptions{})
				return apierrors.IsNotFound(err), fmt.Sprint(err)
			})
			tasNode(t, gone)
		})
		var moved events.WorkloadMovedV1
		eventually(t, 45*time.Second, "mover's move announced", func() (bool, string) {
			// kwok may still have had a heartbeat in flight when it let
			// go of the node: one that lands after ours makes it Ready
			// again, so the condition is set again until it holds.
			if nodeReady(t, gone) {
				notReady(t, gone)
			}
			st, err := env.js.Stream(context.Background(), bus.StreamEvents)
			if err != nil {
				return false, err.Error()
			}
			msg, err := st.GetLastMsgForSubject(context.Background(), events.WorkloadSubject(events.TypeWorkloadMovedV1, events.WorkloadRef{Kind: "job", Namespace: ns, Name: "mover"}))
			if err != nil {
				last, lerr := st.GetLastMsgForSubject(context.Background(), "sluice.workload.v1.*.job."+ns+".mover")
				if lerr != nil {
					return false, err.Error()
				}
				return false, fmt.Sprintf("%v; the mover's last event: %s", err, last.Data)
			}
			return json.Unmarshal(msg.Data, &moved) == nil, string(msg.Data)
		})
		if moved.Admission != before.Admission() || !strings.Contains(moved.Message, "node "+gone+" of its placement is not Ready") {
			t.Errorf("moved %+v: want the admission %s kept and node %s named", moved, before.Admission(), gone)
		}
		// The job controller replaces the pods on the node once they are
		// gone (taint-based eviction deletes them after five minutes; the
		// test does not wait for it); the new ones go where the move says.
		l, err := env.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=mover", FieldSelector: "spec.nodeName=" + gone})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			if err := env.kube.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		var again []string
		eventually(t, 150*time.Second, "mover's pods off "+gone, func() (bool, string) {
			again = placedPods(t, ns, "job-name=mover", 6)
			return !slices.Contains(again, gone), strings.Join(again, ",")
		})
		if slices.Contains(again, gone) || len(distinct(again, blockOf)) != 1 || blockOf(again[0]) != blockOf(gone) {
			t.Errorf("after the move the pods run on %v: want block %s, without %s", again, blockOf(gone), gone)
		}
		after := reservations(t)["job/"+ns+"/mover"]
		if after.Admission() != before.Admission() {
			t.Errorf("admission %s after the move, want %s: the Job was admitted again", after.Admission(), before.Admission())
		}
		noEvent(t, ns, "mover", "Evicted")
	})
}

// notReady makes a data center node not Ready, as a node whose kubelet
// stopped reporting is: kwok lets go of it, and its Ready condition turns
// False.
func notReady(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	patch := []byte(`{"metadata":{"annotations":{"kwok.x-k8s.io/node":null}}}`)
	if _, err := env.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := env.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		for i := range cur.Status.Conditions {
			if c := &cur.Status.Conditions[i]; c.Type == corev1.NodeReady {
				c.Status, c.Reason, c.Message, c.LastTransitionTime, c.LastHeartbeatTime = corev1.ConditionFalse, "KubeletStopped", "e2e: not Ready", now, now
			}
		}
		_, err = env.kube.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("node %s not Ready: %v", name, err)
	}
}

// nodeReady says whether the node's Ready condition is True.
func nodeReady(t *testing.T, name string) bool {
	t.Helper()
	n, err := env.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// dataCenterEmpty waits until no pod of an earlier test runs on the data
// center's nodes (their Jobs are deleted as each test ends).
func dataCenterEmpty(t *testing.T) {
	t.Helper()
	eventually(t, 90*time.Second, "the data center empty", func() (bool, string) {
		l, err := env.kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{LabelSelector: v1beta1.TopologyPodLabel})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, p := range l.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				left = append(left, p.Namespace+"/"+p.Name)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// createJobSet creates a JobSet through the dynamic client.
func createJobSet(t *testing.T, s *jobsetv1.JobSet) {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.dyn.Resource(jobset.Kind.GVR()).Namespace(s.Namespace).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create jobset %s/%s: %v", s.Namespace, s.Name, err)
	}
}
