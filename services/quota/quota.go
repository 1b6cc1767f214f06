// Package quota is the quota accounting service: it releases a workload's
// reservation from the ledger when the workload stops, finishes or is
// deleted (once, however often it hears so), and on a timer reconciles the
// ledger against the workload records and publishes each ClusterQueue's
// usage when it changed (dev.sluice.quota.v1.usage).
package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/supervise"
	"github.com/sluice-dev/sluice/internal/usage"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// Config is the quota service's configuration.
type Config struct {
	// Reconcile is how often the ledger is checked against the workload
	// records; reservations of workloads that no longer exist are
	// released.
	Reconcile time.Duration
	// FenceAge is how long the fence of an ended workload is kept at
	// least; longer while a consumer may still act on its admission
	// (horizon). 0 means two minutes.
	FenceAge time.Duration
}

// Service is the quota accounting service.
type Service struct {
	// consuming opens once the consumer exists (Ready).
	consuming *health.Gate
	cfg       Config
	js        jetstream.JetStream
	pub       events.Publisher
	log       zerolog.Logger
	// lastUsage is the last usage event announced per ClusterQueue.
	lastUsage map[string]usageAnnounced
	// lqs is which ClusterQueue each LocalQueue submits to, as read at
	// the configuration bucket's sequence lqsSeq (lqToCQ).
	lqs     map[string]string
	lqsSeq  uint64
	ledger  *ledger.Writer
	horizon horizon
	// backoffMin and backoffMax bound a failed release's redelivery
	// delay; zero means the bus's defaults.
	backoffMin, backoffMax time.Duration
}

// Option tunes the service.
type Option func(*Service)

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(s *Service) { s.log = l } }

// WithReleaseBackoff bounds the delay before a failed release is retried
// (bus.ConsumerSpec's BackoffMin and BackoffMax; 1s and 1m by default).
func WithReleaseBackoff(lo, hi time.Duration) Option {
	return func(s *Service) { s.backoffMin, s.backoffMax = lo, hi }
}

// New returns the service.
func New(cfg Config, js jetstream.JetStream, pub events.Publisher, opts ...Option) (*Service, error) {
	if cfg.Reconcile <= 0 {
		return nil, fmt.Errorf("quota: reconcile interval %s: must be positive", cfg.Reconcile)
	}
	if cfg.FenceAge < 0 {
		return nil, fmt.Errorf("quota: fence age %s: must not be negative", cfg.FenceAge)
	}
	if cfg.FenceAge == 0 {
		cfg.FenceAge = defaultFenceAge
	}
	s := &Service{consuming: health.NewGate("workload ends not consumed yet"), cfg: cfg, js: js, pub: pub, log: zerolog.Nop(),
		lastUsage: map[string]usageAnnounced{}, ledger: ledger.NewWriter(js)}
	for _, o := range opts {
		o(s)
	}
	if err := s.releaseConsumer().Validate(); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	return s, nil
}

// Ready reports whether the service consumes workload ends.
func (s *Service) Ready() error { return s.consuming.Check() }

// Run consumes stop, finish and delete events and reconciles, until ctx
// ends.
func (s *Service) Run(ctx context.Context) error {
	kvs, stream, err := bus.OpenBuckets(ctx, s.js, true, ledger.Bucket, workloads.Bucket, fence.Bucket)
	if err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	led := kvs[0]
	st := stores{led: led, wls: kvs[1], fenceKV: kvs[2], events: stream}
	tracker := usage.NewTracker(s.js, s.log)
	tracked := make(chan struct{})
	sup := supervise.New(ctx, supervise.WithLogger(s.log))
	defer sup.Stop()
	sup.Go("usage", func(ctx context.Context) error { return tracker.Run(ctx, tracked) })
	sup.Go("releases", func(ctx context.Context) error {
		return bus.Run(ctx, s.js, s.releaseConsumer(), func(ctx context.Context, env events.Envelope) error { return s.handle(ctx, led, env) }, bus.WithLogger(s.log),
			bus.WithStarted(s.consuming.Open),
			// Releases of different workloads do not touch one another;
			// those of one workload keep their order (a stop of one
			// admission, then the end of the job).
			bus.WithPartitions(releasePartitions, events.SubjectWorkload), bus.WithBatch(4*releasePartitions))
	})
	t := time.NewTicker(s.cfg.Reconcile)
	defer t.Stop()
	var collected time.Time
	for {
		select {
		case <-ctx.Done():
			return sup.Stop()
		case <-sup.Failed():
			return fmt.Errorf("quota: %w", sup.Stop())
		case <-t.C:
			select {
			case <-tracked:
				// The tracker's mirror is read: reconciliation looks up
				// only the reservations it does not show settled.
				st.settled = tracker.Settled
			default:
			}
			if err := s.reconcile(ctx, st); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("ledger reconciliation")
			}
			select {
			case <-tracked:
				if err := s.publishUsage(ctx, tracker, st.events); err != nil && ctx.Err() == nil {
					s.log.Warn().Err(err).Msg("usage not published")
				}
			default: // not every record read yet: no usage to tell
			}
			if now := time.Now(); now.Sub(collected) >= s.collectEvery() {
				collected = now
				if err := s.collectFences(ctx, st, stream, now); err != nil && ctx.Err() == nil {
					s.log.Warn().Err(err).Msg("collecting ended workloads' fences")
				}
			}
		}
	}
}

// collectEvery is how often ended workloads' fences are collected: at
// each reconciliation, but no more often than a quarter of the age they
// are kept, so that a short reconciliation interval (seconds, under test)
// does not read the whole fence bucket every few seconds for the few
// fences that came of age since.
func (s *Service) collectEvery() time.Duration {
	return max(s.cfg.Reconcile, s.cfg.FenceAge/4)
}

// releasePartitions is how many releases run at once.
const releasePartitions = 8

// defaultFenceAge is how long the fence of an ended workload is kept at
// least, so that a preemption decided before the end finds it, and is
// refused; the horizon keeps it longer while such a decision is still
// unhandled.
const defaultFenceAge = 2 * time.Minute

// handle releases the reservation of the workload an event is about.
func (s *Service) handle(ctx context.Context, led jetstream.KeyValue, env events.Envelope) error {
	var ref events.WorkloadRef
	// A stop releases only the admission it stopped: a late or redelivered
	// stop must not free the quota of the admission that followed, whose
	// job may be running. An end (finish, deletion) releases the job's
	// reservation, whatever its admission, but not one of a job of the
	// same name created since.
	admission := ""
	switch env.Type {
	case events.TypeWorkloadStoppedV1:
		var e events.WorkloadStoppedV1
		if err := env.As(&e); err != nil {
			return fmt.Errorf("%w: %v", bus.ErrPoison, err)
		}
		if e.Admission == "" {
			return nil // it held no reservation when it stopped
		}
		ref, admission = e.Workload, e.Admission
	case events.TypeWorkloadFinishedV1:
		var e events.WorkloadFinishedV1
		if err := env.As(&e); err != nil {
			return fmt.Errorf("%w: %v", bus.ErrPoison, err)
		}
		ref = e.Workload
	case events.TypeWorkloadDeletedV1:
		var e events.WorkloadDeletedV1
		if err := env.As(&e); err != nil {
			return fmt.Errorf("%w: %v", bus.ErrPoison, err)
		}
		ref = e.Workload
	default:
		return fmt.Errorf("%w: unexpected event type %s", bus.ErrPoison, env.Type)
	}
	return s.release(ctx, led, ref, admission, env.ID)
}

// ReleaseConsumer is the consumer of the events that release quota. A
// release is never given up on: after an outage of the ledger longer than
// any number of retries, a stopped or ended job's quota would otherwise
// stay booked for good, its job suspended or gone.
func ReleaseConsumer() bus.ConsumerSpec {
	return bus.ConsumerSpec{
		Stream:  bus.StreamEvents,
		Durable: "quota",
		FilterSubjects: []string{
			events.SubjectFilter("workload", "stopped", "*", "*"),
			events.SubjectFilter("workload", "finished", "*", "*"),
			events.SubjectFilter("workload", "deleted", "*", "*"),
		},
		MaxDeliver: bus.RetryForever,
	}
}

// releaseConsumer is ReleaseConsumer with this service's backoff.
func (s *Service) releaseConsumer() bus.ConsumerSpec {
	c := ReleaseConsumer()
	c.BackoffMin, c.BackoffMax = s.backoffMin, s.backoffMax
	return c
}

// release frees the reservation of ref's job; of its given admission only,
// if admission is set. by names the release: the id of the event that
// asks for it, so that handling it again after a lost answer announces
// what the first attempt did.
func (s *Service) release(ctx context.Context, led jetstream.KeyValue, ref events.WorkloadRef, admission, by string) error {
	key := workloads.EngineKey(ref)
	r, released, err := s.ledger.ReleaseIf(ctx, led, key, by, func(r ledger.Reservation) bool {
		if admission != "" && r.Admission() != admission {
			return false
		}
		return r.UID == "" || ref.UID == "" || r.UID == ref.UID
	})
	if err != nil {
		return err // transient: redelivered with backoff
	}
	if !released {
		s.log.Debug().Str("workload", key).Str("admission", admission).Msg("no matching reservation: released before")
		return nil
	}
	s.log.Info().Str("workload", key).Str("queue", r.ClusterQueue).Msg("quota released")
	if ref.UID == "" {
		// A reservation written without the workload's UID (by an older
		// admission service): the release stands, the event cannot name it.
		s.log.Warn().Str("workload", key).Msg("released quota of a workload with no known UID; no event")
		return nil
	}
	// The id names the admission released: the same workload released
	// again after another admission is another event, a retried release
	// of the same one is not.
	ev := events.QuotaReleasedV1{Workload: ref, ClusterQueue: r.ClusterQueue}
	if !r.AdmittedAt.IsZero() {
		ev.Admission = r.Admission()
	}
	return s.pub.Publish(ctx, ev, events.ID(ev.Type(), ref.UID, r.ClusterQueue, ev.Admission))
}

// stores are what reconciliation reads.
type stores struct {
	led, wls jetstream.KeyValue
	fenceKV  fence.Lister
	events   workloads.LastMsgReader
	// settled, once set, says from a mirror of the buckets that a
	// reservation needs nothing (usage.Tracker.Settled): at full scale,
	// two reads per reservation every pass were most of this service's
	// work.
	settled func(wk, uid, admission string) bool
}

// reconcile releases the reservations a lost or unhandled event would
// have released: those whose workload record is gone (the workload
// finished or was deleted), and those whose job Sluice stopped (its fence
// stops that admission and its stop is announced) while the quota stayed
// booked. A corrupt reservation is reported and kept: its size is not
// known, so it is never counted as free.
func (s *Service) reconcile(ctx context.Context, st stores) error {
	snap, err := ledger.Read(ctx, st.led)
	errs := []error{err}
	if err != nil && !errors.Is(err, ledger.ErrCorrupt) {
		return err
	}
	for _, wk := range snap.Workloads() {
		r := snap.Reservations[wk]
		if st.settled != nil && st.settled(wk, r.UID, r.Admission()) {
			continue
		}
		n, _ := workloads.ParseEngine(wk)
		ref := n.Ref(r.UID)
		gctx, cancel := bus.Bounded(ctx)
		v, err := bus.Value(gctx, st.wls, n.KV())
		cancel()
		if err == nil && r.UID != "" {
			// A record of another workload of the same job (it left its
			// queue or moved, and came back) does not keep this one's.
			var rec events.WorkloadSubmittedV1
			if json.Unmarshal(v, &rec) == nil && rec.Workload.UID != "" && rec.Workload.UID != r.UID {
				err = jetstream.ErrKeyNotFound
			}
		}
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			errs = append(errs, s.release(ctx, st.led, ref, r.Admission(), "reconcile "+r.Admission()))
		case err == nil && r.UID != "":
			id, stopped, err := stoppedAnnounced(ctx, st, ref, r.Admission())
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if stopped {
				errs = append(errs, s.release(ctx, st.led, ref, r.Admission(), id))
			}
		}
	}
	return errors.Join(errs...)
}

// stoppedAnnounced reports whether the job of ref was stopped for the
// given admission and the stop announced; then its id, the one the
// release of that stop carries. Only a fence that stops this admission
// sends the reader to the stream, so a running job costs one read.
func stoppedAnnounced(ctx context.Context, st stores, ref events.WorkloadRef, admission string) (string, bool, error) {
	f, err := fence.Get(ctx, st.fenceKV, workloads.Key(ref))
	if err != nil || f.Phase != fence.Stopping || f.Admission != admission {
		// An unreadable fence says nothing: the quota stays booked.
		return "", false, nil
	}
	gctx, cancel := bus.Bounded(ctx)
	defer cancel()
	msg, err := st.events.GetLastMsgForSubject(gctx, events.WorkloadSubject(events.TypeWorkloadStoppedV1, ref))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the stop of %s: %w", workloads.EngineKey(ref), err)
	}
	env, err := events.DecodeParts(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		return "", false, nil
	}
	var ev events.WorkloadStoppedV1
	if env.As(&ev) != nil || ev.Workload.UID != ref.UID || ev.Admission != admission {
		return "", false, nil
	}
	return env.ID, true, nil
}

// publishUsage announces every ClusterQueue's usage that changed since
// the last announcement.
func (s *Service) publishUsage(ctx context.Context, tracker *usage.Tracker, stream workloads.LastMsgReader) error {
	rep := tracker.Report(s.lqToCQ(ctx))
	names := make([]string, 0, len(rep.ClusterQueues))
	for n := range rep.ClusterQueues {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		q := rep.ClusterQueues[n]
		ev := events.QuotaUsageV1{ClusterQueue: n, Usage: q.Quantities(), Pending: q.Pending, Admitted: q.Admitted}
		if err := s.announceUsage(ctx, stream, ev); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// announceUsage announces ev unless it is what this service announced
// last for its ClusterQueue or what the stream holds last for it. The
// announcement follows the one stored: a restarted service announces only
// what changed, and replicas that see the same change give it the same
// id, so the stream keeps it once.
func (s *Service) announceUsage(ctx context.Context, stream workloads.LastMsgReader, ev events.QuotaUsageV1) error {
	last, known := s.lastUsage[ev.ClusterQueue]
	if known && last.content == usageContent(ev) {
		return nil
	}
	if stream != nil {
		last = storedUsage(ctx, stream, ev)
	}
	next, changed := last.next(ev)
	if !changed {
		s.lastUsage[ev.ClusterQueue] = last
		return nil
	}
	if err := s.pub.Publish(ctx, ev, next.id); err != nil {
		return err
	}
	s.lastUsage[ev.ClusterQueue] = next
	return nil
}

// storedUsage is the last usage event stored about ev's ClusterQueue;
// none when there is none or it cannot be read (then the usage is
// announced: a repeated one costs less than a missing one).
func storedUsage(ctx context.Context, stream workloads.LastMsgReader, ev events.QuotaUsageV1) usageAnnounced {
	gctx, cancel := bus.Bounded(ctx)
	defer cancel()
	msg, err := stream.GetLastMsgForSubject(gctx, ev.NATSSubject())
	if err != nil {
		return usageAnnounced{}
	}
	env, err := events.DecodeParts(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		return usageAnnounced{}
	}
	var stored events.QuotaUsageV1
	if env.As(&stored) != nil || stored.ClusterQueue != ev.ClusterQueue {
		return usageAnnounced{}
	}
	return usageAnnounced{content: usageContent(stored), id: env.ID}
}

// usageContent names what a usage event says.
func usageContent(ev events.QuotaUsageV1) string {
	return events.ID(ev.Type(), ev.ClusterQueue, ev.Usage, ev.Pending, ev.Admitted)
}

// usageAnnounced is a usage event announced: what it says and its id.
type usageAnnounced struct {
	content, id string
}

// next is the announcement of ev after a, and whether ev says anything
// new. The id names the usage and the announcement it follows, so a usage
// that comes back (full, then less, then full again) is a new event: with
// the usage alone for id, the stream dropped its return as a re-send of
// the first within its duplicate window and, past the window, stored a
// second event under the first one's id. A publish retried after a failure
// keeps its id.
func (a usageAnnounced) next(ev events.QuotaUsageV1) (usageAnnounced, bool) {
	content := usageContent(ev)
	if content == a.content {
		return a, false
	}
	return usageAnnounced{content: content, id: events.ID(ev.Type(), ev.ClusterQueue, ev.Usage, ev.Pending, ev.Admitted, a.id)}, true
}

// lqToCQ reads which ClusterQueue each LocalQueue submits to, again only
// when the configuration bucket changed since the last read: with a
// thousand LocalQueues a read is a thousand gets, and it came at every
// reconciliation.
func (s *Service) lqToCQ(ctx context.Context) map[string]string {
	out := map[string]string{}
	kv, err := bus.OpenKV(ctx, s.js, configstore.Bucket)
	if err != nil {
		return out
	}
	var seq uint64
	if st, err := kv.Status(ctx); err == nil {
		if b, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			seq = b.StreamInfo().State.LastSeq
		}
	}
	if seq != 0 && seq == s.lqsSeq {
		return s.lqs
	}
	l, err := kv.ListKeys(ctx)
	if err != nil {
		return out
	}
	var keys []string
	for k := range l.Keys() {
		if strings.HasPrefix(k, configstore.KindLocalQueue+".") {
			keys = append(keys, k)
		}
	}
	complete := true
	for _, k := range keys {
		gctx, cancel := bus.Bounded(ctx)
		e, err := kv.Get(gctx, k)
		cancel()
		if err != nil {
			complete = complete && errors.Is(err, jetstream.ErrKeyNotFound)
			continue
		}
		var lq v1beta1.LocalQueue
		if json.Unmarshal(e.Value(), &lq) == nil {
			out[lq.Namespace+"/"+lq.Name] = lq.Spec.ClusterQueue
		}
	}
	if complete {
		s.lqs, s.lqsSeq = out, seq
	}
	return out
}
