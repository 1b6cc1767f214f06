package jobframework_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/job"
	"github.com/sluice-dev/sluice/services/integration/pod"
)

func member(name, group string, phase corev1.PodPhase, message string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Status: corev1.PodStatus{Phase: phase, Message: message}}
	if group != "" {
		p.Labels = map[string]string{pod.GroupNameLabel: group}
	}
	return p
}

func TestWorkKey(t *testing.T) {
	cases := []struct {
		name    string
		ad      jobframework.Adapter
		obj     any
		wantKey string
		wantOK  bool
	}{
		{"a lone object is its own key", pod.Adapter{}, member("p", "", "", ""), "ns/p", true},
		{"a member's key is its group", pod.Adapter{}, member("p-0", "sweep", "", ""), "ns/sweep", true},
		{"a deleted member's tombstone still names its group", pod.Adapter{}, cache.DeletedFinalStateUnknown{Key: "ns/p-0", Obj: member("p-0", "sweep", "", "")}, "ns/sweep", true},
		{"a kind without groups ignores the label", job.Adapter{}, member("p-0", "sweep", "", ""), "ns/p-0", true},
		{"something that is not an object has no key", pod.Adapter{}, "ns/p", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, ok := jobframework.WorkKey(tc.ad, tc.obj)
			if key != tc.wantKey || ok != tc.wantOK {
				t.Errorf("WorkKey = %q, %v; want %q, %v", key, ok, tc.wantKey, tc.wantOK)
			}
		})
	}
}

func TestGroupFinished(t *testing.T) {
	type result struct {
		Finished, Succeeded bool
		Message             string
	}
	cases := []struct {
		name    string
		members []*corev1.Pod
		want    result
	}{
		{"one member still running: not finished", []*corev1.Pod{member("a", "g", corev1.PodSucceeded, ""), member("b", "g", corev1.PodRunning, "")}, result{}},
		{"every member succeeded", []*corev1.Pod{member("a", "g", corev1.PodSucceeded, ""), member("b", "g", corev1.PodSucceeded, "")},
			result{true, true, "all 2 members succeeded"}},
		{"the first failure names its member", []*corev1.Pod{member("a", "g", corev1.PodSucceeded, ""), member("b", "g", corev1.PodFailed, "OOMKilled"), member("c", "g", corev1.PodFailed, "evicted")},
			result{true, false, "b: OOMKilled"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var jobs []jobframework.Job
			for _, m := range tc.members {
				j, err := pod.Adapter{}.Decode(m)
				if err != nil {
					t.Fatal(err)
				}
				jobs = append(jobs, j)
			}
			var got result
			got.Finished, got.Succeeded, got.Message = jobframework.GroupFinished(jobs)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("GroupFinished (-want +got):\n%s", d)
			}
		})
	}
}
