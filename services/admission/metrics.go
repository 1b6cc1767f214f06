package admission

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/events"
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

	// Kueue's LocalQueue and cohort counters.
	lqAdmitted     *prometheus.CounterVec
	lqWaitTime     *prometheus.HistogramVec
	lqEvicted      *prometheus.CounterVec
	cohortAdmitted *prometheus.CounterVec
	// Quota reservations (admissions, and reservations that wait for
	// admission checks), by ClusterQueue and by LocalQueue.
	reserved, lqReserved                 *prometheus.CounterVec
	reservedWaitTime, lqReservedWaitTime *prometheus.HistogramVec
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
		lqAdmitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_local_queue_admitted_workloads_total",
			Help: "Workloads admitted, by LocalQueue."}, []string{"name", "namespace"}),
		lqWaitTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_local_queue_admission_wait_time_seconds",
			Help:    "Time from a workload's creation to its admission, by LocalQueue.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 16)}, []string{"name", "namespace"}),
		lqEvicted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_local_queue_evicted_workloads_total",
			Help: "Workloads evicted other than by preemption, by LocalQueue and reason."}, []string{"name", "namespace", "reason"}),
		reserved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_quota_reserved_workloads_total",
			Help: "Workloads that reserved quota (admitted, or waiting for admission checks), by ClusterQueue."}, []string{"cluster_queue"}),
		lqReserved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_local_queue_quota_reserved_workloads_total",
			Help: "Workloads that reserved quota, by LocalQueue."}, []string{"name", "namespace"}),
		reservedWaitTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_quota_reserved_wait_time_seconds",
			Help:    "Time from a workload's creation to its quota reservation, by ClusterQueue.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 16)}, []string{"cluster_queue"}),
		lqReservedWaitTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_local_queue_quota_reserved_wait_time_seconds",
			Help:    "Time from a workload's creation to its quota reservation, by LocalQueue.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 16)}, []string{"name", "namespace"}),
		cohortAdmitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cohort_subtree_admitted_workloads_total",
			Help: "Workloads admitted in a cohort's subtree (each cohort above the ClusterQueue counts it), by cohort and priority class."},
			[]string{"cohort", "priority_class"}),
	}
}

// countReserved counts a quota reservation in its ClusterQueue and its
// LocalQueue, w being the workload's record; waited is from its creation.
func (s *Service) countReserved(cq string, w *events.WorkloadSubmittedV1, waited time.Duration) {
	m := s.metrics
	m.reserved.WithLabelValues(cq).Inc()
	m.reservedWaitTime.WithLabelValues(cq).Observe(waited.Seconds())
	m.lqReserved.WithLabelValues(w.LocalQueue, w.Workload.Namespace).Inc()
	m.lqReservedWaitTime.WithLabelValues(w.LocalQueue, w.Workload.Namespace).Observe(waited.Seconds())
}

// countAdmitted counts an admission in its ClusterQueue, its LocalQueue
// and every cohort above, w being the workload's record (nil when
// unknown); waited is from its creation, or negative when not known.
func (s *Service) countAdmitted(cq string, w *events.WorkloadSubmittedV1, waited time.Duration) {
	m := s.metrics
	m.admitted.WithLabelValues(cq).Inc()
	if waited >= 0 {
		m.waitTime.WithLabelValues(cq).Observe(waited.Seconds())
	}
	if w == nil {
		return
	}
	m.lqAdmitted.WithLabelValues(w.LocalQueue, w.Workload.Namespace).Inc()
	if waited >= 0 {
		m.lqWaitTime.WithLabelValues(w.LocalQueue, w.Workload.Namespace).Observe(waited.Seconds())
	}
	for _, c := range s.eng.Cohorts(cq) {
		m.cohortAdmitted.WithLabelValues(c, w.PriorityClass).Inc()
	}
}

// Collectors returns the service's metrics for a registry: its counters
// and the queue gauges, read from the engine at each scrape.
func (s *Service) Collectors() []prometheus.Collector {
	m := s.metrics
	return []prometheus.Collector{m.admitted, m.waitTime, m.evicted, m.preempted, m.cycleDuration, m.cycleAdmitted, m.conflicts, m.trees, m.treesOwned,
		m.lqAdmitted, m.lqWaitTime, m.lqEvicted, m.cohortAdmitted, m.reserved, m.lqReserved, m.reservedWaitTime, m.lqReservedWaitTime, queueGauges{s}}
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
	cqStatusDesc = prometheus.NewDesc("sluice_cluster_queue_status",
		"1 for the ClusterQueue's status, 0 for the others: active (it can admit) or pending (inactive: a missing flavor or check, a stop policy, …).",
		[]string{"cluster_queue", "status"}, nil)
	lqStatusDesc = prometheus.NewDesc("sluice_local_queue_status",
		"1 for whether the LocalQueue is active (True, False), 0 for the other.", []string{"name", "namespace", "active"}, nil)
	cqInfoDesc = prometheus.NewDesc("sluice_cluster_queue_info",
		"Where each ClusterQueue is in the cohort tree (value 1, to join on).", []string{"cluster_queue", "parent_cohort", "root_cohort"}, nil)

	lqPendingDesc = prometheus.NewDesc("sluice_local_queue_pending_workloads",
		"Workloads waiting, by LocalQueue and status (active or inadmissible, as sluice_pending_workloads).", []string{"name", "namespace", "status"}, nil)
	lqReservingDesc = prometheus.NewDesc("sluice_local_queue_reserving_active_workloads",
		"Workloads holding quota (admitted or waiting for admission checks), by LocalQueue.", []string{"name", "namespace"}, nil)
	lqAdmittedDesc = prometheus.NewDesc("sluice_local_queue_admitted_active_workloads",
		"Admitted workloads holding quota, by LocalQueue.", []string{"name", "namespace"}, nil)
	lqReservationDesc = prometheus.NewDesc("sluice_local_queue_resource_reservation",
		"Quota reserved by a LocalQueue's workloads, in base units.", []string{"name", "namespace", "flavor", "resource"}, nil)
	lqUsageDesc = prometheus.NewDesc("sluice_local_queue_resource_usage",
		"Quota used by a LocalQueue's admitted workloads, in base units.", []string{"name", "namespace", "flavor", "resource"}, nil)

	cohortQuotaDesc = prometheus.NewDesc("sluice_cohort_subtree_quota",
		"Nominal quota of a cohort's subtree (its own and every ClusterQueue and cohort below), in base units.", []string{"cohort", "flavor", "resource"}, nil)
	cohortReservationDesc = prometheus.NewDesc("sluice_cohort_subtree_resource_reservations",
		"Quota reserved in a cohort's subtree, in base units.", []string{"cohort", "flavor", "resource"}, nil)
	cohortActiveDesc = prometheus.NewDesc("sluice_cohort_subtree_admitted_active_workloads",
		"Admitted workloads holding quota in a cohort's subtree.", []string{"cohort"}, nil)
	cohortInfoDesc = prometheus.NewDesc("sluice_cohort_info",
		"Where each cohort is in the tree (value 1, to join on).", []string{"cohort", "parent_cohort", "root_cohort"}, nil)
)

// queueGauges reads the ClusterQueues' state from the engine at scrape
// time, in the service's loop.
type queueGauges struct{ s *Service }

func (queueGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{pendingDesc, reservationDesc, nominalDesc, cqStatusDesc, lqStatusDesc, cqInfoDesc, lqPendingDesc, lqReservingDesc, lqAdmittedDesc,
		lqReservationDesc, lqUsageDesc, cohortQuotaDesc, cohortReservationDesc, cohortActiveDesc, cohortInfoDesc} {
		ch <- d
	}
}

func (g queueGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := g.s.currentView(ctx)
	if err != nil {
		return // not loaded yet: no queue gauges rather than wrong ones
	}
	gauge := func(d *prometheus.Desc, val float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, val, labels...)
	}
	roots := map[string]string{}
	for _, c := range v.cohorts {
		roots[c.Cohort] = c.Root
		gauge(cohortInfoDesc, 1, c.Cohort, c.Parent, c.Root)
		gauge(cohortActiveDesc, float64(c.Admitted), c.Cohort)
		for _, r := range c.Resources {
			gauge(cohortQuotaDesc, engine.BaseUnits(r.Resource, r.Nominal), c.Cohort, r.Flavor, r.Resource)
			gauge(cohortReservationDesc, engine.BaseUnits(r.Resource, r.Reserved), c.Cohort, r.Flavor, r.Resource)
		}
	}
	one := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, q := range v.lqStats {
		gauge(lqStatusDesc, one(q.Running), q.Name, q.Namespace, "True")
		gauge(lqStatusDesc, one(!q.Running), q.Name, q.Namespace, "False")
		gauge(lqPendingDesc, float64(q.Active), q.Name, q.Namespace, "active")
		gauge(lqPendingDesc, float64(q.Inadmissible), q.Name, q.Namespace, "inadmissible")
		gauge(lqReservingDesc, float64(q.Reserving), q.Name, q.Namespace)
		gauge(lqAdmittedDesc, float64(q.Admitted), q.Name, q.Namespace)
		for _, r := range q.Resources {
			gauge(lqReservationDesc, engine.BaseUnits(r.Resource, r.Reserved), q.Name, q.Namespace, r.Flavor, r.Resource)
			gauge(lqUsageDesc, engine.BaseUnits(r.Resource, r.Used), q.Name, q.Namespace, r.Flavor, r.Resource)
		}
	}
	for _, q := range v.stats {
		gauge(cqInfoDesc, 1, q.ClusterQueue, q.Cohort, roots[q.Cohort])
		gauge(cqStatusDesc, one(q.Running), q.ClusterQueue, "active")
		gauge(cqStatusDesc, one(!q.Running), q.ClusterQueue, "pending")
	}
	for _, q := range v.stats {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(q.Active), q.ClusterQueue, "active")
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(q.Inadmissible), q.ClusterQueue, "inadmissible")
		for _, r := range q.Resources {
			ch <- prometheus.MustNewConstMetric(reservationDesc, prometheus.GaugeValue, engine.BaseUnits(r.Resource, r.Reserved), q.Cohort, q.ClusterQueue, r.Flavor, r.Resource)
			ch <- prometheus.MustNewConstMetric(nominalDesc, prometheus.GaugeValue, engine.BaseUnits(r.Resource, r.Nominal), q.Cohort, q.ClusterQueue, r.Flavor, r.Resource)
		}
	}
}
