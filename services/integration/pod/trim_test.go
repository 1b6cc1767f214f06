package pod

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestTrimForCache(t *testing.T) {
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	gates := []corev1.PodSchedulingGate{{Name: SchedulingGate}}
	conds := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	p := &corev1.Pod{
		Spec: corev1.PodSpec{
			Containers:      []corev1.Container{{Name: "main", Image: "busybox", Command: []string{"sleep", "1"}, Resources: res}},
			SchedulingGates: gates,
			NodeSelector:    map[string]string{"disk": "ssd"},
			Volumes:         []corev1.Volume{{Name: "data"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: conds,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Image: "busybox", Ready: true}}},
	}
	Adapter{}.TrimForCache(p)
	want := &corev1.Pod{
		Spec: corev1.PodSpec{
			Containers:      []corev1.Container{{Name: "main", Resources: res}},
			SchedulingGates: gates,
			NodeSelector:    map[string]string{"disk": "ssd"},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: conds},
	}
	if d := cmp.Diff(want, p, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); d != "" {
		t.Errorf("trimmed pod (-want +got):\n%s", d)
	}
}
