package watcher

import (
	"context"
	"math"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/lqusage"
)

// lqUsage follows the LocalQueues' Admission Fair Sharing usage that
// admission stores, for their status.
type lqUsage struct {
	mu     sync.Mutex
	byKey  map[string]lqusage.Value
	synced chan struct{}
}

func newLQUsage() *lqUsage {
	return &lqUsage{byKey: map[string]lqusage.Value{}, synced: make(chan struct{})}
}

// run watches the bucket until ctx ends.
func (u *lqUsage) run(ctx context.Context, js jetstream.JetStream, log zerolog.Logger) error {
	kv, err := bus.OpenKV(ctx, js, lqusage.Bucket)
	if err != nil {
		return err
	}
	return bus.WatchKV(ctx, kv, u.synced, func(e jetstream.KeyValueEntry, _ bool) {
		u.mu.Lock()
		defer u.mu.Unlock()
		if e.Operation() != jetstream.KeyValuePut {
			delete(u.byKey, e.Key())
			return
		}
		v, err := lqusage.Decode(e.Value())
		if err != nil {
			log.Warn().Err(err).Str("queue", e.Key()).Msg("LocalQueue usage not reported")
			delete(u.byKey, e.Key())
			return
		}
		u.byKey[e.Key()] = v
	}, bus.WithWatchLogger(log))
}

// status is LocalQueue namespace/name's status.fairSharing, nil when its
// usage is not known (its ClusterQueue does not order by usage).
func (u *lqUsage) status(namespace, name string) *v1beta1.LocalQueueFairSharingStatus {
	u.mu.Lock()
	v, ok := u.byKey[lqusage.Key(namespace, name)]
	u.mu.Unlock()
	if !ok {
		return nil
	}
	st := &v1beta1.LocalQueueFairSharingStatus{AdmissionFairSharingStatus: &v1beta1.AdmissionFairSharingStatus{
		ConsumedResources: v.Resources(),
		LastUpdate:        metav1.NewTime(v.LastUpdate).Rfc3339Copy(),
	}}
	if v.WeightedShare != nil {
		st.WeightedShare = int64(math.Round(min(*v.WeightedShare*1000, math.MaxInt64/2)))
	} else {
		st.WeightedShare = math.MaxInt64
	}
	return st
}
