package mpijob

import (
	"testing"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	corev1 "k8s.io/api/core/v1"
)

func TestPodsReady(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conds []mpiv2.JobCondition
		want  bool
	}{
		{name: "Running true", conds: []mpiv2.JobCondition{{Type: mpiv2.JobCreated, Status: corev1.ConditionTrue}, {Type: mpiv2.JobRunning, Status: corev1.ConditionTrue}}, want: true},
		{name: "Running false", conds: []mpiv2.JobCondition{{Type: mpiv2.JobRunning, Status: corev1.ConditionFalse}}},
		{name: "only Created", conds: []mpiv2.JobCondition{{Type: mpiv2.JobCreated, Status: corev1.ConditionTrue}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &MPIJob{MPIJob: &mpiv2.MPIJob{Status: mpiv2.JobStatus{Conditions: tc.conds}}}
			if got := m.PodsReady(); got != tc.want {
				t.Errorf("PodsReady() = %v, want %v", got, tc.want)
			}
		})
	}
}
