package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// stopDurables are the consumers whose handling of a message can act on
// an admission after its job ended: a preemption decided before the end
// (preemption), a stop's release (quota), an admission check's Retry or
// Rejected that evicts (admission-checks). Each retries forever, so a
// fence is kept until every message each of them may still hold, stored
// before the job ended, is handled.
var stopDurables = []string{"preemption", "quota", "admission-checks"}

// horizon follows how far every stop consumer has handled the event
// stream, as a time: every message stored before settled is handled.
// Each reconciliation notes the stream's last sequence (a checkpoint) and
// the lowest sequence up to which all stop consumers handled everything
// (floor); settled is the time of the latest checkpoint the floor passed.
type horizon struct {
	checkpoints []checkpoint
	settled     time.Time
}

type checkpoint struct {
	at  time.Time
	seq uint64
}

// maxCheckpoints bounds the checkpoints kept while a consumer is stuck;
// dropping the oldest only makes settled move later, never too early.
const maxCheckpoints = 1024

// advance records that the stream's last sequence was last at time at,
// and that every stop consumer handled every message up to floor; it
// returns the new settled time.
func (h *horizon) advance(at time.Time, last, floor uint64) time.Time {
	h.checkpoints = append(h.checkpoints, checkpoint{at: at, seq: last})
	i := 0
	for i < len(h.checkpoints) && h.checkpoints[i].seq <= floor {
		h.settled = h.checkpoints[i].at
		i++
	}
	h.checkpoints = h.checkpoints[i:]
	if n := len(h.checkpoints); n > maxCheckpoints {
		h.checkpoints = h.checkpoints[n-maxCheckpoints:]
	}
	return h.settled
}

// consumerInfos is the part of the event stream the horizon reads.
type consumerInfos interface {
	Info(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error)
	Consumer(ctx context.Context, name string) (jetstream.Consumer, error)
}

// handledUpTo reads the stream's last sequence and the floor of the stop
// consumers: every message up to it that any of them takes is handled.
// The stream is read first, so a consumer with nothing left to handle has
// handled everything up to last.
func handledUpTo(ctx context.Context, stream consumerInfos) (last, floor uint64, err error) {
	ictx, cancel := bus.Bounded(ctx)
	defer cancel()
	si, err := stream.Info(ictx)
	if err != nil {
		return 0, 0, fmt.Errorf("read the event stream's state: %w", err)
	}
	last, floor = si.State.LastSeq, si.State.LastSeq
	for _, d := range stopDurables {
		c, err := stream.Consumer(ictx, d)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue // not created yet: it holds nothing
		}
		if err != nil {
			return 0, 0, fmt.Errorf("read consumer %s: %w", d, err)
		}
		ci := c.CachedInfo()
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			continue
		}
		floor = min(floor, ci.AckFloor.Stream)
	}
	return last, floor, nil
}

// collectFences deletes the fences of workloads that ended longer than
// the configured age ago, and before every stop consumer handled the
// stream, whose reservation is released: no retry can still read them.
func (s *Service) collectFences(ctx context.Context, st stores, stream consumerInfos, now time.Time) error {
	last, floor, err := handledUpTo(ctx, stream)
	if err != nil {
		return err
	}
	settled := s.horizon.advance(now, last, floor)
	_, err = fence.Collect(ctx, st.fenceKV, s.cfg.FenceAge, now, fence.KeepIf(func(ctx context.Context, key string, _ fence.State, finished time.Time) (bool, error) {
		if !finished.Before(settled) {
			return true, nil
		}
		_, held, err := ledger.Get(ctx, st.led, workloads.EngineKeyFromKV(key))
		return held, err
	}))
	return err
}
