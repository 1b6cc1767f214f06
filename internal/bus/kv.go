package bus

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

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
func OpenKV(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("open stream of bucket %s: %w", bucket, err)
	}
	return &exactKV{KeyValue: kv, stream: st, prefix: "$KV." + bucket + "."}, nil
}

type exactKV struct {
	jetstream.KeyValue
	stream jetstream.Stream
	prefix string
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

// Bounded returns ctx with a deadline at most RequestTimeout away.
func Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, RequestTimeout)
}
