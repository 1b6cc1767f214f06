package admission

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/internal/shard"
)

// Admission replicas share the cohort trees, the engine's independent
// units of decision (engine.TreeOf): each tree is a lease in the
// sluice-shards bucket (group "admission", one shard per tree, numbered by
// the trees' names), and a replica decides only for the trees whose leases
// it holds, about an equal share of them each. Every replica still mirrors
// the whole configuration, every workload and the whole ledger, so that it
// can take over any tree at once: when a replica dies its leases expire
// (bus.ShardTTL) and the others take its trees; when one stops, it gives
// them back first. Two replicas that briefly both hold a tree (the trees
// were renumbered by a configuration change one of them has not seen yet)
// cannot both book its quota: the ledger's compare-and-set per tree lets
// one through.

// leaseGroup is the admission replicas' group in the sharding bucket.
const leaseGroup = "admission"

// runLeases renews, takes and gives back tree leases every fifth of their
// TTL, and at once when the trees were renumbered (leaseKick), until ctx
// ends, telling the loop after each round (leaseTicks).
func (s *Service) runLeases(ctx context.Context, owner *shard.Owner, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		owner.Tick(ctx)
		select {
		case s.leaseTicks <- struct{}{}:
		default: // the loop has one to read already
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.leaseKick:
		}
	}
}

// renumberTrees numbers the trees of the configuration for their leases:
// every replica, once it has the same configuration, numbers them alike.
func (s *Service) renumberTrees(ctx context.Context) {
	if s.owner == nil {
		return
	}
	trees := s.eng.Trees()
	index := make(map[string]int, len(trees))
	for i, t := range trees {
		index[t] = i
	}
	s.treeIndex = index
	if err := s.owner.Resize(ctx, max(1, len(trees))); err != nil {
		s.log.Error().Err(err).Msg("tree leases not resized")
	}
	s.metrics.trees.Set(float64(len(trees)))
	s.applyLeases()
	select {
	case s.leaseKick <- struct{}{}: // take a share of the new count now
	default:
	}
}

// applyLeases makes the engine decide for the trees whose leases this
// replica holds now. The workloads of a tree it gains are told their
// reasons again where the stream says otherwise (another replica told
// them last).
func (s *Service) applyLeases() {
	if s.owner == nil {
		return
	}
	before := s.eng.Owned()
	s.eng.SetOwner(func(tree string) bool {
		if tree == "" {
			// Workloads without a queue are told by the holder of the
			// first tree.
			return s.owner.HoldsShard(0)
		}
		i, ok := s.treeIndex[tree]
		return ok && s.owner.HoldsShard(i)
	})
	after := s.eng.Owned()
	s.metrics.treesOwned.Set(float64(len(after)))
	if slices.Equal(before, after) {
		return
	}
	s.log.Info().Strs("trees", after).Int("of", len(s.treeIndex)).Msg("deciding for cohort trees")
	s.dirty = true
	gained := map[string]bool{}
	for _, t := range after {
		if !slices.Contains(before, t) {
			gained[t] = true
		}
	}
	for wk := range s.told {
		if cq := s.eng.ClusterQueueOf(wk); gained[s.eng.TreeOf(cq)] || (cq == "" && s.owner.HoldsShard(0)) {
			delete(s.told, wk)
		}
	}
}
