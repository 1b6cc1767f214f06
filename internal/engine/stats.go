package engine

import (
	"sort"
	"time"
)

// LocalQueueStats is one LocalQueue, for metrics: its waiting workloads,
// the admitted ones holding quota through it, and what they hold.
type LocalQueueStats struct {
	Namespace, Name, ClusterQueue string
	// Running: workloads submitted to it can be admitted (its Active
	// condition).
	Running bool
	// Active and Inadmissible are as in QueueStats.
	Active, Inadmissible int
	// Reserving counts the workloads holding quota (admitted, or waiting
	// for their admission checks); Admitted those of them admitted.
	Reserving, Admitted int
	// Resources are what they hold, per flavor and resource, in the
	// engine's units: Reserved by all, Used by the admitted ones.
	Resources []LocalQueueResource
}

// LocalQueueResource is one flavor-resource a LocalQueue's workloads hold.
type LocalQueueResource struct {
	Flavor, Resource string
	Reserved, Used   int64
}

// CohortStats is one cohort, for metrics: its place in the tree and what
// its subtree (every ClusterQueue and cohort below it) holds.
type CohortStats struct {
	Cohort, Parent, Root string
	// Admitted counts the admitted workloads holding quota in the subtree.
	Admitted int
	// Resources: Nominal sums the subtree's nominal quotas (the cohort's
	// own included), Reserved its ClusterQueues' reservations.
	Resources []ResourceStats
}

// LocalQueueStats reports every LocalQueue, by namespace and name; now
// decides whether a backoff still holds.
func (e *Engine) LocalQueueStats(now time.Time) []LocalQueueStats {
	byKey := map[string]*LocalQueueStats{}
	res := map[string]map[fr]*LocalQueueResource{}
	for key, lq := range e.tree.lqs {
		a, _ := e.LocalQueueActivity(lq.Namespace, lq.Name)
		byKey[key] = &LocalQueueStats{Namespace: lq.Namespace, Name: lq.Name, ClusterQueue: lq.ClusterQueue, Running: a.Active}
		res[key] = map[fr]*LocalQueueResource{}
	}
	for _, cq := range e.tree.cqOrder {
		for _, ws := range cq.pending {
			st := statsOf(byKey, ws)
			switch {
			case st == nil, ws.admitted != nil, ws.pods.deactivated != "", ws.gone:
			case ws.parked || ws.invalid != "" || now.Before(ws.pods.requeueAt):
				st.Inadmissible++
			default:
				st.Active++
			}
		}
		for _, ws := range cq.admitted {
			st := statsOf(byKey, ws)
			if st == nil || ws.admitted == nil {
				continue
			}
			st.Reserving++
			if !ws.admitted.awaiting {
				st.Admitted++
			}
			m := res[ws.lq.Namespace+"/"+ws.lq.Name]
			for _, u := range ws.admitted.usage {
				k := e.tree.frs[u.fr]
				r := m[k]
				if r == nil {
					r = &LocalQueueResource{Flavor: k.Flavor, Resource: k.Resource}
					m[k] = r
				}
				r.Reserved += u.v
				if !ws.admitted.awaiting {
					r.Used += u.v
				}
			}
		}
	}
	out := make([]LocalQueueStats, 0, len(byKey))
	for key, st := range byKey {
		for _, r := range res[key] {
			st.Resources = append(st.Resources, *r)
		}
		sort.Slice(st.Resources, func(i, j int) bool {
			a, b := st.Resources[i], st.Resources[j]
			return a.Flavor < b.Flavor || (a.Flavor == b.Flavor && a.Resource < b.Resource)
		})
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace < out[j].Namespace || (out[i].Namespace == out[j].Namespace && out[i].Name < out[j].Name)
	})
	return out
}

func statsOf(byKey map[string]*LocalQueueStats, ws *wlState) *LocalQueueStats {
	if ws.lq == nil {
		return nil
	}
	return byKey[ws.lq.Namespace+"/"+ws.lq.Name]
}

// CohortStats reports every cohort, by name.
func (e *Engine) CohortStats() []CohortStats {
	out := make([]CohortStats, 0, len(e.tree.cohorts))
	for name, n := range e.tree.cohorts {
		st := CohortStats{Cohort: name, Root: n.root().name}
		if n.parent != nil {
			st.Parent = n.parent.name
		}
		nominal := make([]int64, len(e.tree.frs))
		reserved := make([]int64, len(e.tree.frs))
		var walk func(m *node)
		walk = func(m *node) {
			for i := range m.nominal {
				nominal[i] += m.nominal[i]
			}
			if m.cq != nil {
				for i := range m.usage {
					reserved[i] += m.usage[i]
				}
				for _, ws := range m.cq.admitted {
					if ws.admitted != nil && !ws.admitted.awaiting {
						st.Admitted++
					}
				}
			}
			for _, c := range m.children {
				walk(c)
			}
		}
		walk(n)
		for i, k := range e.tree.frs {
			if nominal[i] != 0 || reserved[i] != 0 {
				st.Resources = append(st.Resources, ResourceStats{Flavor: k.Flavor, Resource: k.Resource, Reserved: reserved[i], Nominal: nominal[i]})
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cohort < out[j].Cohort })
	return out
}

// Cohorts is the chain of cohorts a ClusterQueue is in, nearest first
// (none when it is in no cohort or does not exist).
func (e *Engine) Cohorts(clusterQueue string) []string {
	cq, ok := e.tree.cqs[clusterQueue]
	if !ok {
		return nil
	}
	var out []string
	for n := cq.node.parent; n != nil; n = n.parent {
		out = append(out, n.name)
	}
	return out
}
