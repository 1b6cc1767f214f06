package mpijob

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestPodSets(t *testing.T) {
	cases := []struct {
		name    string
		specs   map[mpiv2.MPIReplicaType]*mpiv2.ReplicaSpec
		want    []string
		wantN   []int32
		wantErr string
	}{
		{name: "launcher then worker",
			specs: map[mpiv2.MPIReplicaType]*mpiv2.ReplicaSpec{"Worker": {Replicas: ptr.To[int32](3)}, "Launcher": {Replicas: ptr.To[int32](1)}},
			want:  []string{"launcher", "worker"}, wantN: []int32{1, 3}},
		{name: "launcher alone", specs: map[mpiv2.MPIReplicaType]*mpiv2.ReplicaSpec{"Launcher": {}}, want: []string{"launcher"}, wantN: []int32{1}},
		{name: "no launcher", specs: map[mpiv2.MPIReplicaType]*mpiv2.ReplicaSpec{"Worker": {}}, wantErr: "spec.mpiReplicaSpecs.Launcher is missing"},
		{name: "an unknown replica type", specs: map[mpiv2.MPIReplicaType]*mpiv2.ReplicaSpec{"Launcher": {}, "Chief": {}}, wantErr: "spec.mpiReplicaSpecs.Chief"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j, err := Adapter{}.Decode(&mpiv2.MPIJob{Spec: mpiv2.MPIJobSpec{MPIReplicaSpecs: tc.specs}})
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

func TestFinishedAndSuspend(t *testing.T) {
	mj := &mpiv2.MPIJob{Status: mpiv2.JobStatus{Conditions: []mpiv2.JobCondition{{Type: mpiv2.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}}}
	j, _ := Adapter{}.Decode(mj)
	if f, s, msg := j.Finished(); !f || s || msg != "BackoffLimitExceeded" {
		t.Errorf("Finished() = %v, %v, %q; want a failure with its reason", f, s, msg)
	}
	if j.IsSuspended() {
		t.Error("suspended without runPolicy.suspend")
	}
	j.SetSuspended(true)
	if !j.IsSuspended() {
		t.Error("SetSuspended(true) did not suspend")
	}
}
