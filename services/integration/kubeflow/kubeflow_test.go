package kubeflow_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kftov1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/services/integration/kubeflow"
)

var shape = &kubeflow.Shape{Kind: "tfjob", Field: "spec.tfReplicaSpecs",
	Order: []kftov1.ReplicaType{kftov1.TFJobReplicaTypeChief, kftov1.TFJobReplicaTypePS, kftov1.TFJobReplicaTypeWorker}}

func tfjob(specs map[kftov1.ReplicaType]*kftov1.ReplicaSpec, conds ...kftov1.JobCondition) *kubeflow.Job {
	o := &kftov1.TFJob{Spec: kftov1.TFJobSpec{TFReplicaSpecs: specs}, Status: kftov1.JobStatus{Conditions: conds}}
	return kubeflow.New(o, o.Spec.TFReplicaSpecs, &o.Spec.RunPolicy, &o.Status, shape)
}

func TestPodSets(t *testing.T) {
	cases := []struct {
		name       string
		specs      map[kftov1.ReplicaType]*kftov1.ReplicaSpec
		wantNames  []string
		wantCounts []int32
		wantErr    string
	}{
		{name: "known types in the shape's order, replicas defaulting to 1",
			specs:     map[kftov1.ReplicaType]*kftov1.ReplicaSpec{"Worker": {Replicas: ptr.To[int32](4)}, "PS": {Replicas: ptr.To[int32](2)}, "Chief": {}},
			wantNames: []string{"chief", "ps", "worker"}, wantCounts: []int32{1, 2, 4}},
		{name: "unknown types after the known ones, by name",
			specs:     map[kftov1.ReplicaType]*kftov1.ReplicaSpec{"Zeta": {}, "Alpha": {}, "Worker": {}},
			wantNames: []string{"worker", "alpha", "zeta"}, wantCounts: []int32{1, 1, 1}},
		{name: "a nil replica spec is no pod set",
			specs:     map[kftov1.ReplicaType]*kftov1.ReplicaSpec{"Worker": {Replicas: ptr.To[int32](2)}, "PS": nil},
			wantNames: []string{"worker"}, wantCounts: []int32{2}},
		{name: "no replicas", specs: nil, wantErr: "spec.tfReplicaSpecs is empty"},
		{name: "negative replicas", specs: map[kftov1.ReplicaType]*kftov1.ReplicaSpec{"Worker": {Replicas: ptr.To[int32](-1)}},
			wantErr: "spec.tfReplicaSpecs.Worker.replicas is -1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sets, err := tfjob(tc.specs).PodSets()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("PodSets() error = %v, want %q", err, tc.wantErr)
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
			if diff := cmp.Diff(tc.wantCounts, counts); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodSetsPointIntoTheObject: the framework writes node selectors
// through a pod set's Spec; they must land in the object.
func TestPodSetsPointIntoTheObject(t *testing.T) {
	o := &kftov1.TFJob{Spec: kftov1.TFJobSpec{TFReplicaSpecs: map[kftov1.ReplicaType]*kftov1.ReplicaSpec{"Worker": {}}}}
	sets, err := kubeflow.New(o, o.Spec.TFReplicaSpecs, &o.Spec.RunPolicy, &o.Status, shape).PodSets()
	if err != nil {
		t.Fatal(err)
	}
	sets[0].Spec.NodeSelector = map[string]string{"pool": "a100"}
	if got := o.Spec.TFReplicaSpecs["Worker"].Template.Spec.NodeSelector["pool"]; got != "a100" {
		t.Errorf("node selector written through the pod set is %q in the object, want a100", got)
	}
}

// TestSuspendWithoutRunPolicy: a job may come without runPolicy.
func TestSuspendWithoutRunPolicy(t *testing.T) {
	o := &kftov1.TFJob{}
	j := kubeflow.New(o, nil, &o.Spec.RunPolicy, &o.Status, shape)
	if j.IsSuspended() {
		t.Fatal("suspended without runPolicy")
	}
	j.SetSuspended(true)
	if o.Spec.RunPolicy.Suspend == nil || !*o.Spec.RunPolicy.Suspend {
		t.Fatal("SetSuspended(true) did not suspend the object")
	}
}

func TestFinished(t *testing.T) {
	for _, tc := range []struct {
		cond                        kftov1.JobCondition
		wantFinished, wantSucceeded bool
		wantMessage                 string
	}{
		{kftov1.JobCondition{Type: kftov1.JobSucceeded, Status: corev1.ConditionTrue}, true, true, "tfjob succeeded"},
		{kftov1.JobCondition{Type: kftov1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}, true, false, "BackoffLimitExceeded"},
		{kftov1.JobCondition{Type: kftov1.JobFailed, Status: corev1.ConditionTrue, Reason: "R", Message: "worker 2 failed"}, true, false, "worker 2 failed"},
		{kftov1.JobCondition{Type: kftov1.JobRunning, Status: corev1.ConditionTrue}, false, false, ""},
		{kftov1.JobCondition{Type: kftov1.JobSucceeded, Status: corev1.ConditionFalse}, false, false, ""},
	} {
		f, s, m := tfjob(nil, tc.cond).Finished()
		if f != tc.wantFinished || s != tc.wantSucceeded || m != tc.wantMessage {
			t.Errorf("%s=%s: Finished() = %v, %v, %q; want %v, %v, %q", tc.cond.Type, tc.cond.Status, f, s, m, tc.wantFinished, tc.wantSucceeded, tc.wantMessage)
		}
	}
}

func TestPodsReady(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conds []kftov1.JobCondition
		want  bool
	}{
		{name: "Running true", conds: []kftov1.JobCondition{{Type: kftov1.JobCreated, Status: corev1.ConditionTrue}, {Type: kftov1.JobRunning, Status: corev1.ConditionTrue}}, want: true},
		{name: "Running false", conds: []kftov1.JobCondition{{Type: kftov1.JobRunning, Status: corev1.ConditionFalse}}},
		{name: "only Created", conds: []kftov1.JobCondition{{Type: kftov1.JobCreated, Status: corev1.ConditionTrue}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tfjob(nil, tc.conds...).PodsReady(); got != tc.want {
				t.Errorf("PodsReady() = %v, want %v", got, tc.want)
			}
		})
	}
}
