package pytorchjob

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kftov1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
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
