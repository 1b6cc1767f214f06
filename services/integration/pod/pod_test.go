package pod

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// podBuilder builds test Pods.
type podBuilder struct{ p *corev1.Pod }

func newPod() *podBuilder {
	return &podBuilder{&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p", ResourceVersion: "7",
			Labels: map[string]string{v1beta1.QueueNameLabel: "q"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": *ptrQ("1")}}}}},
	}}
}

func (b *podBuilder) gated(names ...string) *podBuilder {
	for _, n := range names {
		b.p.Spec.SchedulingGates = append(b.p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: n})
	}
	return b
}

func (b *podBuilder) selector(k, v string) *podBuilder {
	if b.p.Spec.NodeSelector == nil {
		b.p.Spec.NodeSelector = map[string]string{}
	}
	b.p.Spec.NodeSelector[k] = v
	return b
}

func (b *podBuilder) phase(p corev1.PodPhase) *podBuilder { b.p.Status.Phase = p; return b }

func (b *podBuilder) ownedBy(apiVersion, kind string, controller bool) *podBuilder {
	b.p.OwnerReferences = append(b.p.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind,
		Name: "owner", UID: "uid-o", Controller: ptr.To(controller)})
	return b
}

func (b *podBuilder) job(t *testing.T) *Pod {
	t.Helper()
	j, err := Adapter{}.Decode(b.p)
	if err != nil {
		t.Fatal(err)
	}
	return j.(*Pod)
}

func TestSuspension(t *testing.T) {
	cases := []struct {
		name          string
		pod           *podBuilder
		suspend       bool
		wantSuspended bool
		wantGates     []string
	}{
		{name: "a new pod is held by Sluice's gate", pod: newPod(), suspend: true, wantSuspended: true, wantGates: []string{SchedulingGate}},
		{name: "other gates are kept", pod: newPod().gated("other"), suspend: true, wantSuspended: true, wantGates: []string{"other", SchedulingGate}},
		{name: "suspending twice adds one gate", pod: newPod().gated(SchedulingGate), suspend: true, wantSuspended: true, wantGates: []string{SchedulingGate}},
		{name: "resuming removes only Sluice's gate", pod: newPod().gated("other", SchedulingGate), suspend: false, wantGates: []string{"other"}},
		{name: "resuming the last gate leaves none", pod: newPod().gated(SchedulingGate), suspend: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pod.job(t)
			p.SetSuspended(tc.suspend)
			var gates []string
			for _, g := range p.Spec.SchedulingGates {
				gates = append(gates, g.Name)
			}
			if diff := cmp.Diff(tc.wantGates, gates); diff != "" {
				t.Errorf("gates (-want +got):\n%s", diff)
			}
			if got := p.IsSuspended(); got != tc.wantSuspended {
				t.Errorf("IsSuspended() = %v, want %v", got, tc.wantSuspended)
			}
			if got := p.StopsByDeletion(); got == tc.wantSuspended {
				t.Errorf("StopsByDeletion() = %v for suspended=%v", got, tc.wantSuspended)
			}
		})
	}
}

// TestAdmissionIsOneAllowedPatch: admitting a gated Pod removes the gate and
// adds the flavor's node labels and tolerations to the user's, in one merge
// patch that changes nothing else in the spec (the API server allows just
// that on a gated Pod).
func TestAdmissionIsOneAllowedPatch(t *testing.T) {
	p := newPod().gated(SchedulingGate).selector("disk", "ssd").job(t)
	flavors := map[string]*v1beta1.ResourceFlavor{"a100": {ObjectMeta: metav1.ObjectMeta{Name: "a100"},
		Spec: v1beta1.ResourceFlavorSpec{NodeLabels: map[string]string{"gpu": "a100"},
			Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}}}}
	admitted, _ := Adapter{}.Decode(p.Pod.DeepCopy())
	err := jobframework.Admit(admitted, jobframework.Assignment{ClusterQueue: "cq", PodSets: []jobframework.PodSetAssignment{
		{Name: MainPodSet, Count: 1, Flavors: map[string]string{"nvidia.com/gpu": "a100"}}}}, flavors)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jobframework.MergePatch(p.Object(), admitted.Object(), "uid-p", "7")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata map[string]any `json:"metadata"`
		Spec     map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(patch, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"schedulingGates": nil,
		"nodeSelector":    map[string]any{"gpu": "a100"}, // merged into the user's
		"tolerations":     []any{map[string]any{"key": "gpu", "operator": "Exists"}},
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("spec patch (-want +got):\n%s", diff)
	}
	if got.Metadata["uid"] != "uid-p" || got.Metadata["resourceVersion"] != "7" {
		t.Errorf("patch not fenced on uid and resourceVersion: %v", got.Metadata)
	}
	if !admitted.(*Pod).StopsByDeletion() {
		t.Error("an admitted (ungated) Pod must be stopped by deletion")
	}
}

func TestFinished(t *testing.T) {
	for _, tc := range []struct {
		phase                       corev1.PodPhase
		wantFinished, wantSucceeded bool
	}{
		{corev1.PodPending, false, false},
		{corev1.PodRunning, false, false},
		{corev1.PodSucceeded, true, true},
		{corev1.PodFailed, true, false},
	} {
		if f, s, _ := newPod().phase(tc.phase).job(t).Finished(); f != tc.wantFinished || s != tc.wantSucceeded {
			t.Errorf("phase %s: Finished() = %v, %v; want %v, %v", tc.phase, f, s, tc.wantFinished, tc.wantSucceeded)
		}
	}
}

func TestIgnored(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *podBuilder
		want bool
	}{
		{name: "a plain pod is ours", pod: newPod()},
		{name: "a Job's pod is the Job integration's", pod: newPod().ownedBy("batch/v1", "Job", true), want: true},
		{name: "a Ray cluster's pod is the Ray integration's", pod: newPod().ownedBy("ray.io/v1", "RayCluster", true), want: true},
		{name: "a pod of another controller is ours", pod: newPod().ownedBy("apps/v1", "ReplicaSet", true)},
		{name: "an owner that is not the controller does not count", pod: newPod().ownedBy("batch/v1", "Job", false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.pod.job(t).Ignored(); got != tc.want {
				t.Errorf("Ignored() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(newPod().p)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Adapter{}.Decode(&unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	sets, err := j.PodSets()
	if err != nil || len(sets) != 1 || sets[0].Count != 1 || sets[0].Name != MainPodSet {
		t.Errorf("PodSets() = %+v, %v; want one pod set %q of 1", sets, err, MainPodSet)
	}
	if _, err := (Adapter{}).Decode(&corev1.Service{}); err == nil {
		t.Error("a Service decoded as a Pod")
	}
}

func ptrQ(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
