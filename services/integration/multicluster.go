package integration

import (
	"context"
	"slices"
	"sort"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// multiClusterQueues are the LocalQueues ("namespace/name") of snap whose
// ClusterQueue runs a multi-cluster admission check: their jobs are
// dispatched to worker clusters, and their kinds' managedBy fields say so.
func multiClusterQueues(snap configstore.Snapshot) []string {
	dispatching := map[string]bool{}
	for _, ac := range snap.Objects.AdmissionChecks {
		if ac.Spec.ControllerName == v1beta1.MultiClusterController {
			dispatching[ac.Name] = true
		}
	}
	cqs := map[string]bool{}
	for _, cq := range snap.Objects.ClusterQueues {
		for _, r := range cq.Spec.CheckRules() {
			if dispatching[r.Name] {
				cqs[cq.Name] = true
			}
		}
	}
	var out []string
	for _, lq := range snap.Objects.LocalQueues {
		if cqs[lq.Spec.ClusterQueue] {
			out = append(out, lq.Namespace+"/"+lq.Name)
		}
	}
	sort.Strings(out)
	return out
}

// dispatchesToWorkers reports whether a job created in the LocalQueue
// namespace/queue is dispatched to worker clusters (the webhook's
// WithMultiClusterQueues).
func (s *Service) dispatchesToWorkers(namespace, queue string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := slices.BinarySearch(s.mcQueuesLocked(), namespace+"/"+queue)
	return ok
}

// ensureWebhookConditions registers again, when this replica registers
// the webhook itself, the webhook configurations of its kinds once the
// multi-cluster queues or the namespaces with a default LocalQueue
// changed: the match conditions name them (the chart's call the webhook
// for any queue and any namespace instead).
func (s *Service) ensureWebhookConditions(ctx context.Context) error {
	if s.wh == nil || s.cfg.ExternalWebhookConfiguration {
		return nil
	}
	s.mu.Lock()
	queues := s.mcQueuesLocked()
	defaults := s.defaultQueues
	s.mu.Unlock()
	if slices.Equal(queues, s.whQueues) && slices.Equal(defaults, s.whDefaults) {
		return nil
	}
	for _, name := range s.Kinds() {
		var kind jobframework.Kind
		if k, ok := s.kinds[name]; ok {
			kind = k.kind
		} else if ad, ok := s.parents[name]; ok {
			kind = ad.Kind() // a parent kind's objects are defaulted too
		} else {
			continue
		}
		url, err := s.wh.URL(s.cfg.WebhookHost, kind)
		if err != nil {
			return err
		}
		opts := append(s.unqueuedEntry(defaults), jobframework.WithMultiClusterQueueNames(queues))
		if err := jobframework.EnsureWebhookConfiguration(ctx, s.kube, kind, url, s.wh.CABundle(), s.cfg.KueueLabels, opts...); err != nil {
			return err
		}
	}
	s.whQueues, s.whDefaults = queues, defaults
	return nil
}
