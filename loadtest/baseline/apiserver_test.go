package baseline

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWritesBetween(t *testing.T) {
	before := apiCounters{writes: map[string]float64{"POST jobs": 10, "PATCH jobs": 4, "PUT jobs/status": 0}, watchesClosed: 3, replayed: 100}
	after := apiCounters{writes: map[string]float64{"POST jobs": 30, "PATCH jobs": 24, "PUT jobs/status": 20, "POST events": 10}, watchesClosed: 5, replayed: 2600}
	got := writesBetween(before, after)
	want := APIWrites{Total: 70, ByKind: map[string]float64{"POST jobs": 20, "PATCH jobs": 20, "PUT jobs/status": 20, "POST events": 10},
		JobWatchesClosed: 2, JobEventsReplayed: 2500}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("writesBetween (-want +got):\n%s", d)
	}
	wantSummary := "70, 3.50 per Job: PATCH jobs 1.00; POST jobs 1.00; PUT jobs/status 1.00; POST events 0.50;"
	if s := got.summary(20); s != wantSummary {
		t.Errorf("summary:\n got %q\nwant %q", s, wantSummary)
	}
	if s := (APIWrites{}).summary(20); s != "none counted" {
		t.Errorf("summary of nothing: %q", s)
	}
}

// TestParseCounters reads the writes and the Job watches' counters from an
// API server's /metrics as it writes them: reads and other resources'
// watches are not counted.
func TestParseCounters(t *testing.T) {
	body := []byte(`# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="status",verb="PUT",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="status",verb="PUT",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",resource="jobs",scope="namespace",subresource="",verb="LIST",version="v1"} 40
# HELP apiserver_terminated_watchers_total Counter of watchers closed due to unresponsiveness.
# TYPE apiserver_terminated_watchers_total counter
apiserver_terminated_watchers_total{group="batch",resource="jobs"} 9
apiserver_terminated_watchers_total{group="",resource="pods"} 4
# HELP apiserver_init_events_total Counter of init events processed in watch cache broken by resource type.
# TYPE apiserver_init_events_total counter
apiserver_init_events_total{group="batch",resource="jobs"} 1234
apiserver_init_events_total{group="",resource="pods"} 99
`)
	got, err := parseCounters(body)
	if err != nil {
		t.Fatal(err)
	}
	want := apiCounters{writes: map[string]float64{"POST jobs": 12, "PUT jobs/status": 8}, watchesClosed: 9, replayed: 1234}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(apiCounters{})); d != "" {
		t.Errorf("parseCounters (-want +got):\n%s", d)
	}
	if _, err := parseCounters([]byte("# TYPE other_total counter\nother_total 1\n")); err == nil {
		t.Error("parseCounters without apiserver_request_total: no error")
	}
}
