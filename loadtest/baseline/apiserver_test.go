package baseline

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWritesBetween(t *testing.T) {
	before := map[string]float64{"POST jobs": 10, "PATCH jobs": 4, "PUT jobs/status": 0}
	after := map[string]float64{"POST jobs": 30, "PATCH jobs": 24, "PUT jobs/status": 20, "POST events": 10}
	got := writesBetween(before, after)
	want := APIWrites{Total: 70, ByKind: map[string]float64{"POST jobs": 20, "PATCH jobs": 20, "PUT jobs/status": 20, "POST events": 10}}
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
