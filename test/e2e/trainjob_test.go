package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/services/integration/trainjob"
)

// startTrainerController runs Kubeflow Trainer's controller manager, built
// from the module Sluice's go.mod pins. Its certificates are made by its
// own rotator for its in-cluster Service name only, which the API server
// here cannot reach, so its validating webhooks are not registered: the
// controller itself (TrainJob → JobSet) is what runs. It returns once the
// TrainJob controller's workers run. The trainer adds its controllers to a
// manager already started, and once in CI (a loaded machine) they had not
// started 90 s later: a trainer whose TrainJob controller is not running
// within a minute is started again, once.
func startTrainerController(t *testing.T) {
	t.Helper()
	bin := moduleBinary(t, "github.com/kubeflow/trainer/v2", "./cmd/trainer-controller-manager", "trainer-controller")
	// The rotator keeps its certificates in a Secret of its namespace.
	apply(t, `apiVersion: v1
kind: Namespace
metadata: {name: kubeflow-system}
---
apiVersion: v1
kind: Secret
metadata: {name: kubeflow-trainer-webhook-cert, namespace: kubeflow-system}
`)
	for attempt := 1; ; attempt++ {
		logs, stop := runController(t, "trainer controller", bin, "--kubeconfig", env.kubeconfig, fmt.Sprintf("--webhook-server-port=%d", freePort()),
			"--health-probe-bind-address=0", "--metrics-bind-address=0", "--leader-elect=false")
		// Its controllers start once the certificates it wrote into the
		// Secret are in its certificate directory, where the kubelet would
		// mount the Secret: put them there.
		eventually(t, 60*time.Second, "the trainer's certificates written into its Secret", func() (bool, string) {
			sec, err := env.kube.CoreV1().Secrets("kubeflow-system").Get(context.Background(), "kubeflow-trainer-webhook-cert", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if len(sec.Data["tls.crt"]) == 0 || len(sec.Data["tls.key"]) == 0 || len(sec.Data["ca.crt"]) == 0 {
				return false, fmt.Sprintf("keys %v", slices.Collect(maps.Keys(sec.Data)))
			}
			if err := os.MkdirAll(trainerCertDir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
				if err := os.WriteFile(filepath.Join(trainerCertDir, f), sec.Data[f], 0o600); err != nil {
					t.Fatal(err)
				}
			}
			return true, ""
		})
		if attempt == 2 {
			eventually(t, 60*time.Second, "the trainer's TrainJob controller started", func() (bool, string) {
				return trainJobControllerRuns(logs.String()), "waiting for its workers"
			})
			return
		}
		if ok, _ := poll(60*time.Second, func() (bool, string) { return trainJobControllerRuns(logs.String()), "" }); ok {
			return
		}
		stop()
		t.Logf("the trainer's TrainJob controller did not start within a minute; starting the trainer again. Its log:\n%s", headTail(logs.String(), 40))
	}
}

// trainJobControllerRuns tells from the trainer's log whether its TrainJob
// controller's workers run.
func trainJobControllerRuns(log string) bool {
	for line := range strings.Lines(log) {
		if strings.Contains(line, `"Starting workers"`) && strings.Contains(line, `"controller":"trainjob_controller"`) {
			return true
		}
	}
	return false
}

// trainerCertDir is where Kubeflow Trainer's controller reads its serving
// certificate (fixed in its code).
const trainerCertDir = "/tmp/k8s-webhook-server/serving-certs"

// TestTrainJobLifecycle runs Kubeflow Trainer's controller and the JobSet
// controller: a TrainJob is queued for the pods its runtime describes
// (numNodes × resourcesPerNode), admitted with the flavor written into its
// podSpecOverrides, so the JobSet the trainer makes runs on the flavor's
// nodes; preempted, it is suspended and the overrides removed; admitted
// again, it runs to completion and its quota is released.
func TestTrainJobLifecycle(t *testing.T) {
	installKindCRDs(t)
	ns := "e2e-trainjob-ctrl"
	queues(t, ns, 4, "LowerPriority")
	startJobSetController(t, ns)
	waitJobSetWebhook(t, ns)
	startTrainerController(t)
	apply(t, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: e2e-plain}
spec:
  mlPolicy: {numNodes: 1}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              metadata: {annotations: {sluice.dev/run-for: 15s}}
              spec:
                restartPolicy: Never
                terminationGracePeriodSeconds: 0
                containers: [{name: node, image: busybox}]
`)
	res := env.dyn.Resource(trainjob.Kind.GVR()).Namespace(ns)
	manifest := func(name, runtime string) *unstructured.Unstructured {
		var doc map[string]any
		src := fmt.Sprintf(`apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: %s, namespace: %s, labels: {%s: q}}
spec:
  runtimeRef: {name: %s}
  trainer:
    numNodes: 2
    resourcesPerNode: {requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 1}}
`, name, ns, v1beta1.QueueNameLabel, runtime)
		if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: doc}
	}
	eventually(t, 60*time.Second, "the trainjob integration suspends a dry-run TrainJob", func() (bool, string) {
		got, err := res.Create(context.Background(), manifest("probe", "e2e-plain"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		s, _, _ := unstructured.NestedBool(got.Object, "spec", "suspend")
		return s, fmt.Sprintf("suspend=%v", s)
	})

	// A TrainJob whose runtime does not exist waits, with an Event naming it.
	if _, err := res.Create(context.Background(), manifest("orphan", "no-such-runtime"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create trainjob: %v", err)
	}
	if _, err := res.Create(context.Background(), manifest("train", "e2e-plain"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create trainjob: %v", err)
	}
	running := func(what string) {
		t.Helper()
		eventually(t, 90*time.Second, what, func() (bool, string) {
			var state []string
			n := 0
			for _, p := range jobSetPods(t, ns, "train") {
				if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded {
					continue
				}
				state = append(state, fmt.Sprintf("%s on %q with %v", p.Name, p.Spec.NodeName, p.Spec.NodeSelector))
				if strings.HasPrefix(p.Spec.NodeName, "a100") && p.Spec.NodeSelector["instance-type"] == "a100" {
					n++
				}
			}
			r, held := reservations(t)["trainjob/"+ns+"/train"]
			var pods int32
			for _, ps := range r.PodSets {
				pods += ps.Count
			}
			return n == 2 && held && pods == 2, fmt.Sprintf("held %v for %d pods; pods: %s", held, pods, strings.Join(state, "; "))
		})
	}
	running("the TrainJob admitted for its 2 nodes, its JobSet's pods on a100 nodes")
	tj := getObject(t, trainjob.Kind, ns, "train")
	overrides, _, _ := unstructured.NestedSlice(tj.Object, "spec", "podSpecOverrides")
	if len(overrides) != 1 || tj.GetAnnotations()[trainjob.OverridesAnnotation] != "1" {
		t.Errorf("admitted TrainJob: podSpecOverrides %v, annotations %v; want Sluice's one override, counted", overrides, tj.GetAnnotations())
	}
	waitEvent(t, ns, "orphan", "InvalidWorkload", `ClusterTrainingRuntime "no-such-runtime"`, 30*time.Second)

	createJob(t, jobSpec{ns: ns, name: "urgent", queue: "q", priorityClass: "high", pods: 3, gpus: 1, runFor: "4s"})
	eventually(t, 60*time.Second, "the preempted TrainJob suspended, its overrides removed, its pods gone", func() (bool, string) {
		tj := getObject(t, trainjob.Kind, ns, "train")
		suspended, _, _ := unstructured.NestedBool(tj.Object, "spec", "suspend")
		overrides, _, _ := unstructured.NestedSlice(tj.Object, "spec", "podSpecOverrides")
		live := 0
		for _, p := range jobSetPods(t, ns, "train") {
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				live++
			}
		}
		return suspended && len(overrides) == 0 && live == 0, fmt.Sprintf("suspended %v, overrides %v, %d pods left", suspended, overrides, live)
	})
	waitComplete(t, ns, "urgent", 60*time.Second)
	running("the TrainJob admitted again once the preemptor finished")

	eventually(t, 120*time.Second, "the TrainJob completed, as the trainer reports, and its quota released", func() (bool, string) {
		tj := getObject(t, trainjob.Kind, ns, "train")
		conds, _, _ := unstructured.NestedSlice(tj.Object, "status", "conditions")
		complete := false
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Complete" && m["status"] == "True" {
				complete = true
			}
		}
		_, held := reservations(t)["trainjob/"+ns+"/train"]
		return complete && !held, fmt.Sprintf("conditions %v; held %v", conds, held)
	})
	if err := res.Delete(context.Background(), "orphan", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
