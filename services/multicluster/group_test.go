package multicluster

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/pod"
)

// member is a gated pod of group g as the manager sends it, changed by
// edit.
func member(name, g string, edit func(map[string]any)) map[string]any {
	obj := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "team-a",
			"labels":      map[string]any{v1beta1.QueueNameLabel: "lq", v1beta1.PodGroupNameLabel: g},
			"annotations": map[string]any{v1beta1.PodGroupTotalCountAnnotation: "2"}},
		"spec": map[string]any{"schedulingGates": []any{map[string]any{"name": pod.SchedulingGate}},
			"containers": []any{map[string]any{"name": "c", "image": "busybox"}}},
	}
	if edit != nil {
		edit(obj)
	}
	return obj
}

func raw(obj map[string]any) json.RawMessage {
	b, _ := json.Marshal(obj)
	return b
}

// TestCopyOfAGroupMember: a member of a pod group is created when it
// carries the group's label, whatever its name; one of another group is
// not the workload's.
func TestCopyOfAGroupMember(t *testing.T) {
	ref := events.WorkloadRef{Kind: "pod", Namespace: "team-a", Name: "g", UID: jobframework.GroupUIDPrefix + "u1"}
	cases := []struct {
		name    string
		object  map[string]any
		wantErr error
	}{
		{name: "a gated member of the group", object: member("g-0", "g", nil)},
		{name: "a member of another group", object: member("g-0", "other", nil), wantErr: ErrBadMessage},
		{name: "a member that is not gated", object: member("g-0", "g", func(o map[string]any) { delete(o["spec"].(map[string]any), "schedulingGates") }),
			wantErr: ErrRefusedCopy},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := copyOf(Message{Type: Run, Workload: ref, Admission: "a1", Object: raw(tc.object)}, pod.Adapter{}, nil)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("copyOf: %v, want %v", err, tc.wantErr)
			}
			if err == nil && (obj.GetLabels()[OriginLabel] != ref.UID || obj.GetName() != "g-0") {
				t.Errorf("copy %s labelled %v", obj.GetName(), obj.GetLabels())
			}
		})
	}
}

// TestRemoteCopyOfAPod: a Pod's copy leaves out where the manager's
// scheduler put it and the priority its API server computed, and keeps
// the pod group annotations its user wrote.
func TestRemoteCopyOfAPod(t *testing.T) {
	obj := member("g-0", "g", func(o map[string]any) {
		o["metadata"].(map[string]any)["annotations"].(map[string]any)["sluice.dev/admission"] = "bookkeeping"
		o["spec"].(map[string]any)["nodeName"] = "node-1"
		o["spec"].(map[string]any)["priority"] = 1000
	})
	out, err := remoteCopy(pod.Adapter{}, &unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{v1beta1.PodGroupTotalCountAnnotation: "2"}, got.Metadata.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	for _, f := range []string{"nodeName", "priority"} {
		if _, ok := got.Spec[f]; ok {
			t.Errorf("spec.%s copied", f)
		}
	}
}

func TestGroupMessagesValidate(t *testing.T) {
	group := events.WorkloadRef{Kind: "pod", Namespace: "team-a", Name: "g", UID: jobframework.GroupUIDPrefix + "u1"}
	lone := events.WorkloadRef{Kind: "pod", Namespace: "team-a", Name: "p", UID: "u2"}
	m := raw(member("g-0", "g", nil))
	cases := []struct {
		name    string
		msg     Message
		wantErr bool
	}{
		{name: "a group's members", msg: Message{Type: Offer, Workload: group, Admission: "a", Members: []json.RawMessage{m}}},
		{name: "members of a lone pod", msg: Message{Type: Offer, Workload: lone, Admission: "a", Members: []json.RawMessage{m}}, wantErr: true},
		{name: "an object and members", msg: Message{Type: Offer, Workload: group, Admission: "a", Object: m, Members: []json.RawMessage{m}}, wantErr: true},
		{name: "neither", msg: Message{Type: Run, Workload: group, Admission: "a"}, wantErr: true},
	}
	for _, tc := range cases {
		if err := tc.msg.Validate(); (err != nil) != tc.wantErr || err != nil && !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: Validate() = %v, want an error %v", tc.name, err, tc.wantErr)
		}
	}
}

// TestGroupReport: a group's state is its members' together: admitted
// once all are (held ones count, with the admission they hold), finished
// once all are; each member's status is reported by name.
func TestGroupReport(t *testing.T) {
	uid := jobframework.GroupUIDPrefix + "u1"
	copyOf := func(name, phase string, gated, held bool) *unstructured.Unstructured {
		o := member(name, "g", func(o map[string]any) {
			md := o["metadata"].(map[string]any)
			md["labels"].(map[string]any)[OriginLabel] = uid
			md["annotations"].(map[string]any)[AdmissionAnnotation] = "a1"
			if held {
				md["annotations"].(map[string]any)[jobframework.HoldAnnotation] = ""
				md["annotations"].(map[string]any)[jobframework.HeldAnnotation] = "x"
			}
			if !gated {
				delete(o["spec"].(map[string]any), "schedulingGates")
			}
			o["status"] = map[string]any{"phase": phase}
		})
		return &unstructured.Unstructured{Object: o}
	}
	cases := []struct {
		name      string
		members   []*unstructured.Unstructured
		wantState string
	}{
		{name: "one waits", members: []*unstructured.Unstructured{copyOf("g-0", "Running", false, false), copyOf("g-1", "Pending", true, false)}, wantState: Queued},
		{name: "both held for the manager's pick", members: []*unstructured.Unstructured{copyOf("g-0", "Pending", true, true), copyOf("g-1", "Pending", true, true)}, wantState: Admitted},
		{name: "one runs, one ended", members: []*unstructured.Unstructured{copyOf("g-0", "Running", false, false), copyOf("g-1", "Succeeded", false, false)}, wantState: Admitted},
		{name: "both ended", members: []*unstructured.Unstructured{copyOf("g-0", "Failed", false, false), copyOf("g-1", "Succeeded", false, false)}, wantState: Finished},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{originIndex: byOrigin})
			for _, m := range tc.members {
				if err := inf.GetIndexer().Add(m); err != nil {
					t.Fatal(err)
				}
			}
			w := &Worker{name: "w1", adapters: map[string]jobframework.Adapter{"pod": pod.Adapter{}}, informers: map[string]cache.SharedIndexInformer{"pod": inf}}
			one, err := w.reportOf("pod", tc.members[0])
			if err != nil {
				t.Fatal(err)
			}
			r, err := w.groupReport("pod", one)
			if err != nil {
				t.Fatal(err)
			}
			if r.State != tc.wantState || r.Workload.Name != "g" || r.Workload.UID != uid || len(r.Members) != len(tc.members) {
				t.Errorf("report %s of %s with %d members; want %s of g with %d", r.State, r.Workload, len(r.Members), tc.wantState, len(tc.members))
			}
			if err := r.Validate(); err != nil {
				t.Errorf("report not valid: %v", err)
			}
		})
	}
}

// TestGroupsOfALeaderWorkerSetGoTogether: a group of a LeaderWorkerSet is
// offered only to the worker that runs another group of the same set,
// while that worker is heard from; a group of another set, or of none,
// is offered as usual.
func TestGroupsOfALeaderWorkerSetGoTogether(t *testing.T) {
	now := time.Now()
	d := &Dispatcher{now: func() time.Time { return now }, reading: true, readingSince: now.Add(-time.Hour),
		seen: map[string]time.Time{"east": now, "west": now.Add(-time.Hour)},
		dispatches: map[string]*dispatch{
			"group-a": {Workload: events.WorkloadRef{UID: "group-a"}, Set: "team-a/llm", Winner: "east"},
			"group-b": {Workload: events.WorkloadRef{UID: "group-b"}, Set: "team-a/chat", Winner: "west"},
		}}
	s := settings{clusters: []string{"east", "west"}, lost: time.Minute}
	cases := []struct {
		name string
		rec  *dispatch
		want string
	}{
		{name: "another group of llm: east, where llm runs", rec: &dispatch{Workload: events.WorkloadRef{UID: "group-c"}, Set: "team-a/llm"}, want: "east"},
		{name: "the group itself does not count", rec: &dispatch{Workload: events.WorkloadRef{UID: "group-a"}, Set: "team-a/llm"}},
		{name: "chat runs on a worker not heard from: offered as usual", rec: &dispatch{Workload: events.WorkloadRef{UID: "group-d"}, Set: "team-a/chat"}},
		{name: "llm in another namespace", rec: &dispatch{Workload: events.WorkloadRef{UID: "group-e"}, Set: "team-b/llm"}},
		{name: "no set", rec: &dispatch{Workload: events.WorkloadRef{UID: "group-f"}}},
	}
	for _, tc := range cases {
		if got := d.setWorker(tc.rec, s); got != tc.want {
			t.Errorf("%s: setWorker() = %q, want %q", tc.name, got, tc.want)
		}
	}
	member := &unstructured.Unstructured{Object: member("llm-0", "leaderworkerset-llm-0", func(o map[string]any) {
		md := o["metadata"].(map[string]any)
		md["labels"].(map[string]any)["leaderworkerset.sigs.k8s.io/name"] = "llm"
		md["annotations"].(map[string]any)[v1beta1.PodGroupLeaderWorkerSetAnnotation] = "true"
	})}
	if got := pod.LeaderWorkerSetOf(member); got != "team-a/llm" {
		t.Errorf("LeaderWorkerSetOf() = %q, want team-a/llm", got)
	}
}
