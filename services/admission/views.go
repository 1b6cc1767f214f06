package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/catalog"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/visibility"
	"github.com/sluice-dev/sluice/internal/webview"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// ErrNotReady: the service has not loaded its state yet, or stopped.
var ErrNotReady = errors.New("admission: not serving (state not loaded yet, or stopped)")

// read runs f in the service's loop, where the engine lives, once the
// engine is built, and waits for it.
func (s *Service) read(ctx context.Context, f func()) error {
	if !s.synced.IsOpen() {
		return ErrNotReady
	}
	done := make(chan struct{})
	select {
	case s.queries <- func() { f(); close(done) }:
	case <-s.stopped:
		return ErrNotReady
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// viewShare: views are at least this many times their cost apart.
const viewShare = 5

// view is the engine's state as queries see it.
type view struct {
	pending *engine.PendingView
	stats   []engine.QueueStats
	// lqStats and cohorts are the LocalQueues and cohorts, for metrics.
	lqStats []engine.LocalQueueStats
	cohorts []engine.CohortStats
	// stream is the event stream, where the reasons of the trees other
	// replicas decide for are read (fromOwners).
	stream workloads.LastMsgReader
}

// takeView takes a view for the queries waiting for one, unless the last
// was taken too recently (a tick takes it then): however many queries
// come, views are at least an Interval apart, and five times as long as
// the last took, so the loop spends at most a sixth of its time on them
// (a view of 100,000 waiting workloads takes about 20 ms).
func (s *Service) takeView() {
	if !s.viewDue || !s.synced.IsOpen() || time.Since(s.lastView) < max(s.cfg.Interval, viewShare*s.viewCost) {
		return
	}
	start := time.Now()
	now := s.clock()
	v := &view{pending: s.eng.PendingView(), stats: s.eng.Stats(now), lqStats: s.eng.LocalQueueStats(now), cohorts: s.eng.CohortStats()}
	if s.stream != nil {
		v.stream = s.stream
	}
	s.view.Store(v)
	s.viewDue, s.lastView, s.viewCost = false, time.Now(), time.Since(start)
	s.views.Add(1)
	s.viewMu.Lock()
	ch := s.nextView
	s.nextView = nil
	s.viewMu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// currentView waits for a view taken after the query came, so that an
// answer is as fresh as one read in the loop, shared with every query
// that came meanwhile.
func (s *Service) currentView(ctx context.Context) (*view, error) {
	if !s.synced.IsOpen() {
		return nil, ErrNotReady
	}
	if !s.queryLimit.Allow() {
		return nil, fmt.Errorf("admission: more than %d queries a second: %w", s.cfg.QueriesPerSecond, visibility.ErrBusy)
	}
	s.viewMu.Lock()
	if s.nextView == nil {
		s.nextView = make(chan struct{})
	}
	ch := s.nextView
	s.viewMu.Unlock()
	select {
	case s.wantView <- struct{}{}:
	default: // asked already
	}
	select {
	case <-ch:
		return s.view.Load(), nil
	case <-s.stopped:
		return nil, ErrNotReady
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PendingInClusterQueue implements visibility.Source.
func (s *Service) PendingInClusterQueue(ctx context.Context, name string, offset, limit int) (engine.PendingPage, bool, error) {
	v, err := s.currentView(ctx)
	if err != nil {
		return engine.PendingPage{}, false, err
	}
	page, ok := v.pending.InClusterQueue(name, offset, limit)
	return s.fromOwners(ctx, v.stream, page), ok, nil
}

// PendingInLocalQueue implements visibility.Source.
func (s *Service) PendingInLocalQueue(ctx context.Context, namespace, name string, offset, limit int) (engine.PendingPage, bool, error) {
	v, err := s.currentView(ctx)
	if err != nil {
		return engine.PendingPage{}, false, err
	}
	page, ok := v.pending.InLocalQueue(namespace, name, offset, limit)
	return s.fromOwners(ctx, v.stream, page), ok, nil
}

// fromOwners gives the workloads of a page whose tree another replica
// decides for the reason that replica announced last (the stream's last
// event about each, when it is a pending event), read side by side: so
// any replica answers for every tree. Order and positions are this
// replica's own, from the same mirrored state.
func (s *Service) fromOwners(ctx context.Context, stream workloads.LastMsgReader, page engine.PendingPage) engine.PendingPage {
	if stream == nil {
		return page
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, pendingReads)
	for i := range page.Items {
		it := &page.Items[i]
		if !it.Elsewhere {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			last, err := workloads.Last(ctx, stream, events.WorkloadRef{Kind: it.Kind, Namespace: it.Namespace, Name: it.Name})
			if err == nil && last.Type == events.TypeWorkloadPendingV1 && last.Reason != "" {
				it.Reason = last.Reason
			}
		})
	}
	wg.Wait()
	return page
}

// Now is the service's clock, for the visibility API's waiting times.
func (s *Service) Now() time.Time { return s.clock() }

// VisibilityRoutes adds the visibility API (package visibility) to mux:
// the pending workloads of queues, and every workload (the catalog).
func (s *Service) VisibilityRoutes(mux *http.ServeMux) {
	visibility.Register(mux, s, s.clock)
	visibility.RegisterWorkloads(mux, s, s.clock)
}

// WebViewRoutes adds the web view and its live feed (package webview) to
// mux.
func (s *Service) WebViewRoutes(mux *http.ServeMux, opts ...webview.Option) {
	webview.Register(mux, s, webview.NATSFeed{NC: s.js.Conn()}, opts...)
}

// Cohorts implements webview.Source.
func (s *Service) Cohorts(ctx context.Context) ([]engine.CohortStats, error) {
	v, err := s.currentView(ctx)
	if err != nil {
		return nil, err
	}
	return v.cohorts, nil
}

// LocalQueues implements webview.Source.
func (s *Service) LocalQueues(ctx context.Context) ([]engine.LocalQueueStats, error) {
	v, err := s.currentView(ctx)
	if err != nil {
		return nil, err
	}
	return v.lqStats, nil
}

// History implements webview.Source: the last hour, from the catalog of
// the event stream.
func (s *Service) History(ctx context.Context) (catalog.History, error) {
	cat, err := s.readyCatalog(ctx)
	if err != nil {
		return catalog.History{}, err
	}
	return cat.History(s.clock()), nil
}

// Queues implements webview.Source.
func (s *Service) Queues(ctx context.Context) ([]engine.QueueStats, error) {
	v, err := s.currentView(ctx)
	if err != nil {
		return nil, err
	}
	return v.stats, nil
}
