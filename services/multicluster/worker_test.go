package multicluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/kinds"
)

func adapterOf(t testing.TB, name string) jobframework.Adapter {
	t.Helper()
	ads, err := kinds.Select([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	return ads[0]
}

// jobObject is a batch/v1 Job as the manager sends it, changed by edit.
func jobObject(edit func(map[string]any)) json.RawMessage {
	obj := map[string]any{
		"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "train", "namespace": "team-a", "labels": map[string]any{v1beta1.QueueNameLabel: "lq"}},
		"spec": map[string]any{"suspend": true, "template": map[string]any{"spec": map[string]any{"restartPolicy": "Never",
			"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}},
	}
	if edit != nil {
		edit(obj)
	}
	b, _ := json.Marshal(obj)
	return b
}

// TestCopyOfCreatesOnlyWhatSluiceQueues: a worker creates only a
// suspended, queue-labelled object of the offered kind, name and namespace,
// in a namespace it serves, whoever sent the offer.
func TestCopyOfCreatesOnlyWhatSluiceQueues(t *testing.T) {
	ref := events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train", UID: "u1"}
	meta := func(obj map[string]any) map[string]any { return obj["metadata"].(map[string]any) }
	cases := []struct {
		name      string
		object    json.RawMessage
		namespace []string
		wantErr   error
	}{
		{name: "a suspended, queued job", object: jobObject(nil)},
		{name: "in a namespace served", object: jobObject(nil), namespace: []string{"team-a", "team-b"}},
		{name: "in a namespace not served", object: jobObject(nil), namespace: []string{"team-b"}, wantErr: ErrRefusedCopy},
		{name: "not suspended", object: jobObject(func(o map[string]any) { o["spec"].(map[string]any)["suspend"] = false }), wantErr: ErrRefusedCopy},
		{name: "suspend unset", object: jobObject(func(o map[string]any) { delete(o["spec"].(map[string]any), "suspend") }), wantErr: ErrRefusedCopy},
		{name: "no queue label", object: jobObject(func(o map[string]any) { delete(meta(o), "labels") }), wantErr: ErrRefusedCopy},
		{name: "an empty queue label", object: jobObject(func(o map[string]any) {
			meta(o)["labels"] = map[string]any{v1beta1.QueueNameLabel: ""}
		}), wantErr: ErrRefusedCopy},
		{name: "another namespace than offered", object: jobObject(func(o map[string]any) { meta(o)["namespace"] = "kube-system" }), wantErr: ErrBadMessage},
		{name: "another kind than offered", object: jobObject(func(o map[string]any) { o["kind"] = "CronJob" }), wantErr: ErrBadMessage},
		{name: "another API version", object: jobObject(func(o map[string]any) { o["apiVersion"] = "batch/v2" }), wantErr: ErrBadMessage},
		{name: "not an object", object: json.RawMessage(`[1]`), wantErr: ErrBadMessage},
		{name: "null", object: json.RawMessage(`null`), wantErr: ErrBadMessage},
	}
	ad := adapterOf(t, "job")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &Worker{}
			WithNamespaces(tc.namespace...)(w)
			obj, err := copyOf(Message{Type: Offer, Workload: ref, Admission: "a1", Object: tc.object}, ad, w.allowed)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("copyOf: %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			got := map[string]string{"origin": obj.GetLabels()[OriginLabel], "queue": obj.GetLabels()[v1beta1.QueueNameLabel],
				"admission": obj.GetAnnotations()[AdmissionAnnotation]}
			_, held := obj.GetAnnotations()[jobframework.HoldAnnotation]
			got["held"] = fmt.Sprint(held)
			want := map[string]string{"origin": "u1", "queue": "lq", "admission": "a1", "held": "true"}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("copy (-want +got):\n%s", d)
			}
		})
	}
}

// FuzzWorkerMessage: whatever a message to a worker says, it is refused
// with an error, or it is a valid message; and a copy the worker would
// create is of the offered kind, name and namespace, suspended, and
// queued.
func FuzzWorkerMessage(f *testing.F) {
	ref := events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train", UID: "u1"}
	for _, typ := range []string{Offer, Run, Withdraw} {
		b, _ := json.Marshal(Message{Type: typ, Workload: ref, Admission: "a1", Object: jobObject(nil)})
		f.Add(b)
	}
	b, _ := json.Marshal(Message{Type: Offer, Workload: ref, Admission: "a1", Object: jobObject(func(o map[string]any) { o["spec"] = "x" })})
	f.Add(b)
	f.Add([]byte(`{"type":"run","workload":{"kind":"job","namespace":"team-a","name":"train","uid":"u"},"admission":"a","object":{"kind":"Job"}}`))
	f.Add([]byte(`{}`))
	group := events.WorkloadRef{Kind: "pod", Namespace: "team-a", Name: "g", UID: jobframework.GroupUIDPrefix + "u1"}
	for _, name := range []string{"g-0", "g"} {
		b, _ := json.Marshal(Message{Type: Offer, Workload: group, Admission: "a1", Object: raw(member(name, "g", nil))})
		f.Add(b)
	}
	ads := map[string]jobframework.Adapter{}
	for _, ad := range kinds.All {
		ads[ad.Kind().Name] = ad
	}
	allowed := func(ns string) bool { return ns == "team-a" }
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg Message
		if json.Unmarshal(data, &msg) != nil {
			return
		}
		if err := msg.Validate(); err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("Validate: %v, not ErrBadMessage", err)
			}
			return
		}
		ad, ok := ads[msg.Workload.Kind]
		if !ok || msg.Type == Withdraw {
			return
		}
		obj, err := copyOf(msg, ad, allowed)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) && !errors.Is(err, ErrRefusedCopy) {
				t.Fatalf("copyOf: %v, neither ErrBadMessage nor ErrRefusedCopy", err)
			}
			return
		}
		named := obj.GetName() == msg.Workload.Name
		if g, ok := ad.(jobframework.Grouper); ok && isGroup(msg.Workload) {
			named = obj.GetLabels()[g.GroupLabel()] == msg.Workload.Name
		}
		if obj.GetNamespace() != "team-a" || !named || obj.GetKind() != ad.Kind().GVK.Kind ||
			obj.GetLabels()[v1beta1.QueueNameLabel] == "" || obj.GetLabels()[OriginLabel] != msg.Workload.UID {
			t.Fatalf("copy %s %s/%s labels %v for %s", obj.GetKind(), obj.GetNamespace(), obj.GetName(), obj.GetLabels(), msg.Workload)
		}
		job, err := ad.Decode(obj)
		if err != nil || !job.IsSuspended() {
			t.Fatalf("copy not suspended (%v)", err)
		}
	})
}

// FuzzReport: whatever a worker sends the manager, it is refused with an
// error, or it is a heartbeat, or a valid report about the workload whose
// subject it came on, from the worker its subject names.
func FuzzReport(f *testing.F) {
	ref := events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train", UID: "u1"}
	for _, st := range []string{Queued, Admitted, Finished, Gone} {
		b, _ := json.Marshal(Report{Workload: ref, Admission: "a1", State: st, Status: json.RawMessage(`{"active":1}`)})
		f.Add(FromWorker("w1", "u1"), b)
	}
	b, _ := json.Marshal(Report{Workload: ref, Admission: "a1", State: Admitted})
	f.Add(FromWorker("w1", "u2"), b) // about another workload than its subject's
	f.Add(Heartbeat("w1"), []byte(`{}`))
	f.Add("sluice.multicluster.v1.w1.to.u1", []byte(`{}`))
	f.Add(FromWorker("w1", "u1"), []byte(`{"state":"admitted","workload":{"kind":"job"}}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		worker, r, heartbeat, err := parseReport(subject, data)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("parseReport: %v, not ErrBadMessage", err)
			}
			return
		}
		w, token, ok := splitFrom(subject)
		if !ok || w != worker || worker == "" {
			t.Fatalf("accepted from worker %q on subject %q", worker, subject)
		}
		if heartbeat {
			return
		}
		if r.Validate() != nil || r.Workload.UID != token {
			t.Fatalf("accepted report %+v on subject %q", r, subject)
		}
	})
}

// TestFenceAfter: a worker out of reach removes its copies two heartbeats
// before the manager gives it up, or at half the timeout when that is
// short, never after the manager does.
func TestFenceAfter(t *testing.T) {
	cases := []struct {
		name            string
		lost, heartbeat time.Duration
		want            time.Duration
	}{
		{name: "the default timeout: two heartbeats early", lost: 15 * time.Minute, heartbeat: 5 * time.Second, want: 15*time.Minute - 10*time.Second},
		{name: "a timeout of a few heartbeats: half of it", lost: 8 * time.Second, heartbeat: 5 * time.Second, want: 4 * time.Second},
		{name: "exactly four heartbeats", lost: 20 * time.Second, heartbeat: 5 * time.Second, want: 10 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := fenceAfter(tc.lost, tc.heartbeat)
			if got != tc.want || got >= tc.lost {
				t.Errorf("fenceAfter(%v, %v) = %v, want %v (and before the timeout)", tc.lost, tc.heartbeat, got, tc.want)
			}
		})
	}
}

// TestMessageLostAfter: an offer's workerLostTimeout must be a positive
// duration.
func TestMessageLostAfter(t *testing.T) {
	ref := events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train", UID: "u1"}
	for _, tc := range []struct {
		lostAfter string
		wantErr   bool
	}{{"", false}, {"15m0s", false}, {"8s", false}, {"0s", true}, {"-1s", true}, {"soon", true}} {
		err := Message{Type: Offer, Workload: ref, Admission: "a1", Object: jobObject(nil), LostAfter: tc.lostAfter}.Validate()
		if (err != nil) != tc.wantErr {
			t.Errorf("lostAfter %q: Validate() = %v, want an error: %v", tc.lostAfter, err, tc.wantErr)
		}
	}
}
