package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/supervise"
	"k8s.io/client-go/discovery"
)

// RunWhenServed runs the adapters' kinds until ctx ends, each once the API
// server serves it. The kinds served at the start run together; a kind
// whose CRD is missing is reported once and started when its CRD appears
// (discovery is asked again every poll). Kinds started later get a webhook
// on a port of their own next to WebhookAddress's host.
func RunWhenServed(ctx context.Context, cfg Config, adapters []jobframework.Adapter, disc discovery.DiscoveryInterface, mk func(Config, []jobframework.Adapter) (*Service, error), log zerolog.Logger, poll time.Duration) error {
	if len(adapters) == 0 {
		return errors.New("integration: no kinds to run")
	}
	// The batches of kinds, stopped in reverse when ctx ends or one fails.
	g := supervise.New(ctx, supervise.WithLogger(log))
	defer g.Stop()
	pending := slices.Clone(adapters)
	reported := map[string]bool{}
	started := false
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		var ready, waiting []jobframework.Adapter
		for _, ad := range pending {
			ok, err := jobframework.Served(disc, ad.Kind())
			switch {
			case err != nil:
				log.Warn().Err(err).Str("kind", ad.Kind().Name).Msg("cannot tell whether the kind is served; asking again")
				waiting = append(waiting, ad)
			case ok:
				ready = append(ready, ad)
			default:
				if !reported[ad.Kind().Name] {
					reported[ad.Kind().Name] = true
					log.Warn().Str("kind", ad.Kind().Name).Str("resource", ad.Kind().GVR().String()).
						Msg("kind not served by the API server (CRD not installed): skipped until it is")
				}
				waiting = append(waiting, ad)
			}
		}
		pending = waiting
		if len(ready) > 0 {
			c := cfg
			if started && c.WebhookAddress != "" {
				host, _, err := net.SplitHostPort(c.WebhookAddress)
				if err != nil {
					return fmt.Errorf("integration: webhook address %q: %w", c.WebhookAddress, err)
				}
				c.WebhookAddress = net.JoinHostPort(host, "0")
			}
			svc, err := mk(c, ready)
			if err != nil {
				return err
			}
			started = true
			log.Info().Strs("kinds", svc.Kinds()).Msg("integrations started")
			g.Go(strings.Join(svc.Kinds(), ","), svc.Run)
		}
		select {
		case <-ctx.Done():
			return g.Stop()
		case <-g.Failed():
			return g.Stop()
		case <-tick.C:
		}
	}
}
