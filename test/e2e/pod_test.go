package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/services/integration/pod"
)

// createPod creates a plain Pod asking for gpus GPUs that runs for runFor
// once scheduled (kwok ends it).
func createPod(t *testing.T, ns, name, priorityClass string, gpus int64, runFor string) *corev1.Pod {
	t.Helper()
	labels := map[string]string{v1beta1.QueueNameLabel: "q"}
	if priorityClass != "" {
		labels[v1beta1.PriorityClassLabel] = priorityClass
	}
	g := *resource.NewQuantity(gpus, resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels,
			Annotations: map[string]string{"sluice.dev/run-for": runFor}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			NodeSelector:                  map[string]string{"sluice.dev/spot": "false"},
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), "nvidia.com/gpu": g},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": g}}}},
		},
	}
	got, err := env.kube.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	if !(&pod.Pod{Pod: got}).IsSuspended() {
		t.Fatalf("pod %s/%s was not gated on create: gates %v", ns, name, got.Spec.SchedulingGates)
	}
	return got
}

func getPod(t *testing.T, ns, name string) (*corev1.Pod, bool) {
	t.Helper()
	p, err := env.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return p, true
}

// TestPodLifecycle: a plain Pod is gated on create, admitted by removing
// the gate and adding the flavor's node labels (the user's kept), bound by
// the scheduler; preempted by deletion, as in Kueue, which releases its
// quota; a Pod that does not fit waits gated and runs to its end once the
// quota is back.
func TestPodLifecycle(t *testing.T) {
	ns := "e2e-pod"
	queues(t, ns, 4, "LowerPriority")

	createPod(t, ns, "low", "", 4, "600s")
	eventually(t, 30*time.Second, "pod low admitted and bound", func() (bool, string) {
		p, ok := getPod(t, ns, "low")
		if !ok {
			return false, "gone"
		}
		sel := p.Spec.NodeSelector
		return len(p.Spec.SchedulingGates) == 0 && sel["instance-type"] == "a100" && sel["sluice.dev/spot"] == "false" && p.Spec.NodeName != "",
			fmt.Sprintf("gates %v selector %v node %q", p.Spec.SchedulingGates, sel, p.Spec.NodeName)
	})
	waitEvent(t, ns, "low", "Admitted", "ClusterQueue "+ns, 10*time.Second)

	createJob(t, jobSpec{ns: ns, name: "high", queue: "q", priorityClass: "high", pods: 4, gpus: 1, runFor: "4s"})
	eventually(t, 30*time.Second, "pod low deleted by its preemption", func() (bool, string) {
		_, ok := getPod(t, ns, "low")
		return !ok, "still there"
	})
	waitEvent(t, ns, "low", "Preempted", "InClusterQueue", 10*time.Second)
	waitRunning(t, ns, "high", 30*time.Second)

	// Created while high holds the quota: it waits, gated.
	createPod(t, ns, "later", "", 2, "2s")
	waitEvent(t, ns, "later", "Pending", "insufficient unused quota", 45*time.Second)
	if p, _ := getPod(t, ns, "later"); p == nil || len(p.Spec.SchedulingGates) == 0 {
		t.Fatalf("pod later ungated while high holds the quota: %+v", p)
	}
	waitComplete(t, ns, "high", 60*time.Second)
	eventually(t, 60*time.Second, "pod later succeeded", func() (bool, string) {
		p, ok := getPod(t, ns, "later")
		if !ok {
			return false, "gone"
		}
		return p.Status.Phase == corev1.PodSucceeded, fmt.Sprintf("phase %s gates %v", p.Status.Phase, p.Spec.SchedulingGates)
	})
	eventually(t, 20*time.Second, "quota of the pods released", func() (bool, string) {
		rs := reservations(t)
		_, low := rs["pod/"+ns+"/low"]
		_, later := rs["pod/"+ns+"/later"]
		return !low && !later, fmt.Sprintf("low held %v, later held %v", low, later)
	})
}

// createMember creates a Pod of group in ns that says the group has total
// members.
func createMember(t *testing.T, ns, group, name string, total int, gpus int64, runFor string) {
	t.Helper()
	g := *resource.NewQuantity(gpus, resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{v1beta1.QueueNameLabel: "q", pod.GroupNameLabel: group},
			Annotations: map[string]string{"sluice.dev/run-for": runFor, pod.GroupTotalCountAnnotation: fmt.Sprint(total)}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": g}, Limits: corev1.ResourceList{"nvidia.com/gpu": g}}}},
		},
	}
	got, err := env.kube.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	if !(&pod.Pod{Pod: got}).IsSuspended() {
		t.Fatalf("pod %s/%s was not gated on create: gates %v", ns, name, got.Spec.SchedulingGates)
	}
}

// admittedPods counts the named Pods that are ungated with the a100
// flavor's node label.
func admittedPods(t *testing.T, ns string, names ...string) (int, string) {
	n, state := 0, ""
	for _, name := range names {
		p, ok := getPod(t, ns, name)
		switch {
		case !ok:
			state += name + ":gone "
		case len(p.Spec.SchedulingGates) == 0 && p.Spec.NodeSelector["instance-type"] == "a100":
			n++
			state += name + ":admitted "
		default:
			state += name + ":gated "
		}
	}
	return n, state
}

// TestPodGroupLifecycle: the Pods of a group are one workload. A partial
// group is never admitted; the last member's arrival admits all at once;
// a preemption deletes every member; the group created again under the
// same name waits whole, then runs to its end and releases its quota.
func TestPodGroupLifecycle(t *testing.T) {
	ns := "e2e-podgroup"
	queues(t, ns, 4, "LowerPriority")
	members := []string{"train-0", "train-1", "train-2"}

	createMember(t, ns, "train", members[0], 3, 1, "600s")
	createMember(t, ns, "train", members[1], 3, 1, "600s")
	// The integration sees both within milliseconds; give it time to do
	// the wrong thing.
	time.Sleep(3 * time.Second)
	if n, state := admittedPods(t, ns, members[:2]...); n != 0 {
		t.Fatalf("a partial group was admitted: %s", state)
	}
	if _, held := reservations(t)["pod/"+ns+"/train"]; held {
		t.Fatal("a partial group holds quota")
	}

	createMember(t, ns, "train", members[2], 3, 1, "600s")
	eventually(t, 30*time.Second, "the whole group admitted", func() (bool, string) {
		n, state := admittedPods(t, ns, members...)
		return n == 3, state
	})
	eventually(t, 10*time.Second, "one reservation for the group", func() (bool, string) {
		rs := reservations(t)
		_, group := rs["pod/"+ns+"/train"]
		_, lone := rs["pod/"+ns+"/"+members[0]]
		return group && !lone, fmt.Sprintf("group held %v, a member held alone %v", group, lone)
	})
	waitEvent(t, ns, members[0], "Admitted", "group train", 10*time.Second)

	createJob(t, jobSpec{ns: ns, name: "high", queue: "q", priorityClass: "high", pods: 4, gpus: 1, runFor: "4s"})
	eventually(t, 30*time.Second, "every member deleted by the group's preemption", func() (bool, string) {
		n := 0
		for _, name := range members {
			if _, ok := getPod(t, ns, name); ok {
				n++
			}
		}
		return n == 0, fmt.Sprintf("%d members left", n)
	})
	waitRunning(t, ns, "high", 30*time.Second)

	// Created again under the same name while high holds the quota.
	for _, name := range members {
		createMember(t, ns, "train", name, 3, 1, "2s")
	}
	waitEvent(t, ns, members[0], "Pending", "insufficient unused quota", 45*time.Second)
	if n, state := admittedPods(t, ns, members...); n != 0 {
		t.Fatalf("group admitted while high holds the quota: %s", state)
	}
	waitComplete(t, ns, "high", 60*time.Second)
	eventually(t, 60*time.Second, "every member succeeded", func() (bool, string) {
		n, state := 0, ""
		for _, name := range members {
			if p, ok := getPod(t, ns, name); ok && p.Status.Phase == corev1.PodSucceeded {
				n++
			} else if ok {
				state += name + ":" + string(p.Status.Phase) + " "
			}
		}
		return n == 3, state
	})
	eventually(t, 20*time.Second, "quota of the group released", func() (bool, string) {
		_, held := reservations(t)["pod/"+ns+"/train"]
		return !held, "still held"
	})
}
