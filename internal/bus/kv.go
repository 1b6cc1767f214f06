package bus

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// OpenKV opens a bucket whose ListKeys is exact under concurrent writes.
//
// nats.go lists keys through an ordered consumer that delivers the last
// message of each subject; while other clients write to the bucket, that
// listing can end early and miss keys (a test in this package shows it
// losing one key in about a hundred listings under three writers). A lost
// ledger key made quota accounting treat a stop as "nothing to release",
// leaving a preempted job's quota booked forever. The subjects of the
// bucket's stream, read from the server's stream state, are one snapshot
// and miss nothing.
func OpenKV(ctx context.Context, js jetstream.JetStream, bucket string, opts ...KVOption) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	if err := retryUnanswered(ctx, func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, bucket)
		return err
	}); err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bucket, err)
	}
	var st jetstream.Stream
	if err := retryUnanswered(ctx, func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, "KV_"+bucket)
		return err
	}); err != nil {
		return nil, fmt.Errorf("open stream of bucket %s: %w", bucket, err)
	}
	sc := st.CachedInfo().Config
	k := &exactKV{
		KeyValue: kv, js: js, stream: st, prefix: "$KV." + bucket + ".",
		expiring:  sc.MaxMsgsPerSubject == 1 && sc.AllowMsgTTL,
		markerTTL: DeleteMarkerTTL,
	}
	for _, o := range opts {
		o(k)
	}
	return k, nil
}

// KVOption tunes a bucket OpenKV opens.
type KVOption func(*exactKV)

// WithMarkerTTL sets how long the marker Remove leaves stays (default
// DeleteMarkerTTL).
func WithMarkerTTL(d time.Duration) KVOption { return func(k *exactKV) { k.markerTTL = d } }

type exactKV struct {
	jetstream.KeyValue
	js     jetstream.JetStream
	stream jetstream.Stream
	prefix string
	// expiring: the bucket keeps one revision per key and takes
	// per-message TTLs, so a delete marker can expire (Remove).
	expiring  bool
	markerTTL time.Duration
}

// DeleteMarkerTTL is how long the marker Remove leaves stays: far longer
// than a live watch lags. A watch started again after it expired never
// sees the key, and WatchKV then tells its caller the key is gone.
const DeleteMarkerTTL = 15 * time.Minute

// Remove deletes key, only if its revision is still revision (0: any).
// In a bucket that keeps one revision per key and takes per-message TTLs
// (Setup makes the workload and fence buckets so) the delete marker
// expires after DeleteMarkerTTL (WithMarkerTTL): the marker replaces the
// value, and once it is gone so is the key's subject, so the bucket does
// not list a key for every workload that ever ran. Elsewhere it is an
// ordinary delete.
func (k *exactKV) Remove(ctx context.Context, key string, revision uint64) error {
	if !k.expiring {
		return Remove(ctx, k.KeyValue, key, revision)
	}
	m := nats.NewMsg(k.prefix + key)
	m.Header.Set("KV-Operation", "DEL")
	m.Header.Set("Nats-TTL", k.markerTTL.String())
	if revision != 0 {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(revision, 10))
	}
	ctx, cancel := Bounded(ctx)
	defer cancel()
	_, err := k.js.PublishMsg(ctx, m)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("remove %s: %w", key, jetstream.ErrKeyExists)
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	return nil
}

// Deleter is the part of a bucket Remove uses.
type Deleter interface {
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
}

// Remove removes key from kv, only at revision (0: any): with an expiring
// marker when kv is a bucket OpenKV opened (exactKV.Remove), with a plain
// delete otherwise.
func Remove(ctx context.Context, kv Deleter, key string, revision uint64) error {
	if r, ok := kv.(interface {
		Remove(context.Context, string, uint64) error
	}); ok {
		return r.Remove(ctx, key, revision)
	}
	if revision == 0 {
		return kv.Delete(ctx, key)
	}
	return kv.Delete(ctx, key, jetstream.LastRevision(revision))
}

// PurgeMarkers removes the delete markers of keys matching filter (a KV
// key pattern, ">" for all) written longer than olderThan ago, and so the
// keys' subjects: markers left before Remove existed never expire, and a
// bucket lists every key whose subject holds one. Only what a marker
// replaced goes: a key written again since is kept. It reports how many
// markers it removed.
func (k *exactKV) PurgeMarkers(ctx context.Context, filter string, olderThan time.Duration, now time.Time) (int, error) {
	w, err := k.KeyValue.Watch(ctx, filter, jetstream.MetaOnly())
	if err != nil {
		return 0, fmt.Errorf("purge markers of %s: %w", strings.TrimSuffix(k.prefix, "."), err)
	}
	var old []jetstream.KeyValueEntry
	idle := time.NewTimer(RequestTimeout)
	defer idle.Stop()
	for listed := false; !listed; {
		select {
		case <-ctx.Done():
			_ = w.Stop()
			return 0, ctx.Err()
		case <-idle.C:
			// The end of the current entries never came (see WatchKV):
			// the next start tries again.
			_ = w.Stop()
			return 0, fmt.Errorf("purge markers of %s: the listing stalled", strings.TrimSuffix(k.prefix, "."))
		case e, ok := <-w.Updates():
			switch {
			case !ok || e == nil:
				listed = true
			case e.Operation() != jetstream.KeyValuePut && now.Sub(e.Created()) > olderThan:
				old = append(old, e)
			}
			idle.Reset(RequestTimeout)
		}
	}
	_ = w.Stop()
	n := 0
	for _, e := range old {
		// Up to and including the marker: a later put survives.
		pctx, cancel := Bounded(ctx)
		err := k.stream.Purge(pctx, jetstream.WithPurgeSubject(k.prefix+e.Key()), jetstream.WithPurgeSequence(e.Revision()+1))
		cancel()
		if err != nil {
			return n, fmt.Errorf("purge the marker of %s: %w", e.Key(), err)
		}
		n++
	}
	return n, nil
}

// ListKeys lists every key whose subject holds a message, in order. A key
// deleted but not yet purged is listed too: callers read each key and
// already treat "not found" as gone. Watch options are not supported.
func (k *exactKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	if len(opts) > 0 {
		return nil, fmt.Errorf("list keys of %s: watch options are not supported by an exact listing", strings.TrimSuffix(k.prefix, "."))
	}
	ictx, cancel := Bounded(ctx)
	defer cancel()
	info, err := k.stream.Info(ictx, jetstream.WithSubjectFilter(k.prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", strings.TrimSuffix(k.prefix, "."), err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for s := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(s, k.prefix))
	}
	sort.Strings(keys)
	ch := make(chan string, len(keys))
	for _, key := range keys {
		ch <- key
	}
	close(ch)
	return keyList(ch), nil
}

// keyList is a listing already complete: its channel is closed and full.
type keyList <-chan string

func (l keyList) Keys() <-chan string { return l }
func (l keyList) Stop() error         { return nil }

// RequestTimeout bounds a read from JetStream: such a request (nats.go's
// stream and KV gets) otherwise waits as long as its context allows,
// forever for one without a deadline, when the stream's leader dies with
// it.
const RequestTimeout = 5 * time.Second

// retryUnanswered runs a JetStream API call bounded by RequestTimeout, and
// again while it goes unanswered and ctx lasts: a request sent while a
// cluster elects a leader can go unanswered for good, and a service
// opening its buckets then would wait forever (a three-node test saw the
// quota service never start). Any other error ends it.
func retryUnanswered(ctx context.Context, call func(context.Context) error) error {
	for {
		actx, cancel := Bounded(ctx)
		err := call(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !unanswered(err) {
			return err
		}
	}
}

// Bounded returns ctx with a deadline at most RequestTimeout away.
func Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, RequestTimeout)
}

// PurgeOldMarkers is PurgeMarkers on a bucket OpenKV opened, for markers
// older than any expiring one lives (DeleteMarkerTTL, then the server's
// LimitMarkerTTL): those that will never go by themselves. On another
// bucket it does nothing.
func PurgeOldMarkers(ctx context.Context, kv jetstream.KeyValue, filter string, now time.Time) (int, error) {
	k, ok := kv.(*exactKV)
	if !ok {
		return 0, nil
	}
	return k.PurgeMarkers(ctx, filter, DeleteMarkerTTL+LimitMarkerTTL, now)
}

// OpenBuckets opens the named buckets in order (OpenKV), and the events
// stream when withStream: a service's prologue. An error names what did
// not open; nothing opened needs closing.
func OpenBuckets(ctx context.Context, js jetstream.JetStream, withStream bool, buckets ...string) ([]jetstream.KeyValue, jetstream.Stream, error) {
	kvs := make([]jetstream.KeyValue, len(buckets))
	for i, b := range buckets {
		kv, err := OpenKV(ctx, js, b)
		if err != nil {
			return nil, nil, err
		}
		kvs[i] = kv
	}
	if !withStream {
		return kvs, nil, nil
	}
	var st jetstream.Stream
	if err := retryUnanswered(ctx, func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, StreamEvents)
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("open stream %s: %w", StreamEvents, err)
	}
	return kvs, st, nil
}

// EachEntry gives fn every value kv's stream holds, in the order written,
// holding no more than a page of them at a time: by pages for a bucket
// OpenKV opened, else a Get per listed key. Deleted keys are skipped; a
// key written again while the pages are read may come twice, its older
// value first. For walks of a large bucket that keep little of what they
// read (Entries keeps every key's last value).
func EachEntry(ctx context.Context, kv EntryLister, fn func(jetstream.KeyValueEntry) error) error {
	if k, ok := kv.(*exactKV); ok {
		p, err := NewPager(k.js.Conn(), "KV_"+k.Bucket())
		if err != nil {
			return err
		}
		defer p.Close()
		_, err = k.pageEntries(ctx, p, func(e kvEntry) error {
			if e.op != jetstream.KeyValuePut {
				return nil
			}
			return fn(e)
		})
		return err
	}
	entries, err := Entries(ctx, kv, nil)
	for _, e := range entries {
		if ferr := fn(e); ferr != nil {
			return ferr
		}
	}
	return err
}

// EntryLister is the part of a bucket Entries reads.
type EntryLister interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error)
}

// Entries reads the last value of every key of kv that match accepts
// (nil: all), in the order they were written when kv is a bucket OpenKV
// opened: then by pages of its stream, a few requests however many keys
// there are; else a Get per listed key. A deleted key is left out; what
// could not be read is left out too, with the error.
func Entries(ctx context.Context, kv EntryLister, match func(key string) bool) ([]jetstream.KeyValueEntry, error) {
	var out []jetstream.KeyValueEntry
	if k, ok := kv.(*exactKV); ok {
		p, err := NewPager(k.js.Conn(), "KV_"+k.Bucket())
		if err != nil {
			return nil, err
		}
		defer p.Close()
		entries, _, err := k.lastOfEach(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("read bucket %s: %w", k.Bucket(), err)
		}
		for _, e := range entries {
			if e.op == jetstream.KeyValuePut && (match == nil || match(e.key)) {
				out = append(out, e)
			}
		}
		return out, nil
	}
	l, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	var keys []string
	for key := range l.Keys() {
		if match == nil || match(key) {
			keys = append(keys, key)
		}
	}
	var errs []error
	for _, key := range keys {
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			errs = append(errs, fmt.Errorf("read %s: %w", key, err))
		default:
			out = append(out, e)
		}
	}
	return out, errors.Join(errs...)
}

// KeyGetter reads a key's last entry (jetstream.KeyValue).
type KeyGetter interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
}

// noHeaders asks a direct get for the stored message's payload alone.
var noHeaders = []byte(`{"no_hdr":true}`)

// Value reads the last value of key in a bucket whose values are never
// empty, as a direct get without headers; jetstream.ErrKeyNotFound when
// the key has none (never written, deleted or purged: a marker's payload
// is empty). For a reader that needs neither the revision nor the
// operation (a workload's record, read at every sync of its job; a
// fence's state): the server answers a get of a message that has headers
// (every value written with an expected revision keeps that header) by
// rewriting them four times to add its own, and the client parses them
// all again; across every kind of read, that rewriting was an eighth of
// `sluice dev`'s allocations at 50,000 Jobs. A bucket OpenKV did not open
// is read with Get.
func Value(ctx context.Context, kv KeyGetter, key string) ([]byte, error) {
	k, ok := kv.(*exactKV)
	if !ok {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		return e.Value(), nil
	}
	if key == "" || strings.ContainsAny(key, "*> \t\r\n") || strings.HasPrefix(key, ".") || strings.HasSuffix(key, ".") {
		return nil, fmt.Errorf("read %q of bucket %s: %w", key, k.Bucket(), jetstream.ErrInvalidKey)
	}
	msg, err := k.js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_"+k.Bucket()+"."+k.prefix+key, noHeaders)
	if err != nil {
		return nil, fmt.Errorf("read %s of bucket %s: %w", key, k.Bucket(), err)
	}
	switch status := msg.Header.Get("Status"); status {
	case "":
	case "404":
		return nil, jetstream.ErrKeyNotFound
	default:
		return nil, fmt.Errorf("read %s of bucket %s: status %s %s", key, k.Bucket(), status, msg.Header.Get("Description"))
	}
	if len(msg.Data) == 0 {
		return nil, jetstream.ErrKeyNotFound
	}
	return msg.Data, nil
}
