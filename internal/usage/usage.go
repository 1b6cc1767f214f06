// Package usage computes, from the quota ledger and the workload records,
// how much each ClusterQueue and LocalQueue uses and how many workloads
// they hold and keep waiting. The watcher writes it into queue status; quota
// accounting publishes it as events.
package usage

import (
	"github.com/sluice-dev/sluice/internal/engine"
)

// Queue is the usage of one queue.
type Queue struct {
	Pending, Admitted int32
	// Amounts maps flavor → resource → canonical amount (see engine).
	Amounts map[string]map[string]int64
}

func (q *Queue) add(flavor, res string, v int64) {
	if q.Amounts == nil {
		q.Amounts = map[string]map[string]int64{}
	}
	if q.Amounts[flavor] == nil {
		q.Amounts[flavor] = map[string]int64{}
	}
	q.Amounts[flavor][res] += v
}

// Quantities renders Amounts as Kubernetes quantity strings.
func (q *Queue) Quantities() map[string]map[string]string {
	out := map[string]map[string]string{}
	for f, rs := range q.Amounts {
		out[f] = map[string]string{}
		for r, v := range rs {
			out[f][r] = engine.Format(r, v)
		}
	}
	return out
}

// Report is the usage of every queue: ClusterQueues by name, LocalQueues
// by namespace/name.
type Report struct {
	ClusterQueues map[string]*Queue
	LocalQueues   map[string]*Queue
}

func get(m map[string]*Queue, k string) *Queue {
	if m[k] == nil {
		m[k] = &Queue{}
	}
	return m[k]
}
