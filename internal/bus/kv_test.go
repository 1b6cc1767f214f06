package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
)

// TestOpenKVListsEveryKeyWhileOthersWrite lists a bucket again and again
// while three writers update its keys: every listing must hold each key
// exactly once. nats.go's own listing misses keys here about once in a
// hundred listings, which is why OpenKV exists.
func TestOpenKVListsEveryKeyWhileOthersWrite(t *testing.T) {
	ctx, js := setup(t)
	kv, err := bus.OpenKV(ctx, js, bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 5 {
		k := fmt.Sprintf("tree.c%d", i)
		want = append(want, k)
		if _, err := kv.Put(ctx, k, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "tree.gone", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "tree.gone"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := kv.Put(ctx, want[(n+w)%len(want)], []byte(fmt.Sprintf(`{"n":%d}`, n))); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	for i := range 500 {
		l, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatalf("listing %d: %v", i, err)
		}
		var got []string
		for k := range l.Keys() {
			if k != "tree.gone" { // a purged key keeps its marker until markers are purged
				got = append(got, k)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("listing %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestOpenKVEmptyBucketAndMissingBucket(t *testing.T) {
	ctx, js := setup(t)
	kv, err := bus.OpenKV(ctx, js, bus.BucketQuota)
	if err != nil {
		t.Fatal(err)
	}
	l, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatalf("ListKeys of an empty bucket: %v", err)
	}
	for k := range l.Keys() {
		t.Errorf("empty bucket lists %q", k)
	}
	if _, err := bus.OpenKV(ctx, js, "no-such-bucket"); err == nil {
		t.Error("OpenKV of a missing bucket succeeded")
	}
}

// remover is what OpenKV's buckets add to jetstream.KeyValue.
type remover interface {
	Remove(ctx context.Context, key string, revision uint64) error
	PurgeMarkers(ctx context.Context, filter string, olderThan time.Duration, now time.Time) (int, error)
}

// expiringBucket creates a bucket as Setup makes the record and fence
// buckets, with markers that expire after a second.
func expiringBucket(t *testing.T, ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, remover) {
	t.Helper()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "expiring", History: 1, LimitMarkerTTL: time.Second, RePublish: bus.Republish("expiring")}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenKV(ctx, js, "expiring", bus.WithMarkerTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return kv, kv.(remover)
}

func listKeys(t *testing.T, ctx context.Context, kv jetstream.KeyValue) []string {
	t.Helper()
	l, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// TestRemoveLeavesAMarkerThatExpires: a removed key reads as deleted at
// once and, once its marker expired, is no longer listed; a removal at a
// stale revision is refused as a conflict.
func TestRemoveLeavesAMarkerThatExpires(t *testing.T) {
	ctx, js := setup(t)
	kv, r := expiringBucket(t, ctx, js)
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := kv.Put(ctx, "b", []byte("b2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, "b", rev-1); !bus.IsRevisionConflict(err) {
		t.Fatalf("Remove at a stale revision: %v, want a revision conflict", err)
	}
	if err := r.Remove(ctx, "b", rev); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "b"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("Get of a removed key: %v, want not found", err)
	}
	if d := cmp.Diff([]string{"a", "b"}, listKeys(t, ctx, kv)); d != "" {
		t.Errorf("right after the removal (-want +got):\n%s", d)
	}
	// The marker expires, then the one the server leaves in its place.
	want := []string{"a"}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && !cmp.Equal(want, listKeys(t, ctx, kv)); {
		time.Sleep(100 * time.Millisecond)
	}
	if d := cmp.Diff(want, listKeys(t, ctx, kv)); d != "" {
		t.Errorf("after the marker expired (-want +got):\n%s", d)
	}
	// The key can be created again.
	if _, err := kv.Create(ctx, "b", []byte("b3")); err != nil {
		t.Errorf("Create after the marker expired: %v", err)
	}
}

// TestPurgeMarkers: in a bucket whose markers do not expire (Remove is a
// plain delete there), markers older than the age go with their keys'
// subjects; newer markers and live keys stay.
func TestPurgeMarkers(t *testing.T) {
	ctx, js := setup(t)
	kv, err := bus.OpenKV(ctx, js, bus.BucketConfig)
	if err != nil {
		t.Fatal(err)
	}
	r := kv.(remover)
	for _, k := range []string{"a", "gone", "again"} {
		if _, err := kv.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"gone", "again"} {
		if err := r.Remove(ctx, k, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "again", []byte("back")); err != nil {
		t.Fatal(err)
	}
	if n, err := r.PurgeMarkers(ctx, ">", time.Hour, time.Now()); err != nil || n != 0 {
		t.Errorf("PurgeMarkers of markers younger than the age: %d, %v; want 0", n, err)
	}
	if n, err := r.PurgeMarkers(ctx, ">", time.Minute, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Errorf("PurgeMarkers: %d, %v; want 1", n, err)
	}
	if d := cmp.Diff([]string{"a", "again"}, listKeys(t, ctx, kv)); d != "" {
		t.Errorf("after the purge (-want +got):\n%s", d)
	}
	if e, err := kv.Get(ctx, "again"); err != nil || string(e.Value()) != "back" {
		t.Errorf("a key written again after its deletion: %v, %v", e, err)
	}
}

// OpenBuckets opens buckets in order, and the stream when asked; a missing
// bucket is named in the error.
func TestOpenBuckets(t *testing.T) {
	ctx, js := setup(t)
	kvs, st, err := bus.OpenBuckets(ctx, js, true, bus.BucketShards)
	if err != nil {
		t.Fatalf("OpenBuckets: %v", err)
	}
	if len(kvs) != 1 || kvs[0].Bucket() != bus.BucketShards {
		t.Errorf("buckets %v; want [%s]", kvs, bus.BucketShards)
	}
	if st == nil || st.CachedInfo().Config.Name != bus.StreamEvents {
		t.Errorf("stream %v; want %s", st, bus.StreamEvents)
	}
	if _, st, err := bus.OpenBuckets(ctx, js, false, bus.BucketShards); err != nil || st != nil {
		t.Errorf("without the stream: stream %v, error %v; want none, nil", st, err)
	}
	_, _, err = bus.OpenBuckets(ctx, js, true, bus.BucketShards, "no-such-bucket")
	if err == nil || !strings.Contains(err.Error(), "no-such-bucket") {
		t.Errorf("a missing bucket: error %v; want one naming no-such-bucket", err)
	}
}

// TestEntriesReadEachKeysLastValue: Entries gives every key that holds a
// value once, at its last revision, in the order written, and leaves out
// deleted, purged and
// removed keys, in a bucket whose removals leave expiring markers (the
// fences) and in one whose removals are plain deletes (the configuration).
func TestEntriesReadEachKeysLastValue(t *testing.T) {
	for _, bucket := range []string{bus.BucketFence, bus.BucketConfig} {
		t.Run(bucket, func(t *testing.T) {
			ctx, js := setup(t)
			kv, err := bus.OpenKV(ctx, js, bucket)
			if err != nil {
				t.Fatal(err)
			}
			put := func(k, v string) uint64 {
				t.Helper()
				rev, err := kv.Put(ctx, k, []byte(v))
				if err != nil {
					t.Fatal(err)
				}
				return rev
			}
			put("a", "1")
			put("b", "1")
			put("a", "2")
			put("gone", "1")
			if err := kv.Delete(ctx, "gone"); err != nil {
				t.Fatal(err)
			}
			put("purged", "1")
			if err := kv.Purge(ctx, "purged"); err != nil {
				t.Fatal(err)
			}
			rev := put("removed", "1")
			if err := bus.Remove(ctx, kv, "removed", rev); err != nil {
				t.Fatal(err)
			}
			last := put("c", "1")
			entries, err := bus.Entries(ctx, kv, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, fmt.Sprintf("%s=%s@%d", e.Key(), e.Value(), e.Revision()))
				if e.Created().IsZero() {
					t.Errorf("%s: no creation time", e.Key())
				}
			}
			// In the order written: b's only revision came before a's last.
			want := []string{"b=1@2", "a=2@3", fmt.Sprintf("c=1@%d", last)}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("Entries (-want +got):\n%s", d)
			}
		})
	}
}

// TestEntries: the keys that match, each at its last value, whether the
// bucket was opened by OpenKV (read by pages) or not (a get per key).
func TestEntries(t *testing.T) {
	ctx, js := setup(t)
	plain, err := js.KeyValue(ctx, bus.BucketShards)
	if err != nil {
		t.Fatal(err)
	}
	exact, err := bus.OpenKV(ctx, js, bus.BucketShards)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"g.member.a=1", "g.shard.0=a", "g.shard.0=b", "g.shard.1=", "h.shard.0=c", "g.shard.2=x"} {
		k, v, _ := strings.Cut(kv, "=")
		if _, err := plain.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := plain.Delete(ctx, "g.shard.2"); err != nil {
		t.Fatal(err)
	}
	match := func(k string) bool { return strings.HasPrefix(k, "g.") }
	for name, kv := range map[string]bus.EntryLister{"pages": exact, "gets": plain} {
		t.Run(name, func(t *testing.T) {
			entries, err := bus.Entries(ctx, kv, match)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, e := range entries {
				got[e.Key()] = string(e.Value())
			}
			want := map[string]string{"g.member.a": "1", "g.shard.0": "b", "g.shard.1": ""}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("Entries (-want +got):\n%s", d)
			}
			all, err := bus.Entries(ctx, kv, nil)
			if err != nil || len(all) != 4 {
				t.Errorf("Entries(all) = %d entries, %v; want 4", len(all), err)
			}
			each := map[string]string{}
			err = bus.EachEntry(ctx, kv, func(e jetstream.KeyValueEntry) error {
				each[e.Key()] = string(e.Value())
				return nil
			})
			want["h.shard.0"] = "c"
			if d := cmp.Diff(want, each); err != nil || d != "" {
				t.Errorf("EachEntry: %v (-want +got):\n%s", err, d)
			}
			stop := errors.New("stop")
			if err := bus.EachEntry(ctx, kv, func(jetstream.KeyValueEntry) error { return stop }); !errors.Is(err, stop) {
				t.Errorf("EachEntry with fn failing = %v, want its error", err)
			}
		})
	}
}

// TestValue: a key's last value read without headers is the one Get reads,
// whether it was put, created or updated at a revision (a value stored
// with a header); a key never written, deleted, purged or removed is not
// found; a key that is not one is refused. A bucket OpenKV did not open is
// read with Get.
func TestValue(t *testing.T) {
	ctx, js := setup(t)
	kv, rm := expiringBucket(t, ctx, js)
	plain, err := js.KeyValue(ctx, "expiring")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "put", []byte("p")); err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(ctx, "updated", []byte("u1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "updated", []byte("u2"), rev); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"deleted", "purged", "removed"} {
		if _, err := kv.Put(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "purged"); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "removed")
	if err != nil {
		t.Fatal(err)
	}
	if err := rm.Remove(ctx, "removed", e.Revision()); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]jetstream.KeyValue{"direct": kv, "get": plain} {
		t.Run(name, func(t *testing.T) {
			got := map[string]string{}
			for _, key := range []string{"put", "updated", "never", "deleted", "purged", "removed"} {
				v, err := bus.Value(ctx, b, key)
				switch {
				case errors.Is(err, jetstream.ErrKeyNotFound):
					got[key] = "not found"
				case err != nil:
					t.Fatalf("Value(%s): %v", key, err)
				default:
					got[key] = string(v)
				}
			}
			want := map[string]string{"put": "p", "updated": "u2", "never": "not found", "deleted": "not found", "purged": "not found", "removed": "not found"}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("values (-want +got):\n%s", d)
			}
		})
	}
	for _, key := range []string{"", "a.*", "a.>", "two words", ".a", "a."} {
		if _, err := bus.Value(ctx, kv, key); !errors.Is(err, jetstream.ErrInvalidKey) {
			t.Errorf("Value(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
}
