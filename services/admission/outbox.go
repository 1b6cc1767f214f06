package admission

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// outgoing is an event to publish. One that stops an admission names the
// admission's fence, which must be moved to stopping first.
type outgoing struct {
	ev        events.Event
	id        string
	fenceKey  string
	admission string
	// ended is the engine key of a workload whose admission is not
	// announced once its record is gone: its job ended while it was being
	// admitted (the end came after the decision), and quota
	// reconciliation releases the reservation.
	ended string
	// about is the engine key of the waiting workload a pending reason is
	// about: the outbox remembers the sequence the reason was stored at.
	about string
	// admitted is the announcement of the admission a stop ends, published
	// first if it is not on the stream yet: the replica that reserved the
	// admission may be slow to announce it, or stopped before it did.
	admitted *announcement
	// requeue is stored with the stop of a PodsReadyTimeout eviction.
	requeue *fence.Requeue
	// trace is the context whose span the event's traceparent names.
	trace context.Context
}

// stop: the event ends an admission, and is fenced or preceded by the
// admission's announcement; such events go one at a time.
func (o outgoing) stop() bool { return o.fenceKey != "" || o.admitted != nil }

// outbox is the one way an event leaves the admission service. The loop
// adds what it decides (Add) and publishes it (Flush); what fails to
// publish is kept, and Retry publishes it again, first and in order, with
// whatever was added since. Decisions are made once, so their
// announcements are never dropped. Only the loop's goroutine uses it.
type outbox struct {
	queued, unsent []outgoing

	pub events.Publisher
	log zerolog.Logger
	// stream and fenceKV are opened by Run; without them (a Service not
	// running over JetStream) announcements are published unchecked.
	stream  jetstream.Stream
	fenceKV fence.KV
	// recordExists tells whether a workload's record is still stored (by
	// engine key): an admission whose job ended meanwhile is not
	// announced.
	recordExists func(ctx context.Context, key string) bool
	// stored is the stream sequence of the last pending reason published
	// about each waiting workload (by engine key), while it is the last
	// event this outbox stored about it. The workload's admission expects
	// it rather than reading the stream for the last event first: one
	// request instead of two (the server still looks the last event up to
	// check the expectation). If anything came since, the expectation
	// fails and the stream is read after all.
	stored map[string]uint64
}

// Forget drops what the outbox remembers of a workload (its record is gone).
func (b *outbox) Forget(key string) { delete(b.stored, key) }

// Add queues an event for the next Flush; ctx carries the span the
// event's traceparent names.
func (b *outbox) Add(ctx context.Context, o outgoing) {
	o.trace = ctx
	b.queued = append(b.queued, o)
}

// Waiting counts the events queued and those whose publish failed.
func (b *outbox) Waiting() (queued, unsent int) { return len(b.queued), len(b.unsent) }

// Retry publishes what failed before, in order, then what is queued,
// keeping what fails again.
func (b *outbox) Retry(ctx context.Context) error {
	b.queued = append(b.unsent, b.queued...)
	b.unsent = nil
	return b.Flush(ctx)
}

// allPublisher publishes many events with their acknowledgements in
// flight together (bus.JetStreamPublisher).
type allPublisher interface {
	PublishAll(ctx context.Context, out []bus.Outgoing) []error
}

// recordChecks is how many record reads flush keeps in flight.
const recordChecks = 16

// Flush publishes the queued events; each is stored before Flush returns
// (or kept in unsent). Stops go first, one at a time, each after its
// fence. The others are pipelined: the reads that check their jobs did
// not end meanwhile run together, then the events are published with
// their acknowledgements in flight together, in the order queued.
func (b *outbox) Flush(ctx context.Context) error {
	queued := b.queued
	b.queued = nil
	var errs []error
	var plain []outgoing
	for _, o := range queued {
		if !o.stop() {
			plain = append(plain, o)
			continue
		}
		if err := b.publishOne(ctx, o); err != nil {
			b.unsent = append(b.unsent, o)
			errs = append(errs, err)
		}
	}
	// Which jobs ended since their admission was decided, and for the
	// others the last event about them: the announcement is stored only
	// if nothing came since, so it never follows the job's end.
	gone := make([]bool, len(plain))
	last := make([]uint64, len(plain))
	lookErr := make([]error, len(plain))
	sem := make(chan struct{}, recordChecks)
	var wg sync.WaitGroup
	for i, o := range plain {
		if o.ended == "" {
			continue
		}
		seq, known := b.stored[o.ended]
		known = known && b.stream != nil
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if known {
				// Its last event is the pending reason stored here, unless
				// something came since, which the publish will refuse.
				gone[i], last[i] = !b.recordExists(ctx, o.ended), seq
				return
			}
			gone[i], last[i], lookErr[i] = b.ended(ctx, o)
		})
	}
	wg.Wait()
	send := make([]outgoing, 0, len(plain))
	var expect []uint64
	for i, o := range plain {
		if lookErr[i] != nil {
			b.unsent = append(b.unsent, o)
			errs = append(errs, lookErr[i])
			continue
		}
		if gone[i] {
			b.log.Info().Str("workload", o.ended).Msg("admission not announced: the job ended meanwhile")
			continue
		}
		send = append(send, o)
		expect = append(expect, last[i])
	}
	ap, ok := b.pub.(allPublisher)
	if !ok {
		// One at a time, each looking again right before it is sent.
		for _, o := range send {
			if err := b.publishOne(ctx, o); err != nil {
				b.unsent = append(b.unsent, o)
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	out := make([]bus.Outgoing, len(send))
	for i, o := range send {
		out[i] = bus.Outgoing{Ctx: o.trace, Event: o.ev, ID: o.id}
		if ref, ok := events.WorkloadOf(o.ev); ok && o.ended != "" && b.stream != nil {
			out[i].ExpectLast, out[i].ExpectSeq = events.WorkloadFilter(ref), expect[i]
		}
	}
	for i, err := range ap.PublishAll(ctx, out) {
		o := send[i]
		if o.ended != "" {
			// Stored or refused, the next event expected about it is no
			// longer the pending reason remembered.
			delete(b.stored, o.ended)
		}
		if err == nil && o.about != "" && out[i].Stored != 0 {
			if b.stored == nil {
				b.stored = map[string]uint64{}
			}
			b.stored[o.about] = out[i].Stored
		}
		if errors.Is(err, bus.ErrLastChanged) {
			// Something about the workload came between the look and the
			// publish: look again, one at a time.
			err = b.publishOne(ctx, send[i])
		}
		if err != nil {
			b.unsent = append(b.unsent, send[i])
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ended reports whether the job of an admission's announcement ended: its
// last event is its end, or its record is gone. It also returns that last
// event's sequence, for the announcement to expect.
func (b *outbox) ended(ctx context.Context, o outgoing) (bool, uint64, error) {
	ref, ok := events.WorkloadOf(o.ev)
	if !ok || b.stream == nil {
		return !b.recordExists(ctx, o.ended), 0, nil
	}
	seq, ended, err := workloads.LastEvent(ctx, b.stream, ref)
	if err != nil || ended {
		return ended, seq, err
	}
	// The integration deletes the record before it announces the end.
	return !b.recordExists(ctx, o.ended), seq, nil
}

// publishOne publishes one event: a stop after its fence, an announcement
// unless its job ended.
func (b *outbox) publishOne(ctx context.Context, o outgoing) error {
	if o.trace != nil {
		ctx = o.trace
	}
	if o.ended != "" {
		return b.announceUnlessEnded(ctx, o)
	}
	if o.fenceKey != "" && b.fenceKV != nil {
		var opts []fence.StopOption
		if o.requeue != nil {
			opts = append(opts, fence.WithRequeue(*o.requeue))
		}
		if o.admitted != nil {
			opts = append(opts, fence.OfJob(o.admitted.ref.UID))
		}
		err := fence.Stop(ctx, b.fenceKV, o.fenceKey, o.admission, o.id, opts...)
		if errors.Is(err, fence.ErrFinished) || errors.Is(err, fence.ErrStopTaken) || errors.Is(err, fence.ErrSuperseded) {
			// Its job ended, or a preemption stops it already, or it was
			// admitted again since: nothing of this admission to evict.
			return nil
		}
		if err != nil {
			return err
		}
	}
	// Neither the stop nor the admission it follows is announced after
	// the job's end, which may have come since the fence.
	if a := o.admitted; a != nil && b.stream != nil {
		done, err := workloads.Reserved(ctx, b.stream, a.ref, a.admission)
		if err != nil {
			return err
		}
		if !done {
			if err := workloads.AnnounceUnlessEnded(ctx, b.pub, b.stream, a.ev, a.id, a.ref); err != nil {
				return err
			}
		}
	}
	ref, about := events.WorkloadOf(o.ev)
	if !o.stop() || !about {
		return b.pub.Publish(ctx, o.ev, o.id)
	}
	return workloads.AnnounceUnlessEnded(ctx, b.pub, b.stream, o.ev, o.id, ref)
}

// announceUnlessEnded publishes an admission's announcement unless its job
// ended; with the stream known, it expects the last event it looked at,
// and looks again when something came since.
func (b *outbox) announceUnlessEnded(ctx context.Context, o outgoing) error {
	ref, _ := events.WorkloadOf(o.ev)
	ep, expecting := b.pub.(workloads.ExpectingPublisher)
	if !expecting || b.stream == nil {
		gone, _, err := b.ended(ctx, o)
		if err != nil || gone {
			return err
		}
		return b.pub.Publish(ctx, o.ev, o.id)
	}
	_, err := ep.PublishExpecting(ctx, o.ev, o.id, events.WorkloadFilter(ref), func(ctx context.Context) (uint64, bool, error) {
		gone, seq, err := b.ended(ctx, o)
		if gone {
			b.log.Info().Str("workload", o.ended).Msg("admission not announced: the job ended meanwhile")
		}
		return seq, !gone, err
	})
	return err
}
