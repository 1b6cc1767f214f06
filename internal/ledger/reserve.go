package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Headers of JetStream's atomic batch publish (nats-server 2.12).
const (
	hdrBatchID       = "Nats-Batch-Id"
	hdrBatchSequence = "Nats-Batch-Sequence"
	hdrBatchCommit   = "Nats-Batch-Commit"
	hdrExpectedSeq   = "Nats-Expected-Last-Subject-Sequence"
	hdrKVOperation   = "KV-Operation"
	hdrTTL           = "Nats-TTL"
)

// commitWait bounds the wait for a batch's commit to be answered.
const commitWait = 5 * time.Second

// MaxBatch is how many reservations one atomic batch books at most: the
// server's default limit of 1,000 messages per batch, less the tree key.
// Reserve splits larger sets into chained batches.
const MaxBatch = 999

// Writer books and releases reservations. It publishes into the bucket's
// stream, which Setup (internal/bus) opens to atomic batches and to
// per-message TTLs, and keeps at one revision per key.
type Writer struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	prefix string
}

// NewWriter returns the writer of the ledger in js's bucket.
func NewWriter(js jetstream.JetStream) *Writer {
	return &Writer{js: js, nc: js.Conn(), prefix: "$KV." + Bucket + "."}
}

// Booked is the outcome of Reserve: the tree key's new revision, and the
// revision of each reservation's key.
type Booked struct {
	Tree         uint64
	Reservations map[string]uint64
}

// Reserve books reservations (by workload) in tree, if the tree's key is
// still at revision rev (0: never written). The tree key and the
// reservations are stored together or not at all; a lost race is
// ErrConflict. More than MaxBatch reservations are booked in several
// batches, each checked against the one before; should a later one fail,
// the earlier ones stand and Booked says which were booked.
func (w *Writer) Reserve(ctx context.Context, tree string, rev uint64, res map[string]Reservation) (Booked, error) {
	return w.ReserveAt(ctx, tree, rev, res, nil)
}

// ReserveAt is Reserve where some reservations replace one held at a
// known revision (at, by workload): a workload moved to other domains
// keeps its quota, and its reservation is rewritten only if it is still
// the one read (a release meanwhile wins). A lost race is ErrConflict.
func (w *Writer) ReserveAt(ctx context.Context, tree string, rev uint64, res map[string]Reservation, at map[string]uint64) (Booked, error) {
	b := Booked{Tree: rev, Reservations: map[string]uint64{}}
	wks := make([]string, 0, len(res))
	for wk := range res {
		wks = append(wks, wk)
	}
	sort.Strings(wks)
	treeKey := TreeKey(tree)
	treeVal, _ := json.Marshal(treeValue{})
	for len(wks) > 0 {
		chunk := wks[:min(len(wks), MaxBatch)]
		wks = wks[len(chunk):]
		// The tree key comes last: a reader that has seen a tree's
		// revision has seen every reservation booked up to it, so a writer
		// can only pass the check with a complete view of the tree.
		msgs := make([]*nats.Msg, 0, len(chunk)+1)
		for _, wk := range chunk {
			data, err := json.Marshal(res[wk])
			if err != nil {
				return b, fmt.Errorf("encode reservation of %s: %w", wk, err)
			}
			m := nats.NewMsg(w.prefix + ReservationKey(wk))
			m.Data = data
			if r, ok := at[wk]; ok {
				m.Header.Set(hdrExpectedSeq, strconv.FormatUint(r, 10))
			}
			msgs = append(msgs, m)
		}
		tail := nats.NewMsg(w.prefix + treeKey)
		tail.Data = treeVal
		tail.Header.Set(hdrExpectedSeq, strconv.FormatUint(b.Tree, 10))
		msgs = append(msgs, tail)
		first, err := w.publishBatch(ctx, msgs)
		if err != nil {
			return b, fmt.Errorf("book %d reservations in %s at revision %d: %w", len(chunk), treeKey, b.Tree, err)
		}
		for i, wk := range chunk {
			b.Reservations[wk] = first + uint64(i)
		}
		b.Tree = first + uint64(len(chunk))
	}
	return b, nil
}

// publishBatch stores msgs as one atomic batch and returns the stream
// sequence of the first.
func (w *Writer) publishBatch(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	id := nuid.Next()
	for i, m := range msgs {
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSequence, strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			// Staged by the server in order; the commit's answer says
			// whether all arrived.
			if err := w.nc.PublishMsg(m); err != nil {
				return 0, err
			}
		}
	}
	last := msgs[len(msgs)-1]
	last.Header.Set(hdrBatchCommit, "1")
	// The answer may never come (the stream's leader went away with the
	// batch): the caller learns from the ledger's watch what was stored.
	rctx, cancel := context.WithTimeout(ctx, commitWait)
	defer cancel()
	reply, err := w.nc.RequestMsgWithContext(rctx, last)
	if err != nil {
		return 0, fmt.Errorf("commit of batch %s: %w", id, err)
	}
	var ack struct {
		Sequence  uint64 `json:"seq"`
		BatchSize int    `json:"count"`
		Error     *struct {
			Code        int    `json:"code"`
			ErrCode     uint16 `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return 0, fmt.Errorf("batch answer %q: %w", reply.Data, err)
	}
	if e := ack.Error; e != nil {
		if c := jetstream.ErrorCode(e.ErrCode); c == jetstream.JSErrCodeStreamWrongLastSequence || c == jetstream.JSErrCodeStreamWrongLastSequenceConstant {
			return 0, fmt.Errorf("%w (%s)", ErrConflict, e.Description)
		}
		return 0, fmt.Errorf("batch refused: %s (%d)", e.Description, e.ErrCode)
	}
	if ack.BatchSize != len(msgs) || ack.Sequence < uint64(len(msgs)) {
		return 0, errors.New("batch answer does not account for every message")
	}
	return ack.Sequence - uint64(len(msgs)) + 1, nil
}

// Migrate moves the reservations an older Sluice kept in a tree key's
// value to their own keys, tree by tree, each move one atomic batch
// checked against the tree's revision: a reservation is never held twice
// nor dropped. It returns how many reservations moved. A lost race with
// another replica migrating is not an error: the ledger is read again.
func (w *Writer) Migrate(ctx context.Context, kv jetstream.KeyValue) (int, error) {
	moved := 0
	for attempt := 0; attempt < 5; attempt++ {
		snap, err := Read(ctx, kv)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return moved, err
		}
		legacy, err := legacyTrees(ctx, kv, snap)
		if err != nil {
			return moved, err
		}
		if len(legacy) == 0 {
			return moved, nil
		}
		conflict := false
		for _, t := range legacy {
			n, err := w.migrateTree(ctx, t)
			moved += n
			if errors.Is(err, ErrConflict) {
				conflict = true
				continue
			}
			if err != nil {
				return moved, err
			}
		}
		if !conflict {
			return moved, nil
		}
	}
	return moved, fmt.Errorf("migrate ledger: %w five times", ErrConflict)
}

type legacyTree struct {
	key string
	rev uint64
	res map[string]Reservation
}

// legacyTrees reads the tree keys whose value still holds reservations.
func legacyTrees(ctx context.Context, kv jetstream.KeyValue, snap Snapshot) ([]legacyTree, error) {
	keys := make([]string, 0, len(snap.Trees))
	for k := range snap.Trees {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []legacyTree
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		c, err := Parse(e)
		if err != nil {
			return nil, err
		}
		if len(c.Legacy) > 0 {
			out = append(out, legacyTree{key: k, rev: c.Revision, res: c.Legacy})
		}
	}
	return out, nil
}

func (w *Writer) migrateTree(ctx context.Context, t legacyTree) (int, error) {
	wks := make([]string, 0, len(t.res))
	for wk := range t.res {
		wks = append(wks, wk)
	}
	sort.Strings(wks)
	moved, rev := 0, t.rev
	for len(wks) > 0 {
		chunk := wks[:min(len(wks), MaxBatch)]
		wks = wks[len(chunk):]
		// The tree key keeps what is still to move.
		rest := treeValue{Reservations: map[string]Reservation{}}
		for _, wk := range wks {
			rest.Reservations[wk] = t.res[wk]
		}
		// The reservations come before the tree key that lets go of them,
		// so a watcher never sees a moved reservation missing.
		msgs := make([]*nats.Msg, 0, len(chunk)+1)
		for _, wk := range chunk {
			data, err := json.Marshal(t.res[wk])
			if err != nil {
				return moved, fmt.Errorf("encode reservation of %s: %w", wk, err)
			}
			m := nats.NewMsg(w.prefix + ReservationKey(wk))
			m.Data = data
			msgs = append(msgs, m)
		}
		tail := nats.NewMsg(w.prefix + t.key)
		tail.Data, _ = json.Marshal(rest)
		tail.Header.Set(hdrExpectedSeq, strconv.FormatUint(rev, 10))
		msgs = append(msgs, tail)
		first, err := w.publishBatch(ctx, msgs)
		if err != nil {
			return moved, fmt.Errorf("migrate %s: %w", t.key, err)
		}
		moved += len(chunk)
		rev = first + uint64(len(chunk))
	}
	return moved, nil
}
