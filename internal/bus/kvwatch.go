package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// WatchOption tunes WatchKV.
type WatchOption func(*kvWatch)

// WithWatchLogger logs what the watch does about stalls and reconnects.
func WithWatchLogger(l zerolog.Logger) WatchOption { return func(w *kvWatch) { w.log = l } }

// WithReconnects watches again at once when nc reconnects: a watch would
// otherwise resume only once its missed heartbeats are noticed, about
// 20 s later.
func WithReconnects(nc *nats.Conn) WatchOption { return func(w *kvWatch) { w.nc = nc } }

// WithPatience sets how long the initial pass may go without delivering
// anything before the watch reads the bucket itself (default 10 s).
func WithPatience(d time.Duration) WatchOption { return func(w *kvWatch) { w.patience = d } }

// WatchKV feeds apply every entry of a bucket, first the current ones
// (live false), then every change (live true), until ctx ends; it closes
// synced once the current entries are in. An entry older than one already
// applied for its key is skipped, so apply sees each key's revisions in
// order, even across the watch being started again.
//
// A watch started again (after a reconnect) gets the bucket's current
// entries once more; a key applied before that is not among them was
// deleted meanwhile, and its delete marker expired before the watch could
// see it (Remove): WatchKV applies its deletion.
//
// nats.go marks the end of a watch's initial values once it has seen as
// many as its consumer had pending when created. After a NATS server
// stopped uncleanly, that count can include messages the consumer never
// delivers (seen on buckets whose deleted keys are purged), and the mark
// never comes, however often the watch is started again. So when the
// initial pass delivers nothing for the patience, WatchKV reads the bucket
// itself (its keys from the stream's state, then each key), follows
// changes from then on with a watch of updates only, and declares the
// initial values in.
func WatchKV(ctx context.Context, kv jetstream.KeyValue, synced chan<- struct{}, apply func(e jetstream.KeyValueEntry, live bool), opts ...WatchOption) error {
	w := &kvWatch{kv: kv, apply: apply, log: zerolog.Nop(), patience: 10 * time.Second, applied: map[string]applied{}}
	for _, o := range opts {
		o(w)
	}
	return w.run(ctx, synced)
}

type kvWatch struct {
	kv       jetstream.KeyValue
	apply    func(jetstream.KeyValueEntry, bool)
	log      zerolog.Logger
	nc       *nats.Conn
	patience time.Duration
	// applied is what was last applied per key.
	applied map[string]applied
	// seen holds the keys delivered so far by the initial values of a
	// watch started again; nil outside of such a pass.
	seen map[string]bool
	done bool
}

// applied is the revision last applied for a key, and whether it was a
// value (not a deletion).
type applied struct {
	revision uint64
	put      bool
}

func (w *kvWatch) run(ctx context.Context, synced chan<- struct{}) error {
	watcher, err := w.kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = watcher.Stop() }()
	var reconnected chan nats.Status
	if w.nc != nil {
		reconnected = w.nc.StatusChanged(nats.CONNECTED)
		defer w.nc.RemoveStatusListener(reconnected)
	}
	stalled := time.NewTimer(w.patience)
	defer stalled.Stop()
	markDone := func() {
		if !w.done {
			w.done = true
			close(synced)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected:
			_ = watcher.Stop()
			if watcher, err = w.kv.WatchAll(ctx); err != nil {
				return err
			}
			w.seen = map[string]bool{}
			stalled.Reset(w.patience)
		case <-stalled.C:
			if w.done && w.seen == nil {
				continue
			}
			w.log.Warn().Str("bucket", w.kv.Bucket()).Dur("idle", w.patience).
				Msg("the initial values of the bucket stalled; reading it and following its updates")
			_ = watcher.Stop()
			if watcher, err = w.kv.WatchAll(ctx, jetstream.UpdatesOnly()); err != nil {
				return err
			}
			w.seen = nil
			if err := w.snapshot(ctx); err != nil {
				// Try again after the patience.
				w.log.Warn().Err(err).Str("bucket", w.kv.Bucket()).Msg("bucket not read")
				stalled.Reset(w.patience)
				continue
			}
			markDone()
		case e, ok := <-watcher.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("watch of %s closed", w.kv.Bucket())
			}
			if e == nil {
				w.endPass()
				markDone()
				continue
			}
			if !w.done || w.seen != nil {
				stalled.Reset(w.patience)
			}
			if w.seen != nil {
				w.seen[e.Key()] = true
			}
			w.deliver(e)
		}
	}
}

// endPass ends the initial values of a watch started again: a key whose
// value was applied but that did not come again is gone.
func (w *kvWatch) endPass() {
	if w.seen == nil {
		return
	}
	var gone []deletedEntry
	for key, a := range w.applied {
		if a.put && !w.seen[key] {
			gone = append(gone, deletedEntry{bucket: w.kv.Bucket(), key: key, revision: a.revision + 1})
		}
	}
	w.seen = nil
	for _, d := range gone {
		w.deliver(d)
	}
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

// snapshot applies every key of the bucket as it is now, and the deletion
// of keys applied before that are gone.
func (w *kvWatch) snapshot(ctx context.Context) error {
	lctx, cancel := Bounded(ctx)
	l, err := w.kv.ListKeys(lctx)
	cancel()
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		l, err = keyList(closedEmpty()), nil
	}
	if err != nil {
		return fmt.Errorf("list the keys of %s: %w", w.kv.Bucket(), err)
	}
	present := map[string]bool{}
	for key := range l.Keys() {
		gctx, cancel := Bounded(ctx)
		e, err := w.kv.Get(gctx, key)
		cancel()
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s of %s: %w", key, w.kv.Bucket(), err)
		}
		present[key] = true
		w.deliver(e)
	}
	for key, a := range w.applied {
		if a.put && !present[key] {
			w.deliver(deletedEntry{bucket: w.kv.Bucket(), key: key, revision: a.revision + 1})
		}
	}
	return nil
}

func closedEmpty() chan string {
	ch := make(chan string)
	close(ch)
	return ch
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
