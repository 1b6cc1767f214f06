package job

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
)

func TestPodsReady(t *testing.T) {
	cases := []struct {
		name                   string
		parallelism, completed *int32
		ready, succeeded       int32
		want                   bool
	}{
		{name: "all parallel pods ready", parallelism: ptr.To[int32](3), ready: 3, want: true},
		{name: "one short", parallelism: ptr.To[int32](3), ready: 2},
		{name: "succeeded pods count as ready", parallelism: ptr.To[int32](3), ready: 1, succeeded: 2, want: true},
		{name: "fewer completions than parallelism need only those", parallelism: ptr.To[int32](4), completed: ptr.To[int32](2), ready: 2, want: true},
		{name: "parallelism unset means one pod", ready: 1, want: true},
		{name: "nothing ready", parallelism: ptr.To[int32](1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := &Job{Job: &batchv1.Job{Spec: batchv1.JobSpec{Parallelism: tc.parallelism, Completions: tc.completed},
				Status: batchv1.JobStatus{Ready: &tc.ready, Succeeded: tc.succeeded}}}
			if got := j.PodsReady(); got != tc.want {
				t.Errorf("PodsReady() = %v, want %v", got, tc.want)
			}
		})
	}
}
