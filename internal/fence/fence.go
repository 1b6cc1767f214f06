// Package fence orders the start of an admitted workload against its stop.
//
// The integration that starts a job and the services that decide to stop it
// (preemption, draining) are different processes, so nothing else orders
// "unsuspend the job" against "announce that it is preempted". Without an
// order, a job can be unsuspended after its preemption was announced and
// its quota given away, and run beyond its cohort's quota. The fence is
// one JetStream KV key per workload, moved only by compare-and-set, that
// says what the workload's current admission (named by its reservation's
// admission time) is doing:
//
//	(none) ──BeginStart──▶ starting ──EndStart──▶ started
//	   │                      │                      │
//	   └────────Stop──────────┼──────────Stop────────┘
//	                          ▼ (refused: ErrStarting)
//	                       stopping
//
// A start is refused once the admission is stopping (ErrStopping), and a
// stop waits while a start is in flight (ErrStarting), so an admission's
// `started` never follows its `preempted`. A new admission of the same
// workload replaces the state of the old one. When the job finishes or is
// deleted its admission becomes finished, and a stop of it is refused
// (ErrFinished): nothing is preempted after it ended. A stop names the
// decision it carries out; an admission is stopped by one decision only
// (ErrStopTaken), and never once the workload was admitted again
// (ErrSuperseded). Finished keys are
// collected a while later (Collect).
package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
)

// Bucket is the KV bucket holding one key per workload.
const Bucket = "sluice-fence"

// Phase of an admission.
type Phase string

// Phases.
const (
	Starting Phase = "starting"
	Started  Phase = "started"
	Stopping Phase = "stopping"
	Finished Phase = "finished"
)

// Errors of the fence.
var (
	// ErrStopping: the admission is being stopped; it must not start.
	ErrStopping = errors.New("admission is being stopped")
	// ErrStarting: a start of the admission is in flight; a stop must
	// wait until it is announced.
	ErrStarting = errors.New("admission is starting")
	// ErrFinished: the job ended; there is nothing left to stop.
	ErrFinished = errors.New("admission ended with its job")
	// ErrContended: the key kept changing under the compare-and-set.
	ErrContended = errors.New("fence key contended")
	// ErrSuperseded: the workload was admitted again since; the stop of
	// an admission that is over is void.
	ErrSuperseded = errors.New("admission superseded by a later one")
	// ErrStopTaken: another decision (another preemptor, an eviction)
	// already stops the admission; it is stopped, and announced, once.
	ErrStopTaken = errors.New("admission already being stopped by another decision")
	// ErrCorrupt: the stored value cannot be read. Nothing that depends
	// on it moves (no start, no stop) until it is repaired: read as no
	// fence, it would let a preempted admission start again. Only the
	// end of the job may overwrite it (Finish). Repair: delete the key.
	ErrCorrupt = errors.New("fence value cannot be read")
)

// State is the stored value.
type State struct {
	// Admission names the admission: its reservation's admission time.
	Admission string `json:"admission"`
	Phase     Phase  `json:"phase"`
	// UID of the job that finished (Finished only), so that a stale view
	// of it is never queued again.
	UID string `json:"uid,omitempty"`
	// StopID is the id of the announcement of the stop (Stopping only):
	// the decision that stops the admission. A redelivered decision
	// carries the same id and may announce again (the stream drops the
	// duplicate); any other decision to stop it is refused.
	StopID string `json:"stopId,omitempty"`
	// End is how the job ended (Finished only), kept until the end is
	// announced for good: a replica that takes over after a crash between
	// the two announces it from here.
	End *End `json:"end,omitempty"`
	// Ready is whether the admission's pods are all ready (Started only),
	// as the job integration last saw it; written only while
	// waitForPodsReady is on.
	Ready *Readiness `json:"ready,omitempty"`
	// Requeue is waitForPodsReady's memory of the workload across its
	// admissions (kept by every move but Finish), so that a restarted
	// admission service keeps its backoff and its count.
	Requeue *Requeue `json:"requeue,omitempty"`
	// EverStarted: an admission of the workload has started before (kept
	// by every move but Finish), so that the first start, which ends the
	// workload's admission-latency trace, is told from later ones.
	EverStarted bool `json:"everStarted,omitempty"`
	// ClusterQueue is the ClusterQueue of the admission last started
	// (kept by every move but Finish), so that a job that ends after its
	// reservation was released still names where it ran.
	ClusterQueue string `json:"clusterQueue,omitempty"`
}

// carried is what every move but Finish keeps of cur, across admissions.
func carried(cur State) State {
	return State{Requeue: cur.Requeue, EverStarted: cur.EverStarted, ClusterQueue: cur.ClusterQueue}
}

// Readiness is whether an admission's pods are all ready, since At.
type Readiness struct {
	Ready bool      `json:"ready"`
	At    time.Time `json:"at"`
}

// Requeue is how often a workload was requeued after a PodsReadyTimeout,
// until when it backs off (after a timeout or an admission check's Retry),
// and why it was deactivated, if it was.
type Requeue struct {
	Count       int32     `json:"count"`
	At          time.Time `json:"at,omitempty"`
	Deactivated string    `json:"deactivated,omitempty"`
	// Why holds the workload back until At, when it was not a
	// PodsReadyTimeout (an admission check asked to retry).
	Why string `json:"why,omitempty"`
	// Executed is how long the workload's ended admissions ran toward its
	// maximum execution time, in nanoseconds.
	Executed time.Duration `json:"executed,omitempty"`
	// Reactivations counts the times a user reactivated the workload
	// after it was deactivated (Reactivate); each resets the rest.
	// Reactivation is the value of the job's reactivate annotation last
	// taken.
	Reactivations int32  `json:"reactivations,omitempty"`
	Reactivation  string `json:"reactivation,omitempty"`
}

// End is the announcement of a job's end.
type End struct {
	// Deleted: the object went away, or left its queue (Reason says
	// which); otherwise it finished.
	Deleted      bool   `json:"deleted,omitempty"`
	Reason       string `json:"reason,omitempty"`
	ClusterQueue string `json:"clusterQueue,omitempty"`
	Succeeded    bool   `json:"succeeded,omitempty"`
	Message      string `json:"message,omitempty"`
}

// KV is the part of a JetStream KV bucket the fence uses.
type KV interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
}

// maxAttempts bounds the compare-and-set loop; two writers per workload
// (an integration and a stopper) settle in one or two.
const maxAttempts = 8

// Get returns the workload's state; the zero State if there is none. It
// reads the value alone (bus.Value): a state read needs no revision.
func Get(ctx context.Context, kv KV, key string) (State, error) {
	if m, ok := kv.(*memoKV); ok {
		kv = m.KV // a read is of the bucket, never of the memory
	}
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
	v, err := bus.Value(ctx, kv, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("fence %s: read: %w", key, err)
	}
	return decode(key, v)
}

func read(ctx context.Context, kv KV, key string) (State, uint64, error) {
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return State{}, 0, nil
	}
	if err != nil {
		return State{}, 0, fmt.Errorf("fence %s: read: %w", key, err)
	}
	st, err := decode(key, e.Value())
	return st, e.Revision(), err
}

// decode reads a stored fence; an empty value is the zero State, one that
// does not decode is ErrCorrupt (and reported).
func decode(key string, v []byte) (State, error) {
	var st State
	if len(v) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(v, &st); err != nil {
		bus.ReportUnreadable("fence")
		return State{}, fmt.Errorf("fence %s: %w: %v", key, ErrCorrupt, err)
	}
	return st, nil
}

// move applies next to the current state with compare-and-set, retrying
// when another writer moved first. next returns the new state, or
// ok=false to leave it as it is, or an error to refuse.
func move(ctx context.Context, kv KV, key string, next func(State) (State, bool, error)) (State, error) {
	return moveFrom(ctx, kv, key, false, next)
}

// moveFrom is move that, with overCorrupt, takes an unreadable value for
// no fence and replaces it.
//
// Through a KV from Remember, the first attempt starts from the state and
// revision this process last wrote, without a read. The write of a state
// that another writer changed since is refused (compare-and-set) and the
// next attempt reads; a decision not to write, or a refusal, taken on a
// remembered state is taken again on a read, so what a move answers is
// never older than the bucket.
func moveFrom(ctx context.Context, kv KV, key string, overCorrupt bool, next func(State) (State, bool, error)) (State, error) {
	mem, _ := kv.(*memoKV)
	for attempt := range maxAttempts {
		var (
			cur        State
			rev        uint64
			remembered bool
			err        error
		)
		if attempt == 0 {
			cur, rev, remembered = mem.recall(key)
		}
		if !remembered {
			cur, rev, err = read(ctx, kv, key)
			if err != nil && !(overCorrupt && errors.Is(err, ErrCorrupt)) {
				return cur, err
			}
		}
		want, ok, err := next(cur)
		if err != nil || !ok {
			if remembered {
				continue
			}
			return cur, err
		}
		b, err := json.Marshal(want)
		if err != nil {
			return cur, fmt.Errorf("fence %s: encode: %w", key, err)
		}
		var written uint64
		if rev == 0 {
			written, err = kv.Create(ctx, key, b)
		} else {
			written, err = kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			mem.keep(key, want, written)
			return want, nil
		}
		mem.forget(key)
		if !bus.IsRevisionConflict(err) {
			return cur, fmt.Errorf("fence %s: write: %w", key, err)
		}
	}
	return State{}, fmt.Errorf("fence %s: %w", key, ErrContended)
}

// Remember returns kv with a memory of the states written through it, for
// the moves of one process (moveFrom): the integration moves each admitted
// workload's fence three times (begin and end of its start, its finish),
// and each move read the key first, about an eighth of the requests the
// services make per Job. A finished fence is not kept: it is the last move
// of most workloads, and the key is collected a while later.
func Remember(kv KV) KV {
	return &memoKV{KV: kv, states: map[string]memo{}}
}

type memoKV struct {
	KV
	mu     sync.Mutex
	states map[string]memo
}

type memo struct {
	st  State
	rev uint64
}

func (m *memoKV) recall(key string) (State, uint64, bool) {
	if m == nil {
		return State{}, 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.states[key]
	return e.st, e.rev, ok
}

func (m *memoKV) keep(key string, st State, rev uint64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.Phase == Finished {
		delete(m.states, key)
		return
	}
	m.states[key] = memo{st: st, rev: rev}
}

func (m *memoKV) forget(key string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.states, key)
}

// Delete deletes the key and forgets its state.
func (m *memoKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	m.forget(key)
	return m.KV.Delete(ctx, key, opts...)
}

// BeginStart claims the start of an admission. It refuses with
// ErrStopping once the admission is being stopped; for an admission
// already starting or started it succeeds again (a retried start).
// clusterQueue is the admission's ClusterQueue.
func BeginStart(ctx context.Context, kv KV, key, admission, clusterQueue string) (State, error) {
	return move(ctx, kv, key, func(cur State) (State, bool, error) {
		if cur.Admission == admission {
			switch cur.Phase {
			case Stopping, Finished:
				return cur, false, fmt.Errorf("fence %s: admission %s: %w", key, admission, ErrStopping)
			case Starting, Started:
				return cur, false, nil
			}
		}
		next := carried(cur)
		next.Admission, next.Phase = admission, Starting
		if clusterQueue != "" {
			next.ClusterQueue = clusterQueue
		}
		return next, true, nil
	})
}

// EndStart records that the start was applied and announced.
func EndStart(ctx context.Context, kv KV, key, admission string) error {
	_, err := EndStartFirst(ctx, kv, key, admission)
	return err
}

// EndStartFirst is EndStart that also reports whether this was the
// workload's first start.
func EndStartFirst(ctx context.Context, kv KV, key, admission string) (first bool, err error) {
	_, err = move(ctx, kv, key, func(cur State) (State, bool, error) {
		first = false // set by the attempt that writes
		if cur.Admission != admission || cur.Phase != Starting {
			return cur, false, nil
		}
		first = !cur.EverStarted
		next := carried(cur)
		next.Admission, next.Phase, next.EverStarted = admission, Started, true
		return next, true, nil
	})
	return first && err == nil, err
}

// AbortStart gives up a start that was claimed but not applied, so that a
// stop need not wait for it.
func AbortStart(ctx context.Context, kv KV, key, admission string) error {
	_, err := move(ctx, kv, key, func(cur State) (State, bool, error) {
		if cur.Admission != admission || cur.Phase != Starting {
			return cur, false, nil
		}
		next := carried(cur)
		next.Admission = admission
		return next, true, nil
	})
	return err
}

// Stop marks an admission as being stopped by the decision announced with
// stopID, after which it never starts. It refuses with ErrStarting while
// a start is in flight (the caller retries shortly: the start ends within
// one API write), with ErrFinished once its job ended, with ErrSuperseded
// when the workload was admitted again since (a decision made on a stale
// view), and with ErrStopTaken when another decision stops it already.
// The same decision stopping it again succeeds, so a redelivered decision
// can announce what a crash left unannounced.
func Stop(ctx context.Context, kv KV, key, admission, stopID string, opts ...StopOption) error {
	var o stopOptions
	for _, opt := range opts {
		opt(&o)
	}
	_, err := move(ctx, kv, key, func(cur State) (State, bool, error) {
		rq := cur.Requeue
		if o.requeue != nil {
			rq = o.requeue
		}
		if cur.Phase == Finished && o.uid != "" && cur.UID == o.uid {
			// The job ended, whichever admission its end was recorded
			// under (the replica that saw the end may not have seen the
			// latest reservation yet).
			return cur, false, fmt.Errorf("fence %s: admission %s: job %s ended: %w", key, admission, o.uid, ErrFinished)
		}
		if cur.Admission == admission {
			switch cur.Phase {
			case Starting:
				return cur, false, fmt.Errorf("fence %s: admission %s: %w", key, admission, ErrStarting)
			case Finished:
				return cur, false, fmt.Errorf("fence %s: admission %s: %w", key, admission, ErrFinished)
			case Stopping:
				if cur.StopID != "" && cur.StopID != stopID {
					return cur, false, fmt.Errorf("fence %s: admission %s: %w", key, admission, ErrStopTaken)
				}
				if o.requeue == nil || (cur.Requeue != nil && *cur.Requeue == *o.requeue) {
					return cur, false, nil
				}
				cur.Requeue = o.requeue
				return cur, true, nil
			}
		} else if later(cur.Admission, admission) {
			return cur, false, fmt.Errorf("fence %s: admission %s (now %s): %w", key, admission, cur.Admission, ErrSuperseded)
		}
		next := carried(cur)
		next.Admission, next.Phase, next.StopID, next.Requeue = admission, Stopping, stopID, rq
		return next, true, nil
	})
	return err
}

// Reactivate takes the value of a job's reactivate annotation: when it is
// new and the workload is deactivated, its requeue state starts over
// (count, backoff, why and time run toward a maximum execution time),
// with one more reactivation, and reactivated is true; a new value while
// the workload is active is only remembered, so that it cannot reactivate
// a later deactivation. A workload with no requeue state was never
// deactivated: nothing is written.
func Reactivate(ctx context.Context, kv KV, key, token string) (reactivated bool, err error) {
	_, err = move(ctx, kv, key, func(cur State) (State, bool, error) {
		reactivated = false
		rq := cur.Requeue
		if rq == nil || cur.Phase == Finished || rq.Reactivation == token {
			return cur, false, nil
		}
		next := *rq
		next.Reactivation = token
		if rq.Deactivated != "" {
			next = Requeue{Reactivations: rq.Reactivations + 1, Reactivation: token}
			reactivated = true
		}
		cur.Requeue = &next
		return cur, true, nil
	})
	return reactivated, err
}

// Deactivate records that a user deactivated the workload (its job's
// active annotation is "false"), with why, unless it is deactivated
// already: admission evicts it if it is admitted and admits it no more
// until it is reactivated (Reactivate).
func Deactivate(ctx context.Context, kv KV, key, why string) (deactivated bool, err error) {
	_, err = move(ctx, kv, key, func(cur State) (State, bool, error) {
		deactivated = false
		if cur.Phase == Finished || (cur.Requeue != nil && cur.Requeue.Deactivated != "") {
			return cur, false, nil
		}
		var next Requeue
		if cur.Requeue != nil {
			next = *cur.Requeue
		}
		next.Deactivated = why
		cur.Requeue = &next
		deactivated = true
		return cur, true, nil
	})
	return deactivated, err
}

// StopOption tunes Stop.
type StopOption func(*stopOptions)

type stopOptions struct {
	requeue *Requeue
	uid     string
}

// OfJob names the UID of the job whose admission is stopped: once that
// job ended, no admission of it is stopped.
func OfJob(uid string) StopOption { return func(o *stopOptions) { o.uid = uid } }

// WithRequeue records the workload's requeue state with the stop, for a
// stop caused by a PodsReadyTimeout.
func WithRequeue(r Requeue) StopOption { return func(o *stopOptions) { o.requeue = &r } }

// SetReady records whether the pods of a started admission are all ready.
// It does nothing for another admission or phase, or when nothing changed.
func SetReady(ctx context.Context, kv KV, key, admission string, ready bool, at time.Time) error {
	_, err := move(ctx, kv, key, func(cur State) (State, bool, error) {
		// No readiness means not ready: only a change is written.
		was := cur.Ready != nil && cur.Ready.Ready
		if cur.Admission != admission || cur.Phase != Started || was == ready {
			return cur, false, nil
		}
		cur.Ready = &Readiness{Ready: ready, At: at.UTC()}
		return cur, true, nil
	})
	return err
}

// later reports whether admission a is known to come after b. Admissions
// are named by their reservation's admission time (RFC 3339); names that
// are not times have no order.
func later(a, b string) bool {
	ta, errA := time.Parse(time.RFC3339Nano, a)
	tb, errB := time.Parse(time.RFC3339Nano, b)
	return errA == nil && errB == nil && ta.After(tb)
}

// Finish records that the job of an admission ended (finished or was
// deleted), before the end is announced, so that no stop of the admission
// is announced after it. end (optional) is the announcement to make.
func Finish(ctx context.Context, kv KV, key, admission, uid string, end *End) error {
	// The job ended: whatever the fence said, nothing of it may start or
	// stop again, which Finished says; an unreadable value is replaced.
	_, err := moveFrom(ctx, kv, key, true, func(cur State) (State, bool, error) {
		if cur.Admission == admission && cur.Phase == Finished && cur.UID == uid && (end == nil || cur.End != nil) {
			return cur, false, nil
		}
		return State{Admission: admission, Phase: Finished, UID: uid, End: end}, true, nil
	})
	return err
}

// Reopen lets a job whose workload ended without the job ending (it left
// its queue, or moved to another) be queued again: the fence of that end,
// for a job of uid, is cleared, so that a new workload of the same job is
// fenced afresh. It returns the end it cleared (nil when the fence was
// not such an end: a job that finished or was deleted is never reopened).
func Reopen(ctx context.Context, kv KV, key, uid string, reopenable func(End) bool) (*End, error) {
	var ended *End
	_, err := move(ctx, kv, key, func(cur State) (State, bool, error) {
		if cur.Phase != Finished || cur.UID != uid || cur.End == nil || !reopenable(*cur.End) {
			ended = nil
			return cur, false, nil
		}
		ended = cur.End
		// The ended admission is kept: a late start of it still finds
		// it, and starts nothing without a reservation of the new UID.
		return State{Admission: cur.Admission}, true, nil
	})
	if err != nil {
		return nil, err
	}
	return ended, nil
}

// Lister is the part of a KV bucket Collect walks.
type Lister interface {
	KV
	ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
}

// Collect deletes the keys of admissions that finished longer than age
// ago, so the bucket holds only live workloads. A key written again since
// it was read is left, and so is one an option keeps (the caller knows of
// work that may still read it). In a bucket opened with bus.OpenKV the
// deletions' markers expire (bus.Remove), and the keys go with them.
func Collect(ctx context.Context, kv Lister, age time.Duration, now time.Time, opts ...CollectOption) (int, error) {
	var o collectOptions
	for _, opt := range opts {
		opt(&o)
	}
	// Only the fences old enough to go are kept from the walk: the bucket
	// holds one per workload, and is read a page at a time.
	type candidate struct {
		key      string
		st       State
		revision uint64
		finished time.Time
	}
	var old []candidate
	err := bus.EachEntry(ctx, kv, func(e jetstream.KeyValueEntry) error {
		var st State
		if json.Unmarshal(e.Value(), &st) == nil && st.Phase == Finished && now.Sub(e.Created()) >= age {
			old = append(old, candidate{key: e.Key(), st: st, revision: e.Revision(), finished: e.Created()})
		}
		return nil
	})
	n := 0
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("fence: read the bucket: %w", err))
	}
	for _, c := range old {
		k := c.key
		if o.keep != nil {
			keep, err := o.keep(ctx, k, c.st, c.finished)
			if err != nil {
				errs = append(errs, fmt.Errorf("fence %s: %w", k, err))
			}
			if keep || err != nil {
				continue
			}
		}
		if err := bus.Remove(ctx, kv, k, c.revision); err != nil {
			if !bus.IsRevisionConflict(err) {
				errs = append(errs, fmt.Errorf("fence %s: delete: %w", k, err))
			}
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// CollectOption tunes Collect.
type CollectOption func(*collectOptions)

type collectOptions struct {
	keep func(ctx context.Context, key string, st State, finished time.Time) (bool, error)
}

// KeepIf keeps every finished key for which keep says so (or fails), for
// as long as it does: keep is given the key, its state and when it
// finished.
func KeepIf(keep func(ctx context.Context, key string, st State, finished time.Time) (bool, error)) CollectOption {
	return func(o *collectOptions) { o.keep = keep }
}
