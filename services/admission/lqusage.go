package admission

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/lqusage"
)

// usageFlushInterval bounds how often the changed LocalQueue usage is
// stored: each admission into a ClusterQueue that orders by usage changes
// its LocalQueue's, and one write per second per queue is plenty for a
// history that moves over hours.
const usageFlushInterval = time.Second

// applyUsage restores a LocalQueue's Admission Fair Sharing usage as
// stored: at start, and when the replica that decided for its tree wrote
// it (the engine keeps what it has when that is newer, as its own writes
// are).
func (s *Service) applyUsage(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return // a deleted key leaves the history the engine has
	}
	ns, name, err := lqusage.Parse(e.Key())
	if err != nil {
		s.log.Warn().Err(err).Str("bucket", lqusage.Bucket).Msg("ignoring key")
		return
	}
	v, err := lqusage.Decode(e.Value())
	if err != nil {
		s.log.Warn().Err(err).Str("queue", lqusage.Key(ns, name)).Msg("ignoring unreadable LocalQueue usage")
		return
	}
	s.eng.SetLocalQueueUsage(ns, name, v.Engine())
	s.dirty = true
}

// saveUsage stores the LocalQueue usage the engine changed (only in the
// trees this replica decides for), at most once per usageFlushInterval; a
// failed write is tried again at the next.
func (s *Service) saveUsage(ctx context.Context, now time.Time) {
	for key, u := range s.eng.ChangedLocalQueueUsage() {
		if s.usageDue == nil {
			s.usageDue = map[string]engine.LocalQueueUsage{}
		}
		s.usageDue[key] = u
	}
	if len(s.usageDue) == 0 || s.usageKV == nil || now.Sub(s.lastUsageSave) < usageFlushInterval {
		return
	}
	s.lastUsageSave = now
	for key, u := range s.usageDue {
		b, err := lqusage.Encode(u)
		if err != nil {
			s.log.Error().Err(err).Str("queue", key).Msg("LocalQueue usage not encoded")
			delete(s.usageDue, key)
			continue
		}
		wctx, cancel := bus.Bounded(ctx)
		_, err = s.usageKV.Put(wctx, key, b)
		cancel()
		if err != nil {
			s.log.Warn().Err(err).Str("queue", key).Msg("LocalQueue usage not stored; trying again")
			return
		}
		delete(s.usageDue, key)
	}
}
