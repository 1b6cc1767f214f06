package admission

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/catalog"
	"github.com/sluice-dev/sluice/internal/visibility"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// catalogWait bounds how long a first read waits for the catalog to read
// the stream's history.
const catalogWait = 30 * time.Second

// workloadCatalog is the catalog of the event stream behind the visibility
// API's workloads and the web view's workload pages. It starts following
// the stream at its first reader, so an admission service nobody asks
// spends nothing on it, and stops with the service.
type workloadCatalog struct {
	once     sync.Once
	cat      *catalog.Catalog
	follower *catalog.Follower
}

// catalog is the service's catalog, following the stream from the first
// call on.
func (s *Service) catalog() (*catalog.Catalog, *catalog.Follower) {
	c := &s.wlCatalog
	c.once.Do(func() {
		c.cat = catalog.New(s.catalogOpts...)
		c.follower = catalog.NewFollower(c.cat)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-s.stopped
			cancel()
		}()
		go func() {
			for ctx.Err() == nil {
				err := c.follower.Run(ctx, s.js.Conn())
				if err == nil || ctx.Err() != nil {
					return
				}
				s.log.Warn().Err(err).Msg("workload catalog: reading the event stream failed; trying again")
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	})
	return c.cat, c.follower
}

// readyCatalog is the catalog once it has read the stream's history.
func (s *Service) readyCatalog(ctx context.Context) (*catalog.Catalog, error) {
	cat, f := s.catalog()
	ctx, cancel := context.WithTimeout(ctx, catalogWait)
	defer cancel()
	select {
	case <-f.Ready():
		return cat, nil
	case <-s.stopped:
		return nil, ErrNotReady
	case <-ctx.Done():
		return nil, fmt.Errorf("admission: the workload catalog has not read the event stream yet: %w", ctx.Err())
	}
}

// withPlaces gives the waiting workloads among ws their places in line and
// their reasons as of the current view.
func (s *Service) withPlaces(ctx context.Context, ws []visibility.Workload) error {
	waiting := false
	for _, w := range ws {
		waiting = waiting || w.Status.State == visibility.StatePending
	}
	if !waiting {
		return nil
	}
	v, err := s.currentView(ctx)
	if err != nil {
		return err
	}
	for i := range ws {
		w := &ws[i]
		if w.Status.State != visibility.StatePending {
			continue
		}
		it, ok := v.pending.Find(workloads.Name{Kind: w.Spec.JobKind, Namespace: w.Namespace, Name: w.Spec.JobName}.Engine())
		if !ok {
			continue
		}
		cq, lq := int32(it.PositionInClusterQueue), int32(it.PositionInLocalQueue)
		w.Status.PositionInClusterQueue, w.Status.PositionInLocalQueue = &cq, &lq
		if it.ClusterQueue != "" {
			w.Status.ClusterQueue = it.ClusterQueue
		}
		if it.Reason != "" && !it.Elsewhere {
			w.Status.Reason = it.Reason
		}
	}
	return nil
}

// ListWorkloads implements visibility.WorkloadSource.
func (s *Service) ListWorkloads(ctx context.Context, namespace string) ([]visibility.Workload, string, error) {
	cat, err := s.readyCatalog(ctx)
	if err != nil {
		return nil, "", err
	}
	ws, seq := cat.List(namespace, s.clock())
	if err := s.withPlaces(ctx, ws); err != nil {
		return nil, "", err
	}
	return ws, fmt.Sprint(seq), nil
}

// GetWorkload implements visibility.WorkloadSource: the workload with
// every event the stream holds of it.
func (s *Service) GetWorkload(ctx context.Context, namespace, name string) (visibility.Workload, bool, error) {
	cat, err := s.readyCatalog(ctx)
	if err != nil {
		return visibility.Workload{}, false, err
	}
	w, ok := cat.Get(namespace, name, s.clock())
	if !ok {
		return w, false, nil
	}
	one := []visibility.Workload{w}
	if err := s.withPlaces(ctx, one); err != nil {
		return w, false, err
	}
	w = one[0]
	ref := events.WorkloadRef{Kind: w.Spec.JobKind, Namespace: namespace, Name: w.Spec.JobName}
	w.Status.Events, err = catalog.Events(ctx, s.js.Conn(), ref, string(w.UID))
	return w, true, err
}

// WatchWorkloads implements visibility.WorkloadSource.
func (s *Service) WatchWorkloads(ctx context.Context, namespace, resourceVersion string) (<-chan visibility.WorkloadWatchEvent, error) {
	cat, err := s.readyCatalog(ctx)
	if err != nil {
		return nil, err
	}
	from := cat.Seq()
	if resourceVersion != "" {
		if _, err := fmt.Sscan(resourceVersion, &from); err != nil {
			return nil, fmt.Errorf("resourceVersion %q: not one this API gave: %w", resourceVersion, visibility.ErrExpired)
		}
	}
	if _, _, _, ok := cat.Since(namespace, from); !ok {
		return nil, visibility.ErrExpired
	}
	out := make(chan visibility.WorkloadWatchEvent, 64)
	go func() {
		defer close(out)
		for {
			evs, last, woken, ok := cat.Since(namespace, from)
			if !ok {
				return // fell behind the kept changes: the client lists again
			}
			for _, ev := range evs {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			from = last
			select {
			case <-woken:
			case <-ctx.Done():
				return
			case <-s.stopped:
				return
			}
		}
	}()
	return out, nil
}
