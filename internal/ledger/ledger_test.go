package ledger_test

import (
	"context"
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

// bucket starts an embedded JetStream server, creates Sluice's buckets and
// returns the ledger bucket.
func bucket(t *testing.T) (context.Context, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("bus.Setup: %v", err)
	}
	kv, err := js.KeyValue(ctx, ledger.Bucket)
	if err != nil {
		t.Fatalf("open %s: %v", ledger.Bucket, err)
	}
	return ctx, kv
}

var at = time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)

func reservation(cq string, count int32) ledger.Reservation {
	return ledger.Reservation{
		ClusterQueue: cq,
		PodSets:      []engine.PodSetAssignment{{Name: "main", Count: count, Flavors: map[string]string{"cpu": "default"}}},
		AdmittedAt:   at,
	}
}

func entry(rs map[string]ledger.Reservation) ledger.Entry {
	if rs == nil {
		rs = map[string]ledger.Reservation{}
	}
	return ledger.Entry{Reservations: rs}
}

// mustWrite writes e at rev and fails the test on error.
func mustWrite(t *testing.T, ctx context.Context, kv ledger.KV, key string, rev uint64, e ledger.Entry) uint64 {
	t.Helper()
	n, err := ledger.Write(ctx, kv, key, rev, e)
	if err != nil {
		t.Fatalf("Write(%s, rev %d): %v", key, rev, err)
	}
	return n
}

func mustRead(t *testing.T, ctx context.Context, kv ledger.KV, key string) ledger.Versioned {
	t.Helper()
	v, err := ledger.Read(ctx, kv, key)
	if err != nil {
		t.Fatalf("Read(%s): %v", key, err)
	}
	return v
}

func TestKey(t *testing.T) {
	for tree, want := range map[string]string{
		"cohort/all":      "tree.cohort.all",
		"cq/gpu.a100":     "tree.cq.gpu.a100",
		"cohort/team-a-b": "tree.cohort.team-a-b",
	} {
		if got := ledger.Key(tree); got != want {
			t.Errorf("Key(%q) = %q, want %q", tree, got, want)
		}
	}
}

func TestReadMissingKeyIsEmptyAtRevisionZero(t *testing.T) {
	ctx, kv := bucket(t)
	got := mustRead(t, ctx, kv, "tree.cq.none")
	want := ledger.Versioned{Entry: entry(nil)}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Read of a missing key (-want +got):\n%s", d)
	}
}

// TestWriteCompareAndSet drives Write through the revision cases: each
// step writes at a revision computed from the steps before, and either
// succeeds or must report ErrConflict and leave the stored entry alone.
func TestWriteCompareAndSet(t *testing.T) {
	first := entry(map[string]ledger.Reservation{"job/a/one": reservation("cq", 1)})
	second := entry(map[string]ledger.Reservation{"job/a/one": reservation("cq", 1), "job/a/two": reservation("cq", 2)})
	other := entry(map[string]ledger.Reservation{"job/a/three": reservation("cq", 3)})

	type step struct {
		name string
		// rev picks the revision to write at, given the revisions the
		// successful writes so far returned (oldest first).
		rev      func(revs []uint64) uint64
		write    ledger.Entry
		conflict bool
		// want is the entry stored after the step.
		want ledger.Entry
	}
	zero := func([]uint64) uint64 { return 0 }
	latest := func(revs []uint64) uint64 { return revs[len(revs)-1] }
	cases := []struct {
		name  string
		steps []step
	}{
		{
			name:  "create when revision is 0 and the key is missing",
			steps: []step{{name: "create", rev: zero, write: first, want: first}},
		},
		{
			name: "create when revision is 0 but the key exists",
			steps: []step{
				{name: "create", rev: zero, write: first, want: first},
				{name: "create again", rev: zero, write: other, conflict: true, want: first},
			},
		},
		{
			name: "update at the current revision",
			steps: []step{
				{name: "create", rev: zero, write: first, want: first},
				{name: "update", rev: latest, write: second, want: second},
			},
		},
		{
			name: "update at a stale revision",
			steps: []step{
				{name: "create", rev: zero, write: first, want: first},
				{name: "update", rev: latest, write: second, want: second},
				{name: "update at the create's revision", rev: func(revs []uint64) uint64 { return revs[0] }, write: other, conflict: true, want: second},
			},
		},
		{
			name: "update at a revision from the future",
			steps: []step{
				{name: "create", rev: zero, write: first, want: first},
				{name: "update", rev: func(revs []uint64) uint64 { return latest(revs) + 100 }, write: other, conflict: true, want: first},
			},
		},
		{
			name: "update of a missing key at a non-zero revision",
			steps: []step{
				{name: "update", rev: func([]uint64) uint64 { return 7 }, write: other, conflict: true, want: entry(nil)},
			},
		},
		{
			name: "two writers decided on the same revision: the second loses",
			steps: []step{
				{name: "create", rev: zero, write: first, want: first},
				{name: "writer A", rev: latest, write: second, want: second},
				{name: "writer B at A's base", rev: func(revs []uint64) uint64 { return revs[len(revs)-2] }, write: other, conflict: true, want: second},
			},
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, kv := bucket(t)
			key := fmt.Sprintf("tree.cq.case%d", i)
			revs := []uint64{0}
			for _, s := range tc.steps {
				rev := s.rev(revs)
				n, err := ledger.Write(ctx, kv, key, rev, s.write)
				switch {
				case s.conflict && !errors.Is(err, ledger.ErrConflict):
					t.Fatalf("%s: Write at revision %d = (%d, %v), want ErrConflict", s.name, rev, n, err)
				case !s.conflict && err != nil:
					t.Fatalf("%s: Write at revision %d: %v", s.name, rev, err)
				case !s.conflict:
					if n <= latest(revs) {
						t.Errorf("%s: new revision %d is not after %d", s.name, n, latest(revs))
					}
					revs = append(revs, n)
				}
				got := mustRead(t, ctx, kv, key)
				if d := cmp.Diff(s.want, got.Entry); d != "" {
					t.Errorf("%s: stored entry (-want +got):\n%s", s.name, d)
				}
				if got.Revision != latest(revs) {
					t.Errorf("%s: stored revision %d, want %d", s.name, got.Revision, latest(revs))
				}
			}
		})
	}
}

func TestWriteCreatesAgainAfterDelete(t *testing.T) {
	ctx, kv := bucket(t)
	key := "tree.cq.gone"
	mustWrite(t, ctx, kv, key, 0, entry(map[string]ledger.Reservation{"job/a/x": reservation("gone", 1)}))
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, ctx, kv, key); got.Revision != 0 || len(got.Entry.Reservations) != 0 {
		t.Fatalf("Read after delete = %+v, want an empty entry at revision 0", got)
	}
	want := entry(map[string]ledger.Reservation{"job/a/y": reservation("gone", 2)})
	rev := mustWrite(t, ctx, kv, key, 0, want)
	got := mustRead(t, ctx, kv, key)
	if d := cmp.Diff(ledger.Versioned{Entry: want, Revision: rev}, got); d != "" {
		t.Errorf("after re-create (-want +got):\n%s", d)
	}
}

func TestReadDecodes(t *testing.T) {
	cases := []struct {
		name    string
		value   string
		want    ledger.Entry
		corrupt bool
	}{
		{name: "empty value is an empty entry", value: "", want: entry(nil)},
		{name: "null reservations become an empty map", value: `{"reservations":null}`, want: entry(nil)},
		{name: "no reservations field", value: `{}`, want: entry(nil)},
		{
			name:  "one reservation",
			value: `{"reservations":{"job/a/x":{"clusterQueue":"cq","podSets":[{"name":"main","count":1,"flavors":{"cpu":"default"}}],"admittedAt":"2025-06-07T08:09:10Z"}}}`,
			want:  entry(map[string]ledger.Reservation{"job/a/x": reservation("cq", 1)}),
		},
		{name: "not JSON", value: `reservations: yes`, corrupt: true},
		{name: "truncated JSON", value: `{"reservations":{"job/a/x":`, corrupt: true},
		{name: "reservations of the wrong type", value: `{"reservations":[1,2]}`, corrupt: true},
		{name: "count of the wrong type", value: `{"reservations":{"job/a/x":{"podSets":[{"count":"many"}]}}}`, corrupt: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, kv := bucket(t)
			key := fmt.Sprintf("tree.cq.decode%d", i)
			rev, err := kv.Put(ctx, key, []byte(tc.value))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ledger.Read(ctx, kv, key)
			if tc.corrupt {
				if !errors.Is(err, ledger.ErrCorrupt) {
					t.Fatalf("Read = (%+v, %v), want ErrCorrupt", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if d := cmp.Diff(ledger.Versioned{Entry: tc.want, Revision: rev}, got); d != "" {
				t.Errorf("Read (-want +got):\n%s", d)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	cases := []struct {
		name   string
		put    []string
		delete []string
		want   []string
	}{
		{name: "empty bucket", want: nil},
		{name: "sorted", put: []string{"tree.cq.b", "tree.cohort.z", "tree.cq.a"}, want: []string{"tree.cohort.z", "tree.cq.a", "tree.cq.b"}},
		{name: "deleted keys are left out", put: []string{"tree.cq.a", "tree.cq.b"}, delete: []string{"tree.cq.a"}, want: []string{"tree.cq.b"}},
		{name: "every key deleted", put: []string{"tree.cq.a"}, delete: []string{"tree.cq.a"}, want: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, kv := bucket(t)
			for _, k := range tc.put {
				mustWrite(t, ctx, kv, k, 0, entry(nil))
			}
			for _, k := range tc.delete {
				if err := kv.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ledger.Keys(ctx, kv)
			if err != nil {
				t.Fatalf("Keys: %v", err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Keys (-want +got):\n%s", d)
			}
		})
	}
}

// TestKeysReportsCancellation: a cancelled context must not pass for "the
// ledger has no keys". Release trusts Keys, and quota accounting acks the
// release of a workload Release says holds nothing.
func TestKeysReportsCancellation(t *testing.T) {
	ctx, kv := bucket(t)
	mustWrite(t, ctx, kv, "tree.cq.a", 0, entry(map[string]ledger.Reservation{"job/a/x": reservation("a", 1)}))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	keys, err := ledger.Keys(cancelled, kv)
	if err == nil && len(keys) == 0 {
		t.Errorf("Keys with a cancelled context = (%v, nil): an incomplete listing reported as complete", keys)
	}
	cq, released, err := ledger.Release(cancelled, kv, "job/a/x")
	if err == nil && !released {
		t.Errorf("Release with a cancelled context = (%q, false, nil): reports no reservation while one exists, so the caller acks a release that never happened", cq)
	}
	if v := mustRead(t, ctx, kv, "tree.cq.a"); err == nil && !released && len(v.Entry.Reservations) != 1 {
		t.Errorf("reservation changed: %+v", v.Entry)
	}
}

// cancelAfterList is a ledger KV whose context ends right after ListKeys
// has started listing, as when quota accounting's drain timeout runs out
// while a release is in flight.
type cancelAfterList struct {
	ledger.KV
	cancel context.CancelFunc
}

func (c cancelAfterList) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	l, err := c.KV.ListKeys(ctx, opts...)
	c.cancel()
	return l, err
}

// TestKeysCancelledWhileListing: a listing cut short by its context must
// be an error, not a shorter list. Release trusts Keys: with a short list
// it reports "no reservation" and quota accounting acks the stop or finish
// event, so the quota stays booked (for a stopped workload, whose record
// remains, reconciliation never frees it).
func TestKeysCancelledWhileListing(t *testing.T) {
	ctx, kv := bucket(t)
	const n = 64
	for i := range n {
		mustWrite(t, ctx, kv, fmt.Sprintf("tree.cq.q%02d", i), 0, entry(map[string]ledger.Reservation{fmt.Sprintf("job/ns/w%02d", i): reservation("q", 1)}))
	}

	lctx, cancel := context.WithCancel(ctx)
	keys, err := ledger.Keys(lctx, cancelAfterList{KV: kv, cancel: cancel})
	if err == nil && len(keys) != n {
		t.Errorf("Keys cancelled while listing = (%d of %d keys, nil error): an incomplete listing reported as complete", len(keys), n)
	}

	rctx, cancel := context.WithCancel(ctx)
	last := fmt.Sprintf("job/ns/w%02d", n-1)
	cq, released, err := ledger.Release(rctx, cancelAfterList{KV: kv, cancel: cancel}, last)
	if err == nil && !released {
		t.Errorf("Release(%s) cancelled while listing = (%q, false, nil): says nothing was held although tree.cq.q%02d holds it", last, cq, n-1)
	}
}

func TestRelease(t *testing.T) {
	type call struct {
		workload     string
		wantCQ       string
		wantReleased bool
	}
	cases := []struct {
		name  string
		keys  map[string]map[string]ledger.Reservation
		calls []call
		want  map[string]map[string]ledger.Reservation
	}{
		{
			name: "release once",
			keys: map[string]map[string]ledger.Reservation{
				"tree.cq.a": {"job/ns/x": reservation("a", 1), "job/ns/y": reservation("a", 2)},
			},
			calls: []call{{workload: "job/ns/x", wantCQ: "a", wantReleased: true}},
			want:  map[string]map[string]ledger.Reservation{"tree.cq.a": {"job/ns/y": reservation("a", 2)}},
		},
		{
			name: "release twice: the second finds nothing",
			keys: map[string]map[string]ledger.Reservation{
				"tree.cq.a": {"job/ns/x": reservation("a", 1)},
			},
			calls: []call{
				{workload: "job/ns/x", wantCQ: "a", wantReleased: true},
				{workload: "job/ns/x"},
			},
			want: map[string]map[string]ledger.Reservation{"tree.cq.a": {}},
		},
		{
			name: "release a workload no key holds",
			keys: map[string]map[string]ledger.Reservation{
				"tree.cq.a": {"job/ns/x": reservation("a", 1)},
			},
			calls: []call{{workload: "job/ns/nobody"}},
			want:  map[string]map[string]ledger.Reservation{"tree.cq.a": {"job/ns/x": reservation("a", 1)}},
		},
		{
			name:  "release on an empty ledger",
			calls: []call{{workload: "job/ns/x"}},
			want:  map[string]map[string]ledger.Reservation{},
		},
		{
			name: "release across several keys touches only the holder's key",
			keys: map[string]map[string]ledger.Reservation{
				"tree.cohort.all": {"job/ns/p": reservation("gpu", 1), "job/ns/q": reservation("cpu", 1)},
				"tree.cq.lone":    {"job/ns/r": reservation("lone", 4)},
				"tree.cq.zeta":    {"job/ns/s": reservation("zeta", 2), "job/ns/t": reservation("zeta", 3)},
			},
			calls: []call{
				{workload: "job/ns/t", wantCQ: "zeta", wantReleased: true},
				{workload: "job/ns/q", wantCQ: "cpu", wantReleased: true},
				{workload: "job/ns/r", wantCQ: "lone", wantReleased: true},
				{workload: "job/ns/t"},
			},
			want: map[string]map[string]ledger.Reservation{
				"tree.cohort.all": {"job/ns/p": reservation("gpu", 1)},
				"tree.cq.lone":    {},
				"tree.cq.zeta":    {"job/ns/s": reservation("zeta", 2)},
			},
		},
	}
	// Each case runs with ledger.Release and with a Finder, which is given
	// the ClusterQueue each workload held quota in, a wrong one, or none.
	finder := &ledger.Finder{}
	releasers := map[string]func(ctx context.Context, kv ledger.KV, c call) (string, bool, error){
		"Release": func(ctx context.Context, kv ledger.KV, c call) (string, bool, error) {
			return ledger.Release(ctx, kv, c.workload)
		},
		"Finder": func(ctx context.Context, kv ledger.KV, c call) (string, bool, error) {
			// A new bucket per case: forget the keys of the last one.
			return finder.ReleaseIf(ctx, kv, c.workload, c.wantCQ, func(ledger.Reservation) bool { return true })
		},
		"Finder, wrong queue": func(ctx context.Context, kv ledger.KV, c call) (string, bool, error) {
			return (&ledger.Finder{}).ReleaseIf(ctx, kv, c.workload, "elsewhere", func(ledger.Reservation) bool { return true })
		},
	}
	for _, tc := range cases {
		for rname, release := range releasers {
			t.Run(tc.name+"/"+rname, func(t *testing.T) {
				ctx, kv := bucket(t)
				revs := map[string]uint64{}
				for k, rs := range tc.keys {
					revs[k] = mustWrite(t, ctx, kv, k, 0, entry(rs))
				}
				finder = &ledger.Finder{}
				for i, c := range tc.calls {
					cq, released, err := release(ctx, kv, c)
					if err != nil {
						t.Fatalf("call %d: Release(%s): %v", i, c.workload, err)
					}
					if cq != c.wantCQ || released != c.wantReleased {
						t.Errorf("call %d: Release(%s) = (%q, %v), want (%q, %v)", i, c.workload, cq, released, c.wantCQ, c.wantReleased)
					}
				}
				got := map[string]map[string]ledger.Reservation{}
				keys, err := ledger.Keys(ctx, kv)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					v := mustRead(t, ctx, kv, k)
					got[k] = v.Entry.Reservations
					changed := len(tc.keys[k]) != len(tc.want[k])
					if !changed && v.Revision != revs[k] {
						t.Errorf("key %s: rewritten (revision %d → %d) although nothing in it was released", k, revs[k], v.Revision)
					}
				}
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("ledger after the calls (-want +got):\n%s", d)
				}
			})
		}
	}
}

// A Finder that listed the ledger's keys finds a reservation in a tree
// created after that listing, and follows a queue that moved to another
// tree.
func TestFinderLearnsNewKeys(t *testing.T) {
	ctx, kv := bucket(t)
	all := func(ledger.Reservation) bool { return true }
	mustWrite(t, ctx, kv, "tree.cq.a", 0, entry(map[string]ledger.Reservation{"job/ns/x": reservation("a", 1), "job/ns/y": reservation("a", 1)}))
	var f ledger.Finder
	if cq, ok, err := f.ReleaseIf(ctx, kv, "job/ns/x", "a", all); err != nil || cq != "a" || !ok {
		t.Fatalf("first release = (%q, %v, %v)", cq, ok, err)
	}
	// Queue a joins a cohort: its reservations are now in the cohort's key.
	mustWrite(t, ctx, kv, "tree.cohort.c", 0, entry(map[string]ledger.Reservation{"job/ns/z": reservation("a", 1)}))
	if cq, ok, err := f.ReleaseIf(ctx, kv, "job/ns/z", "a", all); err != nil || cq != "a" || !ok {
		t.Fatalf("release from the new key = (%q, %v, %v)", cq, ok, err)
	}
	if cq, ok, err := f.ReleaseIf(ctx, kv, "job/ns/y", "a", all); err != nil || cq != "a" || !ok {
		t.Fatalf("release from the old key = (%q, %v, %v)", cq, ok, err)
	}
	if got := mustRead(t, ctx, kv, "tree.cohort.c").Entry.Reservations; len(got) != 0 {
		t.Errorf("cohort key still holds %v", got)
	}
}

// TestReleaseSkipsACorruptTree: one corrupt entry must not stop releases
// in other cohort trees (the admission service likewise stops only the
// corrupt entry's tree). Otherwise every finished job anywhere keeps its
// quota until an operator repairs the entry.
func TestReleaseSkipsACorruptTree(t *testing.T) {
	ctx, kv := bucket(t)
	if _, err := kv.Put(ctx, "tree.cohort.broken", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, ctx, kv, "tree.cq.fine", 0, entry(map[string]ledger.Reservation{"job/ns/x": reservation("fine", 1)}))
	cq, released, err := ledger.Release(ctx, kv, "job/ns/x")
	if err != nil || cq != "fine" || !released {
		t.Errorf("Release of a workload in tree.cq.fine while tree.cohort.broken is corrupt = (%q, %v, %v), want (\"fine\", true, nil)", cq, released, err)
	}
}

// TestReleaseConcurrent: releases racing on one key all land. Each loses at
// most one race per other release, fewer than Release's retry budget.
func TestReleaseConcurrent(t *testing.T) {
	ctx, kv := bucket(t)
	const n = 12
	rs := map[string]ledger.Reservation{"job/ns/stays": reservation("cq", 1)}
	for i := range n {
		rs[fmt.Sprintf("job/ns/w%d", i)] = reservation("cq", int32(i+1))
	}
	mustWrite(t, ctx, kv, "tree.cq.cq", 0, entry(rs))

	var wg sync.WaitGroup
	errs := make([]error, n)
	released := make([]bool, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, released[i], errs[i] = ledger.Release(ctx, kv, fmt.Sprintf("job/ns/w%d", i))
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !released[i] {
			t.Errorf("Release(w%d) = (released %v, %v), want (true, nil)", i, released[i], errs[i])
		}
	}
	got := mustRead(t, ctx, kv, "tree.cq.cq").Entry
	want := entry(map[string]ledger.Reservation{"job/ns/stays": reservation("cq", 1)})
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ledger after concurrent releases (-want +got):\n%s", d)
	}
}
