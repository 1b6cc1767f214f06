package baseline

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

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
}

// writeVerbs are the verbs of apiserver_request_total that change state.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true, "DELETECOLLECTION": true}

// scrapeWrites reads the API server's write counters as they are now.
func scrapeWrites(ctx context.Context, kube kubernetes.Interface) (map[string]float64, error) {
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("API server /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("API server /metrics: %w", err)
	}
	out := map[string]float64{}
	fam := families["apiserver_request_total"]
	if fam == nil {
		return nil, fmt.Errorf("API server /metrics: no apiserver_request_total")
	}
	for _, m := range fam.GetMetric() {
		var verb, resource, sub string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				resource = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			}
		}
		if !writeVerbs[verb] {
			continue
		}
		if sub != "" {
			resource += "/" + sub
		}
		out[verb+" "+resource] += m.GetCounter().GetValue()
	}
	return out, nil
}

// writesBetween is what was written from before to after.
func writesBetween(before, after map[string]float64) APIWrites {
	w := APIWrites{ByKind: map[string]float64{}}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			w.ByKind[k] = d
			w.Total += d
		}
	}
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
