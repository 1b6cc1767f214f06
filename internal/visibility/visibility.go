// Package visibility serves the pending workloads of a queue over HTTP as
// JSON, shaped like Kueue's visibility API (visibility.kueue.x-k8s.io) so
// that its clients port by changing the group: positions are the order the
// admission engine would admit in now, counted from 0 over the whole queue.
package visibility

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
)

// APIVersion of every answer.
const APIVersion = "visibility.sluice.dev/v1beta1"

// Prefix of the API's paths.
const Prefix = "/apis/" + APIVersion

// DefaultLimit is how many items an answer holds without limit, as in
// Kueue; MaxLimit bounds what a caller may ask for.
const (
	DefaultLimit = 1000
	MaxLimit     = 10000
)

// ErrBusy: the source takes no more queries now; the client may try
// again shortly (HTTP 429).
var ErrBusy = errors.New("too many queries; try again shortly")

// Source answers for the queues: the admission service's engine.
type Source interface {
	PendingInClusterQueue(ctx context.Context, name string, offset, limit int) (engine.PendingPage, bool, error)
	PendingInLocalQueue(ctx context.Context, namespace, name string, offset, limit int) (engine.PendingPage, bool, error)
}

// PendingWorkloadsSummary is an answer.
type PendingWorkloadsSummary struct {
	Kind       string            `json:"kind"`
	APIVersion string            `json:"apiVersion"`
	Items      []PendingWorkload `json:"items"`
	// Total is how many workloads wait in the queue in all (Sluice's own).
	Total int `json:"total"`
}

// PendingWorkload is one waiting workload.
type PendingWorkload struct {
	Metadata ObjectMeta `json:"metadata"`
	// JobKind is the job integration of the object, e.g. job or jobset.
	JobKind                string  `json:"jobKind,omitempty"`
	Priority               int32   `json:"priority"`
	LocalQueueName         string  `json:"localQueueName"`
	ClusterQueueName       string  `json:"clusterQueueName"`
	PositionInClusterQueue int32   `json:"positionInClusterQueue"`
	PositionInLocalQueue   int32   `json:"positionInLocalQueue"`
	Reason                 string  `json:"reason,omitempty"`
	WaitingSeconds         float64 `json:"waitingSeconds"`
	// ScaleUp: this is the scale-up of an admitted elastic Job, which
	// runs meanwhile; WaitingSeconds count from its change.
	ScaleUp bool `json:"scaleUp,omitempty"`
}

// ObjectMeta names the job object.
type ObjectMeta struct {
	Name              string    `json:"name"`
	Namespace         string    `json:"namespace"`
	CreationTimestamp time.Time `json:"creationTimestamp"`
}

// status is the error body, shaped like a Kubernetes Status.
type status struct {
	Kind    string `json:"kind"`
	APIVer  string `json:"apiVersion"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
}

// Register adds the API's routes to mux; now stamps waitingSeconds.
func Register(mux *http.ServeMux, src Source, now func() time.Time) {
	mux.HandleFunc("GET "+Prefix+"/clusterqueues/{name}/pendingworkloads", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		serve(w, r, now, "clusterqueue "+strconv.Quote(name), func(offset, limit int) (engine.PendingPage, bool, error) {
			return src.PendingInClusterQueue(r.Context(), name, offset, limit)
		})
	})
	mux.HandleFunc("GET "+Prefix+"/namespaces/{namespace}/localqueues/{name}/pendingworkloads", func(w http.ResponseWriter, r *http.Request) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		serve(w, r, now, "localqueue "+strconv.Quote(ns+"/"+name), func(offset, limit int) (engine.PendingPage, bool, error) {
			return src.PendingInLocalQueue(r.Context(), ns, name, offset, limit)
		})
	})
}

func serve(w http.ResponseWriter, r *http.Request, now func() time.Time, what string, get func(offset, limit int) (engine.PendingPage, bool, error)) {
	offset, err := param(r, "offset", 0, 0, -1)
	if err != nil {
		fail(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	limit, err := param(r, "limit", DefaultLimit, 1, MaxLimit)
	if err != nil {
		fail(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	page, found, err := get(offset, limit)
	switch {
	case errors.Is(err, ErrBusy):
		w.Header().Set("Retry-After", "1")
		fail(w, http.StatusTooManyRequests, "TooManyRequests", err.Error())
		return
	case err != nil:
		fail(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error())
		return
	case !found:
		fail(w, http.StatusNotFound, "NotFound", what+" not found")
		return
	}
	t := now()
	out := PendingWorkloadsSummary{Kind: "PendingWorkloadsSummary", APIVersion: APIVersion, Items: []PendingWorkload{}, Total: page.Total}
	for _, it := range page.Items {
		out.Items = append(out.Items, PendingWorkload{
			Metadata: ObjectMeta{Name: it.Name, Namespace: it.Namespace, CreationTimestamp: it.Submitted.UTC()},
			JobKind:  it.Kind, Priority: it.Priority, LocalQueueName: it.LocalQueue, ClusterQueueName: it.ClusterQueue,
			PositionInClusterQueue: int32(it.PositionInClusterQueue), PositionInLocalQueue: int32(it.PositionInLocalQueue),
			Reason: it.Reason, WaitingSeconds: max(0, t.Sub(it.Submitted).Seconds()), ScaleUp: it.ScaleUp,
		})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// param reads a non-negative integer query parameter within [lo, hi]
// (hi < 0: no upper bound).
func param(r *http.Request, name string, def, lo, hi int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || (hi >= 0 && v > hi) {
		bound := fmt.Sprintf("at least %d", lo)
		if hi >= 0 {
			bound = fmt.Sprintf("from %d to %d", lo, hi)
		}
		return 0, fmt.Errorf("query parameter %s=%q: must be an integer %s", name, s, bound)
	}
	return v, nil
}

func fail(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(status{Kind: "Status", APIVer: "v1", Status: "Failure", Message: msg, Reason: reason, Code: code})
}
