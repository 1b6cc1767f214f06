package admission_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/internal/visibility"
)

// get fetches a visibility path from the service and decodes the answer.
func (h *harness) get(srv *httptest.Server, path string, out any) int {
	h.t.Helper()
	res, err := http.Get(srv.URL + path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		h.t.Fatalf("GET %s: %v\n%s", path, err, b)
	}
	return res.StatusCode
}

func TestVisibilityAPI(t *testing.T) {
	h := newHarness(t)
	h.configure("4", nil)
	putLocalQueue("other").do(h)
	h.start()
	h.submit("running", "main", 0, 4, "1")
	ledgerIs(map[string]int32{"running": 4}).do(h)
	h.submit("low", "main", 0, 2, "1")
	h.submit("high", "other", 5, 2, "1")
	h.submit("mid", "main", 3, 2, "1")
	pending("low", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0").do(h)
	mux := http.NewServeMux()
	visibility.Register(mux, h.svc, h.svc.Now)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	order := func(s visibility.PendingWorkloadsSummary) []string {
		var out []string
		for _, it := range s.Items {
			out = append(out, fmt.Sprintf("%s@%d/%d", it.Metadata.Name, it.PositionInClusterQueue, it.PositionInLocalQueue))
		}
		return out
	}
	var all visibility.PendingWorkloadsSummary
	h.eventually("all three pending in the API", func() (bool, string) {
		all = visibility.PendingWorkloadsSummary{}
		code := h.get(srv, visibility.Prefix+"/clusterqueues/cq/pendingworkloads", &all)
		return code == 200 && all.Total == 3, fmt.Sprintf("%d %+v", code, all)
	})
	if d := cmp.Diff([]string{"high@0/0", "mid@1/0", "low@2/1"}, order(all)); d != "" {
		t.Errorf("ClusterQueue order (-want +got):\n%s", d)
	}
	it := all.Items[2]
	if it.Metadata.Namespace != "team-a" || it.JobKind != "job" || it.LocalQueueName != "main" || it.ClusterQueueName != "cq" ||
		it.Reason == "" || it.WaitingSeconds < 0 {
		t.Errorf("item %+v", it)
	}
	var page visibility.PendingWorkloadsSummary
	h.get(srv, visibility.Prefix+"/namespaces/team-a/localqueues/main/pendingworkloads?offset=1&limit=1", &page)
	if d := cmp.Diff([]string{"low@2/1"}, order(page)); d != "" || page.Total != 2 {
		t.Errorf("LocalQueue page (total %d) (-want +got):\n%s", page.Total, d)
	}
	var st struct {
		Code    int    `json:"code"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if code := h.get(srv, visibility.Prefix+"/clusterqueues/nope/pendingworkloads", &st); code != 404 || st.Message != `clusterqueue "nope" not found` {
		t.Errorf("missing ClusterQueue: %d %+v", code, st)
	}
	if code := h.get(srv, visibility.Prefix+"/clusterqueues/cq/pendingworkloads?limit=0", &st); code != 400 ||
		st.Message != `query parameter limit="0": must be an integer from 1 to 10000` {
		t.Errorf("limit=0: %d %+v", code, st)
	}
}

// TestQueriesPastTheLimitAreBusy: reads of the pending API past the
// service's rate are answered 429 with Retry-After, outside the admission
// loop, and admission goes on.
func TestQueriesPastTheLimitAreBusy(t *testing.T) {
	h := newHarness(t)
	h.queriesPerSecond = 2
	h.configure("4", nil)
	h.start()
	h.submit("a", "main", 0, 2, "1")
	ledgerIs(map[string]int32{"a": 2}).do(h)
	mux := http.NewServeMux()
	visibility.Register(mux, h.svc, h.svc.Now)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	codes := map[int]int{}
	retryAfter := ""
	for range 20 {
		res, err := http.Get(srv.URL + visibility.Prefix + "/clusterqueues/cq/pendingworkloads")
		if err != nil {
			t.Fatal(err)
		}
		codes[res.StatusCode]++
		if res.StatusCode == http.StatusTooManyRequests {
			retryAfter = res.Header.Get("Retry-After")
		}
		res.Body.Close()
	}
	if codes[http.StatusOK] == 0 || codes[http.StatusTooManyRequests] == 0 || retryAfter == "" {
		t.Errorf("20 queries at once with a rate of 2 a second: %v (Retry-After %q); want some answered, the rest 429 with Retry-After", codes, retryAfter)
	}
	h.submit("b", "main", 0, 2, "1")
	ledgerIs(map[string]int32{"a": 2, "b": 2}).do(h)
}

// TestQueriesShareViews: a burst of queries is answered from views the
// loop takes at most once per cycle interval, not one read of the engine
// each; admission goes on meanwhile.
func TestQueriesShareViews(t *testing.T) {
	h := newHarness(t)
	h.queriesPerSecond = 100000
	h.configure("4", nil)
	h.start()
	h.submit("a", "main", 0, 2, "1")
	ledgerIs(map[string]int32{"a": 2}).do(h)
	before := h.svc.ViewsTaken()
	const queries = 400
	var wg sync.WaitGroup
	errs := make(chan error, queries)
	for range queries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			page, ok, err := h.svc.PendingInClusterQueue(h.ctx, "cq", 0, 0)
			if err == nil && (!ok || page.Total > 1) {
				err = fmt.Errorf("cq: found %t, %d pending; want found, at most b", ok, page.Total)
			}
			errs <- err
		}()
	}
	h.submit("b", "main", 0, 2, "1")
	ledgerIs(map[string]int32{"a": 2, "b": 2}).do(h)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := h.svc.ViewsTaken() - before; n < 1 || n > queries/4 {
		t.Errorf("%d queries took %d views of the engine; want at least 1 and far fewer than the queries", queries, n)
	}
}
