package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
)

// Bucket is the KV bucket that holds the ledger.
const Bucket = "sluice-quota"

// Errors.
var (
	// ErrConflict: the tree changed since the revision the caller decided
	// on. Nothing was written.
	ErrConflict = errors.New("ledger changed since it was read")
	// ErrCorrupt: a ledger value is not valid JSON of the expected shape.
	ErrCorrupt = errors.New("ledger entry is corrupt")
	// ErrKey: a key that is neither a reservation's nor a tree's.
	ErrKey = errors.New("not a ledger key")
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
	// Checks are the reservation's admission checks and their states;
	// AwaitingChecks: not all have been Ready yet, so the workload holds
	// quota but is not admitted, and must not start.
	Checks         []engine.CheckStatus `json:"checks,omitempty"`
	AwaitingChecks bool                 `json:"awaitingChecks,omitempty"`
	// PodSetUpdates are what each check (by name) that answered Ready
	// adds to the workload's pods when it starts.
	PodSetUpdates map[string][]events.PodSetUpdateV1 `json:"podSetUpdates,omitempty"`
	// DispatchedTo is the worker cluster a multicluster check that
	// answered Ready sent the workload to: it runs there, and its object
	// here is not started.
	DispatchedTo string `json:"dispatchedTo,omitempty"`
	// DispatchedBy is that check; its next answer without a cluster
	// takes the dispatch back.
	DispatchedBy string `json:"dispatchedBy,omitempty"`
	// MaxExecution is the workload's maximum execution time, and
	// PastExecution how long its earlier admissions ran toward it (both
	// in nanoseconds), for a replica that takes over while it runs.
	MaxExecution  time.Duration `json:"maxExecution,omitempty"`
	PastExecution time.Duration `json:"pastExecution,omitempty"`
}

// Startable reports whether the reservation's workload may start: it
// waits for no admission check.
func (r Reservation) Startable() bool { return !r.AwaitingChecks }

// Admission names the admission a reservation records: its admission
// time, to the nanosecond. A workload admitted again after a preemption
// gets a new name, so events and fences about one admission never match
// another.
func (r Reservation) Admission() string { return r.AdmittedAt.UTC().Format(time.RFC3339Nano) }

// Held is a reservation with the revision of its key.
type Held struct {
	Reservation
	Revision uint64
}

const (
	treePrefix        = "tree."
	reservationPrefix = "res."
)

// TreeKey is the revision key of an engine tree ("cohort/x", "cq/y"). KV
// keys allow letters, digits, '-', '_', '=', '.' and '/'; Kubernetes names
// use only lower-case letters, digits, '-' and '.', so the mapping is safe.
func TreeKey(tree string) string { return treePrefix + strings.Replace(tree, "/", ".", 1) }

// ReservationKey is the key of a workload's reservation; workload is the
// engine's key, kind/namespace/name.
func ReservationKey(workload string) string {
	return reservationPrefix + strings.Replace(strings.Replace(workload, "/", ".", 1), "/", ".", 1)
}

// Change is what one ledger key says, as a watch or a read delivers it.
type Change struct {
	// Workload is set for a reservation key: the engine's key of the
	// workload. Reservation is nil when the reservation is gone.
	Workload    string
	Reservation *Reservation
	// Tree is set for a tree's revision key: its key (TreeKey).
	// Legacy holds the reservations an older Sluice kept in its value.
	Tree   string
	Legacy map[string]Reservation
	// Revision of the key.
	Revision uint64
	// CorruptQueue is, for a reservation that does not decode
	// (ErrCorrupt), the ClusterQueue its value still names, when a
	// string field clusterQueue can be read from it; else "".
	CorruptQueue string
}

// Parse reads one ledger key's entry. A reservation that does not decode
// is ErrCorrupt, and the Change still names its workload.
func Parse(e jetstream.KeyValueEntry) (Change, error) {
	return ParseEntry(e.Key(), e.Operation() == jetstream.KeyValuePut, e.Value(), e.Revision())
}

// ParseEntry is Parse of a key's content: its value if put, else the key
// was deleted or purged.
func ParseEntry(key string, put bool, value []byte, revision uint64) (Change, error) {
	c := Change{Revision: revision}
	switch {
	case strings.HasPrefix(key, reservationPrefix):
		parts := strings.SplitN(strings.TrimPrefix(key, reservationPrefix), ".", 3)
		if len(parts) != 3 {
			return c, fmt.Errorf("%w: %q", ErrKey, key)
		}
		c.Workload = strings.Join(parts, "/")
		if !put {
			return c, nil
		}
		var r Reservation
		if err := json.Unmarshal(value, &r); err != nil {
			// Whatever queue the value still names bounds what a reader
			// must hold back; the rest of it cannot be trusted.
			var named struct {
				ClusterQueue string `json:"clusterQueue"`
			}
			if json.Unmarshal(value, &named) == nil {
				c.CorruptQueue = named.ClusterQueue
			}
			return c, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
		}
		if r.ClusterQueue == "" {
			return c, fmt.Errorf("%w: %s: no clusterQueue", ErrCorrupt, key)
		}
		c.Reservation = &r
		return c, nil
	case strings.HasPrefix(key, treePrefix):
		c.Tree = key
		if !put {
			return c, nil
		}
		var t treeValue
		if err := json.Unmarshal(value, &t); err != nil {
			return c, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
		}
		c.Legacy = t.Reservations
		return c, nil
	default:
		return c, fmt.Errorf("%w: %q", ErrKey, key)
	}
}

// treeValue is the value of a tree key. Only an older Sluice wrote
// reservations into it; the current one writes an empty object.
type treeValue struct {
	Reservations map[string]Reservation `json:"reservations,omitempty"`
}

// Snapshot is the whole ledger as one read saw it.
type Snapshot struct {
	// Reservations by workload (engine key).
	Reservations map[string]Held
	// Trees holds the revision of each tree key.
	Trees map[string]uint64
	// Last is the highest revision read, a removal's included.
	Last uint64
}

// Read reads every key of the ledger in one pass (bus.ReadKV). A reservation
// still in an older Sluice's tree value counts as held. A corrupt
// reservation is reported after everything else is read.
func Read(ctx context.Context, kv jetstream.KeyValue) (Snapshot, error) {
	s := Snapshot{Reservations: map[string]Held{}, Trees: map[string]uint64{}}
	var corrupt []error
	err := bus.ReadKV(ctx, kv, func(e jetstream.KeyValueEntry) {
		s.Last = max(s.Last, e.Revision())
		if e.Operation() != jetstream.KeyValuePut {
			return
		}
		c, err := Parse(e)
		if err != nil {
			corrupt = append(corrupt, err)
			return
		}
		switch {
		case c.Reservation != nil:
			s.Reservations[c.Workload] = Held{Reservation: *c.Reservation, Revision: c.Revision}
		case c.Tree != "":
			s.Trees[c.Tree] = c.Revision
			for wk, r := range c.Legacy {
				if _, ok := s.Reservations[wk]; !ok {
					s.Reservations[wk] = Held{Reservation: r}
				}
			}
		}
	})
	if err != nil {
		return s, fmt.Errorf("read ledger: %w", err)
	}
	return s, errors.Join(corrupt...)
}

// Workloads lists the workloads of a snapshot in order.
func (s Snapshot) Workloads() []string {
	out := make([]string, 0, len(s.Reservations))
	for wk := range s.Reservations {
		out = append(out, wk)
	}
	sort.Strings(out)
	return out
}

// Get reads one workload's reservation; found is false when it holds none.
func Get(ctx context.Context, kv jetstream.KeyValue, workload string) (Held, bool, error) {
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
	e, err := kv.Get(ctx, ReservationKey(workload))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Held{}, false, nil
	}
	if err != nil {
		return Held{}, false, fmt.Errorf("read reservation of %s: %w", workload, err)
	}
	c, err := Parse(e)
	if err != nil {
		return Held{}, false, err
	}
	return Held{Reservation: *c.Reservation, Revision: c.Revision}, true, nil
}

// markerTTL is how long the marker a release leaves stays in the bucket:
// watches that are live see it; one started later never sees the key. It
// keeps the bucket from growing with every workload that ever ran.
const markerTTL = 15 * time.Minute

// Release removes a workload's reservation. It reports the reservation it
// removed; a workload with no reservation is not an error (releasing twice
// changes nothing). by names the release (see ReleaseIf).
func (w *Writer) Release(ctx context.Context, kv jetstream.KeyValue, workload, by string) (Reservation, bool, error) {
	return w.ReleaseIf(ctx, kv, workload, by, func(Reservation) bool { return true })
}

// releaseMarker is the body of the delete marker a release leaves.
type releaseMarker struct {
	Released Reservation `json:"released"`
	By       string      `json:"by"`
}

// ReleaseIf is Release of a reservation that match accepts; another
// reservation of the workload (a later admission, or a job of the same
// name created again) is left alone and reported as not released. The
// removal is conditional on the revision match saw, so a reservation
// booked again meanwhile is never removed unseen.
//
// by names the release (the id of the event that asks for it). The marker
// keeps it, so a release tried again after an answer was lost (stored, or
// not) reports what the first attempt did, and its caller announces it.
//
// The removal is a delete marker that expires after markerTTL. The bucket
// keeps one revision per key, so the marker replaces the reservation and
// nothing comes back when it expires. A purge would do the same, but
// costs the server a recount of every consumer's pending messages.
func (w *Writer) ReleaseIf(ctx context.Context, kv jetstream.KeyValue, workload, by string, match func(Reservation) bool) (Reservation, bool, error) {
	for attempt := 0; ; attempt++ {
		h, found, err := Get(ctx, kv, workload)
		if err != nil {
			return Reservation{}, false, err
		}
		if !found {
			return w.releasedBy(ctx, workload, by)
		}
		if !match(h.Reservation) {
			return h.Reservation, false, nil
		}
		m := nats.NewMsg(w.prefix + ReservationKey(workload))
		if m.Data, err = json.Marshal(releaseMarker{Released: h.Reservation, By: by}); err != nil {
			return Reservation{}, false, fmt.Errorf("release reservation of %s: %w", workload, err)
		}
		m.Header.Set(hdrKVOperation, "DEL")
		m.Header.Set(hdrTTL, markerTTL.String())
		_, err = w.writeAt(ctx, m, h.Revision)
		if isWrongLastSequence(err) && attempt < maxRaces {
			continue
		}
		if err != nil {
			return Reservation{}, false, fmt.Errorf("release reservation of %s: %w", workload, err)
		}
		return h.Reservation, true, nil
	}
}

// releasedBy reports the release named by, if it is the last thing that
// happened to the workload's reservation key.
func (w *Writer) releasedBy(ctx context.Context, workload, by string) (Reservation, bool, error) {
	if by == "" {
		return Reservation{}, false, nil
	}
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
	stream, err := w.js.Stream(ctx, "KV_"+Bucket)
	if err != nil {
		return Reservation{}, false, fmt.Errorf("read the release of %s: %w", workload, err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, w.prefix+ReservationKey(workload))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Reservation{}, false, nil
	}
	if err != nil {
		return Reservation{}, false, fmt.Errorf("read the release of %s: %w", workload, err)
	}
	var m releaseMarker
	if msg.Header.Get(hdrKVOperation) != "DEL" || json.Unmarshal(msg.Data, &m) != nil || m.By != by {
		return Reservation{}, false, nil
	}
	return m.Released, true, nil
}

// Update rewrites a workload's reservation with change, which edits it in
// place and reports whether to write (false: nothing to do, e.g. another
// admission). It never changes the quota held, so it leaves the tree's
// revision alone; it is conditional on the revision read, and read again
// when another writer moved first. It reports the reservation as written
// (or as found) and whether it wrote.
func (w *Writer) Update(ctx context.Context, kv jetstream.KeyValue, workload string, change func(*Reservation) bool) (Held, bool, error) {
	for attempt := 0; ; attempt++ {
		h, found, err := Get(ctx, kv, workload)
		if err != nil || !found {
			return h, false, err
		}
		r := h.Reservation
		r.Checks = slices.Clone(r.Checks)
		r.PodSets = slices.Clone(r.PodSets)
		for i := range r.PodSets {
			r.PodSets[i].Flavors = maps.Clone(r.PodSets[i].Flavors)
		}
		if !change(&r) {
			return h, false, nil
		}
		if r.ClusterQueue != h.ClusterQueue || !slices.EqualFunc(r.PodSets, h.PodSets, samePodSet) {
			return h, false, fmt.Errorf("update reservation of %s: the quota it holds cannot change", workload)
		}
		m := nats.NewMsg(w.prefix + ReservationKey(workload))
		if m.Data, err = json.Marshal(r); err != nil {
			return h, false, fmt.Errorf("update reservation of %s: %w", workload, err)
		}
		rev, err := w.writeAt(ctx, m, h.Revision)
		if isWrongLastSequence(err) && attempt < maxRaces {
			continue
		}
		if err != nil {
			return h, false, fmt.Errorf("update reservation of %s: %w", workload, err)
		}
		return Held{Reservation: r, Revision: rev}, true, nil
	}
}

// maxRaces bounds how often a conditional write of a reservation key is
// tried again after another writer moved first.
const maxRaces = 20

// writeAt stores m on its key only if the key is still at revision rev,
// and returns the new revision; a lost race is a wrong-last-sequence
// error (isWrongLastSequence).
func (w *Writer) writeAt(ctx context.Context, m *nats.Msg, rev uint64) (uint64, error) {
	m.Header.Set(hdrExpectedSeq, strconv.FormatUint(rev, 10))
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
	ack, err := w.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

func samePodSet(a, b engine.PodSetAssignment) bool {
	return a.Name == b.Name && a.Count == b.Count && maps.Equal(a.Flavors, b.Flavors)
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
