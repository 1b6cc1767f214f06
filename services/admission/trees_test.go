package admission_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/services/admission"
)

// TestReplicasShareTheTrees: two replicas decide for two cohort trees
// each, together all four, and admit in all of them; when one stops, the
// other takes its trees and goes on admitting there, and no queue ever
// holds more than its quota in the ledger.
func TestReplicasShareTheTrees(t *testing.T) {
	h := newHarness(t)
	h.put(h.cfg, configstore.Key(configstore.KindResourceFlavor, "", "default"), flavor("default"))
	var all []string
	for i := range 4 {
		cq := clusterQueue(fmt.Sprintf("cq-%d", i), "2", nil)
		cq.Spec.Cohort = fmt.Sprintf("cohort-%d", i)
		h.put(h.cfg, configstore.Key(configstore.KindClusterQueue, "", cq.Name), cq)
		h.put(h.cfg, configstore.Key(configstore.KindLocalQueue, ns, fmt.Sprintf("lq-%d", i)), localQueue(fmt.Sprintf("lq-%d", i), cq.Name))
		all = append(all, "cohort/"+cq.Spec.Cohort)
	}
	h.replica = "a"
	h.start()
	a, stopA := h.svc, h.stopF
	h.replica = "b"
	h.start()
	b := h.svc
	owned := func() (ta, tb []string, state string) {
		ta, errA := a.OwnedTrees(h.ctx)
		tb, errB := b.OwnedTrees(h.ctx)
		return ta, tb, fmt.Sprintf("a %v (%v), b %v (%v)", ta, errA, tb, errB)
	}
	h.eventually("the trees split two and two", func() (bool, string) {
		ta, tb, state := owned()
		both := slices.Sorted(slices.Values(append(slices.Clone(ta), tb...)))
		return len(ta) == 2 && len(tb) == 2 && slices.Equal(both, all), state
	})
	for i := range 4 {
		for j := range 3 {
			h.submit(fmt.Sprintf("w-%d-%d", i, j), fmt.Sprintf("lq-%d", i), 0, 1, "1")
		}
	}
	inLedger := func(want int) func() (bool, string) {
		return func() (bool, string) {
			per := map[string]int{}
			for _, r := range h.reservations() {
				per[r.ClusterQueue]++
			}
			for cq, n := range per {
				if n > 2 {
					t.Fatalf("ClusterQueue %s holds %d one-CPU reservations, over its 2 CPUs", cq, n)
				}
			}
			got := 0
			for _, n := range per {
				got += n
			}
			return got == want, fmt.Sprint(per)
		}
	}
	h.eventually("two admitted in every queue", inLedger(8))
	// Either replica answers the pending API for every tree with the
	// reason the tree's owner announced.
	for i := range 4 {
		name := fmt.Sprintf("w-%d-2", i)
		h.eventually(name+" told why it waits", func() (bool, string) {
			ev, ok := h.lastPending(name)
			if !ok {
				return false, "no pending event"
			}
			for _, svc := range []*admission.Service{a, b} {
				page, found, err := svc.PendingInClusterQueue(h.ctx, fmt.Sprintf("cq-%d", i), 0, 10)
				if err != nil || !found || len(page.Items) != 1 || page.Items[0].Reason != ev.Reason {
					return false, fmt.Sprintf("event %q, page %+v (found %v, %v)", ev.Reason, page, found, err)
				}
			}
			return true, ""
		})
	}

	stopA()
	h.eventually("b decides for every tree", func() (bool, string) {
		tb, err := b.OwnedTrees(h.ctx)
		return slices.Equal(tb, all), fmt.Sprint(tb, err)
	})
	for i := range 4 {
		h.finish(fmt.Sprintf("w-%d-0", i))
	}
	// The third of each queue takes the place of the first.
	h.eventually("b admits in a's trees too", inLedger(8))
	for i := range 4 {
		if _, ok := h.reservations()[key(fmt.Sprintf("w-%d-2", i))]; !ok {
			t.Errorf("w-%d-2 not admitted after w-%d-0 finished", i, i)
		}
	}
}
