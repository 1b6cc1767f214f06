package baseline

import (
	"fmt"
	"net"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Client-side rate limits of a run's generator. They are set high enough
// that the API server, not client-go's limiter, paces the creates and the
// completions; the floor (cmd/baseline) and the end-to-end replays use the
// same, so a run and its floor are measured with one generator.
const (
	clientQPS   = 2000
	clientBurst = 4000
)

// RunClients are the clients of a run (Clients).
type RunClients struct {
	// Kube creates the Jobs and writes their status; Watch lists and
	// watches them (Options.Watch); Dyn sets the queues up.
	Kube, Watch kubernetes.Interface
	Dyn         dynamic.Interface
}

// Clients returns the clients of a run made from rc (not changed): the
// generator's rate limits, protobuf for Jobs, and the watch on a
// connection of its own.
//
// Why: the API server gives each watcher a buffer of 100 events and closes
// a watch that lets it fill; the watch resumes from where it was, and the
// server replays what it missed by copying and encoding each missed Job
// for that watcher alone while new events fill the buffer again. With
// JSON (a second encoding of every event for the server, the cluster's
// own watchers taking protobuf, and a slower decoding here) on the
// connection of the creates and status writes, the tracker's watch was
// closed again and again at 50,000 Jobs and saw the Jobs' changes more
// than a minute late, which the floor's time to admission and every
// run's completion lag then measured. docs/performance.md (stop 62) has
// the runs; which of the two changes did more was not separated.
func Clients(rc *rest.Config) (RunClients, error) {
	limited := rest.CopyConfig(rc)
	limited.QPS, limited.Burst = clientQPS, clientBurst
	c := rest.CopyConfig(limited)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(c)
	if err != nil {
		return RunClients{}, fmt.Errorf("load test client: %w", err)
	}
	// A dial function of its own makes client-go build a transport (and
	// so a connection) for the watch alone instead of sharing its cached
	// one.
	w := rest.CopyConfig(c)
	w.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	watch, err := kubernetes.NewForConfig(w)
	if err != nil {
		return RunClients{}, fmt.Errorf("load test watch client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(limited)
	if err != nil {
		return RunClients{}, fmt.Errorf("load test dynamic client: %w", err)
	}
	return RunClients{Kube: kube, Watch: watch, Dyn: dyn}, nil
}
