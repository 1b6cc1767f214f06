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

// handler handles one message of the stream. A nil error acks it, an
// error wrapping ErrBadMessage terminates it (it can never be handled),
// any other error naks it for a retry with backoff.
type handler func(ctx context.Context, m jetstream.Msg) error

// consume runs a durable consumer of the stream (bus.RunMessages), one
// message at a time, until ctx ends; fetched (nil: none) is told after
// each fetch whether it worked. The stream keeps one message per
// subject, so a message handled late is still the one that holds. While
// the consumer cannot be had (the manager's server is away, or its setup
// has not run yet) it asks again with backoff: a worker starts before its
// manager as well as after.
func consume(ctx context.Context, js jetstream.JetStream, durable, filter string, h handler, log zerolog.Logger, fetched func(ok bool)) error {
	log = log.With().Str("consumer", durable).Logger()
	spec := consumerSpec(durable, filter)
	failures := 0
	for ctx.Err() == nil {
		started := false
		err := bus.RunMessages(ctx, js, spec, bus.MessageHandler(h), bus.WithLogger(log), bus.WithBatch(16),
			bus.WithFetched(fetched), bus.WithTerminatePoison(), bus.WithStarted(func() { started = true }))
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("multicluster: consumer %s: %w", durable, err)
		}
		if started {
			failures = 0 // it ran, then lost the consumer: back off from the start
		}
		failures++
		if fetched != nil {
			fetched(false)
		}
		wait := backoff(failures)
		log.Warn().Err(err).Dur("retry_in", wait).Msg("consumer not created yet")
		if !sleep(ctx, wait) {
			return nil
		}
	}
	return nil
}

// backoff doubles from 500 ms up to 30 s, as the consumer's redeliveries do.
func backoff(n int) time.Duration {
	return consumerSpec("-", "-").Backoff(uint64(max(n, 1)))
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

// consumerSpec is the durable consumer named durable of the stream's
// messages on filter: retried forever, 500 ms to 30 s apart.
func consumerSpec(durable, filter string) bus.ConsumerSpec {
	return bus.ConsumerSpec{Stream: Stream, Durable: durable, FilterSubjects: []string{filter}, MaxDeliver: bus.RetryForever,
		BackoffMin: 500 * time.Millisecond, BackoffMax: 30 * time.Second, AckWait: 30 * time.Second}
}

// consumerConfig is consumerSpec's consumer as the server keeps it.
func consumerConfig(durable, filter string) jetstream.ConsumerConfig {
	cfg := consumerSpec(durable, filter).ConsumerConfig()
	cfg.MaxAckPending = 256
	return cfg
}

// ReportsConsumer is the manager's durable consumer of every worker's
// reports; `sluice setup` makes it.
func ReportsConsumer() jetstream.ConsumerConfig { return consumerConfig(ReportsDurable, ReportsFilter) }

// WorkerConsumer is the durable consumer of a worker cluster's offers, on
// the manager's stream; the manager's `sluice setup --workers` makes it.
func WorkerConsumer(worker string) jetstream.ConsumerConfig {
	return consumerConfig(WorkerDurable(worker), WorkerFilter(worker))
}
