package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/natstest"
)

// open starts an embedded JetStream server, creates Sluice's buckets and
// returns the ledger bucket and a writer.
func open(t testing.TB) (context.Context, jetstream.KeyValue, *ledger.Writer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("bus.Setup: %v", err)
	}
	kv, err := bus.OpenKV(ctx, js, ledger.Bucket)
	if err != nil {
		t.Fatalf("open %s: %v", ledger.Bucket, err)
	}
	return ctx, kv, ledger.NewWriter(js)
}

var at = time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)

func reservation(cq string, count int32) ledger.Reservation {
	return ledger.Reservation{
		ClusterQueue: cq,
		PodSets:      []engine.PodSetAssignment{{Name: "main", Count: count, Flavors: map[string]string{"cpu": "default"}}},
		AdmittedAt:   at,
	}
}

// held reads the ledger and returns its reservations without revisions.
func held(t *testing.T, ctx context.Context, kv jetstream.KeyValue) map[string]ledger.Reservation {
	t.Helper()
	snap, err := ledger.Read(ctx, kv)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	out := map[string]ledger.Reservation{}
	for wk, h := range snap.Reservations {
		out[wk] = h.Reservation
	}
	return out
}

func TestKeys(t *testing.T) {
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"cohort tree", ledger.TreeKey("cohort/research.ml"), "tree.cohort.research.ml"},
		{"lone ClusterQueue", ledger.TreeKey("cq/team-a"), "tree.cq.team-a"},
		{"reservation", ledger.ReservationKey("job/ns/train.v2"), "res.job.ns.train.v2"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, c.got, c.want)
		}
	}
}

func TestReserveCompareAndSet(t *testing.T) {
	ctx, kv, w := open(t)
	first, err := w.Reserve(ctx, "cohort/all", 0, map[string]ledger.Reservation{"job/ns/a": reservation("a", 1), "job/ns/b": reservation("b", 2)})
	if err != nil {
		t.Fatalf("first Reserve: %v", err)
	}
	// A writer that decided from the tree before the first write loses,
	// and books nothing of its batch.
	if _, err := w.Reserve(ctx, "cohort/all", 0, map[string]ledger.Reservation{"job/ns/c": reservation("a", 3), "job/ns/d": reservation("a", 4)}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("Reserve from a stale revision: got %v, want ErrConflict", err)
	}
	// Another tree is independent.
	if _, err := w.Reserve(ctx, "cq/lone", 0, map[string]ledger.Reservation{"job/ns/e": reservation("lone", 1)}); err != nil {
		t.Fatalf("Reserve in another tree: %v", err)
	}
	second, err := w.Reserve(ctx, "cohort/all", first.Tree, map[string]ledger.Reservation{"job/ns/c": reservation("a", 3)})
	if err != nil {
		t.Fatalf("Reserve at the current revision: %v", err)
	}
	want := map[string]ledger.Reservation{
		"job/ns/a": reservation("a", 1), "job/ns/b": reservation("b", 2),
		"job/ns/c": reservation("a", 3), "job/ns/e": reservation("lone", 1),
	}
	if diff := cmp.Diff(want, held(t, ctx, kv)); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	snap, err := ledger.Read(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Trees[ledger.TreeKey("cohort/all")]; got != second.Tree {
		t.Errorf("tree revision read %d, Reserve said %d", got, second.Tree)
	}
	for wk, rev := range first.Reservations {
		if got := snap.Reservations[wk].Revision; got != rev {
			t.Errorf("%s: revision read %d, Reserve said %d", wk, got, rev)
		}
	}
}

// TestReserveAtMovesOnlyWhatIsStillHeld: a moved reservation (node
// replacement) is rewritten in its tree's batch only while it is the
// revision read: after a release, the move loses and the release stands.
func TestReserveAtMovesOnlyWhatIsStillHeld(t *testing.T) {
	ctx, kv, w := open(t)
	first, err := w.Reserve(ctx, "cohort/all", 0, map[string]ledger.Reservation{"job/ns/a": reservation("a", 1), "job/ns/b": reservation("b", 2)})
	if err != nil {
		t.Fatal(err)
	}
	moved := reservation("a", 1)
	moved.LocalQueue = "moved"
	second, err := w.ReserveAt(ctx, "cohort/all", first.Tree, map[string]ledger.Reservation{"job/ns/a": moved},
		map[string]uint64{"job/ns/a": first.Reservations["job/ns/a"]})
	if err != nil {
		t.Fatalf("move at the revision read: %v", err)
	}
	if got := held(t, ctx, kv)["job/ns/a"]; got.LocalQueue != "moved" {
		t.Errorf("after the move the ledger holds %+v", got)
	}
	if _, _, err := w.Release(ctx, kv, "job/ns/b", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ReserveAt(ctx, "cohort/all", second.Tree, map[string]ledger.Reservation{"job/ns/b": reservation("b", 2)},
		map[string]uint64{"job/ns/b": first.Reservations["job/ns/b"]}); !errors.Is(err, ledger.ErrConflict) {
		t.Fatalf("move of a released reservation: got %v, want ErrConflict", err)
	}
	if _, ok := held(t, ctx, kv)["job/ns/b"]; ok {
		t.Error("a released reservation came back with a move")
	}
}

func TestReleaseIf(t *testing.T) {
	ctx, kv, w := open(t)
	later := reservation("a", 1)
	later.AdmittedAt = at.Add(time.Minute)
	b, err := w.Reserve(ctx, "cohort/all", 0, map[string]ledger.Reservation{"job/ns/x": reservation("a", 1), "job/ns/y": reservation("b", 2)})
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		name         string
		by           string
		workload     string
		admission    string
		wantCQ       string
		wantReleased bool
	}
	calls := []call{
		{name: "another admission is left alone", by: "e1", workload: "job/ns/x", admission: later.Admission(), wantCQ: "a"},
		{name: "its own admission is released", by: "e2", workload: "job/ns/x", admission: reservation("a", 1).Admission(), wantCQ: "a", wantReleased: true},
		{name: "the same release again (its answer lost) reports what it did", by: "e2", workload: "job/ns/x", wantCQ: "a", wantReleased: true},
		{name: "another release of a released reservation: nothing", by: "e3", workload: "job/ns/x"},
		{name: "a workload holding nothing", by: "e4", workload: "job/ns/nobody"},
	}
	for _, c := range calls {
		r, released, err := w.ReleaseIf(ctx, kv, c.workload, c.by, func(r ledger.Reservation) bool {
			return c.admission == "" || r.Admission() == c.admission
		})
		if cq := r.ClusterQueue; err != nil || cq != c.wantCQ || released != c.wantReleased {
			t.Errorf("%s: ReleaseIf = %q, %v, %v; want %q, %v, nil", c.name, cq, released, err, c.wantCQ, c.wantReleased)
		}
	}
	// A release does not move the tree: a writer that decided before it
	// still books.
	if _, err := w.Reserve(ctx, "cohort/all", b.Tree, map[string]ledger.Reservation{"job/ns/x": later}); err != nil {
		t.Fatalf("Reserve after a release, at the tree's revision: %v", err)
	}
	want := map[string]ledger.Reservation{"job/ns/x": later, "job/ns/y": reservation("b", 2)}
	if diff := cmp.Diff(want, held(t, ctx, kv)); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
}

// TestTwentyThousandReservationsInOneTree books 20,000 reservations in one
// cohort tree (more than one batch can hold, far more than one KV value
// could), races two writers, and releases some: nothing is lost or held
// twice.
func TestTwentyThousandReservationsInOneTree(t *testing.T) {
	ctx, kv, w := open(t)
	const n = 20000
	res := make(map[string]ledger.Reservation, n)
	for i := range n {
		res[fmt.Sprintf("job/ns/w-%05d", i)] = reservation(fmt.Sprintf("cq-%d", i%6), 1)
	}
	b, err := w.Reserve(ctx, "cohort/big", 0, res)
	if err != nil {
		t.Fatalf("Reserve %d: %v", n, err)
	}
	if len(b.Reservations) != n {
		t.Fatalf("booked %d, want %d", len(b.Reservations), n)
	}
	// Two writers decide from the same revision: exactly one wins.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			_, errs[i] = w.Reserve(ctx, "cohort/big", b.Tree, map[string]ledger.Reservation{fmt.Sprintf("job/ns/racer-%d", i): reservation("cq-0", 1)})
		})
	}
	wg.Wait()
	if won := (errs[0] == nil) != (errs[1] == nil); !won || !(errors.Is(errs[0], ledger.ErrConflict) || errors.Is(errs[1], ledger.ErrConflict)) {
		t.Fatalf("racing writers: %v, %v; want one to win and the other ErrConflict", errs[0], errs[1])
	}
	for i := 0; i < n; i += 1000 {
		if _, ok, err := w.Release(ctx, kv, fmt.Sprintf("job/ns/w-%05d", i), fmt.Sprint("release ", i)); err != nil || !ok {
			t.Fatalf("Release w-%05d: %v, %v", i, ok, err)
		}
	}
	got := held(t, ctx, kv)
	if want := n + 1 - n/1000; len(got) != want {
		t.Fatalf("ledger holds %d reservations, want %d", len(got), want)
	}
	for wk, r := range res {
		_, ok := got[wk]
		var i int
		_, _ = fmt.Sscanf(wk, "job/ns/w-%05d", &i)
		if wantHeld := i%1000 != 0; ok != wantHeld {
			t.Fatalf("%s held %v, want %v", wk, ok, wantHeld)
		}
		if ok && !cmp.Equal(got[wk], r) {
			t.Fatalf("%s: %s", wk, cmp.Diff(r, got[wk]))
		}
	}
}

// TestMigrate moves the reservations an older Sluice kept in a tree key's
// value, more than one batch's worth, to their own keys.
func TestMigrate(t *testing.T) {
	ctx, kv, w := open(t)
	legacy := map[string]ledger.Reservation{}
	for i := range 1500 {
		legacy[fmt.Sprintf("job/ns/old-%04d", i)] = reservation("a", 1)
	}
	v, err := json.Marshal(map[string]any{"reservations": legacy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "tree.cohort.all", v); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "tree.cq.lone", []byte(`{"reservations":{"job/ns/lone":{"clusterQueue":"lone","podSets":[],"admittedAt":"2025-06-07T08:09:10Z"}}}`)); err != nil {
		t.Fatal(err)
	}
	// Before migrating, a reader already counts them.
	if got := len(held(t, ctx, kv)); got != 1501 {
		t.Fatalf("before migrating, Read sees %d reservations, want 1501", got)
	}
	moved, err := w.Migrate(ctx, kv)
	if err != nil || moved != 1501 {
		t.Fatalf("Migrate = %d, %v; want 1501, nil", moved, err)
	}
	snap, err := ledger.Read(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	for wk := range legacy {
		if snap.Reservations[wk].Revision == 0 {
			t.Fatalf("%s not in its own key after migrating", wk)
		}
	}
	e, err := kv.Get(ctx, "tree.cohort.all")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := ledger.Parse(e); err != nil || len(c.Legacy) != 0 {
		t.Errorf("tree value after migrating: %s (%v)", e.Value(), err)
	}
	if moved, err := w.Migrate(ctx, kv); err != nil || moved != 0 {
		t.Errorf("second Migrate = %d, %v; want 0, nil", moved, err)
	}
}

func TestCorruptReservationIsReportedNotFatal(t *testing.T) {
	ctx, kv, w := open(t)
	if _, err := w.Reserve(ctx, "cq/a", 0, map[string]ledger.Reservation{"job/ns/good": reservation("a", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, ledger.ReservationKey("job/ns/bad"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	snap, err := ledger.Read(ctx, kv)
	if !errors.Is(err, ledger.ErrCorrupt) {
		t.Errorf("Read: got %v, want ErrCorrupt", err)
	}
	if _, ok := snap.Reservations["job/ns/good"]; !ok || len(snap.Reservations) != 1 {
		t.Errorf("Read kept %v, want only job/ns/good", snap.Workloads())
	}
	if _, _, err := ledger.Get(ctx, kv, "job/ns/bad"); !errors.Is(err, ledger.ErrCorrupt) {
		t.Errorf("Get of the corrupt one: got %v, want ErrCorrupt", err)
	}
}

// TestUpdateRecordsChecksWithoutMovingTheTree: a reservation's admission
// checks are rewritten in its own key, conditionally; the tree's revision
// stays, and the quota held cannot change.
func TestUpdateRecordsChecksWithoutMovingTheTree(t *testing.T) {
	ctx, kv, w := open(t)
	r := reservation("cq", 1)
	r.Checks, r.AwaitingChecks = []engine.CheckStatus{{Name: "prov", State: engine.CheckPending}}, true
	booked, err := w.Reserve(ctx, "cq/cq", 0, map[string]ledger.Reservation{"job/ns/a": r})
	if err != nil {
		t.Fatal(err)
	}
	ready := func(r *ledger.Reservation) bool {
		if r.Checks[0].State == engine.CheckReady {
			return false
		}
		r.Checks[0].State, r.AwaitingChecks = engine.CheckReady, false
		return true
	}
	h, wrote, err := w.Update(ctx, kv, "job/ns/a", ready)
	if err != nil || !wrote || h.Revision <= booked.Reservations["job/ns/a"] {
		t.Fatalf("Update = %+v, %v, %v; want a write at a later revision", h, wrote, err)
	}
	if _, wrote, err := w.Update(ctx, kv, "job/ns/a", ready); err != nil || wrote {
		t.Errorf("Update with nothing to change wrote %v, %v", wrote, err)
	}
	got := held(t, ctx, kv)["job/ns/a"]
	if got.AwaitingChecks || got.Checks[0].State != engine.CheckReady || !got.Startable() {
		t.Errorf("after Update: %+v", got)
	}
	snap, err := ledger.Read(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Trees[ledger.TreeKey("cq/cq")] != booked.Tree {
		t.Errorf("tree revision moved from %d to %d", booked.Tree, snap.Trees[ledger.TreeKey("cq/cq")])
	}
	_, _, err = w.Update(ctx, kv, "job/ns/a", func(r *ledger.Reservation) bool { r.PodSets[0].Count = 2; return true })
	if err == nil {
		t.Error("Update changed the quota held")
	}
	if _, wrote, err := w.Update(ctx, kv, "job/ns/nobody", ready); err != nil || wrote {
		t.Errorf("Update of a workload holding nothing: %v, %v", wrote, err)
	}
	// Writers racing on one key: every change lands.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, _, err := w.Update(ctx, kv, "job/ns/a", func(r *ledger.Reservation) bool {
				r.Checks = append(r.Checks, engine.CheckStatus{Name: fmt.Sprint("c", i), State: engine.CheckReady})
				return true
			}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := len(held(t, ctx, kv)["job/ns/a"].Checks); n != 9 {
		t.Errorf("after 8 racing updates the reservation has %d checks, want 9", n)
	}
}
