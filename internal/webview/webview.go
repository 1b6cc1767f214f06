// Package webview serves Sluice's live web view at "/": the ClusterQueues
// with their usage per flavor and resource, the pending workloads with
// their positions and reasons (read from the pending API), and a live feed
// of workload events. The page is one embedded HTML file with plain
// JavaScript: nothing to build, nothing fetched from elsewhere.
package webview

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
)

//go:embed index.html
var page []byte

// QueuesPath and EventsPath are the page's data.
const (
	QueuesPath = "/ui/v1/queues"
	EventsPath = "/ui/v1/events"
)

// Source answers for the queues: the admission service's engine.
type Source interface {
	Queues(ctx context.Context) ([]engine.QueueStats, error)
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

// Register adds the page and its data to mux.
func Register(mux *http.ServeMux, src Source, feed Feed) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
		_, _ = w.Write(page)
	})
	mux.HandleFunc("GET "+QueuesPath, func(w http.ResponseWriter, r *http.Request) {
		stats, err := src.Queues(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		out := make([]Queue, 0, len(stats))
		for _, q := range stats {
			v := Queue{Name: q.ClusterQueue, Cohort: q.Cohort, Pending: q.Active + q.Inadmissible, Active: q.Active,
				Inadmissible: q.Inadmissible, Resources: []Resource{}}
			for _, r := range q.Resources {
				v.Resources = append(v.Resources, Resource{Flavor: r.Flavor, Resource: r.Resource,
					Reserved: engine.BaseUnits(r.Resource, r.Reserved), Nominal: engine.BaseUnits(r.Resource, r.Nominal)})
			}
			out = append(out, v)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET "+EventsPath, func(w http.ResponseWriter, r *http.Request) { stream(w, r, feed) })
}

// stream sends the feed as server-sent events until the client leaves. A
// client too slow to keep up loses events rather than holding the feed.
func stream(w http.ResponseWriter, r *http.Request, feed Feed) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ch := make(chan Event, 256)
	errc := make(chan error, 1)
	following := make(chan struct{})
	go func() {
		errc <- feed.Follow(ctx, func() { close(following) }, func(e Event) {
			select {
			case ch <- e:
			default:
			}
		})
	}()
	// The stream opens once the feed follows: a client that saw it open
	// misses nothing published after.
	select {
	case <-following:
	case err := <-errc:
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
		return
	case <-ctx.Done():
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": sluice live feed\n\n")
	flusher.Flush()
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errc:
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(w, "event: error\ndata: %q\n\n", err.Error())
				flusher.Flush()
			}
			return
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case e := <-ch:
			b, err := json.Marshal(e)
			if err != nil {
				continue
			}
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		flusher.Flush()
	}
}
