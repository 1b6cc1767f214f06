package admission

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/engine"
)

// metrics are the admission service's Prometheus metrics. Where Kueue has
// a metric of the same meaning, the name is Kueue's with sluice_ for
// kueue_, and the labels are Kueue's, so dashboards port.
type metrics struct {
	admitted      *prometheus.CounterVec
	waitTime      *prometheus.HistogramVec
	evicted       *prometheus.CounterVec
	preempted     *prometheus.CounterVec
	cycleDuration prometheus.Histogram
	cycleAdmitted prometheus.Histogram
	conflicts     prometheus.Counter
	// trees and treesOwned count the cohort trees, and those this
	// replica decides for (trees.go).
	trees, treesOwned prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_admitted_workloads_total",
			Help: "Workloads admitted, by ClusterQueue."}, []string{"cluster_queue"}),
		waitTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_admission_wait_time_seconds",
			Help:    "Time from a workload's creation to its admission, by ClusterQueue.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 16)}, []string{"cluster_queue"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_evicted_workloads_total",
			Help: "Workloads evicted other than by preemption (stop policies, waitForPodsReady, admission checks, maximum execution time), by ClusterQueue and reason."},
			[]string{"cluster_queue", "reason"}),
		preempted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_preempted_workloads_total",
			Help: "Workloads chosen for preemption, by the preemptor's ClusterQueue and the reason."},
			[]string{"preempting_cluster_queue", "reason"}),
		cycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_admission_cycle_duration_seconds",
			Help: "Duration of an admission cycle: the engine and the ledger writes.", Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14)}),
		cycleAdmitted: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_admission_cycle_admitted_workloads",
			Help: "Workloads admitted by one admission cycle.", Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_conflicts_total",
			Help: "Quota ledger compare-and-set writes refused because another replica moved first."}),
		trees: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_admission_cohort_trees",
			Help: "Cohort trees (units of decision) of the configuration, shared among the admission replicas."}),
		treesOwned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_admission_cohort_trees_owned",
			Help: "Cohort trees this admission replica decides for (holds the leases of)."}),
	}
}

// Collectors returns the service's metrics for a registry: its counters
// and the queue gauges, read from the engine at each scrape.
func (s *Service) Collectors() []prometheus.Collector {
	m := s.metrics
	return []prometheus.Collector{m.admitted, m.waitTime, m.evicted, m.preempted, m.cycleDuration, m.cycleAdmitted, m.conflicts, m.trees, m.treesOwned,
		queueGauges{s}}
}

var (
	pendingDesc = prometheus.NewDesc("sluice_pending_workloads",
		"Workloads waiting, by ClusterQueue and status: active (may be admitted next cycle) or inadmissible (waiting for quota to be released, for a backoff, or deactivated).",
		[]string{"cluster_queue", "status"}, nil)
	reservationDesc = prometheus.NewDesc("sluice_cluster_queue_resource_reservation",
		"Quota reserved by admitted workloads, in base units (CPU in cores, memory in bytes).",
		[]string{"cohort", "cluster_queue", "flavor", "resource"}, nil)
	nominalDesc = prometheus.NewDesc("sluice_cluster_queue_nominal_quota",
		"Nominal quota, in base units (CPU in cores, memory in bytes).",
		[]string{"cohort", "cluster_queue", "flavor", "resource"}, nil)
)

// queueGauges reads the ClusterQueues' state from the engine at scrape
// time, in the service's loop.
type queueGauges struct{ s *Service }

func (queueGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- reservationDesc
	ch <- nominalDesc
}

func (g queueGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := g.s.Queues(ctx)
	if err != nil {
		return // not loaded yet: no queue gauges rather than wrong ones
	}
	for _, q := range stats {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(q.Active), q.ClusterQueue, "active")
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(q.Inadmissible), q.ClusterQueue, "inadmissible")
		for _, r := range q.Resources {
			ch <- prometheus.MustNewConstMetric(reservationDesc, prometheus.GaugeValue, engine.BaseUnits(r.Resource, r.Reserved), q.Cohort, q.ClusterQueue, r.Flavor, r.Resource)
			ch <- prometheus.MustNewConstMetric(nominalDesc, prometheus.GaugeValue, engine.BaseUnits(r.Resource, r.Nominal), q.Cohort, q.ClusterQueue, r.Flavor, r.Resource)
		}
	}
}
