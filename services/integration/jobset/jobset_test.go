package jobset

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	jobsetv1 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// jobSet builds a JobSet with the given replicatedJobs (name, replicas,
// parallelism, completions; 0 leaves completions unset).
func jobSet(rjs ...[4]any) *jobsetv1.JobSet {
	js := &jobsetv1.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "js", Namespace: "ns", UID: "uid-js",
		Labels: map[string]string{v1beta1.QueueNameLabel: "q"}}}
	for _, rj := range rjs {
		spec := batchv1.JobSpec{Parallelism: ptr.To(int32(rj[2].(int))),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}}
		if c := rj[3].(int); c != 0 {
			spec.Completions = ptr.To(int32(c))
		}
		js.Spec.ReplicatedJobs = append(js.Spec.ReplicatedJobs, jobsetv1.ReplicatedJob{
			Name: rj[0].(string), Replicas: int32(rj[1].(int)), Template: batchv1.JobTemplateSpec{Spec: spec}})
	}
	return js
}

func TestPodSets(t *testing.T) {
	cases := []struct {
		name      string
		js        *jobsetv1.JobSet
		wantNames []string
		wantCount []int32
		wantErr   string
	}{
		{name: "one pod set per replicatedJob, replicas × parallelism",
			js:        jobSet([4]any{"leader", 1, 1, 0}, [4]any{"workers", 3, 4, 0}),
			wantNames: []string{"leader", "workers"}, wantCount: []int32{1, 12}},
		{name: "completions below parallelism cap each job",
			js:        jobSet([4]any{"w", 2, 4, 2}),
			wantNames: []string{"w"}, wantCount: []int32{4}},
		{name: "no replicatedJobs", js: jobSet(), wantErr: "spec.replicatedJobs is empty"},
		{name: "negative parallelism names the field",
			js: jobSet([4]any{"a", 1, 1, 0}, [4]any{"w", 1, -1, 0}), wantErr: "spec.replicatedJobs[1] (w).template.spec.parallelism is -1"},
		{name: "negative replicas names the field",
			js: jobSet([4]any{"w", -2, 1, 0}), wantErr: "spec.replicatedJobs[0] (w).replicas is -2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j, err := Adapter{}.Decode(tc.js)
			if err != nil {
				t.Fatal(err)
			}
			sets, err := j.PodSets()
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, jobframework.ErrInvalidJob) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("PodSets() error = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			var counts []int32
			for _, ps := range sets {
				names, counts = append(names, ps.Name), append(counts, ps.Count)
			}
			if diff := cmp.Diff(tc.wantNames, names); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCount, counts); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAdmitAndRestoreEveryPodSet: admission writes the flavor into every
// replicatedJob's template, and restoring gives back the JobSet exactly.
func TestAdmitAndRestoreEveryPodSet(t *testing.T) {
	orig := jobSet([4]any{"leader", 1, 1, 0}, [4]any{"workers", 2, 1, 0})
	orig.Spec.Suspend = ptr.To(true)
	orig.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	flavors := map[string]*v1beta1.ResourceFlavor{"a100": {ObjectMeta: metav1.ObjectMeta{Name: "a100"},
		Spec: v1beta1.ResourceFlavorSpec{NodeLabels: map[string]string{"gpu": "a100"},
			Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}}}}
	j, _ := Adapter{}.Decode(orig)
	a := jobframework.Assignment{ClusterQueue: "cq", PodSets: []jobframework.PodSetAssignment{
		{Name: "leader", Count: 1, Flavors: map[string]string{"nvidia.com/gpu": "a100"}},
		{Name: "workers", Count: 2, Flavors: map[string]string{"nvidia.com/gpu": "a100"}},
	}}
	if err := jobframework.Admit(j, a, flavors); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if j.IsSuspended() {
		t.Error("admitted JobSet still suspended")
	}
	sets, _ := j.PodSets()
	for _, ps := range sets {
		if ps.Spec.NodeSelector["gpu"] != "a100" || len(ps.Spec.Tolerations) != 1 {
			t.Errorf("pod set %s: selector %v, tolerations %v; want the flavor's", ps.Name, ps.Spec.NodeSelector, ps.Spec.Tolerations)
		}
	}
	if sets[1].Spec.NodeSelector["disk"] != "ssd" {
		t.Errorf("the user's selector was lost: %v", sets[1].Spec.NodeSelector)
	}
	// Running, its templates must change back: suspend first.
	if step, err := jobframework.NextStopStep(Adapter{}, j); err != nil || step.Name != "suspend" {
		t.Fatalf("NextStopStep() of a running admitted JobSet = %q, %v; want suspend", step.Name, err)
	}
	if _, err := jobframework.Restore(j); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(orig, j.Object()); diff != "" {
		t.Errorf("restored JobSet differs (-want +got):\n%s", diff)
	}
	if a, _, _ := jobframework.AdmissionOf(j.Meta().GetAnnotations()); a.ClusterQueue != "" {
		t.Error("admission annotation left after restore")
	}
}

func TestFinished(t *testing.T) {
	for _, tc := range []struct {
		cond          string
		status        metav1.ConditionStatus
		wantFinished  bool
		wantSucceeded bool
	}{
		{"Completed", metav1.ConditionTrue, true, true},
		{"Failed", metav1.ConditionTrue, true, false},
		{"Completed", metav1.ConditionFalse, false, false},
		{"Suspended", metav1.ConditionTrue, false, false},
	} {
		js := jobSet([4]any{"w", 1, 1, 0})
		apimeta.SetStatusCondition(&js.Status.Conditions, metav1.Condition{Type: tc.cond, Status: tc.status, Reason: "r"})
		j, _ := Adapter{}.Decode(js)
		if f, s, _ := j.Finished(); f != tc.wantFinished || s != tc.wantSucceeded {
			t.Errorf("%s=%s: Finished() = %v, %v; want %v, %v", tc.cond, tc.status, f, s, tc.wantFinished, tc.wantSucceeded)
		}
	}
}

func TestDecodeUnstructured(t *testing.T) {
	js := jobSet([4]any{"w", 2, 1, 0})
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(js)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Adapter{}.Decode(&unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	if sets, err := j.PodSets(); err != nil || len(sets) != 1 || sets[0].Count != 2 {
		t.Errorf("PodSets() = %+v, %v", sets, err)
	}
	if _, err := (Adapter{}).Decode(&corev1.Pod{}); err == nil {
		t.Error("a Pod decoded as a JobSet")
	}
}

// TestTooManyPodSets: a JobSet of more replicatedJobs than a workload may
// have pod sets (8, as in Kueue) is not queued, with an error naming the
// number and the cap.
func TestTooManyPodSets(t *testing.T) {
	var rjs [][4]any
	for i := range jobframework.MaxPodSets + 1 {
		rjs = append(rjs, [4]any{"r" + string(rune('a'+i)), 1, 1, 0})
	}
	j, err := Adapter{}.Decode(jobSet(rjs...))
	if err != nil {
		t.Fatal(err)
	}
	_, err = jobframework.WorkloadOf("jobset", j, nil)
	if !errors.Is(err, jobframework.ErrInvalidJob) || !strings.Contains(err.Error(), "9 pod sets, more than the 8 a workload may have") {
		t.Fatalf("WorkloadOf() error = %v, want one saying 9 pod sets are more than 8", err)
	}
	j, err = Adapter{}.Decode(jobSet(rjs[:jobframework.MaxPodSets]...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobframework.WorkloadOf("jobset", j, nil); err != nil {
		t.Fatalf("WorkloadOf() of 8 pod sets: %v", err)
	}
}
