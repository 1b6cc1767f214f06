package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// queues creates a flavor for the a100 nodes, one ClusterQueue with the
// given GPU quota and policy, a namespace and a LocalQueue "q" in it.
func queues(t *testing.T, name string, gpus int, preemption string) {
	t.Helper()
	queuesWith(t, name, preemption, fmt.Sprintf(`  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: nvidia.com/gpu, nominalQuota: %d}
`, gpus))
}

// queuesWith is queues with the ClusterQueue's resource groups given (YAML
// list items indented by two spaces).
func queuesWith(t *testing.T, name, preemption, groups string) {
	t.Helper()
	applyQueues(t, name, preemption, groups)
	watchQuota(t)
}

// cohortQueue creates a ClusterQueue of gpus GPUs (and 16 CPUs each) of
// flavor a100 in cohort, taking workloads from every namespace.
func cohortQueue(t *testing.T, name, cohort string, gpus int) {
	t.Helper()
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: %s}
spec:
  cohort: %s
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: %d}
      - {name: nvidia.com/gpu, nominalQuota: %d}
`, name, cohort, 16*gpus, gpus))
}

// applyQueues creates what queuesWith does, without starting a quota
// checker (which knows the ClusterQueues that exist when it starts).
func applyQueues(t *testing.T, name, preemption, groups string) {
	t.Helper()
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec:
  nodeLabels: {instance-type: a100}
---
apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: %[2]s}
  resourceGroups:
%[3]s---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: %[1]s}
spec: {clusterQueue: %[1]s}
`, name, preemption, groups))
	// A test's Jobs must not hold the nodes' GPUs for the tests after it.
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		if err := env.kube.BatchV1().Jobs(name).DeleteCollection(context.Background(),
			metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{}); err != nil {
			t.Errorf("delete the Jobs of %s: %v", name, err)
		}
	})
}

func TestAdmitAndComplete(t *testing.T) {
	ns := "e2e-admit"
	queues(t, ns, 8, "Never")
	createJob(t, jobSpec{ns: ns, name: "train", queue: "q", pods: 2, gpus: 1, runFor: "3s"})
	waitRunning(t, ns, "train", 30*time.Second)
	waitEvent(t, ns, "train", "Admitted", "ClusterQueue "+ns, 10*time.Second)

	// The flavor's node labels land on the pods, and the real scheduler
	// binds them to matching kwok nodes.
	eventually(t, 30*time.Second, "pods bound to a100 nodes", func() (bool, string) {
		pods, err := env.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=train"})
		if err != nil || len(pods.Items) < 2 {
			return false, fmt.Sprintf("%d pods, err %v", len(pods.Items), err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeSelector["instance-type"] != "a100" || p.Spec.NodeName == "" {
				return false, fmt.Sprintf("pod %s selector %v node %q", p.Name, p.Spec.NodeSelector, p.Spec.NodeName)
			}
			node, err := env.kube.CoreV1().Nodes().Get(context.Background(), p.Spec.NodeName, metav1.GetOptions{})
			if err != nil || node.Labels["instance-type"] != "a100" {
				return false, fmt.Sprintf("node %s labels %v", p.Spec.NodeName, node.Labels)
			}
		}
		return true, ""
	})
	waitComplete(t, ns, "train", 60*time.Second)

	// Quota is released on completion.
	eventually(t, 20*time.Second, "reservation released", func() (bool, string) {
		r, held := reservations(t)["job/"+ns+"/train"]
		return !held, fmt.Sprintf("still held: %+v", r)
	})
}

func TestQueueingWhenQuotaIsFull(t *testing.T) {
	ns := "e2e-queue"
	queues(t, ns, 4, "Never")
	createJob(t, jobSpec{ns: ns, name: "first", queue: "q", pods: 4, gpus: 1, runFor: "6s"})
	waitRunning(t, ns, "first", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "second", queue: "q", pods: 2, gpus: 1, runFor: "2s"})
	waitEvent(t, ns, "second", "Pending", "insufficient unused quota for nvidia.com/gpu in flavor a100: requested 2, available 0", 45*time.Second)
	if !suspended(getJob(t, ns, "second")) {
		t.Fatalf("second started while first holds the quota")
	}
	waitComplete(t, ns, "first", 60*time.Second)
	waitRunning(t, ns, "second", 30*time.Second)
	waitComplete(t, ns, "second", 60*time.Second)
}

func TestPreemption(t *testing.T) {
	ns := "e2e-preempt"
	queues(t, ns, 4, "LowerPriority")
	createJob(t, jobSpec{ns: ns, name: "low", queue: "q", pods: 4, gpus: 1, runFor: "600s"})
	waitRunning(t, ns, "low", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "high", queue: "q", priorityClass: "high", pods: 4, gpus: 1, runFor: "4s"})

	// The victim is suspended with its template restored, the preemptor
	// starts, and once it finishes the victim resumes.
	waitEvent(t, ns, "low", "Preempted", "InClusterQueue", 30*time.Second)
	waitRunning(t, ns, "high", 30*time.Second)
	low := getJob(t, ns, "low")
	if !suspended(low) {
		t.Fatalf("low runs beside high: %+v", low.Status)
	}
	if _, ok := low.Spec.Template.Spec.NodeSelector["instance-type"]; ok {
		t.Errorf("the preempted job kept the flavor's nodeSelector: %v", low.Spec.Template.Spec.NodeSelector)
	}
	waitComplete(t, ns, "high", 60*time.Second)
	waitRunning(t, ns, "low", 30*time.Second)
}

func TestMissingLocalQueue(t *testing.T) {
	ns := "e2e-missing"
	queues(t, ns, 4, "Never")
	createJob(t, jobSpec{ns: ns, name: "lost", queue: "later", pods: 1, gpus: 1, runFor: "1s"})
	waitEvent(t, ns, "lost", "Pending", "LocalQueue "+ns+"/later does not exist", 45*time.Second)
	if !suspended(getJob(t, ns, "lost")) {
		t.Fatalf("a job naming a missing queue started")
	}
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: later, namespace: %[1]s}
spec: {clusterQueue: %[1]s}
`, ns))
	waitRunning(t, ns, "lost", 30*time.Second)
	waitComplete(t, ns, "lost", 60*time.Second)
}

// setPriorityClass relabels a Job with a workload priority class.
func setPriorityClass(t *testing.T, ns, job, class string) {
	t.Helper()
	patch := []byte(`{"metadata":{"labels":{"` + v1beta1.PriorityClassLabel + `":"` + class + `"}}}`)
	if _, err := env.kube.BatchV1().Jobs(ns).Patch(context.Background(), job, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("relabel %s/%s with priority class %s: %v", ns, job, class, err)
	}
}

func TestPriorityChangeTakesEffect(t *testing.T) {
	ns := "e2e-reprioritize"
	queues(t, ns, 4, "LowerPriority")
	apply(t, `apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 2000
`)
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", priorityClass: "high", pods: 4, gpus: 1, runFor: "600s"})
	waitRunning(t, ns, "running", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "waiting", queue: "q", priorityClass: "high", pods: 4, gpus: 1, runFor: "4s"})
	// Equal priority: LowerPriority preempts nobody.
	waitEvent(t, ns, "waiting", "Pending", "insufficient unused quota", 45*time.Second)

	// Raising the waiting Job's class makes it the higher priority.
	setPriorityClass(t, ns, "waiting", "urgent")
	waitEvent(t, ns, "waiting", "PriorityChanged", "priority 2000 (urgent), was 1000 (high)", 20*time.Second)
	waitEvent(t, ns, "running", "Preempted", "InClusterQueue", 30*time.Second)
	waitRunning(t, ns, "waiting", 30*time.Second)
	waitComplete(t, ns, "waiting", 60*time.Second)
	waitRunning(t, ns, "running", 30*time.Second)
}

// A label naming a priority class that does not exist yet takes effect
// once the class is created: the configuration change looks at the objects
// again.
func TestPriorityClassCreatedAfterTheLabel(t *testing.T) {
	ns := "e2e-class-later"
	queues(t, ns, 4, "Never")
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 4, gpus: 1, runFor: "600s"})
	waitRunning(t, ns, "running", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "waiting", queue: "q", pods: 4, gpus: 1, runFor: "1s"})
	waitEvent(t, ns, "waiting", "Pending", "insufficient unused quota", 45*time.Second)

	setPriorityClass(t, ns, "waiting", "e2e-later")
	waitEvent(t, ns, "waiting", "PriorityClassNotFound", "e2e-later", 20*time.Second)
	apply(t, `apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata: {name: e2e-later}
value: 3000
`)
	waitEvent(t, ns, "waiting", "PriorityChanged", "priority 3000 (e2e-later)", 20*time.Second)
}

func TestPriorityChangeReordersTheQueue(t *testing.T) {
	ns := "e2e-reorder"
	queues(t, ns, 4, "Never")
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 4, gpus: 1, runFor: "8s"})
	waitRunning(t, ns, "running", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "first", queue: "q", pods: 4, gpus: 1, runFor: "4s"})
	createJob(t, jobSpec{ns: ns, name: "second", queue: "q", pods: 4, gpus: 1, runFor: "4s"})
	waitEvent(t, ns, "second", "Pending", "insufficient unused quota", 45*time.Second)

	// Raised above first, second is next in line when running finishes.
	setPriorityClass(t, ns, "second", "high")
	waitEvent(t, ns, "second", "PriorityChanged", "priority 1000 (high)", 20*time.Second)
	waitRunning(t, ns, "second", 60*time.Second)
	if !suspended(getJob(t, ns, "first")) {
		t.Errorf("first started beside or before second")
	}
	waitComplete(t, ns, "second", 60*time.Second)
	waitRunning(t, ns, "first", 30*time.Second)
}

// activeCondition reads a queue's Active condition: its status and reason.
func activeCondition(t *testing.T, resource, ns, name string) (status, reason string) {
	t.Helper()
	ri := env.dyn.Resource(v1beta1.GroupVersion.WithResource(resource))
	var (
		u   *unstructured.Unstructured
		err error
	)
	if ns != "" {
		u, err = ri.Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	} else {
		u, err = ri.Get(context.Background(), name, metav1.GetOptions{})
	}
	if err != nil {
		return "", err.Error()
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == v1beta1.QueueActive {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			return s, r
		}
	}
	return "", "no Active condition"
}

// TestQueueActiveConditions: a ClusterQueue naming a flavor that does not
// exist is not Active, nor is its LocalQueue; once the flavor exists both
// are (Kueue's Active condition, what `kubectl wait --for=condition=Active`
// waits for).
func TestQueueActiveConditions(t *testing.T) {
	ns := "e2e-active"
	apply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: %[1]s-flavor
      resources: [{name: cpu, nominalQuota: 4}]
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: %[1]s}
spec: {clusterQueue: %[1]s}
`, ns))
	want := func(wantStatus, cqReason, lqReason string) {
		eventually(t, 30*time.Second, "Active "+wantStatus, func() (bool, string) {
			cs, cr := activeCondition(t, "clusterqueues", "", ns)
			ls, lr := activeCondition(t, "localqueues", ns, "q")
			return cs == wantStatus && cr == cqReason && ls == wantStatus && lr == lqReason,
				fmt.Sprintf("ClusterQueue %s/%s, LocalQueue %s/%s", cs, cr, ls, lr)
		})
	}
	want("False", "FlavorNotFound", "ClusterQueueIsInactive")
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: %s-flavor}
`, ns))
	want("True", "Ready", "Ready")
}
