package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reading a stream without a consumer.
//
// Whoever may create a consumer on a stream may have its stored messages
// delivered to any subject at all: nats-server checks a push consumer's
// deliver subject against neither the creator's publish permissions nor
// anything but the stream's own subjects. So no Sluice user but setup
// creates consumers: the services' durable consumers are made by `sluice
// setup`, and every other read of a stream — a bucket's current values,
// a watch, `sluice events` — pages through it with batched direct gets
// (JetStream's $JS.API.DIRECT.GET, answered from the stream's store) and
// learns of new messages from the copies the stream republishes.

// DefaultPage is how many messages one direct get asks for.
const DefaultPage = 1000

// Headers the server sets on a message read by a direct get.
const (
	headerSequence    = "Nats-Sequence"
	headerSubject     = "Nats-Subject"
	headerTimeStamp   = "Nats-Time-Stamp"
	headerNumPending  = "Nats-Num-Pending"
	headerKVOperation = "KV-Operation"
	statusNoMessages  = "404"
	statusEndOfBatch  = "204"
)

// directRequest is the body of a batched direct get: JetStream's
// JSApiMsgGetRequest, the fields Sluice uses.
type directRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	Batch   int    `json:"batch,omitempty"`
}

// Stored is one message of a stream as a direct get gives it: its subject
// in the stream, its sequence and when it was stored.
type Stored struct {
	Subject  string
	Sequence uint64
	Time     time.Time
	Header   nats.Header
	Data     []byte
}

// storedOf reads the server's headers of a message from a direct get.
func storedOf(m *nats.Msg) (Stored, error) {
	seq, err := strconv.ParseUint(m.Header.Get(headerSequence), 10, 64)
	if err != nil {
		return Stored{}, fmt.Errorf("message on %s without a valid %s header: %w", m.Subject, headerSequence, err)
	}
	subj := m.Header.Get(headerSubject)
	if subj == "" {
		return Stored{}, fmt.Errorf("message on %s without a %s header", m.Subject, headerSubject)
	}
	ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(headerTimeStamp))
	return Stored{Subject: subj, Sequence: seq, Time: ts, Header: m.Header, Data: m.Data}, nil
}

// Page reads the messages of stream whose subject matches filter, from
// sequence from on, in order, giving each to fn, until the stream's end as
// it is when the last page is read. An empty filter reads every message:
// use it for a bucket's stream, which holds only its keys. With a filter
// the server counts what matches through its index of subjects, on every
// page; a bucket with as many keys as workloads makes that the costliest
// part of a read. It returns the sequence of the last message read
// (from-1 when there was none). An error from fn stops it.
//
// Page subscribes for the answers and unsubscribes after; what reads
// often keeps a Pager, which subscribes once (a subscription costs the
// server about six times what a page does).
func Page(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64, fn func(Stored) error) (uint64, error) {
	p, err := NewPager(nc, stream)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	return p.Page(ctx, filter, from, fn)
}

// A Pager reads one stream by pages (Page), over one subscription for
// the answers. One page at a time: Page is not safe for concurrent use.
type Pager struct {
	nc     *nats.Conn
	stream string
	inbox  string
	sub    *nats.Subscription
	ch     chan *nats.Msg
	// asked numbers the requests: the answer to one that timed out is
	// told from the current one's by its reply subject.
	asked uint64
}

// NewPager subscribes to the answers of pages of stream.
func NewPager(nc *nats.Conn, stream string) (*Pager, error) {
	// The answers wait in a channel that holds two pages: the one being
	// read and what is left of one given up on. A synchronous
	// subscription's own channel holds 65,536 messages (512 KB, cleared
	// at each subscription): the shard leases' surveys and the watches
	// make a Pager every few seconds, and those channels were about 1 %
	// of `sluice dev`'s allocations at 15,000 Jobs.
	p := &Pager{nc: nc, stream: stream, inbox: nc.NewInbox(), ch: make(chan *nats.Msg, pagerChannel)}
	sub, err := nc.ChanSubscribe(p.inbox+".*", p.ch)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", stream, err)
	}
	p.sub = sub
	return p, nil
}

// pagerChannel is how many answers a Pager holds unread: two pages and
// their end-of-batch statuses. More would be a slow consumer, dropped by
// the client; the page waiting for them ends with an error (its bound).
const pagerChannel = 2 * (DefaultPage + 1)

// Close unsubscribes.
func (p *Pager) Close() { _ = p.sub.Unsubscribe() }

// Page reads as the package's Page does.
func (p *Pager) Page(ctx context.Context, filter string, from uint64, fn func(Stored) error) (uint64, error) {
	last := from - 1
	if from == 0 {
		last = 0
	}
	for {
		n, pending, err := p.page(ctx, filter, last+1, DefaultPage, func(s Stored) error {
			last = s.Sequence
			return fn(s)
		})
		if err != nil {
			return last, err
		}
		if n == 0 || pending == 0 {
			return last, nil
		}
	}
}

// tailSingles is how many messages Tail reads one request each before it
// reads the rest by pages.
const tailSingles = 16

// Tail reads as Page does, for a reader that expects few messages: those
// right after the last it read. It asks for them one by one, then by
// pages if there are more than tailSingles. A batched direct get makes
// the server count the messages after the batch (Nats-Num-Pending); on a
// stream whose keys are overwritten (a bucket) or with a filter, that
// count walks the subjects of the stream's last block, every page: a
// watch woken by each write would spend most of the server's time
// counting. A request for one message counts nothing.
func (p *Pager) Tail(ctx context.Context, filter string, from uint64, fn func(Stored) error) (uint64, error) {
	last := from - 1
	if from == 0 {
		last = 0
	}
	next := filter
	if next == "" {
		next = ">" // every subject: without one the server reads by sequence only, and a deleted one is not found
	}
	for range tailSingles {
		n, _, err := p.page(ctx, next, last+1, 0, func(s Stored) error {
			last = s.Sequence
			return fn(s)
		})
		if err != nil || n == 0 {
			return last, err
		}
	}
	return p.Page(ctx, filter, last+1, fn)
}

// page asks for one batch: up to batch messages from seq on (0: one
// message, answered without a count or an end-of-batch status). It
// returns how many came and how many more match after them.
func (p *Pager) page(ctx context.Context, filter string, seq uint64, batch int, fn func(Stored) error) (int, uint64, error) {
	body, err := json.Marshal(directRequest{Seq: seq, NextFor: filter, Batch: batch})
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := Bounded(ctx)
	defer cancel()
	p.asked++
	reply := p.inbox + "." + strconv.FormatUint(p.asked, 10)
	if err := p.nc.PublishRequest("$JS.API.DIRECT.GET."+p.stream, reply, body); err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", p.stream, err)
	}
	n := 0
	for {
		if !p.sub.IsValid() {
			return n, 0, fmt.Errorf("read %s from %d: %w", p.stream, seq, nats.ErrBadSubscription)
		}
		var m *nats.Msg
		select {
		case m = <-p.ch:
		case <-ctx.Done():
			return n, 0, fmt.Errorf("read %s from %d: %w", p.stream, seq, ctx.Err())
		}
		if m.Subject != reply {
			continue // the rest of a page given up on
		}
		if len(m.Data) == 0 && m.Header.Get(headerSequence) == "" {
			switch status := m.Header.Get("Status"); status {
			case statusNoMessages:
				return n, 0, nil
			case statusEndOfBatch:
				pending, _ := strconv.ParseUint(m.Header.Get(headerNumPending), 10, 64)
				return n, pending, nil
			case "503":
				return n, 0, fmt.Errorf("read %s: %w (is the stream's direct get allowed? `sluice setup` allows it)", p.stream, nats.ErrNoResponders)
			default:
				return n, 0, fmt.Errorf("read %s from %d: status %s %s", p.stream, seq, status, m.Header.Get("Description"))
			}
		}
		s, err := storedOf(m)
		if err != nil {
			return n, 0, fmt.Errorf("read %s: %w", p.stream, err)
		}
		n++
		if err := fn(s); err != nil {
			return n, 0, err
		}
		if batch == 0 {
			return n, 0, nil
		}
	}
}

// entryOf makes a stored message of bucket's stream a KV entry; prefix is
// "$KV.<bucket>.".
func entryOf(bucket, prefix string, s Stored) (kvEntry, error) {
	if len(s.Subject) <= len(prefix) || s.Subject[:len(prefix)] != prefix {
		return kvEntry{}, fmt.Errorf("%w: message %d of bucket %s is on %q", ErrNotAKey, s.Sequence, bucket, s.Subject)
	}
	op := jetstream.KeyValuePut
	switch s.Header.Get(headerKVOperation) {
	case "DEL":
		op = jetstream.KeyValueDelete
	case "PURGE":
		op = jetstream.KeyValuePurge
	case "":
		// The server's own marker, left where a message with a TTL
		// expired (the delete markers Remove leaves, after
		// DeleteMarkerTTL) or was removed: a deletion, never a value.
		switch s.Header.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			op = jetstream.KeyValuePurge
		case "Remove":
			op = jetstream.KeyValueDelete
		}
	}
	return kvEntry{bucket: bucket, key: s.Subject[len(prefix):], value: s.Data, revision: s.Sequence, created: s.Time, op: op}, nil
}

// kvEntry is a key's revision read without a consumer.
type kvEntry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e kvEntry) Bucket() string                  { return e.bucket }
func (e kvEntry) Key() string                     { return e.key }
func (e kvEntry) Value() []byte                   { return e.value }
func (e kvEntry) Revision() uint64                { return e.revision }
func (e kvEntry) Created() time.Time              { return e.created }
func (e kvEntry) Delta() uint64                   { return 0 }
func (e kvEntry) Operation() jetstream.KeyValueOp { return e.op }

// ReadKV gives fn every key of a bucket OpenKV opened, as it is now: its
// last revision, a deletion's marker included, in the order they were
// written. It reads no consumer (Page).
func ReadKV(ctx context.Context, kv jetstream.KeyValue, fn func(jetstream.KeyValueEntry)) error {
	k, ok := kv.(*exactKV)
	if !ok {
		return fmt.Errorf("read bucket %s: not opened by bus.OpenKV", kv.Bucket())
	}
	p, err := NewPager(k.js.Conn(), "KV_"+kv.Bucket())
	if err != nil {
		return fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
	}
	defer p.Close()
	out, _, err := k.lastOfEach(ctx, p)
	if err != nil {
		return fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
	}
	for _, e := range out {
		fn(e)
	}
	return nil
}

// FollowPoll is how often Follow looks for new messages when it has heard
// of none: a publish it hears may be stored a moment later.
const FollowPoll = time.Second

// Follow reads the messages of stream on filter from sequence from on, as
// Page does, then every new one as it is stored, until ctx ends or fn
// fails. It learns of new messages from a subscription to wake (default:
// filter itself), subjects the reader may subscribe to that cover filter,
// and looks at least every FollowPoll.
func Follow(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64, fn func(Stored) error, wake ...string) error {
	return FollowNotify(ctx, nc, stream, filter, from, fn, nil, wake...)
}

// FollowNotify is Follow that calls caughtUp (when not nil) each time it
// has read every message stored when it looked, the first time once the
// stream's history is read.
func FollowNotify(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64, fn func(Stored) error, caughtUp func(), wake ...string) error {
	if len(wake) == 0 {
		wake = []string{filter}
	}
	heard := make(chan struct{}, 1)
	for _, subj := range wake {
		sub, err := wakeOn(nc, subj, heard)
		if err != nil {
			return fmt.Errorf("follow %s: %w", stream, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	pager, err := NewPager(nc, stream)
	if err != nil {
		return fmt.Errorf("follow %s: %w", stream, err)
	}
	defer pager.Close()
	next := from
	poll := time.NewTicker(FollowPoll)
	defer poll.Stop()
	first := true
	for {
		var last uint64
		var err error
		if first {
			last, err = pager.Page(ctx, filter, next, fn)
			first = false
		} else {
			last, err = pager.Tail(ctx, filter, next, fn)
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
		if last >= next {
			next = last + 1
		}
		if err == nil && caughtUp != nil {
			caughtUp()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-heard:
		case <-poll.C:
		}
	}
}

// wakeOn subscribes to subject, each message received only a signal on
// woken: many in a row wake a reader once, and it reads all there is.
func wakeOn(nc *nats.Conn, subject string, woken chan<- struct{}) (*nats.Subscription, error) {
	return nc.Subscribe(subject, func(*nats.Msg) {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
}

// LastSequence is the sequence of the last message stream holds (0 when
// empty): what Follow starts after to read only what is new.
func LastSequence(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	ctx, cancel := Bounded(ctx)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("open stream %s: %w", stream, err)
	}
	return st.CachedInfo().State.LastSeq, nil
}
