package integration

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
)

// recordCache keeps the workload records this replica read, each with the
// holding of its shard's lease it was read under (shard.Owner.Holding).
// Only the replica holding an object's shard writes its record, so a
// record read under the holding that is still current is what the bucket
// holds, unless this replica wrote it since: every write forgets the key
// (recordKV). A sync read the record from the bucket every time, about
// seven direct gets per Job at 15,000 Jobs, a fifth of all the requests
// the services make.
//
// A read fills the cache only if no write began after it did: begin hands
// out a ticket that a write of the key voids, and fill needs it whole. The
// absence of a record is not kept: it is read once, before the record is
// written.
type recordCache struct {
	mu      sync.Mutex
	entries map[string]recordEntry
	tickets uint64
}

type recordEntry struct {
	// value is the record as stored; nil while a read is in flight.
	value   []byte
	holding uint64
	// ticket is the read in flight that may fill the entry.
	ticket uint64
}

func newRecordCache() *recordCache {
	return &recordCache{entries: map[string]recordEntry{}}
}

// get returns the record of rk kept under holding, if any. One kept under
// another holding is dropped: another replica may have written it since.
func (c *recordCache) get(rk string, holding uint64) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[rk]
	if !ok || e.value == nil {
		return nil, false
	}
	if e.holding != holding {
		delete(c.entries, rk)
		return nil, false
	}
	return e.value, true
}

// begin notes a read of rk from the bucket and returns its ticket.
func (c *recordCache) begin(rk string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tickets++
	c.entries[rk] = recordEntry{ticket: c.tickets}
	return c.tickets
}

// fill keeps what the read with ticket found (nil: no record, or the read
// failed), unless a write of rk began since the read did.
func (c *recordCache) fill(rk string, ticket, holding uint64, value []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[rk]
	if !ok || e.ticket != ticket || e.value != nil {
		return
	}
	if value == nil {
		delete(c.entries, rk)
		return
	}
	c.entries[rk] = recordEntry{value: value, holding: holding}
}

// forget drops rk's record and voids a read of it in flight.
func (c *recordCache) forget(rk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, rk)
}

// recordKV is the workloads bucket as the integration writes it: each
// write forgets the key's cached record, before it is sent (a read begun
// earlier does not fill the cache with the old value) and after it is
// answered (nor does one begun while it was in flight).
type recordKV struct {
	jetstream.KeyValue
	cache *recordCache
}

func (kv recordKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	kv.cache.forget(key)
	defer kv.cache.forget(key)
	return kv.KeyValue.Create(ctx, key, value, opts...)
}

func (kv recordKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	kv.cache.forget(key)
	defer kv.cache.forget(key)
	return kv.KeyValue.Update(ctx, key, value, revision)
}

func (kv recordKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	kv.cache.forget(key)
	defer kv.cache.forget(key)
	return kv.KeyValue.Put(ctx, key, value)
}

func (kv recordKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return kv.Put(ctx, key, []byte(value))
}

func (kv recordKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	kv.cache.forget(key)
	defer kv.cache.forget(key)
	return kv.KeyValue.Delete(ctx, key, opts...)
}

func (kv recordKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	kv.cache.forget(key)
	defer kv.cache.forget(key)
	return kv.KeyValue.Purge(ctx, key, opts...)
}

// Remove deletes key as bus.Remove does on the bucket underneath.
func (kv recordKV) Remove(ctx context.Context, key string, revision uint64) error {
	kv.cache.forget(key)
	defer kv.cache.forget(key)
	return bus.Remove(ctx, kv.KeyValue, key, revision)
}
