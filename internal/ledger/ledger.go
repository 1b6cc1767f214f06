package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/engine"
)

// Bucket is the KV bucket that holds the ledger.
const Bucket = "sluice-quota"

// Errors.
var (
	// ErrConflict: the key changed since the revision the caller decided
	// on. Nothing was written.
	ErrConflict = errors.New("ledger changed since it was read")
	// ErrCorrupt: a ledger value is not valid JSON of the expected shape.
	ErrCorrupt = errors.New("ledger entry is corrupt")
)

// Reservation is one workload's hold on quota. It carries everything
// needed to account for it, so the quota it holds is known even to a
// reader that has not (yet) seen the workload's record.
type Reservation struct {
	ClusterQueue string                    `json:"clusterQueue"`
	PodSets      []engine.PodSetAssignment `json:"podSets"`
	AdmittedAt   time.Time                 `json:"admittedAt"`
	// UID of the workload's object, for events about it.
	UID string `json:"uid,omitempty"`
	// Requests per pod, by pod set then resource, as quantities.
	Requests map[string]map[string]string `json:"requests,omitempty"`
	// LocalQueue, Priority and Submitted order the workload among
	// preemption candidates.
	LocalQueue string    `json:"localQueue,omitempty"`
	Priority   int32     `json:"priority,omitempty"`
	Submitted  time.Time `json:"submitted,omitzero"`
}

// Admission names the admission a reservation records: its admission
// time, to the nanosecond. A workload admitted again after a preemption
// gets a new name, so events and fences about one admission never match
// another.
func (r Reservation) Admission() string { return r.AdmittedAt.UTC().Format(time.RFC3339Nano) }

// Entry is the value of one ledger key: reservations by workload key.
type Entry struct {
	Reservations map[string]Reservation `json:"reservations"`
}

// Versioned is an entry with the revision it was read at; revision 0
// means the key does not exist yet.
type Versioned struct {
	Entry    Entry
	Revision uint64
}

// Key turns an engine tree name ("cohort/x", "cq/y") into a KV key. KV keys
// allow letters, digits, '-', '_', '=', '.' and '/'; Kubernetes names use
// only lower-case letters, digits, '-' and '.', so the mapping is safe.
func Key(tree string) string { return "tree." + strings.ReplaceAll(tree, "/", ".") }

// KV is the part of a JetStream KV bucket the ledger uses.
type KV interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error)
}

// Decode parses a ledger value.
func Decode(b []byte) (Entry, error) {
	var e Entry
	if len(b) == 0 {
		return Entry{Reservations: map[string]Reservation{}}, nil
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if e.Reservations == nil {
		e.Reservations = map[string]Reservation{}
	}
	return e, nil
}

func encode(e Entry) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode ledger entry: %w", err)
	}
	return b, nil
}

// Read returns the entry under key, or an empty one at revision 0.
func Read(ctx context.Context, kv KV, key string) (Versioned, error) {
	kve, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Versioned{Entry: Entry{Reservations: map[string]Reservation{}}}, nil
	}
	if err != nil {
		return Versioned{}, fmt.Errorf("read ledger %s: %w", key, err)
	}
	e, err := Decode(kve.Value())
	if err != nil {
		return Versioned{}, fmt.Errorf("read ledger %s: %w", key, err)
	}
	return Versioned{Entry: e, Revision: kve.Revision()}, nil
}

// Write stores e under key if the key is still at revision rev (0: must
// not exist), returning the new revision. A lost race is ErrConflict.
func Write(ctx context.Context, kv KV, key string, rev uint64, e Entry) (uint64, error) {
	b, err := encode(e)
	if err != nil {
		return 0, err
	}
	var n uint64
	if rev == 0 {
		n, err = kv.Create(ctx, key, b)
	} else {
		n, err = kv.Update(ctx, key, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("write ledger %s at revision %d: %w", key, rev, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("write ledger %s: %w", key, err)
	}
	return n, nil
}

// Release removes a workload's reservation wherever it is, retrying lost
// races. It reports the ClusterQueue the reservation was in; a workload
// with no reservation is not an error (releasing twice changes nothing).
func Release(ctx context.Context, kv KV, workload string) (string, bool, error) {
	return ReleaseIf(ctx, kv, workload, func(Reservation) bool { return true })
}

// ReleaseIf is Release of a reservation that match accepts; another
// reservation of the workload (a later admission, or a job of the same
// name created again) is left alone and reported as not released.
func ReleaseIf(ctx context.Context, kv KV, workload string, match func(Reservation) bool) (string, bool, error) {
	keys, err := Keys(ctx, kv)
	if err != nil {
		return "", false, err
	}
	// A corrupt entry elsewhere must not block releases in healthy trees;
	// it is reported only if the workload was found nowhere.
	var corrupt error
	for _, key := range keys {
		r, found, released, err := releaseIn(ctx, kv, key, workload, match)
		switch {
		case errors.Is(err, ErrCorrupt):
			corrupt = err
		case err != nil:
			return "", false, err
		case found:
			return r.ClusterQueue, released, nil
		}
	}
	return "", false, corrupt
}

// releaseIn releases workload's reservation from one key's entry, if the
// entry holds it and match accepts it.
func releaseIn(ctx context.Context, kv KV, key, workload string, match func(Reservation) bool) (r Reservation, found, released bool, err error) {
	for attempt := 0; ; attempt++ {
		v, err := Read(ctx, kv, key)
		if err != nil {
			return r, false, false, err
		}
		r, ok := v.Entry.Reservations[workload]
		if !ok {
			return r, false, false, nil
		}
		if !match(r) {
			return r, true, false, nil
		}
		delete(v.Entry.Reservations, workload)
		_, err = Write(ctx, kv, key, v.Revision, v.Entry)
		if errors.Is(err, ErrConflict) && attempt < 20 {
			continue
		}
		if err != nil {
			return r, true, false, err
		}
		return r, true, true, nil
	}
}

// Finder releases reservations like ReleaseIf, but remembers the ledger's
// keys and which key holds each ClusterQueue's reservations, so that a
// release usually reads one entry, instead of listing the bucket and
// reading entry after entry. Safe for concurrent use.
type Finder struct {
	mu   sync.Mutex
	keys []string
	byCQ map[string]string
}

// ReleaseIf is ReleaseIf for a workload last admitted to clusterQueue
// (empty if not known): the key that held that queue's reservations is
// read first, then the other known keys, then the keys created since.
func (f *Finder) ReleaseIf(ctx context.Context, kv KV, workload, clusterQueue string, match func(Reservation) bool) (string, bool, error) {
	f.mu.Lock()
	if f.byCQ == nil {
		f.byCQ = map[string]string{}
	}
	order := make([]string, 0, len(f.keys)+1)
	if k, ok := f.byCQ[clusterQueue]; ok {
		order = append(order, k)
	}
	order = append(order, f.keys...)
	f.mu.Unlock()
	tried := map[string]bool{}
	var corrupt error
	try := func(keys []string) (string, bool, bool, error) {
		for _, key := range keys {
			if tried[key] {
				continue
			}
			tried[key] = true
			r, found, released, err := releaseIn(ctx, kv, key, workload, match)
			switch {
			case errors.Is(err, ErrCorrupt):
				corrupt = err
			case err != nil:
				return "", false, false, err
			case found:
				f.mu.Lock()
				f.byCQ[r.ClusterQueue] = key
				f.mu.Unlock()
				return r.ClusterQueue, true, released, nil
			}
		}
		return "", false, false, nil
	}
	if cq, found, released, err := try(order); err != nil || found {
		return cq, released, err
	}
	// Not in any key known: a tree created since, or not held at all.
	keys, err := Keys(ctx, kv)
	if err != nil {
		return "", false, err
	}
	f.mu.Lock()
	f.keys = keys
	f.mu.Unlock()
	if cq, found, released, err := try(keys); err != nil || found {
		return cq, released, err
	}
	return "", false, corrupt
}

// Keys lists the ledger's keys in order.
func Keys(ctx context.Context, kv KV) ([]string, error) {
	l, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list ledger keys: %w", err)
	}
	var keys []string
	// The channel closes once every key is listed; the lister then needs
	// no Stop.
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	// The channel also closes when ctx ends: that listing is incomplete.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list ledger keys: %w", err)
	}
	sort.Strings(keys)
	return keys, nil
}
