package bus

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The bus's metrics are shared by every publisher and consumer of a
// process (`sluice dev` runs several services over one bus); a process
// registers them once, with Collectors.
var (
	publishDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_event_publish_duration_seconds",
		Help:    "Time from publishing an event to the stream's acknowledgement (retries included), by event type and result (ok, error).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
	}, []string{"type", "result"})
	handleDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_event_handle_duration_seconds",
		Help:    "Time a consumer's handler took for one event, by consumer and outcome (ack, retry, dead_letter).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
	}, []string{"consumer", "outcome"})
	deadLettered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_events_dead_lettered_total",
		Help: "Events a consumer parked on sluice.dlq.<consumer>, by consumer and reason.",
	}, []string{"consumer", "reason"})
	unreadable = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_state_unreadable_total",
		Help: "Reads of stored state (a fence, …) that could not be understood, by state: what depends on it waits until it is repaired.",
	}, []string{"state"})
)

// Collectors returns the bus's metrics, for a process's registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{publishDuration, handleDuration, deadLettered, unreadable}
}

// ReportUnreadable counts a read of stored state that could not be
// understood ("fence", …).
func ReportUnreadable(state string) { unreadable.WithLabelValues(state).Inc() }

func observePublish(eventType string, began time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	publishDuration.WithLabelValues(eventType, result).Observe(time.Since(began).Seconds())
}
