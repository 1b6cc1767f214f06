package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
)

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

// TestWatchKVFollowsWithoutAConsumer: the watch applies the current
// values, then every change, deletions included, each key's revisions in
// order, and the bucket's stream has no consumer meanwhile (no Sluice user
// but setup may create one).
func TestWatchKVFollowsWithoutAConsumer(t *testing.T) {
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
	if err := kv.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	st := &state{vals: map[string]string{}, revs: map[string]uint64{}}
	synced := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- bus.WatchKV(wctx, kv, synced, st.apply) }()
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
	if d := cmp.Diff(map[string]string{"a": "a2", "c": "c1"}, st.snapshot()); d != "" {
		t.Errorf("after the initial values (-want +got):\n%s", d)
	}
	for i := range 50 {
		if _, err := kv.Put(ctx, "d", []byte(fmt.Sprintf("d%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "a2", "d": "d49"}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !cmp.Equal(want, st.snapshot()); {
		time.Sleep(10 * time.Millisecond)
	}
	if d := cmp.Diff(want, st.snapshot()); d != "" {
		t.Errorf("after later changes (-want +got):\n%s", d)
	}
	stream, err := js.Stream(ctx, "KV_"+bus.BucketFence)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("the bucket's stream has %d consumers during the watch, want none", info.State.Consumers)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.bad) > 0 {
		t.Errorf("revisions out of order: %v", st.bad)
	}
}

// TestWatchKVRefusesABucketNotRepublished: a bucket whose stream does not
// copy its writes to the watch subject would never show a change; the
// watch says so at once.
func TestWatchKVRefusesABucketNotRepublished(t *testing.T) {
	ctx, js := setup(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "plain"}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenKV(ctx, js, "plain")
	if err != nil {
		t.Fatal(err)
	}
	err = bus.WatchKV(ctx, kv, make(chan struct{}), func(jetstream.KeyValueEntry, bool) {})
	if !errors.Is(err, bus.ErrNotSetUp) || !strings.Contains(err.Error(), "sluice setup") {
		t.Errorf("WatchKV of a bucket not republished: %v, want ErrNotSetUp naming sluice setup", err)
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
	go func() { _ = bus.WatchKV(wctx, kv, synced, st.apply) }()
	select {
	case <-synced:
	case <-time.After(5 * time.Second):
		t.Fatal("not synced")
	}
	if d := cmp.Diff(map[string]string{"a": "a1"}, st.snapshot()); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
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
	var blind atomic.Bool
	st := &state{vals: map[string]string{}, revs: map[string]uint64{}}
	synced := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- bus.WatchKV(wctx, kv, synced, st.apply, bus.WithCopiesDropped(blind.Load))
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
	blind.Store(true)
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
	blind.Store(false)
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

// TestServerMarkersAreDeletions: where a removal's marker expires, the
// server leaves a marker of its own (Nats-Marker-Reason, no KV-Operation,
// no value). A watch started then, and ReadKV, take it for the deletion it
// is: read as a value, it was a corrupt entry, and a reservation that
// cannot be read blocks admission (stop 44's CI failure, 15 minutes into
// the suite, DeleteMarkerTTL after the first releases).
func TestServerMarkersAreDeletions(t *testing.T) {
	ctx, js := setup(t)
	kv, r := expiringBucket(t, ctx, js)
	rev, err := kv.Put(ctx, "gone", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "kept", []byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, "gone", rev); err != nil {
		t.Fatal(err)
	}
	// Wait for the server's marker in place of the removal's.
	stream, err := js.Stream(ctx, "KV_expiring")
	if err != nil {
		t.Fatal(err)
	}
	reason := ""
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && reason == ""; time.Sleep(100 * time.Millisecond) {
		if m, err := stream.GetLastMsgForSubject(ctx, "$KV.expiring.gone"); err == nil {
			reason = m.Header.Get(jetstream.MarkerReasonHeader)
		}
	}
	if reason == "" {
		t.Fatal("the server left no marker of its own within 15s")
	}

	st := &state{vals: map[string]string{}, revs: map[string]uint64{}}
	synced := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- bus.WatchKV(wctx, kv, synced, st.apply) }()
	select {
	case <-synced:
	case <-time.After(5 * time.Second):
		t.Fatal("not synced")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("WatchKV: %v", err)
	}
	if d := cmp.Diff(map[string]string{"kept": "k"}, st.snapshot()); d != "" {
		t.Errorf("a watch past a %s marker (-want +got):\n%s", reason, d)
	}
	read := map[string]string{}
	if err := bus.ReadKV(ctx, kv, func(e jetstream.KeyValueEntry) {
		if e.Operation() == jetstream.KeyValuePut {
			read[e.Key()] = string(e.Value())
		}
	}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"kept": "k"}, read); d != "" {
		t.Errorf("ReadKV past a %s marker (-want +got):\n%s", reason, d)
	}
}

// TestWatchesOfABucketShareAFollower: watches of one bucket over one
// connection, started while the bucket is being written, each end with
// the bucket as it is, every key's revisions in order, one follower
// paging for all of them; a watch whose apply is stuck holds back no
// other; the follower stops with the last watch.
func TestWatchesOfABucketShareAFollower(t *testing.T) {
	ctx, js := setup(t)
	kv, err := bus.OpenKV(ctx, js, bus.BucketFence)
	if err != nil {
		t.Fatal(err)
	}
	// writes puts and deletes over ten keys; the last value of key k is
	// "k-last", and keys 0, 3, 6 and 9 end deleted.
	write := func(from, to int) {
		for i := from; i < to; i++ {
			key := fmt.Sprintf("k%d", i%10)
			var err error
			if i%7 == 3 {
				err = kv.Delete(ctx, key)
			} else {
				_, err = kv.Put(ctx, key, []byte(fmt.Sprintf("%s-%d", key, i)))
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}
	type watch struct {
		st     *state
		synced chan struct{}
		done   chan error
		cancel context.CancelFunc
	}
	start := func(apply func(*state) func(jetstream.KeyValueEntry, bool)) *watch {
		w := &watch{st: &state{vals: map[string]string{}, revs: map[string]uint64{}}, synced: make(chan struct{}), done: make(chan error, 1)}
		var wctx context.Context
		wctx, w.cancel = context.WithCancel(ctx)
		go func() { w.done <- bus.WatchKV(wctx, kv, w.synced, apply(w.st)) }()
		return w
	}
	plain := func(st *state) func(jetstream.KeyValueEntry, bool) { return st.apply }
	stuck := make(chan struct{})
	var stuckOnce sync.Once
	var watches []*watch
	write(0, 40)
	watches = append(watches, start(plain))
	// The second watch's apply stops at the first live entry until the
	// end of the test.
	blocked := start(func(st *state) func(jetstream.KeyValueEntry, bool) {
		return func(e jetstream.KeyValueEntry, live bool) {
			if live {
				stuckOnce.Do(func() { <-stuck })
			}
			st.apply(e, live)
		}
	})
	writing := make(chan struct{})
	go func() { defer close(writing); write(40, 400) }()
	watches = append(watches, start(plain))
	time.Sleep(50 * time.Millisecond)
	watches = append(watches, start(plain))
	<-writing
	write(400, 420)
	for _, w := range append(watches, blocked) {
		select {
		case <-w.synced:
		case <-time.After(10 * time.Second):
			t.Fatal("a watch did not sync")
		}
	}
	if n := bus.Followers(); n != 1 {
		t.Errorf("%d followers for four watches of one bucket, want 1", n)
	}
	want := map[string]string{}
	for i := 400; i < 420; i++ {
		key := fmt.Sprintf("k%d", i%10)
		if i%7 == 3 {
			delete(want, key)
		} else {
			want[key] = fmt.Sprintf("%s-%d", key, i)
		}
	}
	for i, w := range watches {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !cmp.Equal(want, w.st.snapshot()); {
			time.Sleep(10 * time.Millisecond)
		}
		if d := cmp.Diff(want, w.st.snapshot()); d != "" {
			t.Errorf("watch %d, beside a stuck one (-want +got):\n%s", i, d)
		}
	}
	close(stuck)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !cmp.Equal(want, blocked.st.snapshot()); {
		time.Sleep(10 * time.Millisecond)
	}
	if d := cmp.Diff(want, blocked.st.snapshot()); d != "" {
		t.Errorf("the watch once stuck (-want +got):\n%s", d)
	}
	for i, w := range append(watches, blocked) {
		w.cancel()
		if err := <-w.done; err != nil {
			t.Errorf("watch %d: %v", i, err)
		}
		w.st.mu.Lock()
		if len(w.st.bad) > 0 {
			t.Errorf("watch %d: revisions out of order: %v", i, w.st.bad)
		}
		w.st.mu.Unlock()
	}
	if n := bus.Followers(); n != 0 {
		t.Errorf("%d followers after every watch ended, want 0", n)
	}
}

// TestAWatchEndsAtOnceWhileTheServerIsAway: a watch whose context ends
// while the follower it shares is waiting on a read from a server that is
// gone returns at once; it used to wait for that read's timeout, again
// and again, and services' shutdowns overran their bounds (TestNATSRestart
// in a loaded CI run).
func TestAWatchEndsAtOnceWhileTheServerIsAway(t *testing.T) {
	url, shutdown := natstest.Start(t)
	_, js := natstest.Connect(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	ctx := testCtx(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	kv, err := bus.OpenKV(ctx, js, bus.BucketFence)
	if err != nil {
		t.Fatal(err)
	}
	type watch struct {
		cancel context.CancelFunc
		done   chan error
	}
	start := func() watch {
		wctx, cancel := context.WithCancel(ctx)
		w := watch{cancel: cancel, done: make(chan error, 1)}
		synced := make(chan struct{})
		go func() { w.done <- bus.WatchKV(wctx, kv, synced, func(jetstream.KeyValueEntry, bool) {}) }()
		select {
		case <-synced:
		case <-time.After(5 * time.Second):
			t.Fatal("not synced")
		}
		return w
	}
	first, last := start(), start()
	defer last.cancel()
	shutdown()
	// A poll starts a read that waits for its timeout.
	time.Sleep(bus.WatchPoll + 500*time.Millisecond)
	first.cancel()
	select {
	case err := <-first.done:
		if err != nil {
			t.Errorf("WatchKV: %v", err)
		}
	case <-time.After(bus.RequestTimeout / 2):
		t.Fatalf("a watch whose context ended had not returned after %s, with the server gone", bus.RequestTimeout/2)
	}
}
