package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/services/integration/leaderworkerset"
	"github.com/sluice-dev/sluice/services/integration/pod"
)

// startLWSController runs the LeaderWorkerSet controller, built from the
// module Sluice's go.mod pins, with its webhooks (the LeaderWorkerSet's
// and the Pods', which label each Pod with its group) registered by URL
// for namespace ns only.
func startLWSController(t *testing.T, ns string) {
	t.Helper()
	bin := moduleBinary(t, "sigs.k8s.io/lws", "./cmd", "lws-controller")
	dir := t.TempDir()
	ca := servingCert(t, dir)
	port := freePort()
	_, _ = runController(t, "LeaderWorkerSet controller", bin, "--config", componentConfig(t, dir, "config.lws.x-k8s.io/v1alpha1", port), "--kubeconfig", env.kubeconfig)

	url := func(path string) *string { return ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, path)) }
	scope := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
	lwsPods := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "leaderworkerset.sigs.k8s.io/name", Operator: metav1.LabelSelectorOpExists}}}
	rule := func(group, version, resource string, ops ...admissionv1.OperationType) []admissionv1.RuleWithOperations {
		return []admissionv1.RuleWithOperations{{Operations: ops, Rule: admissionv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}}}}
	}
	none := admissionv1.SideEffectClassNone
	fail := admissionv1.Fail
	reg := env.kube.AdmissionregistrationV1()
	// Named so that the API server calls it before Sluice's (the order of
	// the configurations' names), as a chart install's name does.
	name := "lws-e2e"
	mutating := func(webhook, path string, rules []admissionv1.RuleWithOperations, objects *metav1.LabelSelector) admissionv1.MutatingWebhook {
		return admissionv1.MutatingWebhook{Name: webhook, AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionv1.WebhookClientConfig{URL: url(path), CABundle: ca},
			Rules:        rules, FailurePolicy: &fail, SideEffects: &none, NamespaceSelector: scope, ObjectSelector: objects}
	}
	validating := func(webhook, path string, rules []admissionv1.RuleWithOperations, objects *metav1.LabelSelector) admissionv1.ValidatingWebhook {
		return admissionv1.ValidatingWebhook{Name: webhook, AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionv1.WebhookClientConfig{URL: url(path), CABundle: ca},
			Rules:        rules, FailurePolicy: &fail, SideEffects: &none, NamespaceSelector: scope, ObjectSelector: objects}
	}
	if _, err := reg.MutatingWebhookConfigurations().Create(context.Background(), &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionv1.MutatingWebhook{
			mutating("mleaderworkerset.kb.io", "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
				rule("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", admissionv1.Create, admissionv1.Update), nil),
			mutating("mpod.kb.io", "/mutate--v1-pod", rule("", "v1", "pods", admissionv1.Create), lwsPods),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the LeaderWorkerSet mutating webhooks: %v", err)
	}
	if _, err := reg.ValidatingWebhookConfigurations().Create(context.Background(), &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionv1.ValidatingWebhook{
			validating("vleaderworkerset.kb.io", "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
				rule("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", admissionv1.Create, admissionv1.Update), nil),
			validating("vpod.kb.io", "/validate--v1-pod", rule("", "v1", "pods", admissionv1.Create, admissionv1.Update), lwsPods),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the LeaderWorkerSet validating webhooks: %v", err)
	}
	t.Cleanup(func() {
		_ = reg.MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = reg.ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	eventually(t, 60*time.Second, "the LeaderWorkerSet controller's webhooks serving", func() (bool, string) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
}

// TestLeaderWorkerSetLifecycle runs the real LeaderWorkerSet controller:
// each group (a leader and its workers) is one pod group admitted whole;
// a second group beyond the quota waits gated and leaves with a scale
// down; a preempted group's Pods are deleted and the group, recreated by
// the controller, waits and is admitted again; deleting the set releases
// its quota. A LeaderReady set, whose workers come once the leader runs,
// is admitted on its leader for the whole group.
func TestLeaderWorkerSetLifecycle(t *testing.T) {
	installKindCRDs(t)
	ns := "e2e-leaderworkerset"
	queues(t, ns, 4, "LowerPriority")
	startLWSController(t, ns)
	res := env.dyn.Resource(leaderworkerset.Kind.GVR()).Namespace(ns)
	// The integration's webhook answers once discovery shows the CRD.
	eventually(t, 60*time.Second, "a LeaderWorkerSet with exclusive placement refused", func() (bool, string) {
		lws := leaderWorkerSet(t, ns, "llm", "LeaderCreated")
		lws.SetAnnotations(map[string]string{"leaderworkerset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"})
		_, err := res.Create(context.Background(), lws, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "exclusive-topology"), fmt.Sprintf("err %v", err)
	})
	if _, err := res.Create(context.Background(), leaderWorkerSet(t, ns, "llm", "LeaderCreated"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create leaderworkerset: %v", err)
	}
	group := func(i int) string { return "pod/" + ns + "/" + pod.LeaderWorkerSetGroupName("llm", fmt.Sprint(i)) }
	groupAdmitted := func(what string) {
		t.Helper()
		eventually(t, 90*time.Second, what, func() (bool, string) {
			all, admitted := podsOf(t, ns, "llm")
			r, held := reservations(t)[group(0)]
			var pods int32
			for _, ps := range r.PodSets {
				pods += ps.Count
			}
			return len(all) == 3 && len(admitted) == 3 && held && pods == 3,
				fmt.Sprintf("pods %v admitted %v; group 0 held %v for %d pods; warnings: %s", all, admitted, held, pods, warnings(t, ns))
		})
	}
	groupAdmitted("group 0 (a leader and 2 workers) admitted whole, all 3 pods ungated")

	scaleLWS := func(n int) {
		t.Helper()
		if _, err := res.Patch(context.Background(), "llm", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)), metav1.PatchOptions{}); err != nil {
			t.Fatalf("scale to %d: %v", n, err)
		}
	}
	scaleLWS(2)
	eventually(t, 60*time.Second, "group 1 queued beyond the quota: its 3 pods exist, gated, and hold nothing", func() (bool, string) {
		all, admitted := podsOf(t, ns, "llm")
		_, held := reservations(t)[group(1)]
		return len(all) == 6 && len(admitted) == 3 && !held, fmt.Sprintf("pods %v admitted %v; group 1 held %v", all, admitted, held)
	})
	scaleLWS(1)
	eventually(t, 60*time.Second, "scaled down: group 1's pods gone, group 0 untouched", func() (bool, string) {
		all, admitted := podsOf(t, ns, "llm")
		return len(all) == 3 && len(admitted) == 3, fmt.Sprintf("pods %v admitted %v", all, admitted)
	})

	createJob(t, jobSpec{ns: ns, name: "urgent", queue: "q", priorityClass: "high", pods: 2, gpus: 1, runFor: "4s"})
	waitRunning(t, ns, "urgent", 60*time.Second)
	eventually(t, 30*time.Second, "group 0 preempted whole: its pods, recreated, wait gated", func() (bool, string) {
		all, admitted := podsOf(t, ns, "llm")
		return len(admitted) == 0, fmt.Sprintf("pods %v admitted %v", all, admitted)
	})
	waitComplete(t, ns, "urgent", 60*time.Second)
	groupAdmitted("group 0 admitted again once the Job is done")

	if err := res.Delete(context.Background(), "llm", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatalf("delete leaderworkerset: %v", err)
	}
	eventually(t, 60*time.Second, "deleted: the group's quota released", func() (bool, string) {
		all, _ := podsOf(t, ns, "llm")
		_, held := reservations(t)[group(0)]
		return len(all) == 0 && !held, fmt.Sprintf("pods %v held %v", all, held)
	})

	// LeaderReady: the workers come once the leader runs, so the group is
	// admitted on its leader, for all 3 pods, and the workers start under
	// that admission.
	if _, err := res.Create(context.Background(), leaderWorkerSet(t, ns, "ready", "LeaderReady"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create leaderworkerset: %v", err)
	}
	readyGroup := "pod/" + ns + "/" + pod.LeaderWorkerSetGroupName("ready", "0")
	eventually(t, 90*time.Second, "the LeaderReady group admitted on its leader for 3 pods, then all 3 running", func() (bool, string) {
		all, admitted := podsOf(t, ns, "ready")
		r, held := reservations(t)[readyGroup]
		var pods int32
		for _, ps := range r.PodSets {
			pods += ps.Count
		}
		return len(all) == 3 && len(admitted) == 3 && held && pods == 3,
			fmt.Sprintf("pods %v admitted %v; held %v for %d pods; warnings: %s", all, admitted, held, pods, warnings(t, ns))
	})
}

// leaderWorkerSet is the LeaderWorkerSet name in ns, queued in q: one group
// of a leader and 2 workers, one GPU each (labelled app=name), started by
// policy.
func leaderWorkerSet(t *testing.T, ns, name, policy string) *unstructured.Unstructured {
	t.Helper()
	tpl, err := yaml.Marshal(servingTemplate(name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	src := fmt.Sprintf(`apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: %s, namespace: %s, labels: {%s: q}}
spec:
  replicas: 1
  startupPolicy: %s
  leaderWorkerTemplate:
    size: 3
    workerTemplate:
%s`, name, ns, v1beta1.QueueNameLabel, policy, indent(string(tpl), "      "))
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return &unstructured.Unstructured{Object: doc}
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}
