package bus

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
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
type WatchOption func(*watchOptions)

type watchOptions struct {
	log zerolog.Logger
	// drop, in tests, makes the follower deaf to copies and polls.
	drop func() bool
}

// WithWatchLogger logs what the watch does about failed reads and
// reconnects.
func WithWatchLogger(l zerolog.Logger) WatchOption { return func(o *watchOptions) { o.log = l } }

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
//
// The watches of one bucket over one connection share a follower (one
// process running several services watches the fences four times): the
// bucket's writes are paged once and handed to each watch, and one map of
// revisions per key serves them all. Each watch reads the current entries
// by itself when it starts, and applies on its own goroutine (the
// caller's), so a slow apply holds back its own watch only; what waits
// for it is queued in memory.
func WatchKV(ctx context.Context, kv jetstream.KeyValue, synced chan<- struct{}, apply func(e jetstream.KeyValueEntry, live bool), opts ...WatchOption) error {
	k, ok := kv.(*exactKV)
	if !ok {
		return fmt.Errorf("watch bucket %s: not opened by bus.OpenKV", kv.Bucket())
	}
	if rp := k.stream.CachedInfo().Config.RePublish; rp == nil || rp.Destination != Republish(kv.Bucket()).Destination {
		return fmt.Errorf("watch bucket %s: %w: its stream does not copy its writes to %s.> (`sluice setup` makes it so)", kv.Bucket(), ErrNotSetUp, WatchSubject(kv.Bucket()))
	}
	o := watchOptions{log: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	f, err := follow(k, o)
	if err != nil {
		return fmt.Errorf("watch bucket %s: %w", kv.Bucket(), err)
	}
	defer f.release()
	s := &watchSink{wake: make(chan struct{}, 1)}
	if err := f.join(ctx, s); err != nil {
		return nil // ctx ended
	}
	defer f.leave(s)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
		for _, it := range s.take() {
			if it.synced {
				close(synced)
				continue
			}
			apply(it.entry, it.live)
		}
	}
}

// applied is the revision last applied for a key, and whether it was a
// value (not a deletion).
type applied struct {
	revision uint64
	put      bool
}

// A follower pages one bucket's stream for the watches of it over one
// connection (WatchKV), from the first watch's start to the last one's
// end.
type follower struct {
	key   followerKey
	kv    *exactKV
	log   zerolog.Logger
	drop  func() bool
	sub   *nats.Subscription
	woken chan struct{}
	// users counts the watches holding the follower (followers.mu).
	users  int
	cancel context.CancelFunc
	ended  chan struct{}

	// mu is held while a page is read and handed out, and while a watch
	// joins, so a joining watch sees each write either in its own read or
	// from the follower, never neither.
	mu sync.Mutex
	// sinksMu guards sinks alone, so that a watch leaves at once even
	// while a read holds mu (retrying while the server is away).
	sinksMu sync.Mutex
	sinks   map[*watchSink]struct{}
	// applied is what was last handed out per key. A deletion handed out
	// is forgotten: what comes for its key later is newer.
	applied map[string]applied
	// pager reads the bucket's stream; next is the sequence its next
	// page starts from; seeded once the first watch's read set both.
	pager  *Pager
	next   uint64
	seeded bool
}

type followerKey struct {
	nc             *nats.Conn
	bucket, prefix string
}

// followers holds the running followers, one per bucket and connection.
var followers = struct {
	sync.Mutex
	m map[followerKey]*follower
}{m: map[followerKey]*follower{}}

// follow returns the bucket's follower for k's connection, started if it
// was not running; release gives it back.
func follow(k *exactKV, o watchOptions) (*follower, error) {
	nc := k.js.Conn()
	key := followerKey{nc: nc, bucket: k.Bucket(), prefix: k.prefix}
	followers.Lock()
	defer followers.Unlock()
	if f, ok := followers.m[key]; ok {
		f.users++
		return f, nil
	}
	f := &follower{key: key, kv: k, log: o.log, drop: o.drop, woken: make(chan struct{}, 1), users: 1,
		ended: make(chan struct{}), sinks: map[*watchSink]struct{}{}, applied: map[string]applied{}}
	var err error
	// Subscribed before the first read: a write after it wakes the
	// follower.
	if f.sub, err = wakeOn(nc, WatchSubject(k.Bucket())+".>", f.woken); err != nil {
		return nil, err
	}
	if f.pager, err = NewPager(nc, "KV_"+k.Bucket()); err != nil {
		_ = f.sub.Unsubscribe()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	followers.m[key] = f
	go f.run(ctx)
	return f, nil
}

// release gives back a follower follow returned; the last one out stops
// it.
func (f *follower) release() {
	followers.Lock()
	f.users--
	last := f.users == 0
	if last {
		delete(followers.m, f.key)
	}
	followers.Unlock()
	if last {
		f.cancel()
		<-f.ended
	}
}

func (f *follower) run(ctx context.Context) {
	defer close(f.ended)
	defer f.pager.Close()
	defer func() { _ = f.sub.Unsubscribe() }()
	nc := f.key.nc
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	poll := time.NewTicker(WatchPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reconnected:
			// Deletions whose markers expired while away are seen only by
			// reading the whole bucket.
			f.log.Info().Str("bucket", f.key.bucket).Msg("reconnected; reading the bucket again")
			if err := f.reread(ctx); err != nil {
				return
			}
		case <-f.woken:
			f.follow(ctx)
		case <-poll.C:
			f.follow(ctx)
		}
	}
}

// join reads the bucket as it is now for s, queues what it read and the
// mark of its end, and adds s to the watches the follower hands writes
// to: those after what the read saw. It tries until it has read the
// bucket or ctx ends.
func (f *follower) join(ctx context.Context, s *watchSink) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	entries, last, err := f.readAll(ctx)
	if err != nil {
		return err
	}
	if !f.seeded {
		for _, e := range entries {
			if e.op == jetstream.KeyValuePut {
				f.applied[e.key] = applied{revision: e.revision, put: true}
			}
		}
		f.next, f.seeded = last+1, true
	}
	items := make([]sinkItem, 0, len(entries)+1)
	for _, e := range entries {
		items = append(items, sinkItem{entry: e})
	}
	s.from = last + 1
	s.push(append(items, sinkItem{synced: true})...)
	f.sinksMu.Lock()
	f.sinks[s] = struct{}{}
	f.sinksMu.Unlock()
	return nil
}

// leave stops handing writes to s. It never waits for a read: a watch
// whose context ended returns at once.
func (f *follower) leave(s *watchSink) {
	f.sinksMu.Lock()
	delete(f.sinks, s)
	f.sinksMu.Unlock()
}

// follow hands out what the bucket's stream stored since the last page.
func (f *follower) follow(ctx context.Context) {
	if f.drop != nil && f.drop() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.seeded {
		return
	}
	bucket := f.key.bucket
	last, err := f.pager.Tail(ctx, "", f.next, func(s Stored) error {
		e, err := entryOf(bucket, f.kv.prefix, s)
		if err != nil {
			return err
		}
		f.deliver(e, false)
		return nil
	})
	if last >= f.next {
		f.next = last + 1
	}
	if err != nil && ctx.Err() == nil {
		// The next copy or poll tries again from where this stopped.
		f.log.Warn().Err(err).Str("bucket", bucket).Msg("bucket not followed")
	}
}

// reread hands out every key of the bucket as it is now, and the deletion
// of keys handed out before that are gone.
func (f *follower) reread(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.seeded {
		return nil // the first watch to join reads the bucket anyway
	}
	entries, last, err := f.readAll(ctx)
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, e := range entries {
		present[e.key] = true
		f.deliver(e, false)
	}
	for _, key := range slices.Sorted(maps.Keys(f.applied)) {
		if a := f.applied[key]; a.put && !present[key] {
			// Every watch gets it, even one that started after the
			// deletion: deleting a key it does not have changes nothing.
			f.deliver(deletedEntry{bucket: f.key.bucket, key: key, revision: a.revision + 1}, true)
		}
	}
	f.next = max(f.next, last+1)
	return nil
}

// readAll reads every key's last entry, trying until it has or ctx ends.
// f.mu must be held.
func (f *follower) readAll(ctx context.Context) ([]kvEntry, uint64, error) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		entries, last, err := f.kv.lastOfEach(ctx, f.pager)
		if err == nil {
			return entries, last, nil
		}
		f.log.Warn().Err(err).Str("bucket", f.key.bucket).Dur("retry_in", wait).Msg("bucket not read")
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("watch bucket %s: %w", f.key.bucket, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// deliver hands an entry to every watch unless one as new was handed out
// for its key; a watch that read the bucket after the entry was written
// has it already (sinks' from), unless everyone must have it (a deletion
// reread found). f.mu must be held.
func (f *follower) deliver(e jetstream.KeyValueEntry, everyone bool) {
	if e.Revision() <= f.applied[e.Key()].revision {
		return
	}
	if e.Operation() == jetstream.KeyValuePut {
		f.applied[e.Key()] = applied{revision: e.Revision(), put: true}
	} else {
		// Whatever comes for the key from now on is newer: forget it, so
		// the map does not grow with every key ever deleted.
		delete(f.applied, e.Key())
	}
	f.sinksMu.Lock()
	defer f.sinksMu.Unlock()
	for s := range f.sinks {
		if everyone || e.Revision() >= s.from {
			s.push(sinkItem{entry: e, live: true})
		}
	}
}

// A watchSink is one WatchKV's queue of entries to apply.
type watchSink struct {
	// from is the first sequence the watch did not read itself (f.mu).
	from  uint64
	wake  chan struct{}
	mu    sync.Mutex
	queue []sinkItem
}

// sinkItem is an entry to apply, or the mark that the initial ones are
// in.
type sinkItem struct {
	entry  jetstream.KeyValueEntry
	live   bool
	synced bool
}

func (s *watchSink) push(items ...sinkItem) {
	s.mu.Lock()
	s.queue = append(s.queue, items...)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *watchSink) take() []sinkItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

// pageEntries gives fn every message of the bucket's stream as an entry,
// deletions' markers included, in order, a page at a time; it returns the
// sequence of the last message read.
func (k *exactKV) pageEntries(ctx context.Context, p *Pager, fn func(kvEntry) error) (uint64, error) {
	bucket := k.Bucket()
	return p.Page(ctx, "", 0, func(s Stored) error {
		e, err := entryOf(bucket, k.prefix, s)
		if err != nil {
			return err
		}
		return fn(e)
	})
}

// lastOfEach reads the last revision of every key, a deletion's marker
// included, in the order they were written, and the sequence of the last
// message read.
func (k *exactKV) lastOfEach(ctx context.Context, p *Pager) ([]kvEntry, uint64, error) {
	latest := map[string]kvEntry{}
	last, err := k.pageEntries(ctx, p, func(e kvEntry) error {
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
