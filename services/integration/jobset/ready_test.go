package jobset

import (
	"testing"

	jobsetv1 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
)

func TestPodsReady(t *testing.T) {
	spec := jobsetv1.JobSetSpec{ReplicatedJobs: []jobsetv1.ReplicatedJob{{Name: "a", Replicas: 2}, {Name: "b", Replicas: 1}}}
	cases := []struct {
		name   string
		status []jobsetv1.ReplicatedJobStatus
		want   bool
	}{
		{name: "every child Job ready", status: []jobsetv1.ReplicatedJobStatus{{Name: "a", Ready: 2}, {Name: "b", Ready: 1}}, want: true},
		{name: "succeeded child Jobs count", status: []jobsetv1.ReplicatedJobStatus{{Name: "a", Ready: 1, Succeeded: 1}, {Name: "b", Succeeded: 1}}, want: true},
		{name: "one child Job short", status: []jobsetv1.ReplicatedJobStatus{{Name: "a", Ready: 2}}},
		{name: "no status yet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := &JobSet{JobSet: &jobsetv1.JobSet{Spec: spec, Status: jobsetv1.JobSetStatus{ReplicatedJobsStatus: tc.status}}}
			if got := j.PodsReady(); got != tc.want {
				t.Errorf("PodsReady() = %v, want %v", got, tc.want)
			}
		})
	}
}
