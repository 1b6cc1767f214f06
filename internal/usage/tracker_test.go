package usage_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/internal/usage"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// record puts a workload record of one pod set "main" asking for cpu.
func record(t *testing.T, ctx context.Context, kv jetstream.KeyValue, ns, name, lq, cpu string) {
	t.Helper()
	rec := events.WorkloadSubmittedV1{
		Workload:   events.WorkloadRef{Kind: "job", Namespace: ns, Name: name, UID: "uid-" + name},
		LocalQueue: lq,
		PodSets:    []events.PodSetV1{{Name: "main", Count: 2, Requests: map[string]string{"cpu": cpu}}},
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, workloads.KVKeyFromEngine(workloads.EngineKey(rec.Workload)), b); err != nil {
		t.Fatalf("put record %s: %v", name, err)
	}
}

// summary is a report reduced to what the test compares.
type summary struct {
	Pending, Admitted int32
	Amounts           map[string]map[string]int64
}

func summarize(r usage.Report) map[string]summary {
	out := map[string]summary{}
	for n, q := range r.ClusterQueues {
		out["cq/"+n] = summary{q.Pending, q.Admitted, q.Amounts}
	}
	for n, q := range r.LocalQueues {
		out["lq/"+n] = summary{q.Pending, q.Admitted, q.Amounts}
	}
	return out
}

func TestTracker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	wkv, err := bus.OpenKV(ctx, js, workloads.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	lkv, err := bus.OpenKV(ctx, js, ledger.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	w := ledger.NewWriter(js)
	lqToCQ := map[string]string{"ns/lq": "cq"}

	// Before the tracker starts: two waiting, one admitted whose
	// reservation carries its requests, one booked the older way (its
	// requests in the record only).
	record(t, ctx, wkv, "ns", "a", "lq", "1")
	record(t, ctx, wkv, "ns", "b", "lq", "1")
	record(t, ctx, wkv, "ns", "run", "lq", "500m")
	record(t, ctx, wkv, "ns", "old", "lq", "2")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	psa := []engine.PodSetAssignment{{Name: "main", Count: 2, Flavors: map[string]string{"cpu": "default"}}}
	if _, err := w.Reserve(ctx, "cq/cq", 0, map[string]ledger.Reservation{
		"job/ns/run": {ClusterQueue: "cq", PodSets: psa, AdmittedAt: at, LocalQueue: "lq", Requests: map[string]map[string]string{"main": {"cpu": "500m"}}},
		"job/ns/old": {ClusterQueue: "cq", PodSets: psa, AdmittedAt: at},
	}); err != nil {
		t.Fatal(err)
	}

	tr := usage.NewTracker(js, zerolog.Nop())
	synced := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tr.Run(runCtx, synced) }()
	select {
	case <-synced:
	case <-ctx.Done():
		t.Fatal("the tracker never read the buckets")
	}
	want := map[string]summary{
		"cq/cq":    {Pending: 2, Admitted: 2, Amounts: map[string]map[string]int64{"default": {"cpu": 5000}}},
		"lq/ns/lq": {Pending: 2, Admitted: 2, Amounts: map[string]map[string]int64{"default": {"cpu": 5000}}},
	}
	if d := cmp.Diff(want, summarize(tr.Report(lqToCQ))); d != "" {
		t.Errorf("report of the buckets as they were (-want +got):\n%s", d)
	}

	// Changes while it runs: "old" released and its record gone, "a"
	// admitted, a new record in another LocalQueue.
	if _, _, err := w.Release(ctx, lkv, "job/ns/old", "test"); err != nil {
		t.Fatal(err)
	}
	if err := wkv.Delete(ctx, workloads.KVKeyFromEngine("job/ns/old")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Reserve(ctx, "cq/cq", 0, map[string]ledger.Reservation{
		"job/ns/a": {ClusterQueue: "cq", PodSets: psa, AdmittedAt: at, LocalQueue: "lq", Requests: map[string]map[string]string{"main": {"cpu": "1"}}},
	}); err == nil {
		t.Fatal("booking at revision 0 of a tree already booked succeeded")
	}
	snap, err := ledger.Read(ctx, lkv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Reserve(ctx, "cq/cq", snap.Trees[ledger.TreeKey("cq/cq")], map[string]ledger.Reservation{
		"job/ns/a": {ClusterQueue: "cq", PodSets: psa, AdmittedAt: at, LocalQueue: "lq", Requests: map[string]map[string]string{"main": {"cpu": "1"}}},
	}); err != nil {
		t.Fatal(err)
	}
	record(t, ctx, wkv, "other", "c", "lq2", "3")
	// "b" deactivated (its fence says so): out of line, not pending.
	fkv, err := bus.OpenKV(ctx, js, fence.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fkv.Put(ctx, workloads.KVKeyFromEngine("job/ns/b"),
		[]byte(`{"admission":"x","phase":"stopping","requeue":{"count":3,"deactivated":"deactivated: exceeding the maximum number of re-queuing retries"}}`)); err != nil {
		t.Fatal(err)
	}
	want = map[string]summary{
		"cq/cq":        {Pending: 0, Admitted: 2, Amounts: map[string]map[string]int64{"default": {"cpu": 3000}}},
		"lq/ns/lq":     {Pending: 0, Admitted: 2, Amounts: map[string]map[string]int64{"default": {"cpu": 3000}}},
		"lq/other/lq2": {Pending: 1},
	}
	var d string
	for range 100 {
		if d = cmp.Diff(want, summarize(tr.Report(lqToCQ))); d == "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d != "" {
		t.Errorf("report after the changes (-want +got):\n%s", d)
	}
	// What reconciliation may skip: a reservation whose job's record is
	// there and whose fence does not stop that admission.
	for _, c := range []struct {
		wk, uid, admission string
		want               bool
	}{
		{"job/ns/run", "uid-run", "2026-01-02T03:04:05Z", true},
		{"job/ns/run", "uid-other", "2026-01-02T03:04:05Z", false}, // the record is another job's of that name
		{"job/ns/run", "", "2026-01-02T03:04:05Z", false},          // a reservation without a UID: looked up
		{"job/ns/old", "uid-old", "2026-01-02T03:04:05Z", false},   // its record is gone
		{"job/ns/b", "uid-b", "x", false},                          // its fence stops that admission
		{"job/ns/b", "uid-b", "y", true},                           // another admission
		{"job/ns/none", "uid-none", "x", false},
	} {
		if got := tr.Settled(c.wk, c.uid, c.admission); got != c.want {
			t.Errorf("Settled(%s, %s, %s) = %v, want %v", c.wk, c.uid, c.admission, got, c.want)
		}
	}
	// A second tracker over the connection, started late, shares the
	// first one's books, and goes on following once the first ended.
	tr2 := usage.NewTracker(js, zerolog.Nop())
	synced2 := make(chan struct{})
	runCtx2, stop2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- tr2.Run(runCtx2, synced2) }()
	select {
	case <-synced2:
	case <-ctx.Done():
		t.Fatal("the second tracker never synced")
	}
	if d := cmp.Diff(want, summarize(tr2.Report(lqToCQ))); d != "" {
		t.Errorf("the second tracker's report (-want +got):\n%s", d)
	}
	if n := usage.Followers(); n != 1 {
		t.Errorf("%d followers for two trackers over one connection, want 1", n)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended: %v", err)
	}
	if _, _, err := w.Release(ctx, lkv, "job/ns/a", "test"); err != nil {
		t.Fatal(err)
	}
	want["cq/cq"] = summary{Pending: 1, Admitted: 1, Amounts: map[string]map[string]int64{"default": {"cpu": 1000}}}
	want["lq/ns/lq"] = summary{Pending: 1, Admitted: 1, Amounts: map[string]map[string]int64{"default": {"cpu": 1000}}}
	for range 100 {
		if d = cmp.Diff(want, summarize(tr2.Report(lqToCQ))); d == "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d != "" {
		t.Errorf("the second tracker's report after the first ended and a release (-want +got):\n%s", d)
	}
	stop2()
	if err := <-done2; err != nil {
		t.Errorf("the second Run after its context ended: %v", err)
	}
	if n := usage.Followers(); n != 0 {
		t.Errorf("%d followers after both trackers ended, want 0", n)
	}
}
