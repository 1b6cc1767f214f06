package trainjob

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	trainerv1 "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// fixedRuntimes is a RuntimeReader over fixed runtimes, by name.
type fixedRuntimes map[string]string

func (r fixedRuntimes) Runtime(_ string, ref trainerv1.RuntimeRef) (*trainerv1.TrainingRuntimeSpec, error) {
	src, ok := r[ref.Name]
	if !ok {
		return nil, fmt.Errorf("ClusterTrainingRuntime %q not found", ref.Name)
	}
	var rt trainerv1.ClusterTrainingRuntime
	if err := yaml.Unmarshal([]byte(src), &rt); err != nil {
		return nil, err
	}
	return &rt.Spec, nil
}

// A runtime shaped as the trainer's torch-distributed one: a dataset
// initializer, and the trainer's "node" job.
const torch = `
spec:
  mlPolicy: {numNodes: 2, torch: {numProcPerNode: auto}}
  template:
    spec:
      replicatedJobs:
      - name: dataset-initializer
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}}
          spec: {template: {spec: {containers: [{name: dataset-initializer, image: init, resources: {requests: {cpu: "1"}}}]}}}
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {nodeSelector: {disk: ssd}, containers: [{name: node, image: torch, resources: {requests: {cpu: "2"}}}]}}}
`

// An MPI runtime that runs its launcher as a node.
const mpi = `
spec:
  mlPolicy: {numNodes: 1, mpi: {runLauncherAsNode: true}}
  template:
    spec:
      replicatedJobs:
      - name: launcher
        template: {spec: {template: {spec: {containers: [{name: node, image: mpi}]}}}}
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: mpi}]}}}
`

var all = fixedRuntimes{"torch-distributed": torch, "mpi": mpi, "empty": "spec: {template: {spec: {}}}"}

// trainJob builds a suspended TrainJob of the runtime, with numNodes (0:
// unset) and the user's overrides.
func trainJob(runtime string, numNodes int32, overrides ...trainerv1.PodSpecOverride) *trainerv1.TrainJob {
	tj := &trainerv1.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", UID: "uid-tj", Labels: map[string]string{v1beta1.QueueNameLabel: "q"}},
		Spec: trainerv1.TrainJobSpec{RuntimeRef: trainerv1.RuntimeRef{Name: runtime}, Suspend: ptr.To(true), PodSpecOverrides: overrides}}
	if numNodes > 0 {
		tj.Spec.Trainer = &trainerv1.Trainer{NumNodes: ptr.To(numNodes)}
	}
	return tj
}

func TestPodSets(t *testing.T) {
	gpu := corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}
	withGPUs := trainJob("torch-distributed", 3)
	withGPUs.Spec.Trainer.ResourcesPerNode = &gpu
	cases := []struct {
		name         string
		tj           *trainerv1.TrainJob
		unbound      bool
		wantCounts   map[string]int32
		wantRequests map[string]corev1.ResourceList
		wantSelector map[string]map[string]string
		wantErr      string
	}{
		{name: "the runtime's numNodes for the trainer, one initializer", tj: trainJob("torch-distributed", 0),
			wantCounts: map[string]int32{"dataset-initializer": 1, "node": 2}},
		{name: "the TrainJob's numNodes and resourcesPerNode win", tj: withGPUs,
			wantCounts:   map[string]int32{"dataset-initializer": 1, "node": 3},
			wantRequests: map[string]corev1.ResourceList{"dataset-initializer": {"cpu": resource.MustParse("1")}, "node": gpu.Requests}},
		{name: "the user's override is applied to its target only",
			tj:           trainJob("torch-distributed", 0, trainerv1.PodSpecOverride{TargetJobs: []trainerv1.PodSpecOverrideTargetJob{{Name: "node"}}, NodeSelector: map[string]string{"zone": "a"}}),
			wantCounts:   map[string]int32{"dataset-initializer": 1, "node": 2},
			wantSelector: map[string]map[string]string{"dataset-initializer": nil, "node": {"disk": "ssd", "zone": "a"}}},
		{name: "MPI with the launcher as a node: one node fewer", tj: trainJob("mpi", 4),
			wantCounts: map[string]int32{"launcher": 1, "node": 3}},
		{name: "a missing runtime names the reference", tj: trainJob("nope", 0), wantErr: `spec.runtimeRef: ClusterTrainingRuntime "nope" not found`},
		{name: "a runtime with no jobs", tj: trainJob("empty", 0), wantErr: "has no replicatedJobs"},
		{name: "unbound, the runtime cannot be read", tj: trainJob("torch-distributed", 0), unbound: true, wantErr: "not bound to a client"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ad := Adapter{Runtimes: all}
			if tc.unbound {
				ad = Adapter{}
			}
			j, err := ad.Decode(tc.tj)
			if err != nil {
				t.Fatal(err)
			}
			sets, err := j.PodSets()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("PodSets() error = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int32{}
			requests := map[string]corev1.ResourceList{}
			selectors := map[string]map[string]string{}
			for _, ps := range sets {
				counts[ps.Name] = ps.Count
				requests[ps.Name] = ps.Spec.Containers[0].Resources.Requests
				selectors[ps.Name] = ps.Spec.NodeSelector
			}
			if diff := cmp.Diff(tc.wantCounts, counts); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			if tc.wantRequests != nil {
				if diff := cmp.Diff(tc.wantRequests, requests); diff != "" {
					t.Errorf("requests (-want +got):\n%s", diff)
				}
			}
			if tc.wantSelector != nil {
				if diff := cmp.Diff(tc.wantSelector, selectors); diff != "" {
					t.Errorf("selectors (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestAdmitAndRestore: admission appends, after the user's, one override
// per pod set with the flavor's node labels and the pod set's whole list
// of tolerations, and counts them in an annotation; read back, the pod
// sets carry the flavor; restored, the TrainJob is as it was.
func TestAdmitAndRestore(t *testing.T) {
	user := trainerv1.PodSpecOverride{TargetJobs: []trainerv1.PodSpecOverrideTargetJob{{Name: "node"}},
		Tolerations: []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpEqual, Value: "a"}}}
	orig := trainJob("torch-distributed", 0, user)
	flavors := map[string]*v1beta1.ResourceFlavor{"a100": {ObjectMeta: metav1.ObjectMeta{Name: "a100"},
		Spec: v1beta1.ResourceFlavorSpec{NodeLabels: map[string]string{"gpu": "a100"},
			Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}}}}
	ad := Adapter{Runtimes: all}
	j, _ := ad.Decode(orig)
	a := jobframework.Assignment{ClusterQueue: "cq", PodSets: []jobframework.PodSetAssignment{
		{Name: "dataset-initializer", Count: 1, Flavors: map[string]string{"cpu": "a100"}},
		{Name: "node", Count: 2, Flavors: map[string]string{"cpu": "a100"}},
	}}
	if err := jobframework.Admit(j, a, flavors); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	got := j.Object().(*trainerv1.TrainJob)
	if got.Spec.Suspend == nil || *got.Spec.Suspend {
		t.Error("admitted TrainJob still suspended")
	}
	flavorTol := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists}
	want := []trainerv1.PodSpecOverride{user,
		{TargetJobs: []trainerv1.PodSpecOverrideTargetJob{{Name: "dataset-initializer"}}, NodeSelector: map[string]string{"gpu": "a100"}, Tolerations: []corev1.Toleration{flavorTol}},
		{TargetJobs: []trainerv1.PodSpecOverrideTargetJob{{Name: "node"}}, NodeSelector: map[string]string{"gpu": "a100"}, Tolerations: []corev1.Toleration{user.Tolerations[0], flavorTol}},
	}
	if diff := cmp.Diff(want, got.Spec.PodSpecOverrides); diff != "" {
		t.Errorf("podSpecOverrides (-want +got):\n%s", diff)
	}
	if n := got.Annotations[OverridesAnnotation]; n != "2" {
		t.Errorf("annotation %s = %q, want 2", OverridesAnnotation, n)
	}

	again, _ := ad.Decode(got.DeepCopy())
	sets, err := again.PodSets()
	if err != nil {
		t.Fatal(err)
	}
	if sel := sets[1].Spec.NodeSelector; sel["gpu"] != "a100" || sel["disk"] != "ssd" {
		t.Errorf("pod set node read back with selector %v; want the flavor's and the runtime's", sel)
	}
	if _, err := jobframework.Restore(again); err != nil {
		t.Fatal(err)
	}
	restored := again.Object().(*trainerv1.TrainJob)
	restored.Spec.Suspend = ptr.To(true) // Restore leaves suspension to the stop's steps
	if diff := cmp.Diff(orig, restored); diff != "" {
		t.Errorf("restored TrainJob differs (-want +got):\n%s", diff)
	}
}

func TestBadOverridesAnnotation(t *testing.T) {
	tj := trainJob("torch-distributed", 0)
	tj.Annotations = map[string]string{OverridesAnnotation: "3"}
	j, _ := Adapter{Runtimes: all}.Decode(tj)
	_, err := j.PodSets()
	if !errors.Is(err, jobframework.ErrInvalidJob) || !strings.Contains(err.Error(), OverridesAnnotation) {
		t.Errorf("PodSets() error = %v; want an invalid job naming %s", err, OverridesAnnotation)
	}
}

func TestFinishedAndReady(t *testing.T) {
	tj := trainJob("torch-distributed", 0)
	tj.Status.JobsStatus = []trainerv1.JobStatus{{Name: "dataset-initializer", Succeeded: 1}, {Name: "node", Ready: 2}}
	j, _ := Adapter{Runtimes: all}.Decode(tj)
	if !j.(jobframework.PodsReadier).PodsReady() {
		t.Error("every job ready or done: want PodsReady")
	}
	tj.Status.JobsStatus = tj.Status.JobsStatus[:1]
	j, _ = Adapter{Runtimes: all}.Decode(tj)
	if j.(jobframework.PodsReadier).PodsReady() {
		t.Error("the trainer's job not reported: want not ready")
	}
	tj.Status.Conditions = []metav1.Condition{{Type: trainerv1.TrainJobFailed, Status: metav1.ConditionTrue, Message: "node failed"}}
	j, _ = Adapter{Runtimes: all}.Decode(tj)
	if f, s, msg := j.Finished(); !f || s || msg != "node failed" {
		t.Errorf("Finished() = %v, %v, %q; want failed with its message", f, s, msg)
	}
}
