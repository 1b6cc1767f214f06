package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	autoscaling "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/services/provisioning"
)

// TestProvisioningRequestCheck runs the provisioning admission check of
// `sluice dev` with the test playing the cluster autoscaler: it adds kwok
// nodes and sets the ProvisioningRequests' conditions. Provisioned starts
// the Job on the new node, its pods annotated to consume the request;
// Failed gives the quota up and, after the backoff, a second attempt is
// made; failing every attempt deactivates the Job.
func TestProvisioningRequestCheck(t *testing.T) {
	installKindCRDs(t) // the autoscaler's ProvisioningRequest CRD among them
	ns := "e2e-prov"
	apply(t, fmt.Sprintf(`apiVersion: sluice.dev/v1beta1
kind: ProvisioningRequestConfig
metadata: {name: %[1]s}
spec:
  provisioningClassName: check-capacity.autoscaling.x-k8s.io
  managedResources: [nvidia.com/gpu]
  retryStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 2, backoffMaxSeconds: 10}
  podSetUpdates:
    nodeSelector:
    - {key: e2e.sluice.dev/pool, valueFromProvisioningClassDetail: RequestKey}
---
apiVersion: sluice.dev/v1beta1
kind: AdmissionCheck
metadata: {name: %[1]s}
spec:
  controllerName: sluice.dev/provisioning-request
  parameters: {apiGroup: sluice.dev, kind: ProvisioningRequestConfig, name: %[1]s}
---
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: %[1]s-gpu}
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {}
  admissionChecks: [%[1]s]
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
`, ns))
	watchQuota(t)
	// sluice dev notices the CRD within its discovery poll.
	waitCheckActive(t, ns, 60*time.Second)

	// Provisioned: the Job starts on the node made for it.
	j := createJob(t, jobSpec{ns: ns, name: "provisioned", queue: "q", pods: 2, gpus: 1, runFor: "3s"})
	pr := waitRequest(t, ns, "job-provisioned-"+ns+"-1")
	if pr.Spec.ProvisioningClassName != "check-capacity.autoscaling.x-k8s.io" || len(pr.Spec.PodSets) != 1 || pr.Spec.PodSets[0].Count != 2 {
		t.Fatalf("request spec = %+v; want the config's class and one pod set of 2 pods", pr.Spec)
	}
	tpl, err := env.kube.CoreV1().PodTemplates(ns).Get(context.Background(), pr.Spec.PodSets[0].PodTemplateRef.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the request's pod template: %v", err)
	}
	if got := tpl.Template.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]; got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("pod template asks for %s GPUs, want 1", got.String())
	}
	if owners := pr.OwnerReferences; len(owners) != 1 || owners[0].UID != j.UID {
		t.Errorf("request owners = %v, want the Job", owners)
	}
	time.Sleep(2 * time.Second)
	if !suspended(getJob(t, ns, "provisioned")) {
		t.Fatal("the Job runs before its capacity is provisioned")
	}
	addNode(t, ns+"-pool-1", "pool-1")
	setRequestStatus(t, ns, pr.Name, autoscaling.Provisioned, map[string]string{"RequestKey": "pool-1"})
	waitRunning(t, ns, "provisioned", 60*time.Second)
	pods := jobPods(t, ns, "provisioned", 2, 60*time.Second)
	for _, p := range pods {
		if got := p.Annotations[autoscaling.ProvisioningRequestPodAnnotationKey]; got != pr.Name {
			t.Errorf("pod %s consumes %q, want %q", p.Name, got, pr.Name)
		}
		if got := p.Spec.NodeSelector["e2e.sluice.dev/pool"]; got != "pool-1" {
			t.Errorf("pod %s node selector %v, want e2e.sluice.dev/pool=pool-1", p.Name, p.Spec.NodeSelector)
		}
	}
	waitComplete(t, ns, "provisioned", 60*time.Second)
	// Its capacity is given back once it finished.
	eventually(t, 30*time.Second, "the finished Job's request and pod template deleted", func() (bool, string) {
		_, err := env.dyn.Resource(provisioning.RequestGVR).Namespace(ns).Get(context.Background(), pr.Name, metav1.GetOptions{})
		_, terr := env.kube.CoreV1().PodTemplates(ns).Get(context.Background(), tpl.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(terr), fmt.Sprint(err, terr)
	})

	// Failed once: the quota is given up, and after the backoff a second
	// request is made, which is provisioned.
	createJob(t, jobSpec{ns: ns, name: "retried", queue: "q", pods: 1, gpus: 1, runFor: "2s"})
	first := waitRequest(t, ns, "job-retried-"+ns+"-1")
	setRequestStatus(t, ns, first.Name, autoscaling.Failed, nil)
	waitEvent(t, ns, "retried", "Evicted", "evicted: AdmissionCheck", 60*time.Second)
	second := waitRequest(t, ns, "job-retried-"+ns+"-2")
	eventually(t, 30*time.Second, "the failed attempt deleted", func() (bool, string) {
		_, err := env.dyn.Resource(provisioning.RequestGVR).Namespace(ns).Get(context.Background(), first.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	addNode(t, ns+"-pool-2", "pool-2")
	setRequestStatus(t, ns, second.Name, autoscaling.Provisioned, map[string]string{"RequestKey": "pool-2"})
	waitRunning(t, ns, "retried", 60*time.Second)
	waitComplete(t, ns, "retried", 60*time.Second)

	// Every attempt fails: the Job is deactivated, its quota released.
	createJob(t, jobSpec{ns: ns, name: "exhausted", queue: "q", pods: 1, gpus: 1, runFor: "2s"})
	setRequestStatus(t, ns, waitRequest(t, ns, "job-exhausted-"+ns+"-1").Name, autoscaling.Failed, nil)
	setRequestStatus(t, ns, waitRequest(t, ns, "job-exhausted-"+ns+"-2").Name, autoscaling.Failed, nil)
	waitEvent(t, ns, "exhausted", "Pending", "deactivated: admission check "+ns+" rejected the workload: no capacity", 60*time.Second)
	if !suspended(getJob(t, ns, "exhausted")) {
		t.Error("the rejected Job runs")
	}
	eventually(t, 20*time.Second, "the rejected Job's quota released", func() (bool, string) {
		_, ok := reservations(t)["job/"+ns+"/exhausted"]
		return !ok, "still held"
	})

	// A pod group: one request for its members, owned by all of them;
	// they start on the new node, each consuming it.
	members := []string{"grp-0", "grp-1"}
	for _, m := range members {
		createMember(t, ns, "grp", m, len(members), 1, "2s")
	}
	gpr := waitRequest(t, ns, "pod-grp-"+ns+"-1")
	if len(gpr.OwnerReferences) != 2 || len(gpr.Spec.PodSets) != 1 || gpr.Spec.PodSets[0].Count != 2 {
		t.Fatalf("the group's request: owners %v, pod sets %+v; want both members, one pod set of 2", gpr.OwnerReferences, gpr.Spec.PodSets)
	}
	addNode(t, ns+"-pool-3", "pool-3")
	setRequestStatus(t, ns, gpr.Name, autoscaling.Provisioned, map[string]string{"RequestKey": "pool-3"})
	eventually(t, 60*time.Second, "the group's members ungated, each consuming the request", func() (bool, string) {
		n, state := 0, ""
		for _, m := range members {
			p, ok := getPod(t, ns, m)
			if ok && len(p.Spec.SchedulingGates) == 0 && p.Annotations[autoscaling.ProvisioningRequestPodAnnotationKey] == gpr.Name &&
				p.Spec.NodeSelector["e2e.sluice.dev/pool"] == "pool-3" {
				n++
			}
			if ok {
				state += fmt.Sprintf("%s: gates %v, annotations %v, selector %v; ", m, p.Spec.SchedulingGates, p.Annotations, p.Spec.NodeSelector)
			}
		}
		return n == len(members), state
	})
}

// waitCheckActive waits for the AdmissionCheck's controller to mark it
// Active.
func waitCheckActive(t *testing.T, name string, within time.Duration) {
	t.Helper()
	eventually(t, within, "AdmissionCheck "+name+" marked Active", func() (bool, string) {
		u, err := env.dyn.Resource(checks.GVR).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var ac v1beta1.AdmissionCheck
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ac); err != nil {
			return false, err.Error()
		}
		return ac.IsActive(), fmt.Sprint(ac.Status.Conditions)
	})
}

// waitRequest waits for the ProvisioningRequest named name.
func waitRequest(t *testing.T, ns, name string) *autoscaling.ProvisioningRequest {
	t.Helper()
	var pr autoscaling.ProvisioningRequest
	eventually(t, 60*time.Second, "ProvisioningRequest "+ns+"/"+name, func() (bool, string) {
		u, err := env.dyn.Resource(provisioning.RequestGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pr); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return &pr
}

// setRequestStatus plays the autoscaler: it sets one condition true and
// the class details.
func setRequestStatus(t *testing.T, ns, name, condition string, details map[string]string) {
	t.Helper()
	ri := env.dyn.Resource(provisioning.RequestGVR).Namespace(ns)
	for range 5 {
		u, err := ri.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get request %s: %v", name, err)
		}
		var pr autoscaling.ProvisioningRequest
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pr); err != nil {
			t.Fatal(err)
		}
		msg := "capacity is ready"
		if condition == autoscaling.Failed {
			msg = "no capacity"
		}
		pr.Status.Conditions = append(pr.Status.Conditions, metav1.Condition{Type: condition, Status: metav1.ConditionTrue,
			Reason: condition, Message: msg, LastTransitionTime: metav1.Now()})
		for k, v := range details {
			if pr.Status.ProvisioningClassDetails == nil {
				pr.Status.ProvisioningClassDetails = map[string]autoscaling.Detail{}
			}
			pr.Status.ProvisioningClassDetails[k] = autoscaling.Detail(v)
		}
		u.Object, err = runtime.DefaultUnstructuredConverter.ToUnstructured(&pr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ri.UpdateStatus(context.Background(), u, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatalf("set %s on request %s: %v", condition, name, err)
		}
		return
	}
	t.Fatalf("set %s on request %s: conflicts", condition, name)
}

// addNode plays the autoscaler's scale-up: a kwok node with GPUs,
// labelled with its pool.
func addNode(t *testing.T, name, pool string) {
	t.Helper()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e.sluice.dev/pool": pool},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
				corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("8")},
		},
	}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	if _, err := env.kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = env.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// jobPods waits for n pods of a Job to exist and returns them.
func jobPods(t *testing.T, ns, job string, n int, within time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, within, fmt.Sprintf("%d pods of job %s/%s", n, ns, job), func() (bool, string) {
		l, err := env.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err != nil {
			return false, err.Error()
		}
		pods = l.Items
		var names []string
		for _, p := range pods {
			names = append(names, p.Name)
		}
		return len(pods) >= n, strings.Join(names, ",")
	})
	return pods
}
