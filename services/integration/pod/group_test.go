package pod

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// member builds a Pod of group "train" created at minute n.
func member(name string, n int, total string) *podBuilder {
	b := newPod()
	b.p.Name, b.p.UID = name, types.UID("uid-"+name)
	b.p.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, n, 0, 0, time.UTC))
	b.p.Labels[GroupNameLabel] = "train"
	if total != "" {
		b.p.Annotations = map[string]string{GroupTotalCountAnnotation: total}
	}
	return b
}

func (b *podBuilder) gpus(n int) *podBuilder {
	b.p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = *ptrQ(strconv.Itoa(n))
	return b
}

func (b *podBuilder) label(k, v string) *podBuilder { b.p.Labels[k] = v; return b }

// fast marks the member's group as queued on its first member.
func (b *podBuilder) fast() *podBuilder {
	b.p.Annotations[GroupFastAdmissionAnnotation] = "true"
	return b
}

func (b *podBuilder) queue(q string) *podBuilder { b.p.Labels[v1beta1.QueueNameLabel] = q; return b }

func TestGroupOf(t *testing.T) {
	cases := []struct {
		name      string
		pod       *podBuilder
		wantGroup string
		wantTotal int32
		wantErr   string
	}{
		{name: "a lone pod has no group", pod: newPod()},
		{name: "a member says its group and its total", pod: member("a", 0, "3"), wantGroup: "train", wantTotal: 3},
		{name: "a member without the total count is named", pod: member("a", 0, ""), wantGroup: "train", wantErr: "annotation sluice.dev/pod-group-total-count: missing"},
		{name: "a total that is not a number is named", pod: member("a", 0, "three"), wantGroup: "train", wantErr: `"three" is not a positive whole number`},
		{name: "a group name that cannot name a workload is refused", pod: member("a", 0, "2").label(GroupNameLabel, "Train_1"), wantGroup: "Train_1", wantErr: "must be a lower-case DNS name"},
		{name: "a total of zero is refused", pod: member("a", 0, "0"), wantGroup: "train", wantErr: "not a positive whole number"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			group, total, err := Adapter{}.GroupOf(tc.pod.p)
			if group != tc.wantGroup || total != tc.wantTotal {
				t.Errorf("GroupOf() = %q, %d; want %q, %d", group, total, tc.wantGroup, tc.wantTotal)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("GroupOf() error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestGroupWorkload(t *testing.T) {
	type podSet struct {
		Count int32
		GPUs  string
	}
	cases := []struct {
		name         string
		members      []*podBuilder
		wantComplete bool
		wantUID      string
		wantPodSets  []podSet
		wantErr      error
	}{
		{
			name:    "a partial group is not complete",
			members: []*podBuilder{member("a", 0, "3"), member("b", 1, "3")},
		},
		{
			name:         "a group with fast admission is queued on its first member, for its total",
			members:      []*podBuilder{member("a", 0, "3").fast()},
			wantComplete: true, wantUID: "group-uid-a",
			wantPodSets: []podSet{{Count: 3, GPUs: "1"}},
		},
		{
			name:         "a group with fast admission and some members is still one pod set of its total",
			members:      []*podBuilder{member("a", 0, "3").fast(), member("b", 1, "3").fast()},
			wantComplete: true, wantUID: "group-uid-a",
			wantPodSets: []podSet{{Count: 3, GPUs: "1"}},
		},
		{
			name:    "a group with fast admission whose members differ in shape is refused",
			members: []*podBuilder{member("a", 0, "3").fast(), member("b", 1, "3").fast().gpus(4)},
			wantErr: jobframework.ErrInvalidGroup,
		},
		{
			name:    "a group with fast admission has no more members than its total either",
			members: []*podBuilder{member("a", 0, "1").fast(), member("b", 1, "1").fast()},
			wantErr: jobframework.ErrInvalidGroup,
		},
		{
			name:         "a complete group of one role is one pod set",
			members:      []*podBuilder{member("a", 0, "2"), member("b", 1, "2")},
			wantComplete: true, wantUID: "group-uid-a",
			wantPodSets: []podSet{{Count: 2, GPUs: "1"}},
		},
		{
			name:         "members asking for different resources are different pod sets",
			members:      []*podBuilder{member("launcher", 0, "3"), member("w0", 1, "3").gpus(4), member("w1", 2, "3").gpus(4)},
			wantComplete: true, wantUID: "group-uid-launcher",
			wantPodSets: []podSet{{Count: 1, GPUs: "1"}, {Count: 2, GPUs: "4"}},
		},
		{
			name:    "members disagreeing on the total are refused",
			members: []*podBuilder{member("a", 0, "2"), member("b", 1, "3")},
			wantErr: jobframework.ErrInvalidGroup,
		},
		{
			name:    "members in different queues are refused",
			members: []*podBuilder{member("a", 0, "2"), member("b", 1, "2").queue("other")},
			wantErr: jobframework.ErrInvalidGroup,
		},
		{
			name:    "more members than the total are refused",
			members: []*podBuilder{member("a", 0, "1"), member("b", 1, "1")},
			wantErr: jobframework.ErrInvalidGroup,
		},
		{
			name:    "a member without the total is refused",
			members: []*podBuilder{member("a", 0, "2"), member("b", 1, "")},
			wantErr: jobframework.ErrInvalidJob,
		},
		{
			name:    "a group larger than a group may be is refused, before it is complete",
			members: []*podBuilder{member("a", 0, "2147483647"), member("b", 1, "2147483647")},
			wantErr: jobframework.ErrInvalidGroup,
		},
		{
			name: "a partial group is not read further than its labels",
			// b's pod set could not be read (a negative overhead would
			// do; here a queue name no LocalQueue can have), yet while
			// the group waits for its third member nothing says so.
			members: []*podBuilder{member("a", 0, "3").queue("Bad_Q"), member("b", 1, "3").queue("Bad_Q")},
		},
		{
			name:    "a complete group in a queue no LocalQueue can be named is refused",
			members: []*podBuilder{member("a", 0, "2").queue("Bad_Q"), member("b", 1, "2").queue("Bad_Q")},
			wantErr: jobframework.ErrInvalidJob,
		},
		{
			name: "more roles than a workload has pod sets are refused",
			members: func() []*podBuilder {
				var ms []*podBuilder
				for i := range jobframework.MaxPodSets + 1 {
					ms = append(ms, member("m"+strconv.Itoa(i), i, strconv.Itoa(jobframework.MaxPodSets+1)).gpus(i+1))
				}
				return ms
			}(),
			wantErr: jobframework.ErrInvalidGroup,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var live []jobframework.Job
			for _, m := range tc.members {
				live = append(live, m.job(t))
			}
			w, complete, err := jobframework.GroupWorkload(Adapter{}, "ns", "train", live, nil)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if complete != tc.wantComplete {
				t.Fatalf("complete = %v, want %v", complete, tc.wantComplete)
			}
			if !complete {
				return
			}
			if w.Name != "train" || w.Namespace != "ns" || w.UID != tc.wantUID || w.LocalQueue != "q" {
				t.Errorf("workload %s/%s uid %s queue %s; want ns/train uid %s queue q", w.Namespace, w.Name, w.UID, w.LocalQueue, tc.wantUID)
			}
			var got []podSet
			for _, ps := range w.PodSets {
				if ps.MinCount != ps.Count {
					t.Errorf("pod set %s: minCount %d, want %d (a group runs whole)", ps.Name, ps.MinCount, ps.Count)
				}
				q := ps.Requests[corev1.ResourceName("nvidia.com/gpu")]
				got = append(got, podSet{Count: ps.Count, GPUs: q.String()})
			}
			byGPUs := cmpopts.SortSlices(func(a, b podSet) bool { return a.GPUs < b.GPUs })
			if diff := cmp.Diff(tc.wantPodSets, got, byGPUs); diff != "" {
				t.Errorf("pod sets (-want +got):\n%s", diff)
			}
		})
	}
}
