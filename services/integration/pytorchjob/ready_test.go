package pytorchjob

import (
	"testing"

	kftov1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestPodsReady(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conds []kftov1.JobCondition
		want  bool
	}{
		{name: "Running true", conds: []kftov1.JobCondition{{Type: kftov1.JobCreated, Status: corev1.ConditionTrue}, {Type: kftov1.JobRunning, Status: corev1.ConditionTrue}}, want: true},
		{name: "Running false", conds: []kftov1.JobCondition{{Type: kftov1.JobRunning, Status: corev1.ConditionFalse}}},
		{name: "only Created", conds: []kftov1.JobCondition{{Type: kftov1.JobCreated, Status: corev1.ConditionTrue}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &PyTorchJob{PyTorchJob: &kftov1.PyTorchJob{Status: kftov1.JobStatus{Conditions: tc.conds}}}
			if got := p.PodsReady(); got != tc.want {
				t.Errorf("PodsReady() = %v, want %v", got, tc.want)
			}
		})
	}
}
