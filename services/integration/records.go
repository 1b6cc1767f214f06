package integration

import (
	"hash/maphash"
	"sync"
)

// recordCache keeps the workload records this replica read, as stored, so
// a sync need not ask NATS for a record it read before. A job's every
// change, and every reservation or fence change of its workload, syncs
// it again, and each sync began with a read of its record: at 50,000 Jobs
// about a quarter of the server's direct gets, each building a reply whose
// headers cost more than the record, and loading the record's block into
// the server's cache for ten seconds.
//
// Only the integration replica that holds a workload's shard writes its
// record, so what the replica read stays true while it holds the shard
// without a break: an entry is good for the holding of the shard it was
// read under (shard.Owner.Holding), and a lease lost and taken again, when
// another replica may have written, makes it stale. The replica's own
// writes drop the entry (the next read fills it again). A read that
// overlapped a write of the same key by this replica (a group and its
// member's sync hold different locks) is not kept: each write moves a
// counter of the key's stripe, and a fill whose stripe moved is dropped.
type recordCache struct {
	mu      sync.Mutex
	entries map[string]cachedRecord
	// writes counts the writes (drops) per stripe of keys.
	writes [recordStripes]uint64
	// swept is the size after the last sweep of stale entries.
	swept int
	seed  maphash.Seed
}

const recordStripes = 1024

type cachedRecord struct {
	// raw is the record as stored; nil when there is none.
	raw     []byte
	holding uint64
}

func newRecordCache() *recordCache {
	return &recordCache{entries: map[string]cachedRecord{}, seed: maphash.MakeSeed()}
}

func (c *recordCache) stripe(rk string) int {
	return int(maphash.String(c.seed, rk) % recordStripes)
}

// get returns the record of rk kept under holding, if any ("none stored"
// is an answer too: raw nil, ok true).
func (c *recordCache) get(rk string, holding uint64) (raw []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.entries[rk]
	if !found {
		return nil, false
	}
	if e.holding != holding {
		delete(c.entries, rk)
		return nil, false
	}
	return e.raw, true
}

// begin is called before reading rk from the bucket; its answer goes to
// fill with what was read.
func (c *recordCache) begin(rk string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes[c.stripe(rk)]
}

// fill keeps raw as rk's record under holding, unless this replica wrote
// a key of the stripe since begin returned mark. current says whether a
// holding is still the shard's; entries for which it is not are swept
// out once the map has doubled since the last sweep.
func (c *recordCache) fill(rk string, holding, mark uint64, raw []byte, current func(rk string, holding uint64) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes[c.stripe(rk)] != mark {
		return
	}
	c.entries[rk] = cachedRecord{raw: raw, holding: holding}
	if n := len(c.entries); n > 1024 && n > 2*c.swept {
		for k, e := range c.entries {
			if !current(k, e.holding) {
				delete(c.entries, k)
			}
		}
		c.swept = len(c.entries)
	}
}

// drop forgets rk's record: this replica is about to write it or has.
func (c *recordCache) drop(rk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes[c.stripe(rk)]++
	delete(c.entries, rk)
}
