package admission

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// told is what was last announced of a waiting workload's reason.
type told struct {
	class string
	at    time.Time
	// held: a reason of another class came within the interval and was
	// held back.
	held bool
}

// tellPending announces waiting workloads' pending reasons. Each id names
// the reason and the time, so that a reason that comes back later is a new
// event, not a re-send.
//
// When the last event stored about a workload already tells a reason of
// the same kind, it only notes that as told. That is how a restarted
// replica, which starts knowing nothing it told, and replicas running side
// by side, each with its own record of what it told, do not announce every
// waiting workload again (seen with two replicas restarted 17 times each
// under 15,000 Jobs: 21 pending events per Job instead of about one).
// The stream is read for all of them together, pendingReads at a time, so
// a cycle with many new waiting workloads does not wait for each read in
// turn before its admissions and preemptions are published.
func (s *Service) tellPending(ctx context.Context, tells []pendingTell) {
	stored := make([]struct {
		reason string
		ok     bool
	}, len(tells))
	if s.stream != nil && len(tells) > 0 {
		var wg sync.WaitGroup
		slots := make(chan struct{}, pendingReads)
		for i, t := range tells {
			if t.told {
				continue
			}
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				stored[i].reason, stored[i].ok = s.storedPending(ctx, t.ref)
			})
		}
		wg.Wait()
	}
	now := s.clock()
	for i, t := range tells {
		class := engine.ReasonClass(t.reason)
		if st := stored[i]; st.ok {
			if kept, news := engine.Retold(engine.ReasonClass(st.reason), class); !news {
				s.told[t.key] = told{class: kept, at: now}
				continue
			}
		}
		s.told[t.key] = told{class: class, at: now}
		ev := events.WorkloadPendingV1{Workload: t.ref, ClusterQueue: t.cq, Reason: t.reason, Invalid: engine.Invalid(t.reason)}
		s.out.Add(ctx, outgoing{ev: ev, id: events.ID(ev.Type(), t.ref.UID, t.reason, now.UnixNano()), about: t.key})
	}
}

// pendingTell is a pending reason to announce.
type pendingTell struct {
	ref             events.WorkloadRef
	key, cq, reason string
	// told: this replica announced a reason of the workload before and
	// has decided for its tree since (a tree gained forgets what was
	// told of its workloads), so the last pending event about it is its
	// own, of the class it noted, and the stream need not be read: the
	// read is for what another replica or an earlier run announced.
	told bool
}

// pendingReads bounds the reads of the stream tellPending makes at once.
const pendingReads = 16

// storedPending returns the reason of the last event stored about the
// workload, if that event is a pending one. Without the stream, or when it
// cannot be read, it says none, and the reason is announced: a repeated
// pending event costs less than a missing one.
func (s *Service) storedPending(ctx context.Context, ref events.WorkloadRef) (string, bool) {
	if s.stream == nil {
		return "", false
	}
	last, err := workloads.Last(ctx, s.stream, ref)
	if err != nil {
		s.log.Debug().Err(err).Str("workload", workloads.EngineKey(ref)).Msg("last event not read: pending reason announced")
		return "", false
	}
	return last.PendingFor(ref.UID)
}

// tellHeldPending announces the reasons held back whose interval is over, if
// their workload still waits for a reason of that new kind.
func (s *Service) tellHeldPending(ctx context.Context, now time.Time) {
	var due []string
	for key, t := range s.told {
		if t.held && now.Sub(t.at) >= s.cfg.PendingInterval {
			due = append(due, key)
		}
	}
	sort.Strings(due)
	var tells []pendingTell
	for _, key := range due {
		t := s.told[key]
		t.held = false
		s.told[key] = t
		w := s.wls[key]
		reason := s.eng.PendingReason(key)
		if w == nil || reason == "" || s.eng.IsAdmitted(key) || !engine.News(t.class, engine.ReasonClass(reason)) {
			continue
		}
		tells = append(tells, pendingTell{ref: w.Workload, key: key, cq: s.eng.ClusterQueueOf(key), reason: reason, told: true})
	}
	s.tellPending(ctx, tells)
	if err := s.out.Flush(ctx); err != nil {
		s.log.Warn().Err(err).Msg("pending reasons not announced")
	}
}
