package baseline

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// APIWrites counts the API server's write requests during a run, by verb
// and resource (from its apiserver_request_total): the server's capacity
// is what bounds the wall here, so what each Job costs it is the first
// thing to know when the wall grows.
type APIWrites struct {
	// ByKind is the count per "VERB resource[/subresource]".
	ByKind map[string]float64
	// Total is the sum of ByKind.
	Total float64
	// JobWatchesClosed is how many watches of Jobs the API server closed
	// because their watcher fell behind (apiserver_terminated_watchers_total),
	// and JobEventsReplayed how many events it replayed to watchers that
	// resumed (apiserver_init_events_total): each replayed Job is copied
	// and encoded for its watcher alone, so on a server short of CPU they
	// are where a run's wall goes (docs/performance.md, stop 62).
	JobWatchesClosed, JobEventsReplayed float64
}

// apiCounters are the API server's counters a run reads before and after.
type apiCounters struct {
	writes                  map[string]float64 // by "VERB resource[/subresource]"
	watchesClosed, replayed float64            // of batch/v1 Jobs
}

// writeVerbs are the verbs of apiserver_request_total that change state.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true, "DELETECOLLECTION": true}

// scrapeWrites reads the API server's counters as they are now.
func scrapeWrites(ctx context.Context, kube kubernetes.Interface) (apiCounters, error) {
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return apiCounters{}, fmt.Errorf("API server /metrics: %w", err)
	}
	return parseCounters(body)
}

// parseCounters reads the counters from the API server's /metrics.
func parseCounters(body []byte) (apiCounters, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return apiCounters{}, fmt.Errorf("API server /metrics: %w", err)
	}
	out := apiCounters{writes: map[string]float64{}}
	fam := families["apiserver_request_total"]
	if fam == nil {
		return apiCounters{}, fmt.Errorf("API server /metrics: no apiserver_request_total")
	}
	for _, m := range fam.GetMetric() {
		ls := labels(m)
		verb, resource, sub := ls["verb"], ls["resource"], ls["subresource"]
		if !writeVerbs[verb] {
			continue
		}
		if sub != "" {
			resource += "/" + sub
		}
		out.writes[verb+" "+resource] += m.GetCounter().GetValue()
	}
	out.watchesClosed = jobCounter(families["apiserver_terminated_watchers_total"])
	out.replayed = jobCounter(families["apiserver_init_events_total"])
	return out, nil
}

// jobCounter is a counter's value for batch Jobs (0 when the server has
// no such counter).
func jobCounter(fam *dto.MetricFamily) float64 {
	var v float64
	for _, m := range fam.GetMetric() {
		if ls := labels(m); ls["group"] == "batch" && ls["resource"] == "jobs" {
			v += m.GetCounter().GetValue()
		}
	}
	return v
}

// labels is a sample's labels by name.
func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// writesBetween is what was written, and what the Job watches cost, from
// before to after.
func writesBetween(before, after apiCounters) APIWrites {
	w := APIWrites{ByKind: map[string]float64{}}
	for k, v := range after.writes {
		if d := v - before.writes[k]; d > 0 {
			w.ByKind[k] = d
			w.Total += d
		}
	}
	w.JobWatchesClosed = max(after.watchesClosed-before.watchesClosed, 0)
	w.JobEventsReplayed = max(after.replayed-before.replayed, 0)
	return w
}

// summary is the writes per Job, the largest kinds first.
func (w APIWrites) summary(jobs int) string {
	if jobs == 0 || w.Total == 0 {
		return "none counted"
	}
	kinds := largestFirst(w.ByKind)
	var b strings.Builder
	fmt.Fprintf(&b, "%.0f, %.2f per Job:", w.Total, w.Total/float64(jobs))
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s %.2f;", k, w.ByKind[k]/float64(jobs))
	}
	return b.String()
}

// largestFirst is the keys of counts, the largest count first, equal
// counts by key.
func largestFirst[V int | float64](counts map[string]V) []string {
	return slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
}
