package integration

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

func TestPickDomains(t *testing.T) {
	placement := &engine.TopologyAssignment{
		Levels: []string{"rack", "kubernetes.io/hostname"},
		Domains: []engine.TopologyDomain{
			{Values: []string{"r1", "n1"}, Count: 2},
			{Values: []string{"r1", "n2"}, Count: 1},
		},
	}
	n1 := map[string]string{"rack": "r1", "kubernetes.io/hostname": "n1"}
	n2 := map[string]string{"rack": "r1", "kubernetes.io/hostname": "n2"}
	cases := []struct {
		name   string
		placed []map[string]string
		n      int
		want   []map[string]string
	}{
		{name: "nothing placed: the domains in order", n: 3, want: []map[string]string{n1, n1, n2}},
		{name: "a pod already on n1 holds one of its places", placed: []map[string]string{n1}, n: 3, want: []map[string]string{n1, n2}},
		{name: "a replacement goes where a pod ended", placed: []map[string]string{n1, n2}, n: 1, want: []map[string]string{n1}},
		{name: "a pod with the user's own selector beside the domain's still counts", placed: []map[string]string{{"rack": "r1", "kubernetes.io/hostname": "n2", "disk": "ssd"}}, n: 1,
			want: []map[string]string{n1}},
		{name: "every place taken: nothing more", placed: []map[string]string{n1, n1, n2}, n: 2, want: nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, pickDomains(placement, c.placed, c.n)); diff != "" {
				t.Errorf("pickDomains (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithTopology(t *testing.T) {
	placement := &engine.TopologyAssignment{Levels: []string{"rack"}, Domains: []engine.TopologyDomain{{Values: []string{"r1"}, Count: 2}}}
	checks := &jobframework.PodSetUpdate{Labels: map[string]string{"from-check": "yes"}}
	got, err := withTopology(checks, "jobset", "ns/train", "workers", "2026-11-29T10:00:00Z", placement, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &jobframework.PodSetUpdate{
		Labels: map[string]string{"from-check": "yes", v1beta1.TopologyPodLabel: "jobset"},
		Annotations: map[string]string{
			v1beta1.TopologyAssignmentAnnotation: `{"levels":["rack"],"domains":[{"values":["r1"],"count":2}]}`,
			v1beta1.TopologyOwnerAnnotation:      "ns/train",
			v1beta1.TopologyPodSetAnnotation:     "workers",
			v1beta1.TopologyAdmissionAnnotation:  "2026-11-29T10:00:00Z",
		},
		SchedulingGates: []string{v1beta1.TopologySchedulingGate},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("template update (-want +got):\n%s", diff)
	}
	if len(checks.Labels) != 1 {
		t.Errorf("the checks' update was changed: %v", checks.Labels)
	}
	pod, err := withTopology(nil, "pod", "", "main", "2026-11-29T10:00:00Z", placement, true, map[string]string{"rack": "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&jobframework.PodSetUpdate{NodeSelector: map[string]string{"rack": "r1"}}, pod); diff != "" {
		t.Errorf("a Pod's update (-want +got):\n%s", diff)
	}
}
