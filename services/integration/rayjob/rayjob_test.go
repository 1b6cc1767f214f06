package rayjob

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func rayJob(mode rayv1.JobSubmissionMode, submitter *corev1.PodTemplateSpec) *rayv1.RayJob {
	return &rayv1.RayJob{Spec: rayv1.RayJobSpec{SubmissionMode: mode, SubmitterPodTemplate: submitter,
		RayClusterSpec: &rayv1.RayClusterSpec{WorkerGroupSpecs: []rayv1.WorkerGroupSpec{{GroupName: "w", Replicas: ptr.To[int32](2)}}}}}
}

func TestPodSets(t *testing.T) {
	own := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mine"}}}}
	cases := []struct {
		name          string
		rj            *rayv1.RayJob
		want          []string
		wantSubmitter string // container name of the submitter pod set
		wantErr       string
	}{
		{name: "default mode adds KubeRay's submitter", rj: rayJob("", nil), want: []string{"head", "w", "submitter"}, wantSubmitter: "ray-job-submitter"},
		{name: "the user's submitter template", rj: rayJob(rayv1.K8sJobMode, own), want: []string{"head", "w", "submitter"}, wantSubmitter: "mine"},
		{name: "HTTP mode has no submitter pod", rj: rayJob(rayv1.HTTPMode, nil), want: []string{"head", "w"}},
		{name: "an existing cluster cannot be queued", rj: &rayv1.RayJob{Spec: rayv1.RayJobSpec{ClusterSelector: map[string]string{"ray.io/cluster": "c"}}}, wantErr: "spec.clusterSelector"},
		{name: "no cluster spec", rj: &rayv1.RayJob{}, wantErr: "spec.rayClusterSpec is missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j, err := Adapter{}.Decode(tc.rj)
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
			for _, ps := range sets {
				names = append(names, ps.Name)
				if ps.Name == SubmitterPodSet && ps.Spec.Containers[0].Name != tc.wantSubmitter {
					t.Errorf("submitter container %q, want %q", ps.Spec.Containers[0].Name, tc.wantSubmitter)
				}
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("pod sets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFinished(t *testing.T) {
	for _, tc := range []struct {
		deploy        rayv1.JobDeploymentStatus
		job           rayv1.JobStatus
		wantFinished  bool
		wantSucceeded bool
	}{
		{rayv1.JobDeploymentStatusRunning, rayv1.JobStatusRunning, false, false},
		{rayv1.JobDeploymentStatusComplete, rayv1.JobStatusSucceeded, true, true},
		{rayv1.JobDeploymentStatusComplete, rayv1.JobStatusFailed, true, false},
		{rayv1.JobDeploymentStatusFailed, "", true, false},
		{rayv1.JobDeploymentStatusSuspended, "", false, false},
	} {
		rj := rayJob("", nil)
		rj.Status.JobDeploymentStatus, rj.Status.JobStatus = tc.deploy, tc.job
		j, _ := Adapter{}.Decode(rj)
		if f, s, _ := j.Finished(); f != tc.wantFinished || s != tc.wantSucceeded {
			t.Errorf("%s/%s: Finished() = %v, %v; want %v, %v", tc.deploy, tc.job, f, s, tc.wantFinished, tc.wantSucceeded)
		}
	}
}
