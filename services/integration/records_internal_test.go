package integration

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
)

func TestRecordCache(t *testing.T) {
	const rk = "job.ns.train"
	cases := []struct {
		name string
		// steps run on a fresh cache; the last get's answer is checked.
		steps     func(c *recordCache)
		getAt     uint64
		wantValue string
		wantFound bool
		wantLen   int
	}{
		{
			name: "a read kept under a holding is found under it",
			steps: func(c *recordCache) {
				c.fill(rk, c.begin(rk), 7, []byte("v1"))
			},
			getAt: 7, wantValue: "v1", wantFound: true, wantLen: 1,
		},
		{
			name: "under another holding it is dropped",
			steps: func(c *recordCache) {
				c.fill(rk, c.begin(rk), 7, []byte("v1"))
			},
			getAt: 8, wantLen: 0,
		},
		{
			name: "a write begun during the read voids its fill",
			steps: func(c *recordCache) {
				ticket := c.begin(rk)
				c.forget(rk)
				c.fill(rk, ticket, 7, []byte("v1"))
			},
			getAt: 7, wantLen: 0,
		},
		{
			name: "a later read voids an earlier one's fill and keeps its own",
			steps: func(c *recordCache) {
				first := c.begin(rk)
				second := c.begin(rk)
				c.fill(rk, second, 7, []byte("v2"))
				c.fill(rk, first, 7, []byte("v1"))
			},
			getAt: 7, wantValue: "v2", wantFound: true, wantLen: 1,
		},
		{
			name: "a read begun before a write does not fill for a read begun after it",
			steps: func(c *recordCache) {
				before := c.begin(rk)
				c.forget(rk)
				c.begin(rk) // still in flight
				c.fill(rk, before, 7, []byte("v1"))
			},
			getAt: 7, wantLen: 1,
		},
		{
			name: "no record, or a failed read, keeps nothing",
			steps: func(c *recordCache) {
				c.fill(rk, c.begin(rk), 7, nil)
			},
			getAt: 7, wantLen: 0,
		},
		{
			name: "a read in flight is not an answer",
			steps: func(c *recordCache) {
				c.begin(rk)
			},
			getAt: 0, wantLen: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newRecordCache()
			tc.steps(c)
			v, found := c.get(rk, tc.getAt)
			if string(v) != tc.wantValue || found != tc.wantFound {
				t.Errorf("get = %q, %v; want %q, %v", v, found, tc.wantValue, tc.wantFound)
			}
			if got := c.len(); got != tc.wantLen {
				t.Errorf("%d keys kept, want %d", got, tc.wantLen)
			}
		})
	}
}

// TestRecordKVWritesForget: every kind of write through recordKV drops the
// key's cached record, and reaches the bucket.
func TestRecordKVWritesForget(t *testing.T) {
	ctx := context.Background()
	js := natstest.JetStream(t)
	raw, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "records-test"})
	if err != nil {
		t.Fatal(err)
	}
	cache := newRecordCache()
	kv := recordKV{KeyValue: raw, cache: cache}
	const rk = "job.ns.train"
	cached := func() {
		t.Helper()
		cache.fill(rk, cache.begin(rk), 1, []byte("stale"))
		if _, ok := cache.get(rk, 1); !ok {
			t.Fatal("cache not filled")
		}
	}
	writes := []struct {
		name  string
		write func() error
		want  string // the bucket's value after it; "" for none
	}{
		{"create", func() error { _, err := kv.Create(ctx, rk, []byte("v1")); return err }, "v1"},
		{"update", func() error {
			e, err := raw.Get(ctx, rk)
			if err != nil {
				return err
			}
			_, err = kv.Update(ctx, rk, []byte("v2"), e.Revision())
			return err
		}, "v2"},
		{"put", func() error { _, err := kv.Put(ctx, rk, []byte("v3")); return err }, "v3"},
		{"put a string", func() error { _, err := kv.PutString(ctx, rk, "v4"); return err }, "v4"},
		{"remove", func() error { return bus.Remove(ctx, kv, rk, 0) }, ""},
		{"create again", func() error { _, err := kv.Create(ctx, rk, []byte("v5")); return err }, "v5"},
		{"delete", func() error { return kv.Delete(ctx, rk) }, ""},
		{"put once more", func() error { _, err := kv.Put(ctx, rk, []byte("v6")); return err }, "v6"},
		{"purge", func() error { return kv.Purge(ctx, rk) }, ""},
	}
	for _, w := range writes {
		cached()
		if err := w.write(); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if _, ok := cache.get(rk, 1); ok {
			t.Errorf("%s: the cached record survived the write", w.name)
		}
		got := ""
		if e, err := raw.Get(ctx, rk); err == nil {
			got = string(e.Value())
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w.want, got); diff != "" {
			t.Errorf("%s: the bucket's value (-want +got):\n%s", w.name, diff)
		}
	}
}

// len is how many keys the cache holds, reads in flight included.
func (c *recordCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
