package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// startupRetry is the pause between two attempts to start.
var startupRetry = 2 * time.Second

// retryAtStart runs run, and runs it again when it fails within
// --startup-wait of the first attempt: at a fresh install the NATS server
// and `sluice setup` may come up after a service's pod (a bucket or a
// durable consumer is missing until setup is done, and a service notices
// only when it opens it), and restarting the pod for it would put it into
// the kubelet's growing back-off. A usage error is never retried, nor is
// anything after the wait: the last error is returned then.
//
// Each attempt gets a context of its own, cancelled when it ends, so
// nothing an attempt started outlives it.
func (c *common) retryAtStart(ctx context.Context, log zerolog.Logger, run func(context.Context) error) error {
	deadline := time.Now().Add(c.startupWait)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithCancel(ctx)
		err := run(actx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		var ue usageError
		if errors.As(err, &ue) || !time.Now().Add(startupRetry).Before(deadline) {
			if attempt > 1 {
				return fmt.Errorf("not started after %d attempts in %s: %w", attempt, c.startupWait, err)
			}
			return err
		}
		log.Warn().Err(err).Int("attempt", attempt).Msg("cannot start yet (NATS not answering, or sluice setup not done); retrying")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(startupRetry):
		}
	}
}
