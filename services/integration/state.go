package integration

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
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// watchKV feeds every entry of a bucket to apply, closing synced once the
// initial values are in, until ctx ends (bus.WatchKV).
func watchKV(ctx context.Context, log zerolog.Logger, kv jetstream.KeyValue, synced chan<- struct{}, apply func(jetstream.KeyValueEntry, bool)) error {
	return bus.WatchKV(ctx, kv, synced, apply, bus.WithWatchLogger(log.With().Str("component", "watch").Logger()))
}

func (s *Service) watchConfig(ctx context.Context, kv jetstream.KeyValue, synced chan<- struct{}) error {
	return watchKV(ctx, s.log, kv, synced, func(e jetstream.KeyValueEntry, live bool) {
		s.mu.Lock()
		if e.Operation() == jetstream.KeyValuePut {
			s.config.Apply(e.Key(), e.Value())
		} else {
			s.config.Apply(e.Key(), nil)
		}
		// The snapshot decodes every object: built when next read, not
		// once per entry, which made reading a bucket of n queues cost
		// n² decodes.
		s.configDirty = true
		s.mu.Unlock()
		if live {
			// A new queue or priority class may unblock objects: look at
			// all of them, once for a burst of changes (requeueOnConfig).
			select {
			case s.reconfigured <- struct{}{}:
			default:
			}
		}
	})
}

// configLocked is the configuration snapshot, rebuilt if an entry changed
// since it was last built. s.mu must be held.
func (s *Service) configLocked() configstore.Snapshot {
	if s.configDirty {
		s.snap, _ = s.config.Snapshot()
		s.mcQueues = multiClusterQueues(s.snap)
		s.defaultQueues = defaultQueueNamespaces(s.snap)
		s.configDirty = false
	}
	return s.snap
}

// mcQueuesLocked is multiClusterQueues of the current snapshot. s.mu must
// be held.
func (s *Service) mcQueuesLocked() []string {
	s.configLocked()
	return s.mcQueues
}

// requeueOnConfig looks at every object after the configuration changed.
func (s *Service) requeueOnConfig(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.reconfigured:
		}
		s.enqueueAll()
		if err := s.ensureWebhookConditions(ctx); err != nil {
			s.log.Warn().Err(err).Msg("webhook configurations not updated for the multi-cluster queues and default LocalQueues")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(configSettle):
		}
	}
}

func (s *Service) enqueueAll() {
	for _, k := range s.kinds {
		if k.inf == nil {
			continue
		}
		for _, key := range k.inf.GetStore().ListKeys() {
			k.queue.Add(key)
		}
	}
}

func (s *Service) watchLedger(ctx context.Context, kv jetstream.KeyValue, synced chan<- struct{}) error {
	return watchKV(ctx, s.log, kv, synced, func(e jetstream.KeyValueEntry, _ bool) {
		c, err := ledger.Parse(e)
		if err != nil {
			s.log.Error().Err(err).Str("key", e.Key()).Msg("ledger entry not understood; ignoring it")
			if errors.Is(err, ledger.ErrCorrupt) && c.Workload != "" {
				s.tellUnreadable(c.Workload)
			}
			return
		}
		var changed []string
		if c.Tree != "" {
			changed = s.setLegacy(c.Tree, c.Legacy)
		} else {
			changed = s.setReservation(c.Workload, c.Reservation)
		}
		for _, wk := range changed {
			kind, key, _ := strings.Cut(wk, "/")
			k := s.kinds[kind]
			if c.Tree == "" && c.Reservation == nil && s.finishedInCache(k, key) {
				// The release of a finished object: its end was handled
				// on its own update, and there is nothing left to stop.
				continue
			}
			k.queue.Add(key)
			if q := k.ungating.Load(); q != nil {
				(*q).Add(key)
			}
			if q := k.elastic.Load(); q != nil {
				(*q).Add(key)
			}
		}
	})
}

// tellUnreadable puts a Warning Event on the job whose reservation cannot
// be read: the admission service holds its cohort back until the key is
// repaired, and the job's owner is the first to ask why.
func (s *Service) tellUnreadable(wk string) {
	kind, key, _ := strings.Cut(wk, "/")
	k := s.kinds[kind]
	if k == nil {
		return
	}
	job, err := s.cached(k, key)
	if err != nil || job == nil {
		return
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "ReservationUnreadable",
		"its reservation in %s cannot be read; its cohort admits nothing until the key %s there is repaired or deleted",
		ledger.Bucket, ledger.ReservationKey(wk))
}

// finishedInCache reports whether the informer holds the object finished.
// Finished is final, so a stale cache cannot say so wrongly.
func (s *Service) finishedInCache(k *kindRunner, key string) bool {
	job, err := s.cached(k, key)
	if err != nil || job == nil {
		return false
	}
	done, _, _ := job.Finished()
	return done
}

// watchFences keeps the fence state of the workloads of the kinds run
// here: a stop decided elsewhere (a preemption, a drain) shows first as
// the fence of its admission moving to stopping, and the replica owning
// the object carries it out.
func (s *Service) watchFences(ctx context.Context, synced chan<- struct{}) error {
	return watchKV(ctx, s.log, s.fenceKV, synced, func(e jetstream.KeyValueEntry, _ bool) {
		n, ok := workloads.ParseKV(e.Key())
		k := s.kinds[n.Kind]
		if !ok || k == nil {
			return
		}
		key := n.Object()
		var st fence.State
		if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &st) != nil {
			s.log.Error().Str("key", e.Key()).Msg("corrupt fence entry")
			return
		}
		s.mu.Lock()
		if st.Phase == "" {
			delete(s.fences, e.Key())
		} else {
			s.fences[e.Key()] = st
		}
		s.mu.Unlock()
		if st.Phase == fence.Stopping {
			k.queue.Add(key)
			if q := k.ungating.Load(); q != nil {
				(*q).Add(key)
			}
		}
	})
}

func (s *Service) fenceOf(rk string) fence.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fences[rk]
}

// enqueueShards looks at every object of the shards this replica just
// took: those the informer holds, and those only a workload record or a
// reservation remembers (deleted while no replica owned their shard).
func (s *Service) enqueueShards(ctx context.Context, k *kindRunner, shards []int) {
	in := map[int]bool{}
	for _, sh := range shards {
		in[sh] = true
	}
	add := func(key string) {
		if in[k.owner.Of(key)] {
			if n, ok := workloads.ParseEngine(k.kind.Name + "/" + key); ok {
				s.markUnverified(n.KV())
			}
			k.queue.Add(key)
		}
	}
	for _, obj := range k.inf.GetStore().List() {
		if key, ok := jobframework.WorkKey(k.ad, obj); ok {
			add(key)
		}
	}
	s.mu.Lock()
	var keys []string
	for wk := range s.held {
		if kind, key, _ := strings.Cut(wk, "/"); kind == k.kind.Name {
			keys = append(keys, key)
		}
	}
	// Ended workloads whose end this replica may have to announce.
	for fk, st := range s.fences {
		if n, ok := workloads.ParseKV(fk); ok && n.Kind == k.kind.Name && st.Phase == fence.Finished {
			keys = append(keys, n.Object())
		}
	}
	s.mu.Unlock()
	for _, key := range keys {
		add(key)
	}
	l, err := s.wlKV.ListKeys(ctx)
	if err != nil {
		if !errors.Is(err, jetstream.ErrNoKeysFound) {
			s.log.Warn().Err(err).Msg("list workload records; objects deleted meanwhile are seen at the next resync")
		}
		return
	}
	for rk := range l.Keys() {
		if n, ok := workloads.ParseKV(rk); ok && n.Kind == k.kind.Name {
			add(n.Object())
		}
	}
}

// markUnverified notes that a workload's announcements are to be checked
// at its next look (reannounce).
func (s *Service) markUnverified(rk string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unverified[rk] = true
}

// takeUnverified reports and clears the note.
func (s *Service) takeUnverified(rk string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.unverified[rk] {
		return false
	}
	delete(s.unverified, rk)
	return true
}

// setLedger records one ledger key's reservations of the kinds run here
// and returns the engine keys of the workloads whose reservation changed.
// setReservation records one workload's reservation (nil: released) and
// reports the workload if it is of a kind run here and its reservation
// changed.
func (s *Service) setReservation(wk string, r *ledger.Reservation) []string {
	kind, _, _ := strings.Cut(wk, "/")
	if _, ours := s.kinds[kind]; !ours {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.held[wk]
	if r == nil {
		delete(s.ownKey, wk)
		if !had {
			return nil
		}
		delete(s.held, wk)
		return []string{wk}
	}
	s.held[wk] = *r
	s.ownKey[wk] = true
	if had && old.AdmittedAt.Equal(r.AdmittedAt) && old.Startable() == r.Startable() && sameCounts(old, *r) {
		return nil // the same reservation, still as startable and as large as it was
	}
	return []string{wk}
}

// setLegacy records the reservations an older Sluice kept in a tree key's
// value, until admission moves them to their own keys (a move books the
// reservation's own key before it empties the tree's).
func (s *Service) setLegacy(key string, res map[string]ledger.Reservation) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []string
	now := map[string]bool{}
	for wk, r := range res {
		kind, _, _ := strings.Cut(wk, "/")
		if _, ours := s.kinds[kind]; !ours {
			continue
		}
		now[wk] = true
		if old, ok := s.held[wk]; !ok || !old.AdmittedAt.Equal(r.AdmittedAt) {
			changed = append(changed, wk)
		}
		s.held[wk] = r
	}
	for _, wk := range s.legacyKeys[key] {
		if !now[wk] {
			if !s.ownKey[wk] {
				delete(s.held, wk)
				changed = append(changed, wk)
			}
		}
	}
	keys := make([]string, 0, len(now))
	for wk := range now {
		keys = append(keys, wk)
	}
	sort.Strings(keys)
	s.legacyKeys[key] = keys
	return changed
}

func (s *Service) reservation(ref events.WorkloadRef) (ledger.Reservation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.held[ref.Kind+"/"+ref.Namespace+"/"+ref.Name]
	return r, ok
}

// cached returns the informer's copy of an object, decoded; nil when the
// informer has none.
func (s *Service) cached(k *kindRunner, key string) (jobframework.Job, error) {
	obj, exists, err := k.inf.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("informer of %s holds a %T", k.kind.Resource, obj)
	}
	return k.decode(ro)
}

// keyLocks is a mutex per key, kept only while someone holds or waits for
// it.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

// lock takes key's mutex and returns its release.
func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
