package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/services/integration/raycluster"
	"github.com/sluice-dev/sluice/services/integration/rayservice"
	"github.com/sluice-dev/sluice/services/integration/statefulset"
)

// servingTemplate is the pod template of a serving workload: one GPU per
// pod, running until deleted; the queue label is on the owner only.
func servingTemplate(app string) corev1.PodTemplateSpec {
	g := resource.MustParse("1")
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": g}, Limits: corev1.ResourceList{"nvidia.com/gpu": g}}}},
		},
	}
}

// podsOf lists the Pods of app in ns that are not being deleted, and how
// many of them are admitted (ungated, with the a100 flavor's label).
func podsOf(t *testing.T, ns, app string) (all, admitted []string) {
	t.Helper()
	l, err := env.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatalf("list pods of %s: %v", app, err)
	}
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		all = append(all, p.Name)
		if len(p.Spec.SchedulingGates) == 0 && p.Spec.NodeSelector["instance-type"] == "a100" {
			admitted = append(admitted, p.Name)
		}
	}
	return all, admitted
}

// warnings are the last Warning events in ns, for a failure's message:
// why a ReplicaSet or a StatefulSet could not create its Pods.
func warnings(t *testing.T, ns string) string {
	t.Helper()
	evs, err := env.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range evs.Items[max(0, len(evs.Items)-3):] {
		out = append(out, e.InvolvedObject.Name+": "+e.Reason+": "+e.Message)
	}
	return strings.Join(out, "; ")
}

// heldIn counts the reservations of workloads in ns whose key starts with
// prefix.
func heldIn(t *testing.T, ns, prefix string) (n int, pods int32) {
	for key, r := range reservations(t) {
		if strings.HasPrefix(key, "pod/"+ns+"/"+prefix) {
			n++
			for _, ps := range r.PodSets {
				pods += ps.Count
			}
		}
	}
	return n, pods
}

func scale(t *testing.T, res, ns, name string, n int32) error {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))
	var err error
	switch res {
	case "deployment":
		_, err = env.kube.AppsV1().Deployments(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	default:
		_, err = env.kube.AppsV1().StatefulSets(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	return err
}

// TestDeploymentLifecycle: a Deployment's Pods are queued one by one. Its
// template gets the queue label; scaling up queues the new Pods (those
// beyond the quota wait gated), scaling down releases the quota of the
// Pods removed, a preempted Pod is deleted and its replacement waits; the
// queue cannot change while Pods are ready.
func TestDeploymentLifecycle(t *testing.T) {
	ns := "e2e-deployment"
	queues(t, ns, 4, "LowerPriority")
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{v1beta1.QueueNameLabel: "q"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: servingTemplate("web")},
	}
	got, err := env.kube.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	if q := got.Spec.Template.Labels[v1beta1.QueueNameLabel]; q != "q" {
		t.Fatalf("pod template labels %v: want the queue label from the Deployment", got.Spec.Template.Labels)
	}
	eventually(t, 60*time.Second, "both pods admitted, each a workload of its own", func() (bool, string) {
		all, admitted := podsOf(t, ns, "web")
		n, _ := heldIn(t, ns, "web-")
		return len(admitted) == 2 && n == 2, fmt.Sprintf("pods %v admitted %v reservations %d; warnings: %s", all, admitted, n, warnings(t, ns))
	})

	if err := scale(t, "deployment", ns, "web", 6); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "scaled to 6: 4 admitted, 2 waiting gated", func() (bool, string) {
		all, admitted := podsOf(t, ns, "web")
		n, _ := heldIn(t, ns, "web-")
		return len(all) == 6 && len(admitted) == 4 && n == 4, fmt.Sprintf("pods %v admitted %v reservations %d; warnings: %s", all, admitted, n, warnings(t, ns))
	})

	d, err = env.kube.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Labels[v1beta1.QueueNameLabel] = "other"
	if _, err := env.kube.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "may not be changed") {
		t.Fatalf("queue changed while pods are ready: err %v", err)
	}

	if err := scale(t, "deployment", ns, "web", 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "scaled to 1: the others' quota released", func() (bool, string) {
		all, admitted := podsOf(t, ns, "web")
		n, _ := heldIn(t, ns, "web-")
		return len(all) == 1 && len(admitted) == 1 && n == 1, fmt.Sprintf("pods %v admitted %v reservations %d; warnings: %s", all, admitted, n, warnings(t, ns))
	})

	// A higher-priority Job takes all 4 GPUs: the Pod is deleted, its
	// replacement waits gated, and runs once the Job is done.
	createJob(t, jobSpec{ns: ns, name: "urgent", queue: "q", priorityClass: "high", pods: 4, gpus: 1, runFor: "4s"})
	waitRunning(t, ns, "urgent", 60*time.Second)
	all, admitted := podsOf(t, ns, "web")
	if len(admitted) != 0 {
		t.Fatalf("a web pod runs beside the Job that took all the quota: pods %v admitted %v", all, admitted)
	}
	waitComplete(t, ns, "urgent", 60*time.Second)
	eventually(t, 60*time.Second, "the replacement admitted once the Job is done", func() (bool, string) {
		all, admitted := podsOf(t, ns, "web")
		return len(admitted) == 1, fmt.Sprintf("pods %v admitted %v", all, admitted)
	})

	if err := env.kube.AppsV1().Deployments(ns).Delete(context.Background(), "web", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "quota released once the Deployment is gone", func() (bool, string) {
		n, _ := heldIn(t, ns, "web-")
		return n == 0, fmt.Sprintf("%d reservations", n)
	})
}

// TestStatefulSetLifecycle: a StatefulSet's Pods are one serving group,
// admitted all together although the StatefulSet creates them one by one
// (OrderedReady); its replicas cannot change between two non-zero counts;
// a preemption deletes every Pod and the group waits, whole, until the
// quota is back; scaling to 0 releases it.
func TestStatefulSetLifecycle(t *testing.T) {
	ns := "e2e-statefulset"
	queues(t, ns, 4, "LowerPriority")
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Labels: map[string]string{v1beta1.QueueNameLabel: "q"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: servingTemplate("db")},
	}
	got, err := env.kube.AppsV1().StatefulSets(ns).Create(context.Background(), ss, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create statefulset: %v", err)
	}
	group := statefulset.GroupName("db")
	if l := got.Spec.Template.Labels; l[v1beta1.QueueNameLabel] != "q" || l[v1beta1.PodGroupNameLabel] != group {
		t.Fatalf("pod template labels %v: want the queue and group %s", l, group)
	}
	key := "pod/" + ns + "/" + group
	admittedAll := func(what string) {
		t.Helper()
		eventually(t, 90*time.Second, what, func() (bool, string) {
			all, admitted := podsOf(t, ns, "db")
			r, held := reservations(t)[key]
			var pods int32
			for _, ps := range r.PodSets {
				pods += ps.Count
			}
			return len(admitted) == 3 && held && pods == 3, fmt.Sprintf("pods %v admitted %v; group held %v for %d pods; warnings: %s", all, admitted, held, pods, warnings(t, ns))
		})
	}
	admittedAll("the group admitted for 3 pods on its first, then all 3 running")

	if err := scale(t, "statefulset", ns, "db", 2); err == nil || !strings.Contains(err.Error(), "spec.replicas") {
		t.Fatalf("replicas changed from 3 to 2 on a queued StatefulSet: err %v", err)
	}

	createJob(t, jobSpec{ns: ns, name: "urgent", queue: "q", priorityClass: "high", pods: 2, gpus: 1, runFor: "4s"})
	waitRunning(t, ns, "urgent", 60*time.Second)
	eventually(t, 30*time.Second, "the group preempted whole: its pods wait gated", func() (bool, string) {
		all, admitted := podsOf(t, ns, "db")
		return len(admitted) == 0, fmt.Sprintf("pods %v admitted %v", all, admitted)
	})
	waitComplete(t, ns, "urgent", 60*time.Second)
	admittedAll("the group admitted again once the Job is done")

	if err := scale(t, "statefulset", ns, "db", 0); err != nil {
		t.Fatalf("scale to 0: %v", err)
	}
	eventually(t, 60*time.Second, "scaled to 0: the group's quota released", func() (bool, string) {
		all, _ := podsOf(t, ns, "db")
		_, held := reservations(t)[key]
		return len(all) == 0 && !held, fmt.Sprintf("pods %v held %v", all, held)
	})
}

// TestRayServiceLifecycle: a RayService is not queued itself; the
// RayCluster KubeRay creates for it, labelled as the RayService is, is
// queued and admitted as any RayCluster, and its quota released when
// KubeRay deletes it. The RayService's webhook refuses a bad queue name,
// and a change of queue while a cluster serves. KubeRay does not run
// here: the test creates the cluster and writes the status as it would.
func TestRayServiceLifecycle(t *testing.T) {
	installKindCRDs(t)
	ns := "e2e-rayservice"
	queues(t, ns, 4, "LowerPriority")
	svcRes := env.dyn.Resource(rayservice.Kind.GVR()).Namespace(ns)
	service := func(queue string) *unstructured.Unstructured {
		var doc map[string]any
		manifest := `apiVersion: ray.io/v1
kind: RayService
metadata: {name: serve, namespace: ` + ns + `, labels: {sluice.dev/queue-name: "` + queue + `"}}
spec:
  rayClusterConfig:
    headGroupSpec: {rayStartParams: {}, template: ` + fmt.Sprintf(gpuPod, "") + `}
`
		if err := yaml.Unmarshal([]byte(manifest), &doc); err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: doc}
	}
	// The integration starts once discovery shows the CRD.
	eventually(t, 60*time.Second, "a RayService in a queue no LocalQueue can have refused", func() (bool, string) {
		_, err := svcRes.Create(context.Background(), service("Bad_Q"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "sluice.dev/queue-name"), fmt.Sprintf("err %v", err)
	})
	svc, err := svcRes.Create(context.Background(), service("q"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create rayservice: %v", err)
	}

	// The cluster as KubeRay makes it: the RayService's labels, owned by it.
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(fmt.Sprintf(kindCases["raycluster"].manifest, ns, "serve-raycluster-x7k2p")), &doc); err != nil {
		t.Fatal(err)
	}
	rc := &unstructured.Unstructured{Object: doc}
	rc.SetLabels(map[string]string{v1beta1.QueueNameLabel: "q", "ray.io/originated-from-crd": "RayService", "ray.io/originated-from-cr-name": "serve"})
	rc.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: "RayService", Name: "serve", UID: svc.GetUID(), Controller: ptr.To(true)}})
	rcRes := env.dyn.Resource(raycluster.Kind.GVR()).Namespace(ns)
	created, err := rcRes.Create(context.Background(), rc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the service's raycluster: %v", err)
	}
	if s, _ := podSetSelectors(t, raycluster.Adapter{}, created); !s {
		t.Fatal("the service's RayCluster was not suspended on create")
	}
	key := "raycluster/" + ns + "/serve-raycluster-x7k2p"
	eventually(t, 30*time.Second, "the service's RayCluster admitted with the flavor", func() (bool, string) {
		suspended, sel := podSetSelectors(t, raycluster.Adapter{}, getObject(t, raycluster.Kind, ns, "serve-raycluster-x7k2p"))
		_, held := reservations(t)[key]
		return !suspended && held && sel["head"]["instance-type"] == "a100", fmt.Sprintf("suspended %v held %v selectors %v", suspended, held, sel)
	})

	if err := unstructured.SetNestedField(svc.Object, "serve-raycluster-x7k2p", "status", "activeServiceStatus", "rayClusterName"); err != nil {
		t.Fatal(err)
	}
	if svc, err = svcRes.UpdateStatus(context.Background(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write the service's status: %v", err)
	}
	svc.SetLabels(map[string]string{v1beta1.QueueNameLabel: "other"})
	if _, err := svcRes.Update(context.Background(), svc, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "may not be changed") {
		t.Fatalf("queue changed while a cluster serves: err %v", err)
	}

	if err := rcRes.Delete(context.Background(), "serve-raycluster-x7k2p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "quota of the deleted cluster released", func() (bool, string) {
		_, held := reservations(t)[key]
		return !held, "still held"
	})
}
