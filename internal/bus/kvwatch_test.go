package bus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
)

// markerless is a bucket whose watches never mark the end of their
// initial values, however often started, as seen after a server's
// unclean stop.
type markerless struct {
	jetstream.KeyValue
}

func (m *markerless) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := m.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	out := make(chan jetstream.KeyValueEntry)
	go func() {
		defer close(out)
		for e := range w.Updates() {
			if e != nil {
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return &dropped{KeyWatcher: w, out: out}, nil
}

type dropped struct {
	jetstream.KeyWatcher
	out chan jetstream.KeyValueEntry
}

func (d *dropped) Updates() <-chan jetstream.KeyValueEntry { return d.out }

// state is a bucket as a watch's applies left it.
type state struct {
	mu   sync.Mutex
	vals map[string]string
	revs map[string]uint64
	bad  []string
}

func (s *state) apply(e jetstream.KeyValueEntry, _ bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Revision() <= s.revs[e.Key()] {
		s.bad = append(s.bad, fmt.Sprintf("%s at %d after %d", e.Key(), e.Revision(), s.revs[e.Key()]))
	}
	s.revs[e.Key()] = e.Revision()
	if e.Operation() == jetstream.KeyValuePut {
		s.vals[e.Key()] = string(e.Value())
	} else {
		delete(s.vals, e.Key())
	}
}

func (s *state) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, v := range s.vals {
		out[k] = v
	}
	return out
}

// TestWatchKVRecoversFromAMissingMarker: when the end of the initial
// values never comes, the watch reads the bucket itself after its
// patience, says it is synced, and keeps following changes, each key's
// revisions in order, deletions included.
func TestWatchKVRecoversFromAMissingMarker(t *testing.T) {
	ctx, js := setup(t)
	kv, err := bus.OpenKV(ctx, js, bus.BucketFence)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := kv.Put(ctx, k, []byte(k+"1")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "a", []byte("a2")); err != nil {
		t.Fatal(err)
	}
	m := &markerless{KeyValue: kv}
	st := &state{vals: map[string]string{}, revs: map[string]uint64{}}
	synced := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- bus.WatchKV(wctx, m, synced, st.apply, bus.WithPatience(200*time.Millisecond)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchKV: %v", err)
		}
	}()
	// Changed while the first watch stalls: seen by reading the bucket.
	if err := kv.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-synced:
	case <-time.After(5 * time.Second):
		t.Fatal("not synced after the patience")
	}
	if d := cmp.Diff(map[string]string{"a": "a2", "c": "c1"}, st.snapshot()); d != "" {
		t.Errorf("after the initial values (-want +got):\n%s", d)
	}
	// Changes after that arrive through the watch of updates.
	if _, err := kv.Put(ctx, "d", []byte("d1")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "a2", "d": "d1"}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !cmp.Equal(want, st.snapshot()); {
		time.Sleep(10 * time.Millisecond)
	}
	if d := cmp.Diff(want, st.snapshot()); d != "" {
		t.Errorf("after later changes (-want +got):\n%s", d)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.bad) > 0 {
		t.Errorf("revisions out of order: %v", st.bad)
	}
}

// TestWatchKVMarksTheEndOfItsInitialValues: the usual path, with nothing
// stalled: synced closes once the current entries are in.
func TestWatchKVMarksTheEndOfItsInitialValues(t *testing.T) {
	ctx, js := setup(t)
	kv, err := bus.OpenKV(ctx, js, bus.BucketFence)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a", []byte("a1")); err != nil {
		t.Fatal(err)
	}
	st := &state{vals: map[string]string{}, revs: map[string]uint64{}}
	synced := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = bus.WatchKV(wctx, kv, synced, st.apply, bus.WithPatience(time.Minute)) }()
	select {
	case <-synced:
	case <-time.After(5 * time.Second):
		t.Fatal("not synced")
	}
	if d := cmp.Diff(map[string]string{"a": "a1"}, st.snapshot()); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// blinding is a bucket whose first watch goes blind once told to: it
// delivers nothing more, as a watch does that misses a deletion.
type blinding struct {
	jetstream.KeyValue
	blind   chan struct{}
	watches int
}

func (b *blinding) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := b.KeyValue.WatchAll(ctx, opts...)
	if err != nil || b.watches > 0 {
		return w, err
	}
	b.watches++
	out := make(chan jetstream.KeyValueEntry)
	go func() {
		defer close(out)
		for e := range w.Updates() {
			select {
			case <-b.blind:
				continue
			default:
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return &dropped{KeyWatcher: w, out: out}, nil
}

// TestWatchKVForgetsAKeyDeletedWhileItWasAway: a key deleted while the
// watch saw nothing, whose marker expired before the watch was started
// again on a reconnect, is deleted for the caller when the new watch's
// initial values end without it.
func TestWatchKVForgetsAKeyDeletedWhileItWasAway(t *testing.T) {
	url, _ := natstest.Start(t)
	watchConn, watchJS := natstest.Connect(t, url, nats.ReconnectWait(10*time.Millisecond))
	ctx := testCtx(t)
	kv, r := expiringBucket(t, ctx, watchJS)
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	b := &blinding{KeyValue: kv, blind: make(chan struct{})}
	st := &state{vals: map[string]string{}, revs: map[string]uint64{}}
	synced := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- bus.WatchKV(wctx, b, synced, st.apply, bus.WithReconnects(watchConn), bus.WithPatience(time.Minute))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchKV: %v", err)
		}
	}()
	select {
	case <-synced:
	case <-time.After(5 * time.Second):
		t.Fatal("not synced")
	}
	close(b.blind)
	if err := r.Remove(ctx, "b", 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && len(listKeys(t, ctx, kv)) > 1; {
		time.Sleep(100 * time.Millisecond)
	}
	if keys := listKeys(t, ctx, kv); len(keys) != 1 {
		t.Fatalf("the marker of b did not expire: %v", keys)
	}
	if d := cmp.Diff(map[string]string{"a": "a", "b": "b"}, st.snapshot()); d != "" {
		t.Fatalf("the blind watch saw the deletion (-want +got):\n%s", d)
	}
	if err := watchConn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "a"}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !cmp.Equal(want, st.snapshot()); {
		time.Sleep(10 * time.Millisecond)
	}
	if d := cmp.Diff(want, st.snapshot()); d != "" {
		t.Errorf("after the watch started again (-want +got):\n%s", d)
	}
}
