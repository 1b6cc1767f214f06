package multicluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/internal/bus"
)

type consumeOptions struct {
	// fetched is told after each fetch whether it worked (an empty one
	// did).
	fetched func(ok bool)
}

type consumeOption func(*consumeOptions)

func withFetched(f func(ok bool)) consumeOption { return func(o *consumeOptions) { o.fetched = f } }

// handler handles one message of the stream. A nil error acks it, an
// error wrapping ErrBadMessage terminates it (it can never be handled),
// any other error naks it for a retry with backoff.
type handler func(ctx context.Context, m jetstream.Msg) error

// consume runs a durable consumer of the stream, one message at a time,
// until ctx ends. The stream keeps one message per subject, so a message
// handled late is still the one that holds.
func consume(ctx context.Context, js jetstream.JetStream, durable, filter string, h handler, log zerolog.Logger, opts ...consumeOption) error {
	var o consumeOptions
	for _, opt := range opts {
		opt(&o)
	}
	fetched := func(ok bool) {
		if o.fetched != nil {
			o.fetched(ok)
		}
	}
	log = log.With().Str("consumer", durable).Logger()
	var cons jetstream.Consumer
	failures := 0
	for ctx.Err() == nil {
		if cons == nil {
			// Made again whenever it is lost: the manager's server may come
			// back with a new store, or the stream be set up late.
			c, err := bus.EnsureConsumer(ctx, js, Stream, consumerConfig(durable, filter))
			if err != nil {
				fetched(false)
				failures++
				wait := backoff(failures)
				log.Warn().Err(err).Dur("retry_in", wait).Msg("consumer not created yet")
				if !sleep(ctx, wait) {
					break
				}
				continue
			}
			cons, failures = c, 0
			log.Info().Str("filter", filter).Msg("consuming")
		}
		batch, err := cons.Fetch(16, jetstream.FetchMaxWait(2*time.Second))
		if err == nil {
			for m := range batch.Messages() {
				settle(ctx, m, h(ctx, m), log)
			}
			err = batch.Error()
		}
		switch {
		case err == nil, errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrNoMessages):
			failures = 0
			fetched(true)
			continue
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("multicluster: consumer %s: %w", durable, err)
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, nats.ErrNoResponders):
			cons = nil
		}
		if ctx.Err() != nil {
			break
		}
		fetched(false)
		failures++
		wait := backoff(failures)
		log.Warn().Err(err).Dur("retry_in", wait).Msg("fetch failed")
		if !sleep(ctx, wait) {
			break
		}
	}
	return nil
}

func settle(ctx context.Context, m jetstream.Msg, err error, log zerolog.Logger) {
	switch {
	case err == nil:
		if aerr := m.Ack(); aerr != nil {
			log.Warn().Err(aerr).Str("subject", m.Subject()).Msg("ack failed; the message comes again")
		}
	case errors.Is(err, ErrBadMessage):
		log.Error().Err(err).Str("subject", m.Subject()).Msg("message parked: it cannot be handled")
		_ = m.TermWithReason(err.Error())
	case ctx.Err() != nil:
		_ = m.Nak()
	default:
		n := 1
		if md, merr := m.Metadata(); merr == nil {
			n = int(md.NumDelivered)
		}
		wait := backoff(n)
		log.Warn().Err(err).Str("subject", m.Subject()).Dur("retry_in", wait).Msg("handling failed; will retry")
		_ = m.NakWithDelay(wait)
	}
}

// backoff doubles from 500 ms up to 30 s, as the bus's consumers do.
func backoff(n int) time.Duration {
	return bus.ConsumerSpec{BackoffMin: 500 * time.Millisecond, BackoffMax: 30 * time.Second}.Backoff(uint64(max(n, 1)))
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// consumerConfig is the durable consumer named durable of the stream's
// messages on filter.
func consumerConfig(durable, filter string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable: durable, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxAckPending: 256,
	}
}

// ReportsConsumer is the manager's durable consumer of every worker's
// reports; `sluice setup` makes it.
func ReportsConsumer() jetstream.ConsumerConfig { return consumerConfig(ReportsDurable, ReportsFilter) }

// WorkerConsumer is the durable consumer of a worker cluster's offers, on
// the manager's stream; the manager's `sluice setup --workers` makes it.
func WorkerConsumer(worker string) jetstream.ConsumerConfig {
	return consumerConfig(WorkerDurable(worker), WorkerFilter(worker))
}
