package usage

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/supervise"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// Tracker follows the workload records, the quota ledger and the fences,
// and keeps of each only what a report counts: a workload's LocalQueue and
// per pod set its requests in canonical amounts, a reservation's
// ClusterQueue, counts and flavors, and which workloads are deactivated.
// Each change is decoded once, as it comes; a report is a pass over those
// compact entries (reading the buckets for each report decoded
// every record every few seconds: 100,000 of them at full scale).
//
// The trackers running over one connection share what they keep: one
// process running quota and the watcher (sluice dev) follows the buckets
// and holds the entries once.
type Tracker struct {
	js  jetstream.JetStream
	log zerolog.Logger
	// books is what the trackers of the connection keep; Run sets it
	// before it closes synced.
	books atomic.Pointer[books]
}

// books is what a tracker keeps of the buckets.
type books struct {
	log zerolog.Logger

	mu   sync.Mutex
	wls  map[string]tracked
	held map[string]ledger.Reservation
	// deactivated are the workloads waitForPodsReady or a rejecting
	// admission check took out of line: not pending (Kueue's count).
	deactivated map[string]bool
	// stopping is, per workload whose fence stops an admission, that
	// admission (Settled).
	stopping map[string]string
	// names interns LocalQueue names, which many workloads share.
	names map[string]string
}

// tracked is what a report needs of one workload record.
type tracked struct {
	localQueue string // namespace/name
	uid        string // the job's, as the record names it
	podSets    []trackedPodSet
}

type trackedPodSet struct {
	name     string
	requests []amount
}

type amount struct {
	resource string
	v        int64
}

// NewTracker returns a tracker; Run feeds it.
func NewTracker(js jetstream.JetStream, log zerolog.Logger) *Tracker {
	return &Tracker{js: js, log: log}
}

// Run follows the three buckets until ctx ends, closing synced once the
// current entries of all are in. The first Run over a connection starts
// following them, the last one to end stops.
func (t *Tracker) Run(ctx context.Context, synced chan<- struct{}) error {
	f := follow(t.js, t.log)
	defer f.release()
	t.books.Store(f.books)
	select {
	case <-ctx.Done():
		return nil
	case <-f.ended:
		return f.err
	case <-f.synced:
		close(synced)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-f.ended:
		return f.err
	}
}

// follower follows the buckets for the trackers of one connection.
type follower struct {
	nc     *nats.Conn
	books  *books
	users  int // followers.mu
	cancel context.CancelFunc
	synced chan struct{}
	// ended is closed once the buckets are no longer followed; err says
	// why when it was not the last tracker's end.
	ended chan struct{}
	err   error
}

var followers = struct {
	sync.Mutex
	m map[*nats.Conn]*follower
}{m: map[*nats.Conn]*follower{}}

// follow returns the follower of js's connection, started if none runs;
// release gives it back.
func follow(js jetstream.JetStream, log zerolog.Logger) *follower {
	nc := js.Conn()
	followers.Lock()
	defer followers.Unlock()
	if f, ok := followers.m[nc]; ok {
		select {
		case <-f.ended:
			// It failed (a bucket could not be opened): start anew.
		default:
			f.users++
			return f
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{nc: nc, users: 1, cancel: cancel, synced: make(chan struct{}), ended: make(chan struct{}),
		books: &books{log: log, wls: map[string]tracked{}, held: map[string]ledger.Reservation{}, deactivated: map[string]bool{},
			stopping: map[string]string{}, names: map[string]string{}}}
	followers.m[nc] = f
	go func() {
		defer close(f.ended)
		f.err = f.books.follow(ctx, js, f.synced)
	}()
	return f
}

// release gives back a follower follow returned; the last one out stops
// it.
func (f *follower) release() {
	followers.Lock()
	f.users--
	stop := f.users == 0
	if stop && followers.m[f.nc] == f {
		delete(followers.m, f.nc)
	}
	followers.Unlock()
	if stop {
		f.cancel()
		<-f.ended
	}
}

// follow applies the three buckets' entries until ctx ends, closing
// synced once the current entries of all are in.
func (t *books) follow(ctx context.Context, js jetstream.JetStream, synced chan<- struct{}) error {
	kvs, _, err := bus.OpenBuckets(ctx, js, false, workloads.Bucket, ledger.Bucket, fence.Bucket)
	if err != nil {
		return err
	}
	wkv, lkv, fkv := kvs[0], kvs[1], kvs[2]
	wSynced, lSynced, fSynced := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		for _, c := range []chan struct{}{wSynced, lSynced, fSynced} {
			select {
			case <-c:
			case <-ctx.Done():
				return
			}
		}
		close(synced)
	}()
	opts := []bus.WatchOption{bus.WithWatchLogger(t.log)}
	sup := supervise.New(ctx, supervise.WithLogger(t.log))
	sup.Go("records", func(ctx context.Context) error {
		return bus.WatchKV(ctx, wkv, wSynced, func(e jetstream.KeyValueEntry, _ bool) { t.applyRecord(e) }, opts...)
	})
	sup.Go("ledger", func(ctx context.Context) error {
		return bus.WatchKV(ctx, lkv, lSynced, func(e jetstream.KeyValueEntry, _ bool) { t.applyLedger(e) }, opts...)
	})
	sup.Go("fences", func(ctx context.Context) error {
		return bus.WatchKV(ctx, fkv, fSynced, func(e jetstream.KeyValueEntry, _ bool) { t.applyFence(e) }, opts...)
	})
	if err := sup.Wait(); err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	return nil
}

func (t *books) applyRecord(e jetstream.KeyValueEntry) {
	key := workloads.EngineKeyFromKV(e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		t.mu.Lock()
		delete(t.wls, key)
		t.mu.Unlock()
		return
	}
	// Only the fields counted are decoded.
	var rec struct {
		Workload struct {
			Namespace string `json:"namespace"`
			UID       string `json:"uid"`
		} `json:"workload"`
		LocalQueue string `json:"localQueue"`
		PodSets    []struct {
			Name     string            `json:"name"`
			Requests map[string]string `json:"requests"`
		} `json:"podSets"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		// Admission refuses and reports such a record; it is not counted.
		t.log.Debug().Err(err).Str("workload", key).Msg("unreadable workload record left out of usage")
		return
	}
	tr := tracked{uid: rec.Workload.UID, podSets: make([]trackedPodSet, 0, len(rec.PodSets))}
	for _, ps := range rec.PodSets {
		tr.podSets = append(tr.podSets, trackedPodSet{name: ps.Name, requests: parse(ps.Requests)})
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	lq := rec.Workload.Namespace + "/" + rec.LocalQueue
	if n, ok := t.names[lq]; ok {
		lq = n
	} else {
		t.names[lq] = lq
	}
	tr.localQueue = lq
	t.wls[key] = tr
}

func (t *books) applyLedger(e jetstream.KeyValueEntry) {
	c, err := ledger.Parse(e)
	if err != nil || c.Workload == "" {
		// A tree's revision key, or an entry admission reports as
		// corrupt. (An older Sluice's reservations in a tree's value
		// are moved to their own keys when admission starts.)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.Reservation == nil {
		delete(t.held, c.Workload)
		return
	}
	t.held[c.Workload] = *c.Reservation
}

// applyFence notes whether a workload is deactivated, and which
// admission its fence stops; only those parts of it are decoded.
func (t *books) applyFence(e jetstream.KeyValueEntry) {
	key := workloads.EngineKeyFromKV(e.Key())
	var st struct {
		Admission string      `json:"admission"`
		Phase     fence.Phase `json:"phase"`
		Requeue   *struct {
			Deactivated string `json:"deactivated"`
		} `json:"requeue"`
	}
	put := e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &st) == nil
	t.mu.Lock()
	defer t.mu.Unlock()
	if put && st.Phase == fence.Stopping {
		t.stopping[key] = st.Admission
	} else {
		delete(t.stopping, key)
	}
	if !put || st.Requeue == nil || st.Requeue.Deactivated == "" {
		delete(t.deactivated, key)
		return
	}
	t.deactivated[key] = true
}

// Settled says whether, as far as the entries applied so far show, the
// reservation of workload wk for the given admission of the job uid
// needs nothing from reconciliation: the job's record is there and its
// fence does not stop that admission. It may be behind the buckets, so
// only a false answer is worth a look at them: a true one that is stale
// delays a release to the next reconciliation, never frees quota in use.
func (t *Tracker) Settled(wk, uid, admission string) bool {
	b := t.books.Load()
	return b != nil && b.settled(wk, uid, admission)
}

func (t *books) settled(wk, uid, admission string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.wls[wk]
	if !ok || uid == "" || w.uid != uid {
		return false
	}
	stops, ok := t.stopping[wk]
	return !ok || stops != admission
}

// Report is the usage as of the entries applied so far. lqToCQ maps a
// LocalQueue (namespace/name) to its ClusterQueue, for counting the
// pending workloads of ClusterQueues.
func (t *Tracker) Report(lqToCQ map[string]string) Report {
	rep := Report{ClusterQueues: map[string]*Queue{}, LocalQueues: map[string]*Queue{}}
	if b := t.books.Load(); b != nil {
		b.report(rep, lqToCQ)
	}
	return rep
}

func (t *books) report(rep Report, lqToCQ map[string]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for wk, r := range t.held {
		cq := get(rep.ClusterQueues, r.ClusterQueue)
		cq.Admitted++
		w, known := t.wls[wk]
		lqKey := w.localQueue
		if n, ok := workloads.ParseEngine(wk); ok && r.LocalQueue != "" {
			lqKey = n.Namespace + "/" + r.LocalQueue
		}
		var lq *Queue
		if lqKey != "" {
			lq = get(rep.LocalQueues, lqKey)
			lq.Admitted++
		}
		for _, pa := range r.PodSets {
			// A reservation carries its requests; one booked by an
			// older Sluice has them in the workload's record only.
			reqs := parse(r.Requests[pa.Name])
			if reqs == nil && known {
				for _, ps := range w.podSets {
					if ps.name == pa.Name {
						reqs = ps.requests
					}
				}
			}
			for _, a := range reqs {
				// Saturated: reported, never enforced; admission never
				// books an amount it cannot count.
				v, _ := engine.MulAmount(a.v, int64(pa.Count))
				cq.add(pa.Flavors[a.resource], a.resource, v)
				if lq != nil {
					lq.add(pa.Flavors[a.resource], a.resource, v)
				}
			}
		}
	}
	for wk, w := range t.wls {
		if _, ok := t.held[wk]; ok || t.deactivated[wk] {
			continue
		}
		get(rep.LocalQueues, w.localQueue).Pending++
		if cq, ok := lqToCQ[w.localQueue]; ok {
			get(rep.ClusterQueues, cq).Pending++
		}
	}
}

// parse turns requests as quantity strings into canonical amounts, leaving
// out any that does not parse (admission refuses those workloads).
func parse(reqs map[string]string) []amount {
	if len(reqs) == 0 {
		return nil
	}
	out := make([]amount, 0, len(reqs))
	for res, qs := range reqs {
		q, err := resource.ParseQuantity(qs)
		if err != nil {
			continue
		}
		out = append(out, amount{resource: res, v: engine.Canonical(res, q)})
	}
	return out
}
