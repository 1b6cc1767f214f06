package rayjob

import (
	"testing"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
)

func TestPodsReady(t *testing.T) {
	for state, want := range map[rayv1.ClusterState]bool{rayv1.Ready: true, rayv1.Suspended: false, "": false} {
		r := newRayJob(&rayv1.RayJob{Status: rayv1.RayJobStatus{RayClusterStatus: rayv1.RayClusterStatus{State: state}}}) //nolint:staticcheck // KubeRay's state field
		if got := r.PodsReady(); got != want {
			t.Errorf("cluster state %q: PodsReady() = %v, want %v", state, got, want)
		}
	}
}
