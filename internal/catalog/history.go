package catalog

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/events"
)

// The history the web view draws: the last hour, from the event stream.
const (
	// HistoryWindow is how far back the history goes.
	HistoryWindow = time.Hour
	// UsageStep is the finest step of a ClusterQueue's usage series: of
	// several usage events within one step, the last is kept.
	UsageStep = 30 * time.Second
)

// Minute is what happened to workloads in one minute.
type Minute struct {
	Start     time.Time `json:"start"`
	Submitted int       `json:"submitted"`
	Admitted  int       `json:"admitted"`
	Finished  int       `json:"finished"`
	// Evicted counts evictions and preemptions.
	Evicted int `json:"evicted"`
}

// UsageSample is a ClusterQueue's usage at one time, as the quota
// accounting service announced it: "flavor/resource" to base units
// (CPU in cores, memory in bytes).
type UsageSample struct {
	Time     time.Time          `json:"time"`
	Usage    map[string]float64 `json:"usage"`
	Pending  int32              `json:"pending"`
	Admitted int32              `json:"admitted"`
}

// QueueUsage is one ClusterQueue's usage series, oldest first.
type QueueUsage struct {
	ClusterQueue string        `json:"clusterQueue"`
	Samples      []UsageSample `json:"samples"`
}

// History is the last hour: workloads per minute and each ClusterQueue's
// usage over time.
type History struct {
	Minutes []Minute     `json:"minutes"`
	Usage   []QueueUsage `json:"usage"`
}

// history keeps the last hour; bounded by the window (60 minutes, and at
// most HistoryWindow/UsageStep samples per ClusterQueue).
type history struct {
	minutes map[int64]*Minute // by minute since the epoch
	usage   map[string][]UsageSample
}

func newHistory() history {
	return history{minutes: map[int64]*Minute{}, usage: map[string][]UsageSample{}}
}

// count adds one event of a workload at t.
func (h *history) count(ev events.Event, t time.Time) {
	var field func(*Minute)
	switch ev.(type) {
	case events.WorkloadSubmittedV1:
		field = func(m *Minute) { m.Submitted++ }
	case events.WorkloadAdmittedV1:
		field = func(m *Minute) { m.Admitted++ }
	case events.WorkloadFinishedV1:
		field = func(m *Minute) { m.Finished++ }
	case events.WorkloadEvictedV1, events.WorkloadPreemptedV1:
		field = func(m *Minute) { m.Evicted++ }
	default:
		return
	}
	k := t.Unix() / 60
	m := h.minutes[k]
	if m == nil {
		m = &Minute{Start: time.Unix(k*60, 0).UTC()}
		h.minutes[k] = m
	}
	field(m)
	h.trim(t)
}

// sample records a usage event at t.
func (h *history) sample(u events.QuotaUsageV1, t time.Time) {
	s := UsageSample{Time: t, Usage: map[string]float64{}, Pending: u.Pending, Admitted: u.Admitted}
	for flavor, rs := range u.Usage {
		for r, q := range rs {
			v, err := resource.ParseQuantity(q)
			if err != nil {
				continue
			}
			s.Usage[flavor+"/"+r] = v.AsApproximateFloat64()
		}
	}
	ss := h.usage[u.ClusterQueue]
	if n := len(ss); n > 0 && t.Sub(ss[n-1].Time) < UsageStep && t.Truncate(UsageStep).Equal(ss[n-1].Time.Truncate(UsageStep)) {
		ss[n-1] = s
	} else {
		ss = append(ss, s)
	}
	h.usage[u.ClusterQueue] = ss
	h.trim(t)
}

// trim forgets what is older than the window as of t.
func (h *history) trim(t time.Time) {
	oldest := t.Add(-HistoryWindow)
	for k := range h.minutes {
		if time.Unix((k+1)*60, 0).Before(oldest) {
			delete(h.minutes, k)
		}
	}
	for cq, ss := range h.usage {
		i := 0
		// One sample before the window is kept: the usage it starts with.
		for i+1 < len(ss) && ss[i+1].Time.Before(oldest) {
			i++
		}
		if i > 0 {
			h.usage[cq] = append(ss[:0], ss[i:]...)
		}
	}
}

// snapshot is the history as of now: the 60 minutes up to now's (empty
// ones included) and the usage series.
func (h *history) snapshot(now time.Time) History {
	out := History{Minutes: make([]Minute, 0, 60), Usage: make([]QueueUsage, 0, len(h.usage))}
	last := now.Unix() / 60
	for k := last - 59; k <= last; k++ {
		if m := h.minutes[k]; m != nil {
			out.Minutes = append(out.Minutes, *m)
		} else {
			out.Minutes = append(out.Minutes, Minute{Start: time.Unix(k*60, 0).UTC()})
		}
	}
	for cq, ss := range h.usage {
		out.Usage = append(out.Usage, QueueUsage{ClusterQueue: cq, Samples: append([]UsageSample(nil), ss...)})
	}
	sort.Slice(out.Usage, func(i, j int) bool { return out.Usage[i].ClusterQueue < out.Usage[j].ClusterQueue })
	return out
}

// History is the last hour as of now.
func (c *Catalog) History(now time.Time) History {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.hist.snapshot(now)
}
