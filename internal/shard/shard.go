// Package shard splits the objects of one integration among its live
// replicas, so that any number of replicas share the work and no object is
// handled by two of them at once.
//
// The objects of a group (an integration kind) fall into a fixed number of
// shards by a hash of their key. Each shard is a lease: one key in the
// sluice-shards bucket holding the id of the replica that owns it. A
// replica takes a free shard by compare-and-set, renews the shards it holds
// every fifth of the TTL, and gives back what is above its fair share (the shard
// count over the live replicas, each announcing itself under a member key).
// Keys expire a TTL after their last write (bus.ShardTTL, 10 s), so the
// shards of a replica that died come free on their own.
//
// A replica acts on a shard only while its lease is valid: until the TTL
// minus a margin (30% of it) after the renewal was sent. The bucket counts
// the TTL from when the server stored that write, which is later, so a
// lease is considered lost by its holder at least the margin before anyone
// else can take it. The margin bounds how long one action on an object may
// still be in flight (Deadline gives the caller that bound, and Context a
// context that keeps it while renewals extend the lease).
package shard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/internal/bus"
)

// Defaults.
const (
	// DefaultShards is the shard count; every replica of a group must
	// use the same.
	DefaultShards = 32
)

// KV is the part of a JetStream KV bucket the leases use. Its ListKeys
// must be exact (bus.OpenKV).
type KV interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
	ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error)
}

// Owner holds the leases of one replica of a group.
type Owner struct {
	kv       KV
	group    string
	id       string
	shards   int
	interval time.Duration
	ttl      time.Duration
	margin   time.Duration
	now      func() time.Time
	log      zerolog.Logger

	mu   sync.Mutex
	held map[int]lease
	// holdings numbers the leases taken (lease.holding); acting is what
	// is in flight under each shard (Context), ended when it is given
	// back.
	holdings uint64
	acting   map[int]map[*action]struct{}
}

type lease struct {
	rev   uint64
	until time.Time
	// holding tells one holding of the shard from another: a renewal
	// keeps it, a lease taken (again) is a new one. Between two holdings
	// another replica may have held the shard, so an action begun under
	// one does not go on under the next.
	holding uint64
}

// action is one Context in flight under a shard's lease.
type action struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// Option sets an optional setting of an Owner.
type Option func(*Owner)

// WithShards sets the shard count (DefaultShards).
func WithShards(n int) Option { return func(o *Owner) { o.shards = n } }

// WithTTL sets the TTL of the bucket's keys (bus.ShardTTL); it must be
// the bucket's. Leases are renewed every fifth of it.
func WithTTL(d time.Duration) Option { return func(o *Owner) { o.ttl = d } }

// WithClock sets the clock (time.Now); tests move it.
func WithClock(now func() time.Time) Option { return func(o *Owner) { o.now = now } }

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(o *Owner) { o.log = l } }

// New returns the Owner of replica id in group. group and id must be valid
// NATS subject tokens (letters, digits, '-', '_').
func New(kv KV, group, id string, opts ...Option) (*Owner, error) {
	o := &Owner{kv: kv, group: group, id: id, shards: DefaultShards, ttl: bus.ShardTTL,
		now: time.Now, log: zerolog.Nop(), held: map[int]lease{}, acting: map[int]map[*action]struct{}{}}
	for _, opt := range opts {
		opt(o)
	}
	o.interval, o.margin = o.ttl/5, o.ttl*3/10
	for what, tok := range map[string]string{"group": group, "replica id": id} {
		if tok == "" || strings.ContainsAny(tok, ".*> \t") {
			return nil, fmt.Errorf("shard: %s %q: must be a non-empty subject token", what, tok)
		}
	}
	if o.shards < 1 {
		return nil, fmt.Errorf("shard: shard count %d: must be positive", o.shards)
	}
	if o.ttl < 100*time.Millisecond {
		return nil, fmt.Errorf("shard: TTL %s: must be at least 100ms", o.ttl)
	}
	return o, nil
}

// ID is the replica's id.
func (o *Owner) ID() string { return o.id }

// Of returns the shard of key.
func (o *Owner) Of(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(o.count()))
}

// count is the shard count now.
func (o *Owner) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.shards
}

// Resize changes the shard count, for a group whose units of work are
// numbered by its configuration (the admission service's cohort trees):
// every replica must come to the same count, and the leases of shards
// past it are given back. A unit's work must be safe while two replicas
// briefly disagree on what a shard number means.
func (o *Owner) Resize(ctx context.Context, n int) error {
	if n < 1 {
		return fmt.Errorf("shard: shard count %d: must be positive", n)
	}
	o.mu.Lock()
	o.shards = n
	var gone []int
	for s := range o.held {
		if s >= n {
			gone = append(gone, s)
		}
	}
	o.mu.Unlock()
	for _, s := range gone {
		o.release(ctx, s)
	}
	return nil
}

// HoldsShard says whether this replica holds shard s's lease now.
func (o *Owner) HoldsShard(s int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	l, ok := o.held[s]
	return ok && o.now().Before(l.until)
}

// Holding returns the holding of key's shard's lease and whether this
// replica holds that lease now. What the replica learned of an object under
// one holding is still true under the same one, when only the shard's
// owner writes it: no other replica could have acted on the object in
// between.
func (o *Owner) Holding(key string) (uint64, bool) {
	s := o.Of(key)
	o.mu.Lock()
	defer o.mu.Unlock()
	l, ok := o.held[s]
	if !ok || !o.now().Before(l.until) {
		return 0, false
	}
	return l.holding, true
}

// Deadline says whether this replica owns key's shard now and, if so,
// until when: an action on the object must be over by then.
func (o *Owner) Deadline(key string) (time.Time, bool) {
	return o.end(o.Of(key))
}

// ErrLeaseLost is the cause of a Context that ended because the lease on
// its key's shard did: it was not renewed in time, or was given back.
var ErrLeaseLost = errors.New("shard: the lease on the object's shard ended")

// Context returns a context for one action on key, and whether this
// replica owns key's shard now (if not, the context is already done). It
// is done when ctx is, or when the lease ends: at Deadline, unless the
// lease was renewed by then, in which case at the renewed lease's
// deadline, and so on; but not past a lease given back (Resize, a fair
// share that shrank, Release): that ends its contexts at once, and the
// lease is given back only once they ended. An action thus keeps the
// bound Deadline gives (never in flight past its lease's end, margin
// included) without being cut off at one renewal's end while the lease
// lives on: under load a stop of a job takes several round trips, each
// slowed, and a fixed deadline from the moment it began would fail it
// over and over.
func (o *Owner) Context(ctx context.Context, key string) (context.Context, context.CancelFunc, bool) {
	s := o.Of(key)
	c, cancel := context.WithCancelCause(ctx)
	o.mu.Lock()
	l, ok := o.held[s]
	if !ok || !o.now().Before(l.until) {
		o.mu.Unlock()
		cancel(ErrLeaseLost)
		return c, func() {}, false
	}
	a := &action{cancel: cancel, done: make(chan struct{})}
	if o.acting[s] == nil {
		o.acting[s] = map[*action]struct{}{}
	}
	o.acting[s][a] = struct{}{}
	o.mu.Unlock()
	var mu sync.Mutex
	var t *time.Timer
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		if c.Err() != nil {
			return
		}
		// Renewed meanwhile: wait for the new end. Not so for a lease
		// taken again after this one ended: someone else may have acted
		// in between.
		o.mu.Lock()
		cur, ok := o.held[s]
		o.mu.Unlock()
		if ok && cur.holding == l.holding {
			if d := cur.until.Add(o.margin).Sub(o.now()); d > 0 {
				t.Reset(d)
				return
			}
		}
		cancel(ErrLeaseLost)
	}
	mu.Lock()
	t = time.AfterFunc(l.until.Add(o.margin).Sub(o.now()), check)
	mu.Unlock()
	var once sync.Once
	return c, func() {
		once.Do(func() {
			mu.Lock()
			t.Stop()
			mu.Unlock()
			cancel(context.Canceled)
			o.mu.Lock()
			delete(o.acting[s], a)
			if len(o.acting[s]) == 0 {
				delete(o.acting, s)
			}
			o.mu.Unlock()
			close(a.done)
		})
	}, true
}

// end is when an action under shard s's lease must be over (the lease's
// end plus the margin), if this replica holds a valid lease on it now.
func (o *Owner) end(s int) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l, ok := o.held[s]
	if !ok || !o.now().Before(l.until) {
		return time.Time{}, false
	}
	return l.until.Add(o.margin), true
}

// Owns says whether this replica owns key's shard now.
func (o *Owner) Owns(key string) bool {
	_, ok := o.Deadline(key)
	return ok
}

// Held lists the shards whose leases this replica holds now.
func (o *Owner) Held() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []int
	now := o.now()
	for s, l := range o.held {
		if now.Before(l.until) {
			out = append(out, s)
		}
	}
	return out
}

func (o *Owner) shardKey(s int) string { return o.group + ".shard." + strconv.Itoa(s) }
func (o *Owner) memberKey() string     { return o.group + ".member." + o.id }

// Run keeps the leases until ctx ends, calling acquired with the shards it
// takes each time (to look at their objects: another replica may have left
// work in them). It does not give the leases back: call Release once the
// work in flight is done.
func (o *Owner) Run(ctx context.Context, acquired func(shards []int)) error {
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for ctx.Err() == nil {
		if taken := o.Tick(ctx); len(taken) > 0 {
			acquired(taken)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	return nil
}

// Tick renews, gives back and takes leases once, and returns the shards
// taken, and those whose lease had lapsed and is renewed now: while it
// lapsed, the replica did not act on their objects (Deadline said so), so
// they must be looked at again as if taken. Errors are logged: a lease
// that cannot be renewed lapses.
func (o *Owner) Tick(ctx context.Context) []int {
	if _, err := o.kv.Put(ctx, o.memberKey(), []byte(o.id)); err != nil {
		o.log.Warn().Err(err).Str("group", o.group).Msg("announce replica")
	}
	regained := o.renew(ctx)
	members, owners, err := o.survey(ctx)
	if err != nil {
		o.log.Warn().Err(err).Str("group", o.group).Msg("read leases")
		return regained
	}
	shards := o.count()
	fair := (shards + members - 1) / members
	held := o.Held()
	if extra := len(held) - fair; extra > 0 {
		rand.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
		for _, s := range held[:extra] {
			o.release(ctx, s)
		}
		return slices.DeleteFunc(regained, func(s int) bool { return !o.HoldsShard(s) })
	}
	var taken []int
	free := make([]int, 0, shards)
	for s := range shards {
		switch h, ok := owners[s]; {
		case !ok || h.free:
			free = append(free, s)
		case h.id == o.id && !o.HoldsShard(s):
			// Its own lease from before a restart: taken back at once
			// instead of after it expires.
			if o.take(ctx, s, owners) {
				taken = append(taken, s)
			}
		}
	}
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	for _, s := range free {
		if len(held)+len(taken) >= fair {
			break
		}
		if o.take(ctx, s, owners) {
			taken = append(taken, s)
		}
	}
	return append(taken, regained...)
}

// renew extends every lease held; one that fails is lost at once. It
// returns the shards whose lease had lapsed before it was renewed.
//
// The renewals go out side by side: one after another, a busy server
// answering each in a few hundred milliseconds made a round over 32
// shards outlast the TTL, so the leases lapsed while being renewed (seen
// at 50,000 Jobs: every shard lost about once a minute, and each retaking
// looked at all its objects again).
func (o *Owner) renew(ctx context.Context) (regained []int) {
	o.mu.Lock()
	held := make([]int, 0, len(o.held))
	leases := make([]lease, 0, len(o.held))
	for s, l := range o.held {
		held = append(held, s)
		leases = append(leases, l)
	}
	o.mu.Unlock()
	parallel(len(held), func(i int) {
		s, l := held[i], leases[i]
		sent := o.now()
		rev, err := o.kv.Update(ctx, o.shardKey(s), []byte(o.id), l.rev)
		o.mu.Lock()
		defer o.mu.Unlock()
		switch {
		case bus.IsRevisionConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound):
			// Expired and maybe taken: gone for good.
			delete(o.held, s)
			o.log.Warn().Err(err).Str("group", o.group).Int("shard", s).Msg("lease lost")
		case err != nil:
			// Not renewed this time: it lapses at its old end unless a
			// later renewal gets through.
			o.log.Debug().Err(err).Str("group", o.group).Int("shard", s).Msg("lease not renewed")
		default:
			if cur, ok := o.held[s]; !ok || cur.holding != l.holding {
				return // given back meanwhile (Resize)
			}
			if !sent.Before(l.until) {
				regained = append(regained, s)
			}
			o.held[s] = lease{rev: rev, until: sent.Add(o.ttl - o.margin), holding: l.holding}
		}
	})
	return regained
}

// inFlight bounds the requests a round of renewals or a survey has out at
// once.
const inFlight = 16

// parallel calls f(0) … f(n-1), at most inFlight at a time, and returns
// once all have.
func parallel(n int, f func(i int)) {
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// survey counts the live replicas of the group and reads each shard's
// holder (a missing shard is free; an empty holder was given back).
func (o *Owner) survey(ctx context.Context) (int, map[int]holder, error) {
	// One read of the whole bucket (bus.Entries: a page per thousand
	// keys), where a Get per key cost a request each at every round of
	// every replica.
	memberPrefix, shardPrefix := o.group+".member.", o.group+".shard."
	entries, err := bus.Entries(ctx, o.kv, func(k string) bool {
		return strings.HasPrefix(k, memberPrefix) || strings.HasPrefix(k, shardPrefix)
	})
	if err != nil {
		return 0, nil, err
	}
	members := 0
	owners := map[int]holder{}
	for _, e := range entries {
		k := e.Key()
		if strings.HasPrefix(k, memberPrefix) {
			members++
			continue
		}
		s, perr := strconv.Atoi(strings.TrimPrefix(k, shardPrefix))
		if perr != nil || s < 0 || s >= o.count() {
			continue
		}
		owners[s] = holder{rev: e.Revision(), free: len(e.Value()) == 0, id: string(e.Value())}
	}
	if members == 0 {
		members = 1 // this replica, whose announcement failed
	}
	return members, owners, nil
}

// holder is what a shard's key says: given back (free) or held, at a
// revision.
type holder struct {
	rev  uint64
	free bool
	id   string
}

// take claims a free shard: created if its key is gone, updated if it was
// given back.
func (o *Owner) take(ctx context.Context, s int, owners map[int]holder) bool {
	sent := o.now()
	var rev uint64
	var err error
	if h, ok := owners[s]; ok {
		rev, err = o.kv.Update(ctx, o.shardKey(s), []byte(o.id), h.rev)
	} else {
		rev, err = o.kv.Create(ctx, o.shardKey(s), []byte(o.id))
	}
	if err != nil {
		if !bus.IsRevisionConflict(err) && !errors.Is(err, jetstream.ErrKeyExists) {
			o.log.Warn().Err(err).Str("group", o.group).Int("shard", s).Msg("take lease")
		}
		return false
	}
	o.mu.Lock()
	o.holdings++
	o.held[s] = lease{rev: rev, until: sent.Add(o.ttl - o.margin), holding: o.holdings}
	o.mu.Unlock()
	o.log.Debug().Str("group", o.group).Int("shard", s).Msg("lease taken")
	return true
}

// release gives a shard back so another replica can take it at once,
// once what is in flight under it ended (settle).
func (o *Owner) release(ctx context.Context, s int) {
	o.mu.Lock()
	l, ok := o.held[s]
	delete(o.held, s)
	acting := slices.Collect(maps.Keys(o.acting[s]))
	o.mu.Unlock()
	if !ok {
		return
	}
	o.settle(acting)
	if _, err := o.kv.Update(ctx, o.shardKey(s), nil, l.rev); err != nil {
		o.log.Debug().Err(err).Str("group", o.group).Int("shard", s).Msg("give lease back")
	}
}

// settle ends the actions in flight under a lease being given back and
// waits for them, at most the margin: the replica that takes the shard
// next must not find this one still acting on its objects. An action that
// does not heed its context is not waited for longer than its lease's end
// would have bounded it.
func (o *Owner) settle(acting []*action) {
	if len(acting) == 0 {
		return
	}
	for _, a := range acting {
		a.cancel(ErrLeaseLost)
	}
	bound := time.NewTimer(o.margin)
	defer bound.Stop()
	for _, a := range acting {
		select {
		case <-a.done:
		case <-bound.C:
			o.log.Warn().Str("group", o.group).Int("actions", len(acting)).Msg("lease given back with actions still in flight")
			return
		}
	}
}

// Release gives back every lease and withdraws the replica, so the others
// take its shards at once instead of after the TTL. Call it after the
// work in flight is done.
func (o *Owner) Release(ctx context.Context) {
	o.mu.Lock()
	var held []int
	for s := range o.held {
		held = append(held, s)
	}
	o.mu.Unlock()
	for _, s := range held {
		o.release(ctx, s)
	}
	if err := o.kv.Delete(ctx, o.memberKey()); err != nil {
		o.log.Debug().Err(err).Str("group", o.group).Msg("withdraw replica")
	}
}
