package pytorchjob

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kftov1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestPodSets(t *testing.T) {
	cases := []struct {
		name    string
		specs   map[kftov1.ReplicaType]*kftov1.ReplicaSpec
		want    []string
		wantN   []int32
		wantErr string
	}{
		{name: "master then worker",
			specs: map[kftov1.ReplicaType]*kftov1.ReplicaSpec{"Worker": {Replicas: ptr.To[int32](4)}, "Master": {}},
			want:  []string{"master", "worker"}, wantN: []int32{1, 4}},
		{name: "workers alone", specs: map[kftov1.ReplicaType]*kftov1.ReplicaSpec{"Worker": {Replicas: ptr.To[int32](2)}},
			want: []string{"worker"}, wantN: []int32{2}},
		{name: "no replicas", specs: nil, wantErr: "spec.pytorchReplicaSpecs is empty"},
		{name: "negative replicas", specs: map[kftov1.ReplicaType]*kftov1.ReplicaSpec{"Worker": {Replicas: ptr.To[int32](-1)}},
			wantErr: "spec.pytorchReplicaSpecs.Worker.replicas is -1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j, err := Adapter{}.Decode(&kftov1.PyTorchJob{Spec: kftov1.PyTorchJobSpec{PyTorchReplicaSpecs: tc.specs}})
			if err != nil {
				t.Fatal(err)
			}
			sets, err := j.PodSets()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("PodSets() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			var names []string
			var counts []int32
			for _, ps := range sets {
				names, counts = append(names, ps.Name), append(counts, ps.Count)
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantN, counts); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSuspendWithoutRunPolicy: a PyTorchJob may come without runPolicy.
func TestSuspendWithoutRunPolicy(t *testing.T) {
	j, _ := Adapter{}.Decode(&kftov1.PyTorchJob{})
	if j.IsSuspended() {
		t.Fatal("suspended without runPolicy")
	}
	j.SetSuspended(true)
	if !j.IsSuspended() {
		t.Fatal("SetSuspended(true) did not suspend")
	}
}

func TestFinished(t *testing.T) {
	for _, tc := range []struct {
		typ                         kftov1.JobConditionType
		status                      corev1.ConditionStatus
		wantFinished, wantSucceeded bool
	}{
		{kftov1.JobSucceeded, corev1.ConditionTrue, true, true},
		{kftov1.JobFailed, corev1.ConditionTrue, true, false},
		{kftov1.JobRunning, corev1.ConditionTrue, false, false},
		{kftov1.JobSucceeded, corev1.ConditionFalse, false, false},
	} {
		pj := &kftov1.PyTorchJob{Status: kftov1.JobStatus{Conditions: []kftov1.JobCondition{{Type: tc.typ, Status: tc.status}}}}
		j, _ := Adapter{}.Decode(pj)
		if f, s, _ := j.Finished(); f != tc.wantFinished || s != tc.wantSucceeded {
			t.Errorf("%s=%s: Finished() = %v, %v", tc.typ, tc.status, f, s)
		}
	}
}
