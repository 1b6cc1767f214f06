package main

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// kueueMetrics are the metrics Sluice serves as sluice_NAME that Kueue
// serves as kueue_NAME with the same meaning and labels: with
// --metrics-names kueue they are served under Kueue's names, so that
// dashboards and alerts written for Kueue read Sluice unchanged. Sluice's
// own metrics keep their names.
var kueueMetrics = map[string]bool{
	"admission_wait_time_seconds": true, "admitted_workloads_total": true, "evicted_workloads_total": true,
	"preempted_workloads_total": true, "pending_workloads": true,
	"cluster_queue_info": true, "cluster_queue_nominal_quota": true, "cluster_queue_resource_reservation": true,
	"local_queue_admission_wait_time_seconds": true, "local_queue_admitted_active_workloads": true,
	"local_queue_admitted_workloads_total": true, "local_queue_evicted_workloads_total": true, "local_queue_pending_workloads": true,
	"local_queue_reserving_active_workloads": true, "local_queue_resource_reservation": true, "local_queue_resource_usage": true,
	"cohort_info": true, "cohort_subtree_admitted_active_workloads": true, "cohort_subtree_admitted_workloads_total": true,
	"cohort_subtree_quota": true, "cohort_subtree_resource_reservations": true,
	"cluster_queue_status": true, "local_queue_status": true,
	"quota_reserved_workloads_total": true, "local_queue_quota_reserved_workloads_total": true,
	"quota_reserved_wait_time_seconds": true, "local_queue_quota_reserved_wait_time_seconds": true,
}

// metricNames is --metrics-names: sluice (default) or kueue.
func metricNames(g prometheus.Gatherer, names string) (prometheus.Gatherer, error) {
	switch names {
	case "", "sluice":
		return g, nil
	case "kueue":
		return kueueNamed{g}, nil
	}
	return nil, usageError{Err: fmt.Errorf("--metrics-names %q: must be sluice or kueue", names)}
}

// kueueNamed serves the metrics Kueue also has under Kueue's names.
type kueueNamed struct{ prometheus.Gatherer }

func (k kueueNamed) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := k.Gatherer.Gather()
	for _, mf := range mfs {
		if name, ok := strings.CutPrefix(mf.GetName(), "sluice_"); ok && kueueMetrics[name] {
			mf.Name = proto.String("kueue_" + name)
		}
	}
	return mfs, err
}
