package bus

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// WatchSubject is where a bucket's stream republishes the headers of every
// message it stores (Setup configures it): WatchSubject(bucket)+"."+key.
// Only the server publishes there; no Sluice user may.
func WatchSubject(bucket string) string { return "sluice.watch." + bucket }

// WatchOption tunes WatchKV.
type WatchOption func(*kvWatch)

// WithWatchLogger logs what the watch does about failed reads and
// reconnects.
func WithWatchLogger(l zerolog.Logger) WatchOption { return func(w *kvWatch) { w.log = l } }

// WatchPoll is how often a watch looks for writes it heard nothing of:
// a copy lost on the way (the watch pages from where it stopped, so one
// look finds every write since).
const WatchPoll = 2 * time.Second

// WatchKV feeds apply every entry of a bucket OpenKV opened, first the
// current ones (live false), then every change (live true), until ctx
// ends; it closes synced once the current entries are in. An entry older
// than one already applied for its key is skipped, so apply sees each
// key's revisions in order.
//
// It uses no consumer (see Page): it pages through the bucket's stream
// for the current entries, then from where it stopped whenever the stream
// republishes a write's headers (WatchSubject), and every WatchPoll. A
// copy only wakes it: what it applies is always read from the stream, so
// a message delivered to the watch subject by anyone else changes
// nothing. After a reconnect it reads the whole bucket again; a key
// applied before that is no longer there was deleted meanwhile, and its
// delete marker expired before the watch could see it (Remove): WatchKV
// applies its deletion.
func WatchKV(ctx context.Context, kv jetstream.KeyValue, synced chan<- struct{}, apply func(e jetstream.KeyValueEntry, live bool), opts ...WatchOption) error {
	k, ok := kv.(*exactKV)
	if !ok {
		return fmt.Errorf("watch bucket %s: not opened by bus.OpenKV", kv.Bucket())
	}
	if rp := k.stream.CachedInfo().Config.RePublish; rp == nil || rp.Destination != Republish(kv.Bucket()).Destination {
		return fmt.Errorf("watch bucket %s: %w: its stream does not copy its writes to %s.> (`sluice setup` makes it so)", kv.Bucket(), ErrNotSetUp, WatchSubject(kv.Bucket()))
	}
	w := &kvWatch{kv: k, apply: apply, log: zerolog.Nop(), applied: map[string]applied{}}
	for _, o := range opts {
		o(w)
	}
	return w.run(ctx, synced)
}

type kvWatch struct {
	kv    *exactKV
	apply func(jetstream.KeyValueEntry, bool)
	log   zerolog.Logger
	// applied is what was last applied per key. A deletion applied after
	// the initial values is forgotten: what comes for its key later is
	// newer.
	applied map[string]applied
	// pager reads the bucket's stream; next is the sequence its next
	// page starts from.
	pager *Pager
	next  uint64
	done  bool
	// drop, in tests, makes the watch deaf to copies and polls.
	drop func() bool
}

// applied is the revision last applied for a key, and whether it was a
// value (not a deletion).
type applied struct {
	revision uint64
	put      bool
}

func (w *kvWatch) run(ctx context.Context, synced chan<- struct{}) error {
	nc := w.kv.js.Conn()
	bucket := w.kv.Bucket()
	woken := make(chan struct{}, 1)
	sub, err := wakeOn(nc, WatchSubject(bucket)+".>", woken)
	if err != nil {
		return fmt.Errorf("watch bucket %s: %w", bucket, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if w.pager, err = NewPager(nc, "KV_"+bucket); err != nil {
		return fmt.Errorf("watch bucket %s: %w", bucket, err)
	}
	defer w.pager.Close()
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	if err := w.read(ctx); err != nil {
		return nil // ctx ended
	}
	w.done = true
	close(synced)
	poll := time.NewTicker(WatchPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected:
			// Deletions whose markers expired while away are seen only by
			// reading the whole bucket.
			w.log.Info().Str("bucket", bucket).Msg("reconnected; reading the bucket again")
			if err := w.read(ctx); err != nil {
				return nil
			}
		case <-woken:
			w.follow(ctx)
		case <-poll.C:
			w.follow(ctx)
		}
	}
}

// follow applies what the bucket's stream stored since the last page.
func (w *kvWatch) follow(ctx context.Context) {
	if w.drop != nil && w.drop() {
		return
	}
	bucket := w.kv.Bucket()
	last, err := w.pager.Tail(ctx, "", w.next, func(s Stored) error {
		e, err := entryOf(bucket, w.kv.prefix, s)
		if err != nil {
			return err
		}
		w.deliver(e)
		return nil
	})
	if last >= w.next {
		w.next = last + 1
	}
	if err != nil && ctx.Err() == nil {
		// The next copy or poll tries again from where this stopped.
		w.log.Warn().Err(err).Str("bucket", bucket).Msg("bucket not followed")
	}
}

// read applies every key of the bucket as it is now, and the deletion of
// keys applied before that are gone. It tries until it has read the bucket
// or ctx ends.
func (w *kvWatch) read(ctx context.Context) error {
	var entries []kvEntry
	var last uint64
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		var err error
		if entries, last, err = w.kv.lastOfEach(ctx, w.pager); err == nil {
			break
		}
		w.log.Warn().Err(err).Str("bucket", w.kv.Bucket()).Dur("retry_in", wait).Msg("bucket not read")
		select {
		case <-ctx.Done():
			return fmt.Errorf("watch bucket %s: %w", w.kv.Bucket(), ctx.Err())
		case <-time.After(wait):
		}
	}
	present := map[string]bool{}
	for _, e := range entries {
		present[e.key] = true
		w.deliver(e)
	}
	for _, key := range slices.Sorted(maps.Keys(w.applied)) {
		if a := w.applied[key]; a.put && !present[key] {
			w.deliver(deletedEntry{bucket: w.kv.Bucket(), key: key, revision: a.revision + 1})
		}
	}
	w.next = max(w.next, last+1)
	return nil
}

// deliver applies an entry unless one as new was applied for its key.
func (w *kvWatch) deliver(e jetstream.KeyValueEntry) {
	if e.Revision() <= w.applied[e.Key()].revision {
		return
	}
	w.applied[e.Key()] = applied{revision: e.Revision(), put: e.Operation() == jetstream.KeyValuePut}
	w.apply(e, w.done)
	if w.done && e.Operation() != jetstream.KeyValuePut {
		// Whatever comes for the key from now on is newer: forget it, so
		// the map does not grow with every key ever deleted.
		delete(w.applied, e.Key())
	}
}

// lastOfEach reads the last revision of every key, a deletion's marker
// included, in the order they were written, and the sequence of the last
// message read.
func (k *exactKV) lastOfEach(ctx context.Context, p *Pager) ([]kvEntry, uint64, error) {
	latest := map[string]kvEntry{}
	bucket := k.Bucket()
	last, err := p.Page(ctx, "", 0, func(s Stored) error {
		e, err := entryOf(bucket, k.prefix, s)
		if err != nil {
			return err
		}
		latest[e.key] = e
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	// A bucket keeping more than one revision gives a key's older ones
	// first; only the last counts.
	return slices.SortedFunc(maps.Values(latest), func(a, b kvEntry) int { return cmp.Compare(a.revision, b.revision) }), last, nil
}

// deletedEntry stands for the deletion of a key the watch missed: the key
// is gone from the bucket, and its last revision is not known.
type deletedEntry struct {
	bucket, key string
	revision    uint64
}

func (d deletedEntry) Bucket() string                  { return d.bucket }
func (d deletedEntry) Key() string                     { return d.key }
func (d deletedEntry) Value() []byte                   { return nil }
func (d deletedEntry) Revision() uint64                { return d.revision }
func (d deletedEntry) Created() time.Time              { return time.Time{} }
func (d deletedEntry) Delta() uint64                   { return 0 }
func (d deletedEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValueDelete }
