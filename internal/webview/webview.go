// Package webview serves Sluice's live web view at "/": the ClusterQueues
// with their usage per flavor and resource, the pending workloads with
// their positions and reasons (read from the pending API), a live feed of
// workload events, charts of the last hour, the cohort tree, the
// LocalQueues, and a page per workload (read from the workloads API). The page is one embedded HTML file with plain
// JavaScript: nothing to build, nothing fetched from elsewhere.
package webview

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/internal/catalog"
	"github.com/sluice-dev/sluice/internal/engine"
)

//go:embed index.html
var page []byte

// The page's data.
const (
	QueuesPath      = "/ui/v1/queues"
	CohortsPath     = "/ui/v1/cohorts"
	LocalQueuesPath = "/ui/v1/localqueues"
	HistoryPath     = "/ui/v1/history"
	EventsPath      = "/ui/v1/events"
)

// Source answers for the queues (the admission service's engine) and for
// the last hour (its catalog of the event stream).
type Source interface {
	Queues(ctx context.Context) ([]engine.QueueStats, error)
	Cohorts(ctx context.Context) ([]engine.CohortStats, error)
	LocalQueues(ctx context.Context) ([]engine.LocalQueueStats, error)
	History(ctx context.Context) (catalog.History, error)
}

// Cohort is one cohort as the page's tree shows it: what its subtree
// holds against its quota.
type Cohort struct {
	Name     string     `json:"name"`
	Parent   string     `json:"parent,omitempty"`
	Root     string     `json:"root"`
	Admitted int        `json:"admitted"`
	Res      []Resource `json:"resources"`
}

// LocalQueue is one LocalQueue as the page shows it.
type LocalQueue struct {
	Namespace    string          `json:"namespace"`
	Name         string          `json:"name"`
	ClusterQueue string          `json:"clusterQueue"`
	Active       int             `json:"active"`
	Inadmissible int             `json:"inadmissible"`
	Reserving    int             `json:"reserving"`
	Admitted     int             `json:"admitted"`
	Resources    []LocalQueueUse `json:"resources"`
}

// LocalQueueUse is what a LocalQueue's workloads hold of one flavor and
// resource, in base units.
type LocalQueueUse struct {
	Flavor   string  `json:"flavor"`
	Resource string  `json:"resource"`
	Reserved float64 `json:"reserved"`
	Used     float64 `json:"used"`
}

// Feed delivers workload events as they are published until ctx ends,
// calling ready once every event published from then on is delivered.
type Feed interface {
	Follow(ctx context.Context, ready func(), deliver func(Event)) error
}

// Queue is one ClusterQueue as the page shows it.
type Queue struct {
	Name   string `json:"name"`
	Cohort string `json:"cohort,omitempty"`
	// Pending counts the active and inadmissible waiting workloads.
	Pending      int        `json:"pending"`
	Active       int        `json:"active"`
	Inadmissible int        `json:"inadmissible"`
	Resources    []Resource `json:"resources"`
}

// Resource is one flavor and resource of a ClusterQueue, in base units
// (CPU in cores, memory in bytes).
type Resource struct {
	Flavor   string  `json:"flavor"`
	Resource string  `json:"resource"`
	Reserved float64 `json:"reserved"`
	Nominal  float64 `json:"nominal"`
}

// Event is one line of the live feed.
type Event struct {
	Time         time.Time `json:"time"`
	Type         string    `json:"type"` // the transition: submitted, admitted, …
	Workload     string    `json:"workload"`
	Kind         string    `json:"kind,omitempty"`
	ClusterQueue string    `json:"clusterQueue,omitempty"`
	Detail       string    `json:"detail,omitempty"`
}

// Option configures Register.
type Option func(*options)

type options struct {
	maxClients   int
	writeTimeout time.Duration
	prefix       string
	filter       func(*http.Request) func(Event) bool
}

// WithPrefix serves the page at prefix+"/ui" and its data under
// prefix+"/ui/v1/" (default: the page at "/"). The page asks for its data
// by relative paths, so it works under either.
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithEventFilter decides, for each client of the live feed as it
// connects, which events it is shown (default: all).
func WithEventFilter(f func(*http.Request) func(Event) bool) Option {
	return func(o *options) { o.filter = f }
}

// WithMaxClients bounds the live feed's clients at once (default
// DefaultMaxClients); one more is answered 503.
func WithMaxClients(n int) Option { return func(o *options) { o.maxClients = n } }

// WithWriteTimeout bounds each write to a live feed client (default 10s):
// a client that stops reading is dropped.
func WithWriteTimeout(d time.Duration) Option { return func(o *options) { o.writeTimeout = d } }

// Register adds the page and its data to mux.
func Register(mux *http.ServeMux, src Source, feed Feed, opts ...Option) {
	o := options{maxClients: DefaultMaxClients, writeTimeout: 10 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	h := newHub(feed, max(1, o.maxClients))
	pagePath := "GET /{$}"
	if o.prefix != "" {
		pagePath = "GET " + o.prefix + "/ui"
	}
	mux.HandleFunc(pagePath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
		_, _ = w.Write(page)
	})
	data(mux, o.prefix+QueuesPath, src.Queues, queuesOf)
	data(mux, o.prefix+CohortsPath, src.Cohorts, cohortsOf)
	data(mux, o.prefix+LocalQueuesPath, src.LocalQueues, localQueuesOf)
	data(mux, o.prefix+HistoryPath, src.History, func(h catalog.History) catalog.History { return h })
	mux.HandleFunc("GET "+o.prefix+EventsPath, func(w http.ResponseWriter, r *http.Request) {
		show := func(Event) bool { return true }
		if o.filter != nil {
			show = o.filter(r)
		}
		stream(w, r, h, o.writeTimeout, show)
	})
}

// data serves at path what get reads, as the page wants it (503 when it
// cannot be read yet).
func data[T, V any](mux *http.ServeMux, path string, get func(context.Context) (T, error), shape func(T) V) {
	mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
		v, err := get(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(shape(v))
	})
}

// resources are quotas in base units.
func resources(stats []engine.ResourceStats) []Resource {
	out := make([]Resource, 0, len(stats))
	for _, r := range stats {
		out = append(out, Resource{Flavor: r.Flavor, Resource: r.Resource,
			Reserved: engine.BaseUnits(r.Resource, r.Reserved), Nominal: engine.BaseUnits(r.Resource, r.Nominal)})
	}
	return out
}

func queuesOf(stats []engine.QueueStats) []Queue {
	out := make([]Queue, 0, len(stats))
	for _, q := range stats {
		out = append(out, Queue{Name: q.ClusterQueue, Cohort: q.Cohort, Pending: q.Active + q.Inadmissible, Active: q.Active,
			Inadmissible: q.Inadmissible, Resources: resources(q.Resources)})
	}
	return out
}

func cohortsOf(stats []engine.CohortStats) []Cohort {
	out := make([]Cohort, 0, len(stats))
	for _, c := range stats {
		out = append(out, Cohort{Name: c.Cohort, Parent: c.Parent, Root: c.Root, Admitted: c.Admitted, Res: resources(c.Resources)})
	}
	return out
}

func localQueuesOf(stats []engine.LocalQueueStats) []LocalQueue {
	out := make([]LocalQueue, 0, len(stats))
	for _, q := range stats {
		v := LocalQueue{Namespace: q.Namespace, Name: q.Name, ClusterQueue: q.ClusterQueue, Active: q.Active, Inadmissible: q.Inadmissible,
			Reserving: q.Reserving, Admitted: q.Admitted, Resources: []LocalQueueUse{}}
		for _, r := range q.Resources {
			v.Resources = append(v.Resources, LocalQueueUse{Flavor: r.Flavor, Resource: r.Resource,
				Reserved: engine.BaseUnits(r.Resource, r.Reserved), Used: engine.BaseUnits(r.Resource, r.Used)})
		}
		out = append(out, v)
	}
	return out
}

// stream sends the feed as server-sent events until the client leaves. A
// client too slow to keep up loses events rather than holding the feed,
// and one that stops reading is dropped after writeTimeout.
func stream(w http.ResponseWriter, r *http.Request, h *hub, writeTimeout time.Duration, show func(Event) bool) {
	if _, ok := w.(http.Flusher); !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	c, err := h.join()
	if err != nil {
		w.Header().Set("Retry-After", "10")
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer h.leave(c)
	ctx := r.Context()
	// The stream opens once the feed follows: a client that saw it open
	// misses nothing published after.
	select {
	case <-c.run.ready:
	case <-c.run.done:
		err := c.run.err
		if err == nil {
			err = errors.New("live feed ended")
		}
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case <-ctx.Done():
		return
	}
	rc := http.NewResponseController(w)
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if !write(": sluice live feed\n\n") {
		return
	}
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		var ok bool
		select {
		case <-ctx.Done():
			return
		case <-c.run.done:
			if c.run.err != nil {
				write("event: error\ndata: %q\n\n", c.run.err.Error())
			}
			return
		case <-keepAlive.C:
			ok = write(": keep-alive\n\n")
		case e := <-c.ch:
			if !show(e) {
				continue
			}
			b, err := json.Marshal(e)
			if err != nil {
				continue
			}
			ok = write("data: %s\n\n", b)
		}
		if !ok {
			return
		}
	}
}
