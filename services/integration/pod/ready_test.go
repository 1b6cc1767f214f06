package pod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPodsReady(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status corev1.PodStatus
		want   bool
	}{
		{name: "Ready condition true", status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}, want: true},
		{name: "Ready condition false", status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}},
		{name: "pending", status: corev1.PodStatus{Phase: corev1.PodPending}},
		{name: "succeeded", status: corev1.PodStatus{Phase: corev1.PodSucceeded}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Pod{Pod: &corev1.Pod{Status: tc.status}}
			if got := p.PodsReady(); got != tc.want {
				t.Errorf("PodsReady() = %v, want %v", got, tc.want)
			}
		})
	}
}
