package appwrapper

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	awv1beta2 "github.com/project-codeflare/appwrapper/api/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// wrapper is an AppWrapper of a Job whose pod set is inferred (2 pods)
// and a PyTorchJob-shaped object whose pod sets are declared (1 and 4).
const wrapper = `apiVersion: workload.codeflare.dev/v1beta2
kind: AppWrapper
metadata: {name: train, namespace: ns}
spec:
  suspend: true
  components:
  - template:
      apiVersion: batch/v1
      kind: Job
      metadata: {name: prep}
      spec: {parallelism: 2, completions: 3, template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}}
  - podSets: [{replicas: 1, path: template.spec.master}, {replicas: 4, path: template.spec.worker}]
    template:
      apiVersion: example.com/v1
      kind: Trainer
      metadata: {name: t}
      spec:
        master: {spec: {containers: [{name: m, resources: {requests: {cpu: "2"}}}]}}
        worker: {spec: {nodeSelector: {disk: ssd}, containers: [{name: w, resources: {requests: {nvidia.com/gpu: "1"}}}]}}
`

func decode(t *testing.T, manifest string) *awv1beta2.AppWrapper {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(manifest), &obj); err != nil {
		t.Fatal(err)
	}
	j, err := Adapter{}.Decode(&unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	return j.(*AppWrapper).AppWrapper
}

func TestPodSets(t *testing.T) {
	j, _ := Adapter{}.Decode(decode(t, wrapper))
	sets, err := j.PodSets()
	if err != nil {
		t.Fatal(err)
	}
	type set struct {
		Name     string
		Count    int32
		Selector map[string]string
	}
	var got []set
	for _, ps := range sets {
		got = append(got, set{ps.Name, ps.Count, ps.Spec.NodeSelector})
	}
	want := []set{{"train-0", 2, nil}, {"train-1", 1, nil}, {"train-2", 4, map[string]string{"disk": "ssd"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod sets (-want +got):\n%s", diff)
	}
}

func TestBadComponentIsNamed(t *testing.T) {
	aw := decode(t, wrapper)
	aw.Spec.Components[1].DeclaredPodSets[1].Path = "template.spec.nothing"
	j, _ := Adapter{}.Decode(aw)
	if _, err := j.PodSets(); err == nil || !strings.HasPrefix(err.Error(), "spec.components[1].podSets[1].path") {
		t.Errorf("PodSets() error = %v; want one naming spec.components[1].podSets[1].path", err)
	}
}

// TestAdmitAndRestore: admission puts the flavor into the components'
// podSetInfos (the wrapped templates are left as written), and restoring
// gives back the AppWrapper exactly.
func TestAdmitAndRestore(t *testing.T) {
	orig := decode(t, wrapper)
	flavors := map[string]*v1beta1.ResourceFlavor{"a100": {ObjectMeta: metav1.ObjectMeta{Name: "a100"},
		Spec: v1beta1.ResourceFlavorSpec{NodeLabels: map[string]string{"gpu": "a100"},
			Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}}}}
	j, _ := Adapter{}.Decode(orig)
	a := jobframework.Assignment{ClusterQueue: "cq", PodSets: []jobframework.PodSetAssignment{
		{Name: "train-0", Count: 2, Flavors: map[string]string{"cpu": "a100"}},
		{Name: "train-1", Count: 1, Flavors: map[string]string{"cpu": "a100"}},
		{Name: "train-2", Count: 4, Flavors: map[string]string{"nvidia.com/gpu": "a100"}},
	}}
	if err := jobframework.Admit(j, a, flavors); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	aw := j.Object().(*awv1beta2.AppWrapper)
	if aw.Spec.Suspend {
		t.Error("admitted AppWrapper still suspended")
	}
	var infos [][]awv1beta2.AppWrapperPodSetInfo
	for _, c := range aw.Spec.Components {
		infos = append(infos, c.PodSetInfos)
	}
	flavor := awv1beta2.AppWrapperPodSetInfo{NodeSelector: map[string]string{"gpu": "a100"}, Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}}
	want := [][]awv1beta2.AppWrapperPodSetInfo{{flavor}, {flavor, flavor}}
	if diff := cmp.Diff(want, infos); diff != "" {
		t.Errorf("podSetInfos (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(orig.Spec.Components[1].Template.Raw, aw.Spec.Components[1].Template.Raw); diff != "" {
		t.Errorf("the wrapped template changed (-want +got):\n%s", diff)
	}

	// Read back from the API server, the admitted pod sets carry the flavor.
	again, _ := Adapter{}.Decode(aw.DeepCopy())
	sets, err := again.PodSets()
	if err != nil {
		t.Fatal(err)
	}
	if sel := sets[2].Spec.NodeSelector; sel["gpu"] != "a100" || sel["disk"] != "ssd" {
		t.Errorf("pod set train-2 read back with selector %v; want the flavor's and the user's", sel)
	}
	if _, err := jobframework.Restore(again); err != nil {
		t.Fatal(err)
	}
	restored := again.Object().(*awv1beta2.AppWrapper)
	restored.Spec.Suspend = false // Restore leaves suspension to the stop's steps
	orig.Spec.Suspend = false
	if diff := cmp.Diff(orig, restored); diff != "" {
		t.Errorf("restored AppWrapper differs (-want +got):\n%s", diff)
	}
}

func TestFinished(t *testing.T) {
	cases := []struct {
		phase                     awv1beta2.AppWrapperPhase
		wantFinished, wantSucceed bool
	}{
		{awv1beta2.AppWrapperRunning, false, false},
		{awv1beta2.AppWrapperSucceeded, true, true},
		{awv1beta2.AppWrapperFailed, true, false},
	}
	for _, tc := range cases {
		t.Run(string(tc.phase), func(t *testing.T) {
			aw := decode(t, wrapper)
			aw.Status.Phase = tc.phase
			j, _ := Adapter{}.Decode(aw)
			if f, s, _ := j.Finished(); f != tc.wantFinished || s != tc.wantSucceed {
				t.Errorf("Finished() = %v, %v; want %v, %v", f, s, tc.wantFinished, tc.wantSucceed)
			}
		})
	}
}
