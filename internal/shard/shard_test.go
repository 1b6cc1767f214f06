package shard_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/internal/shard"
)

// bucket makes a shard bucket with the given TTL on a fresh server.
func bucket(t *testing.T, ttl time.Duration) shard.KV {
	t.Helper()
	ctx := context.Background()
	js := natstest.JetStream(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketShards, History: 1, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenKV(ctx, js, bus.BucketShards)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func owners(t *testing.T, kv shard.KV, ttl time.Duration, ids ...string) []*shard.Owner {
	t.Helper()
	var out []*shard.Owner
	for _, id := range ids {
		o, err := shard.New(kv, "job", id, shard.WithShards(32), shard.WithTTL(ttl), shard.WithLogger(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// tick lets every owner renew and rebalance, rounds times.
func tick(os []*shard.Owner, rounds int) {
	for range rounds {
		for _, o := range os {
			o.Tick(context.Background())
		}
	}
}

// split returns how many shards each owner holds, and fails on a shard held
// twice or not at all.
func split(t *testing.T, os []*shard.Owner, shards int) map[string]int {
	t.Helper()
	by := map[int]string{}
	got := map[string]int{}
	for _, o := range os {
		for _, s := range o.Held() {
			if prev, dup := by[s]; dup {
				t.Fatalf("shard %d held by both %s and %s", s, prev, o.ID())
			}
			by[s] = o.ID()
			got[o.ID()]++
		}
	}
	if len(by) != shards {
		t.Fatalf("%d of %d shards held", len(by), shards)
	}
	return got
}

func TestOwnersSplitTheShards(t *testing.T) {
	kv := bucket(t, 10*time.Second)
	os := owners(t, kv, 10*time.Second, "a", "b", "c")
	tick(os, 4)
	if diff := cmp.Diff(map[string]int{"a": 11, "b": 11, "c": 10}, sortedCounts(split(t, os, 32))); diff != "" {
		t.Errorf("split of 32 shards over 3 replicas (-want +got, sorted by count):\n%s", diff)
	}
	// Every key maps to the one owner of its shard.
	for i := range 200 {
		key := fmt.Sprintf("ns/job-%d", i)
		n := 0
		for _, o := range os {
			if o.Owns(key) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("key %s owned by %d replicas", key, n)
		}
	}
}

// sortedCounts renames the counts a, b, c… from largest to smallest, so
// the expected split does not depend on who took what.
func sortedCounts(m map[string]int) map[string]int {
	var c []int
	for _, n := range m {
		c = append(c, n)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(c)))
	out := map[string]int{}
	for i, n := range c {
		out[string(rune('a'+i))] = n
	}
	return out
}

func TestJoinAndLeave(t *testing.T) {
	kv := bucket(t, 10*time.Second)
	os := owners(t, kv, 10*time.Second, "a", "b")
	a, b := os[0], os[1]
	tick([]*shard.Owner{a}, 2)
	if diff := cmp.Diff(map[string]int{"a": 32}, split(t, []*shard.Owner{a}, 32)); diff != "" {
		t.Errorf("alone (-want +got):\n%s", diff)
	}
	// b joins: a gives back half, b takes it.
	tick(os, 3)
	if diff := cmp.Diff(map[string]int{"a": 16, "b": 16}, split(t, os, 32)); diff != "" {
		t.Errorf("after b joined (-want +got):\n%s", diff)
	}
	// a leaves cleanly: b takes everything on its next tick, without
	// waiting for a's leases to expire.
	a.Release(context.Background())
	tick([]*shard.Owner{b}, 1)
	if diff := cmp.Diff(map[string]int{"b": 32}, split(t, []*shard.Owner{b}, 32)); diff != "" {
		t.Errorf("after a left (-want +got):\n%s", diff)
	}
}

// TestDeadReplicaNeverOverlaps: a replica that stops renewing (frozen, cut
// off) stops acting on its shards before the bucket frees them, and the
// survivor takes them after. Sampled every few milliseconds, no shard is
// ever owned by both.
func TestDeadReplicaNeverOverlaps(t *testing.T) {
	const ttl = time.Second
	kv := bucket(t, ttl)
	os := owners(t, kv, ttl, "a", "b")
	a, b := os[0], os[1]
	tick(os, 3)
	split(t, os, 32)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = b.Run(ctx, func([]int) {})
	}()
	// a is frozen from now on: it never ticks again.
	overlaps := 0
	deadline := time.Now().Add(4 * ttl)
	for time.Now().Before(deadline) {
		for s := range 32 {
			key := keyOf(b, s)
			if a.Owns(key) && b.Owns(key) {
				overlaps++
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if overlaps > 0 {
		t.Fatalf("%d samples found a shard owned by both replicas", overlaps)
	}
	if got := len(a.Held()); got != 0 {
		t.Errorf("the frozen replica still acts on %d shards", got)
	}
	if got := len(b.Held()); got != 32 {
		t.Errorf("the survivor holds %d shards, want all 32", got)
	}
}

// keyOf finds a key in shard s.
func keyOf(o *shard.Owner, s int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("k%d", i)
		if o.Of(k) == s {
			return k
		}
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	kv := bucket(t, 10*time.Second)
	for name, tc := range map[string]struct {
		group, id string
		opts      []shard.Option
		want      string
	}{
		"empty id":      {group: "job", id: "", want: `shard: replica id "": must be a non-empty subject token`},
		"dotted group":  {group: "a.b", id: "x", want: `shard: group "a.b": must be a non-empty subject token`},
		"no shards":     {group: "job", id: "x", opts: []shard.Option{shard.WithShards(0)}, want: "shard: shard count 0: must be positive"},
		"TTL too short": {group: "job", id: "x", opts: []shard.Option{shard.WithTTL(time.Millisecond)}, want: "shard: TTL 1ms: must be at least 100ms"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := shard.New(kv, tc.group, tc.id, tc.opts...)
			if err == nil || err.Error() != tc.want {
				t.Errorf("New: got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestResize: shrinking gives back the shards past the new count, growing
// lets the replicas share the new ones.
func TestResize(t *testing.T) {
	kv := bucket(t, 10*time.Second)
	os := owners(t, kv, 10*time.Second, "a", "b")
	tick(os, 3)
	split(t, os, 32)
	for _, n := range []int{10, 3, 40} {
		for _, o := range os {
			if err := o.Resize(context.Background(), n); err != nil {
				t.Fatal(err)
			}
		}
		tick(os, 3)
		want := map[string]int{"a": (n + 1) / 2, "b": n / 2}
		if diff := cmp.Diff(want, sortedCounts(split(t, os, n))); diff != "" {
			t.Errorf("after resizing to %d (-want +got, sorted by count):\n%s", n, diff)
		}
		for _, o := range os {
			for _, s := range o.Held() {
				if s >= n {
					t.Errorf("%s holds shard %d of %d", o.ID(), s, n)
				}
			}
		}
	}
	if err := os[0].Resize(context.Background(), 0); err == nil {
		t.Error("Resize(0) succeeded")
	}
}

// TestRestartTakesItsLeasesBack: a replica restarted under the same id
// takes back the leases its previous run held at its first tick, without
// waiting for them to expire.
func TestRestartTakesItsLeasesBack(t *testing.T) {
	kv := bucket(t, 10*time.Second)
	before := owners(t, kv, 10*time.Second, "a", "b")
	tick(before, 3)
	held := split(t, before, 32)["a"]
	after := owners(t, kv, 10*time.Second, "a")[0] // a, restarted
	tick([]*shard.Owner{after, before[1]}, 1)
	if got := len(after.Held()); got != held {
		t.Errorf("restarted a holds %d shards, want the %d it held before", got, held)
	}
	split(t, []*shard.Owner{after, before[1]}, 32)
}

// TestLapsedLeaseRenewedIsRetaken: a lease that lapsed (renewals late, the
// replica's clock past its end) and is then renewed comes back from Tick
// as if taken, so the caller looks again at the objects it did not act on
// meanwhile.
func TestLapsedLeaseRenewedIsRetaken(t *testing.T) {
	kv := bucket(t, 10*time.Second)
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	o, err := shard.New(kv, "job", "a", shard.WithShards(4), shard.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Tick(context.Background()); len(got) != 4 {
		t.Fatalf("first tick took %v, want 4 shards", got)
	}
	if got := o.Tick(context.Background()); len(got) != 0 {
		t.Fatalf("a timely renewal returned %v, want nothing", got)
	}
	mu.Lock()
	clock = clock.Add(8 * time.Second) // past the lease's end (TTL less the margin)
	mu.Unlock()
	if held := o.Held(); len(held) != 0 {
		t.Fatalf("lapsed leases still held: %v", held)
	}
	got := o.Tick(context.Background())
	sort.Ints(got)
	if diff := cmp.Diff([]int{0, 1, 2, 3}, got); diff != "" {
		t.Errorf("tick after the lapse (-want +got):\n%s", diff)
	}
	if held := o.Held(); len(held) != 4 {
		t.Errorf("after the renewal %d shards held, want 4", len(held))
	}
}

// TestContextFollowsTheLease: an action's context outlives one renewal's
// deadline while the lease is renewed, and ends (ErrLeaseLost) once the
// renewals stop; a replica that holds nothing gets a context already done.
func TestContextFollowsTheLease(t *testing.T) {
	const ttl = 500 * time.Millisecond
	kv := bucket(t, ttl)
	os := owners(t, kv, ttl, "a", "idle")
	a, idle := os[0], os[1]
	a.Tick(context.Background())
	if _, _, ok := idle.Context(context.Background(), "ns/job"); ok {
		t.Fatal("a replica that never took a lease owns the key")
	}
	ctx, cancel, ok := a.Context(context.Background(), "ns/job")
	defer cancel()
	if !ok {
		t.Fatal("the only replica does not own the key")
	}
	first, _ := a.Deadline("ns/job")
	for time.Now().Before(first.Add(3 * ttl)) {
		time.Sleep(ttl / 5)
		a.Tick(context.Background())
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("context ended while the lease was renewed (%v; cause %v)", err, context.Cause(ctx))
	}
	// The last renewal's deadline: the context must live until then.
	last, ok := a.Deadline("ns/job")
	if !ok {
		t.Fatal("the lease lapsed while it was renewed")
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * ttl):
		t.Fatal("context still live long after the renewals stopped")
	}
	if ended := time.Now(); ended.Before(last) {
		t.Errorf("context ended at %s, before the last renewal's deadline %s", ended.Format(time.StampMilli), last.Format(time.StampMilli))
	}
	if cause := context.Cause(ctx); !errors.Is(cause, shard.ErrLeaseLost) {
		t.Errorf("cause %v, want ErrLeaseLost", cause)
	}
}

// TestGivingBackEndsActionsFirst: a lease given back ends the contexts of
// the actions in flight under it, and is free for another replica only
// once they returned; a context of a shard still held lives on.
func TestGivingBackEndsActionsFirst(t *testing.T) {
	ctx := context.Background()
	// A long TTL: giving back waits for the action at most the margin
	// (30 % of it), longer than a loaded machine stalls this test.
	const ttl = 30 * time.Second
	kv := bucket(t, ttl)
	a := owners(t, kv, ttl, "a")[0]
	a.Tick(ctx)
	gone, kept := "", ""
	for i := 0; gone == "" || kept == ""; i++ {
		switch key := fmt.Sprintf("ns/job-%d", i); {
		case a.Of(key) == 31 && gone == "":
			gone = key
		case a.Of(key) < 31 && kept == "":
			kept = key
		}
	}
	goneCtx, done, ok := a.Context(ctx, gone)
	if !ok {
		t.Fatalf("the only replica does not own %s", gone)
	}
	keptCtx, keptDone, ok := a.Context(ctx, kept)
	if !ok {
		t.Fatalf("the only replica does not own %s", kept)
	}
	defer keptDone()
	resized := make(chan error, 1)
	go func() { resized <- a.Resize(ctx, 31) }()
	select {
	case <-goneCtx.Done():
	case <-time.After(ttl):
		t.Fatal("the context of an action under a lease being given back did not end")
	}
	if cause := context.Cause(goneCtx); !errors.Is(cause, shard.ErrLeaseLost) {
		t.Errorf("cause %v, want ErrLeaseLost", cause)
	}
	// The action has not returned yet: the lease is still this replica's.
	e, err := kv.Get(ctx, "job.shard.31")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != "a" {
		t.Errorf("shard 31 given back (%q) while an action under it was in flight", e.Value())
	}
	done()
	if err := <-resized; err != nil {
		t.Fatal(err)
	}
	if e, err = kv.Get(ctx, "job.shard.31"); err != nil {
		t.Fatal(err)
	}
	if len(e.Value()) != 0 {
		t.Errorf("shard 31 still held by %q after the action returned", e.Value())
	}
	if err := keptCtx.Err(); err != nil {
		t.Errorf("the context of a shard still held ended: %v (cause %v)", err, context.Cause(keptCtx))
	}
	if a.HoldsShard(31) {
		t.Error("shard 31 still held after it was given back")
	}
}

// TestHoldingChangesOnlyWithTheHolder: a key's holding stays through
// renewals and is another once the shard went to another replica and came
// back; a replica that does not hold the shard has none.
func TestHoldingChangesOnlyWithTheHolder(t *testing.T) {
	kv := bucket(t, 10*time.Second)
	os := owners(t, kv, 10*time.Second, "a", "b")
	a, b := os[0], os[1]
	tick([]*shard.Owner{a}, 1)
	const key = "ns/job"
	first, ok := a.Holding(key)
	if !ok {
		t.Fatal("the only replica has no holding of the key's shard")
	}
	tick([]*shard.Owner{a}, 3)
	if got, ok := a.Holding(key); !ok || got != first {
		t.Errorf("after renewals: holding %d (held %v), want %d", got, ok, first)
	}
	// a leaves: b holds the shard; a has no holding of it.
	a.Release(context.Background())
	tick([]*shard.Owner{b}, 1)
	if _, ok := a.Holding(key); ok {
		t.Error("a replica that gave its leases back still has a holding")
	}
	if _, ok := b.Holding(key); !ok {
		t.Fatal("b, the only replica left, has no holding of the key's shard")
	}
	// b leaves and a takes the shard again: another holding.
	b.Release(context.Background())
	tick([]*shard.Owner{a}, 1)
	if got, ok := a.Holding(key); !ok || got == first {
		t.Errorf("after the shard came back: holding %d (held %v), want one other than %d", got, ok, first)
	}
}
