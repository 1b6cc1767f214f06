// Package usage computes, from the quota ledger and the workload records,
// how much each ClusterQueue and LocalQueue uses and how many workloads
// they hold and keep waiting. The watcher writes it into queue status; quota
// accounting publishes it as events.
package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
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

// Compute reads the ledger and the workload records. lqToCQ maps a
// LocalQueue (namespace/name) to its ClusterQueue, for counting the
// pending workloads of ClusterQueues.
func Compute(ctx context.Context, js jetstream.JetStream, lqToCQ map[string]string) (Report, error) {
	rep := Report{ClusterQueues: map[string]*Queue{}, LocalQueues: map[string]*Queue{}}
	wls, err := readWorkloads(ctx, js)
	if err != nil {
		return rep, err
	}
	led, err := bus.OpenKV(ctx, js, ledger.Bucket)
	if err != nil {
		return rep, fmt.Errorf("open %s: %w", ledger.Bucket, err)
	}
	// A corrupt reservation is left out (admission and quota accounting
	// report it); the report counts the others.
	snap, err := ledger.Read(ctx, led)
	if err != nil && !errors.Is(err, ledger.ErrCorrupt) {
		return rep, err
	}
	held := map[string]bool{}
	for wk, h := range snap.Reservations {
		r := h.Reservation
		held[wk] = true
		cq := get(rep.ClusterQueues, r.ClusterQueue)
		cq.Admitted++
		rec := wls[wk]
		if rec == nil {
			continue
		}
		lq := get(rep.LocalQueues, rec.Workload.Namespace+"/"+rec.LocalQueue)
		lq.Admitted++
		for _, pa := range r.PodSets {
			for _, ps := range rec.PodSets {
				if ps.Name != pa.Name {
					continue
				}
				for res, qs := range ps.Requests {
					q, err := resource.ParseQuantity(qs)
					if err != nil {
						continue
					}
					v := engine.Canonical(res, q) * int64(pa.Count)
					cq.add(pa.Flavors[res], res, v)
					lq.add(pa.Flavors[res], res, v)
				}
			}
		}
	}
	for wk, rec := range wls {
		if held[wk] {
			continue
		}
		lq := rec.Workload.Namespace + "/" + rec.LocalQueue
		get(rep.LocalQueues, lq).Pending++
		if cq, ok := lqToCQ[lq]; ok {
			get(rep.ClusterQueues, cq).Pending++
		}
	}
	return rep, nil
}

// readWorkloads reads every workload record by engine key, in one pass
// over the bucket (a watch delivers every current value, then nil), not
// one request per key.
func readWorkloads(ctx context.Context, js jetstream.JetStream) (map[string]*events.WorkloadSubmittedV1, error) {
	kv, err := bus.OpenKV(ctx, js, workloads.Bucket)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", workloads.Bucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", workloads.Bucket, err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]*events.WorkloadSubmittedV1{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read %s: %w", workloads.Bucket, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read %s: watch closed", workloads.Bucket)
			}
			if e == nil {
				return out, nil // every current record delivered
			}
			var rec events.WorkloadSubmittedV1
			if json.Unmarshal(e.Value(), &rec) == nil {
				out[workloads.EngineKey(rec.Workload)] = &rec
			}
		}
	}
}
