package raycluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

func group(name string, replicas *int32, hosts int32) rayv1.WorkerGroupSpec {
	return rayv1.WorkerGroupSpec{GroupName: name, Replicas: replicas, NumOfHosts: hosts, MinReplicas: ptr.To[int32](0), MaxReplicas: ptr.To[int32](10)}
}

func TestPodSets(t *testing.T) {
	cases := []struct {
		name    string
		groups  []rayv1.WorkerGroupSpec
		want    map[string]int32
		wantErr string
	}{
		{name: "head alone", want: map[string]int32{"head": 1}},
		{name: "groups at their declared replicas times hosts",
			groups: []rayv1.WorkerGroupSpec{group("cpu", ptr.To[int32](3), 0), group("tpu", ptr.To[int32](2), 4)},
			want:   map[string]int32{"head": 1, "cpu": 3, "tpu": 8}},
		{name: "unset replicas count as one", groups: []rayv1.WorkerGroupSpec{group("w", nil, 1)}, want: map[string]int32{"head": 1, "w": 1}},
		{name: "a group called head", groups: []rayv1.WorkerGroupSpec{group("head", nil, 1)}, wantErr: "workerGroupSpecs[0].groupName \"head\""},
		{name: "negative replicas", groups: []rayv1.WorkerGroupSpec{group("w", ptr.To[int32](-1), 1)}, wantErr: "workerGroupSpecs[0] (w).replicas is -1"},
		{name: "too many groups", groups: make([]rayv1.WorkerGroupSpec, 8), wantErr: "at most 7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := &rayv1.RayCluster{Spec: rayv1.RayClusterSpec{WorkerGroupSpecs: tc.groups}}
			j, err := Adapter{}.Decode(rc)
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
			got := map[string]int32{}
			for _, ps := range sets {
				got[ps.Name] = ps.Count
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pod sets (-want +got):\n%s", diff)
			}
			if f, _, _ := j.Finished(); f {
				t.Error("a RayCluster finished by itself")
			}
		})
	}
}

func TestSuspend(t *testing.T) {
	j, _ := Adapter{}.Decode(&rayv1.RayCluster{})
	if j.IsSuspended() {
		t.Fatal("a new RayCluster is suspended")
	}
	j.SetSuspended(true)
	if !j.IsSuspended() {
		t.Fatal("SetSuspended(true) did not suspend")
	}
}

// TestAutoscalingIsElasticOnly: a queued RayCluster may use KubeRay's
// autoscaler only as an elastic job (as in Kueue); an elastic one's
// workload follows its worker groups' replicas.
func TestAutoscalingIsElasticOnly(t *testing.T) {
	cases := []struct {
		name        string
		autoscaling bool
		annotations map[string]string
		wantElastic bool
		wantErr     string
	}{
		{name: "fixed size"},
		{name: "autoscaling, not elastic", autoscaling: true, wantErr: "autoscales, which a queued raycluster may do only as an elastic job"},
		{name: "autoscaling and elastic (Kueue's annotation)", autoscaling: true, annotations: map[string]string{"kueue.x-k8s.io/elastic-job": "true"}, wantElastic: true},
		{name: "elastic without the autoscaler", annotations: map[string]string{"sluice.dev/elastic-job": "true"}, wantElastic: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := &rayv1.RayCluster{
				ObjectMeta: metav1.ObjectMeta{Name: "rc", Namespace: "ns", Labels: map[string]string{"sluice.dev/queue-name": "q"}, Annotations: tc.annotations},
				Spec: rayv1.RayClusterSpec{EnableInTreeAutoscaling: ptr.To(tc.autoscaling),
					WorkerGroupSpecs: []rayv1.WorkerGroupSpec{group("w", ptr.To[int32](2), 1)}},
			}
			w, err := jobframework.WorkloadOf("raycluster", &RayCluster{rc}, nil)
			if tc.wantErr != "" {
				if !errors.Is(err, jobframework.ErrInvalidJob) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrInvalidJob saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.Elastic != tc.wantElastic {
				t.Errorf("Elastic = %t, want %t", w.Elastic, tc.wantElastic)
			}
		})
	}
}
