package admission

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/shard"
)

// Admission replicas share the cohort trees, the engine's independent
// units of decision (engine.TreeOf): each tree is a lease in the
// sluice-shards bucket (group "admission", one shard per tree, numbered by
// the trees' age), and a replica decides only for the trees whose leases
// it holds, about an equal share of them each. Every replica still mirrors
// the whole configuration, every workload and the whole ledger, so that it
// can take over any tree at once: when a replica dies its leases expire
// (bus.ShardTTL) and the others take its trees; when one stops, it gives
// them back first. Trees are numbered oldest first (numberTrees), so a new
// queue does not move the others. Two replicas that briefly both hold a
// tree (the trees were renumbered by a configuration change one of them
// has not seen yet) cannot both book its quota: the ledger's
// compare-and-set per tree lets one through.

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
	born := map[string]time.Time{}
	for cq, at := range s.cqBorn {
		tree := s.eng.TreeOf(cq)
		if b, ok := born[tree]; !ok || at.Before(b) {
			born[tree] = at
		}
	}
	trees := numberTrees(s.eng.Trees(), born)
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

// numberTrees orders the trees for their leases: oldest first (a tree is
// as old as its oldest ClusterQueue), then by name. A tree created later
// comes after every other, so adding a queue, the change that happens
// most, moves no tree to another lease, nor to another replica; only
// removing a tree (or joining two) renumbers those after it.
func numberTrees(trees []string, born map[string]time.Time) []string {
	out := slices.Clone(trees)
	slices.SortStableFunc(out, func(a, b string) int {
		if c := born[a].Compare(born[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return out
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
