package webview_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/catalog"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/internal/webview"
)

type queues struct {
	stats   []engine.QueueStats
	cohorts []engine.CohortStats
	lqs     []engine.LocalQueueStats
	hist    catalog.History
	err     error
}

func (q queues) Queues(context.Context) ([]engine.QueueStats, error)           { return q.stats, q.err }
func (q queues) Cohorts(context.Context) ([]engine.CohortStats, error)         { return q.cohorts, q.err }
func (q queues) LocalQueues(context.Context) ([]engine.LocalQueueStats, error) { return q.lqs, q.err }
func (q queues) History(context.Context) (catalog.History, error)              { return q.hist, q.err }

// TestTreeLocalQueuesAndHistory: the cohort tree's, the LocalQueues' and
// the last hour's data, in base units.
func TestTreeLocalQueuesAndHistory(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	srv, _ := server(t, queues{
		cohorts: []engine.CohortStats{{Cohort: "team", Parent: "org", Root: "org", Admitted: 2,
			Resources: []engine.ResourceStats{{Flavor: "a100", Resource: "cpu", Reserved: 2500, Nominal: 8000}}}},
		lqs: []engine.LocalQueueStats{{Namespace: "ns", Name: "q", ClusterQueue: "cq", Active: 1, Reserving: 2, Admitted: 1,
			Resources: []engine.LocalQueueResource{{Flavor: "a100", Resource: "cpu", Reserved: 2500, Used: 500}}}},
		hist: catalog.History{Minutes: []catalog.Minute{{Start: t0, Admitted: 3}}},
	})
	get := func(path string, out any) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if err := json.NewDecoder(res.Body).Decode(out); err != nil || res.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, res.StatusCode, err)
		}
	}
	var cohorts []webview.Cohort
	get(webview.CohortsPath, &cohorts)
	if d := cmp.Diff([]webview.Cohort{{Name: "team", Parent: "org", Root: "org", Admitted: 2,
		Res: []webview.Resource{{Flavor: "a100", Resource: "cpu", Reserved: 2.5, Nominal: 8}}}}, cohorts); d != "" {
		t.Errorf("cohorts (-want +got):\n%s", d)
	}
	var lqs []webview.LocalQueue
	get(webview.LocalQueuesPath, &lqs)
	if d := cmp.Diff([]webview.LocalQueue{{Namespace: "ns", Name: "q", ClusterQueue: "cq", Active: 1, Reserving: 2, Admitted: 1,
		Resources: []webview.LocalQueueUse{{Flavor: "a100", Resource: "cpu", Reserved: 2.5, Used: 0.5}}}}, lqs); d != "" {
		t.Errorf("local queues (-want +got):\n%s", d)
	}
	var h catalog.History
	get(webview.HistoryPath, &h)
	if len(h.Minutes) != 1 || h.Minutes[0].Admitted != 3 || !h.Minutes[0].Start.Equal(t0) {
		t.Errorf("history: %+v", h)
	}
}

func server(t *testing.T, src webview.Source, opts ...webview.Option) (*httptest.Server, events.Publisher) {
	t.Helper()
	js := natstest.JetStream(t)
	if err := bus.Setup(context.Background(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	webview.Register(mux, src, webview.NATSFeed{NC: js.Conn()}, opts...)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, bus.NewPublisher(js, events.Source("test"))
}

func TestPageAndQueues(t *testing.T) {
	srv, _ := server(t, queues{stats: []engine.QueueStats{{ClusterQueue: "gpu", Cohort: "all", Active: 2, Inadmissible: 1,
		Resources: []engine.ResourceStats{{Flavor: "a100", Resource: "cpu", Reserved: 1500, Nominal: 4000},
			{Flavor: "a100", Resource: "nvidia.com/gpu", Reserved: 3, Nominal: 8}}}}})
	res, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "<title>Sluice</title>") {
		t.Errorf("GET / = %d %s, %d bytes", res.StatusCode, res.Header.Get("Content-Type"), len(body))
	}
	if res, err := http.Get(srv.URL + "/nothing-here"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %v %v, want 404", res.StatusCode, err)
	}

	res, err = http.Get(srv.URL + webview.QueuesPath)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got []webview.Queue
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := []webview.Queue{{Name: "gpu", Cohort: "all", Pending: 3, Active: 2, Inadmissible: 1, Resources: []webview.Resource{
		{Flavor: "a100", Resource: "cpu", Reserved: 1.5, Nominal: 4}, {Flavor: "a100", Resource: "nvidia.com/gpu", Reserved: 3, Nominal: 8}}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("queues (-want +got):\n%s", d)
	}
}

func TestQueuesNotLoadedYet(t *testing.T) {
	srv, _ := server(t, queues{err: errors.New("admission: not ready")})
	res, err := http.Get(srv.URL + webview.QueuesPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "not ready") {
		t.Errorf("got %d %q, want 503 naming the cause", res.StatusCode, body)
	}
}

// Events published after a client connected reach it as server-sent
// events.
func TestLiveFeed(t *testing.T) {
	srv, pub := server(t, queues{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+webview.EventsPath, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	lines := bufio.NewReader(res.Body)
	// The comment line says the stream is open: publish only then.
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	ref := events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train", UID: "u1"}
	ev := events.WorkloadAdmittedV1{Workload: ref, ClusterQueue: "gpu", Admission: "a1",
		PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 2, Flavors: map[string]string{"nvidia.com/gpu": "a100"}}}}
	if err := pub.Publish(ctx, ev, "admitted-1"); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("no event before %v", err)
		}
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok {
			continue
		}
		var got webview.Event
		if err := json.Unmarshal([]byte(data), &got); err != nil {
			t.Fatal(err)
		}
		got.Time = time.Time{}
		want := webview.Event{Type: "admitted", Workload: "team-a/train", Kind: "job", ClusterQueue: "gpu", Detail: "nvidia.com/gpu=a100"}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("feed event (-want +got):\n%s", d)
		}
		return
	}
}

// Under a prefix (the aggregated API's), the page is at prefix/ui and its
// data beneath; a client of the feed sees only what its filter shows.
func TestPrefixAndFilter(t *testing.T) {
	const prefix = "/apis/visibility.sluice.dev/v1beta1"
	srv, pub := server(t, queues{}, webview.WithPrefix(prefix), webview.WithEventFilter(func(r *http.Request) func(webview.Event) bool {
		ns := r.URL.Query().Get("ns")
		return func(e webview.Event) bool { return strings.HasPrefix(e.Workload, ns+"/") }
	}))
	for path, want := range map[string]int{prefix + "/ui": 200, prefix + webview.QueuesPath: 200, "/": 404, webview.QueuesPath: 404} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, res.StatusCode, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+prefix+webview.EventsPath+"?ns=team-a", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := bufio.NewReader(res.Body)
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	for i, ns := range []string{"team-b", "team-a"} {
		ref := events.WorkloadRef{Kind: "job", Namespace: ns, Name: "train", UID: "u" + ns}
		if err := pub.Publish(ctx, events.WorkloadSubmittedV1{Workload: ref, LocalQueue: "q", CreationTime: time.Now(), PodSets: []events.PodSetV1{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "1"}}}}, fmt.Sprint("submitted-", i)); err != nil {
			t.Fatal(err)
		}
	}
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("no event before %v", err)
		}
		if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			if !strings.Contains(data, `"team-a/train"`) {
				t.Errorf("first event shown: %s, want team-a's only", data)
			}
			return
		}
	}
}

// countingFeed counts the Follows running at once, around a NATSFeed.
type countingFeed struct {
	inner   webview.Feed
	mu      sync.Mutex
	now, hi int
}

func (f *countingFeed) Follow(ctx context.Context, ready func(), deliver func(webview.Event)) error {
	f.mu.Lock()
	f.now++
	f.hi = max(f.hi, f.now)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.now--
		f.mu.Unlock()
	}()
	return f.inner.Follow(ctx, ready, deliver)
}

// TestLiveFeedIsSharedAndCapped: clients share one subscription, both see
// an event, and one more than the cap is answered 503 without following.
func TestLiveFeedIsSharedAndCapped(t *testing.T) {
	js := natstest.JetStream(t)
	if err := bus.Setup(context.Background(), js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	feed := &countingFeed{inner: webview.NATSFeed{NC: js.Conn()}}
	mux := http.NewServeMux()
	webview.Register(mux, queues{}, feed, webview.WithMaxClients(2))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	pub := bus.NewPublisher(js, events.Source("test"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	open := func() (*http.Response, *bufio.Reader) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+webview.EventsPath, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		r := bufio.NewReader(res.Body)
		if res.StatusCode == http.StatusOK {
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		return res, r
	}
	_, a := open()
	_, b := open()
	third, _ := open()
	if third.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a third client: %d, want 503", third.StatusCode)
	}
	ref := events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train", UID: "u1"}
	if err := pub.Publish(ctx, events.WorkloadSubmittedV1{Workload: ref, LocalQueue: "q",
		PodSets: []events.PodSetV1{{Name: "main", Count: 1}}}, "submitted-1"); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*bufio.Reader{"first": a, "second": b} {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("%s client: no event before %v", name, err)
			}
			if strings.HasPrefix(line, "data: ") {
				if !strings.Contains(line, `"workload":"team-a/train"`) {
					t.Errorf("%s client got %s", name, line)
				}
				break
			}
		}
	}
	feed.mu.Lock()
	defer feed.mu.Unlock()
	if feed.hi != 1 {
		t.Errorf("%d Follows ran at once for two clients, want one shared", feed.hi)
	}
}
