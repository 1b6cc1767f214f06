package multicluster

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/services/integration/job"
)

// report is a message as the reports consumer hands it over.
type report struct {
	jetstream.Msg
	subject string
	data    []byte
}

func (r report) Subject() string { return r.subject }
func (r report) Data() []byte    { return r.data }

func reportMsg(t *testing.T, worker string, r Report) jetstream.Msg {
	t.Helper()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return report{subject: FromWorker(worker, r.Workload.UID), data: raw}
}

// dispatcherHarness is a Dispatcher on a real JetStream, its bucket and
// stream made, with the manager's Job in a fake API.
func dispatcherHarness(t *testing.T) (*Dispatcher, jetstream.JetStream, events.WorkloadRef) {
	t.Helper()
	url, stop := natstest.Start(t)
	t.Cleanup(stop)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := bus.Setup(ctx, js, bus.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := batchv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	j := &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u-1"}}
	dyn := dynamicfake.NewSimpleDynamicClient(scheme, j)
	d, err := NewDispatcher(dyn, js, []jobframework.Adapter{job.Adapter{}}, WithClock(time.Now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if d.kv, err = bus.OpenKV(ctx, js, Bucket); err != nil {
		t.Fatal(err)
	}
	return d, js, events.WorkloadRef{Kind: "job", Namespace: "ns", Name: "a", UID: "u-1"}
}

// lastTo is the type of the last message to a worker about a workload
// ("" for none).
func lastTo(t *testing.T, js jetstream.JetStream, worker, uid string) string {
	t.Helper()
	st, err := js.Stream(context.Background(), Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(context.Background(), ToWorker(worker, uid))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var msg Message
	if err := json.Unmarshal(m.Data, &msg); err != nil {
		t.Fatal(err)
	}
	return msg.Type
}

// Two workers admit the held copy; the first wins: it is told to run,
// the other to withdraw, and the check is answered Ready naming it, once.
// A second dispatcher working from what it read before cannot pick
// another winner.
func TestFirstAdmissionWinsOnce(t *testing.T) {
	d, js, ref := dispatcherHarness(t)
	ctx := context.Background()
	stale := &dispatch{Workload: ref, Check: "mc", Admission: "a1", ClusterQueue: "cq", Config: "workers", Offered: []string{"w1", "w2"}}
	d.mu.Lock()
	if err := d.save(ctx, stale); err != nil {
		t.Fatal(err)
	}
	d.mu.Unlock()
	readBefore := *stale

	for _, w := range []string{"w1", "w2", "w1"} {
		if err := d.handleReport(ctx, reportMsg(t, w, Report{Workload: ref, Admission: "a1", State: Admitted})); err != nil {
			t.Fatalf("report from %s: %v", w, err)
		}
	}
	if got := lastTo(t, js, "w1", ref.UID); got != Run {
		t.Errorf("last message to w1: %q, want %q", got, Run)
	}
	if got := lastTo(t, js, "w2", ref.UID); got != Withdraw {
		t.Errorf("last message to w2: %q, want %q", got, Withdraw)
	}
	d.mu.Lock()
	rec, err := d.get(ctx, ref.UID)
	d.mu.Unlock()
	if err != nil || rec == nil || rec.Winner != "w1" || !rec.Answered {
		t.Fatalf("dispatch after the pick: %+v, %v; want w1 the winner, answered", rec, err)
	}
	// One Ready answer, naming w1.
	st, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(events.CheckSubject(ref, v1beta1.MultiClusterController)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Msgs; n != 1 {
		t.Errorf("%d check answers, want 1", n)
	}
	last, err := st.GetLastMsgForSubject(ctx, events.CheckSubject(ref, v1beta1.MultiClusterController))
	if err != nil {
		t.Fatal(err)
	}
	var ans events.CheckUpdatedV1
	if err := json.Unmarshal(last.Data, &ans); err != nil {
		t.Fatal(err)
	}
	if ans.State != events.CheckReady || ans.Cluster != "w1" || ans.Admission != "a1" {
		t.Errorf("answer %+v, want Ready for a1 naming w1", ans)
	}

	// Another dispatcher, from the record as it was before the pick.
	readBefore.Winner = "w2"
	d.mu.Lock()
	err = d.save(ctx, &readBefore)
	d.mu.Unlock()
	if !errors.Is(err, errConflict) {
		t.Errorf("a second pick from a stale record: %v, want %v", err, errConflict)
	}
}

// A winner's copy deleted before its end is reported gives the workload
// up; its end, even reported after the deletion, does not.
func TestWinnerGoneRetriesButFinishedDoesNot(t *testing.T) {
	d, js, ref := dispatcherHarness(t)
	ctx := context.Background()
	d.mu.Lock()
	if err := d.save(ctx, &dispatch{Workload: ref, Check: "mc", Admission: "a1", Config: "workers", Offered: []string{"w1"}, Winner: "w1", Answered: true}); err != nil {
		t.Fatal(err)
	}
	d.mu.Unlock()
	if err := d.handleReport(ctx, reportMsg(t, "w1", Report{Workload: ref, Admission: "a1", State: Finished, Status: json.RawMessage(`{"succeeded":1}`)})); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	rec, _ := d.get(ctx, ref.UID)
	d.mu.Unlock()
	if rec == nil {
		t.Fatal("a finished copy gave the dispatch up")
	}
	if err := d.handleReport(ctx, reportMsg(t, "w1", Report{Workload: ref, Admission: "a1", State: Gone, Message: "deleted"})); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	rec, _ = d.get(ctx, ref.UID)
	d.mu.Unlock()
	if rec != nil {
		t.Errorf("the winner's copy gone, the dispatch kept: %+v", rec)
	}
	// The forgotten dispatch's marker expires, so the bucket does not keep
	// a key per workload ever dispatched.
	st, err := js.Stream(ctx, "KV_"+Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.GetLastMsgForSubject(ctx, "$KV."+Bucket+"."+ref.UID); err != nil || m.Header.Get("Nats-TTL") == "" {
		t.Errorf("marker of the forgotten dispatch: %v, %v; want one with a TTL", m, err)
	}
	if got := lastTo(t, js, "w1", ref.UID); got != Withdraw {
		t.Errorf("last message to w1: %q, want %q", got, Withdraw)
	}
}

func TestKeepCounters(t *testing.T) {
	prev := map[string]any{"succeeded": int64(3), "failed": int64(1), "active": int64(0)}
	now := map[string]any{"succeeded": float64(1), "active": float64(1), "conditions": []any{"Complete"}}
	got := keepCounters(prev, now)
	if got["succeeded"] != int64(3) || got["failed"] != int64(1) || got["active"] != float64(1) || got["conditions"] == nil {
		t.Errorf("keepCounters = %v", got)
	}
}
