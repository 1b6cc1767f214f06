package integration

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// QueueMetrics are the work queues' metrics, one series per kind (label
// name), under the names controller-runtime gives its own with sluice_
// in front, so that a dashboard of a controller's queues reads them: how
// long an object waits before a worker takes it is where a busy service
// spends the time between an admission and its start. One value serves
// every Service of a process (Config.QueueMetrics): a kind has one queue.
type QueueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

// NewQueueMetrics makes the metrics, for Config.QueueMetrics.
func NewQueueMetrics() *QueueMetrics {
	buckets := prometheus.ExponentialBuckets(0.0001, 4, 11) // 100 µs to ~100 s
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"name"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"name"})
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{"name"})
	}
	return &QueueMetrics{
		depth:      gauge("sluice_workqueue_depth", "Objects waiting in a kind's work queue."),
		unfinished: gauge("sluice_workqueue_unfinished_work_seconds", "Seconds of work in progress not yet finished, summed over the kind's workers."),
		longest:    gauge("sluice_workqueue_longest_running_processor_seconds", "Seconds the longest-running worker of the kind has been at its object."),
		adds:       counter("sluice_workqueue_adds_total", "Objects added to a kind's work queue."),
		retries:    counter("sluice_workqueue_retries_total", "Objects put back into a kind's work queue after an error or to look again."),
		latency:    histogram("sluice_workqueue_queue_duration_seconds", "Seconds an object waits in a kind's work queue before a worker takes it."),
		work:       histogram("sluice_workqueue_work_duration_seconds", "Seconds a worker spends on one object of the kind."),
	}
}

// Collectors returns the metrics for a registry.
func (m *QueueMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.depth, m.unfinished, m.longest, m.adds, m.retries, m.latency, m.work}
}

// The workqueue.MetricsProvider methods: the queue of a kind asks for its
// series by the queue's name.

func (m *QueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name)
}

func (m *QueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}

func (m *QueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}

func (m *QueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.work.WithLabelValues(name)
}

func (m *QueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}

func (m *QueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longest.WithLabelValues(name)
}

func (m *QueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}
