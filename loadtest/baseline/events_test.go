package baseline

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFinishCountsUndisturbedJobs: the events per Job never preempted nor
// evicted leave out the Jobs that were, and the probes.
func TestFinishCountsUndisturbedJobs(t *testing.T) {
	jobs := map[string]runJob{"a": {name: "a"}, "b": {name: "b"}, "c": {name: "c"}, "p": {name: "probe", probe: true}}
	perJob := map[string]int{"a": 6, "b": 14, "c": 8, "p": 6}
	finished := map[string]bool{"a": true, "b": true, "c": true}
	disturbed := map[string]bool{"b": true}
	rep := finish(&EventsReport{}, perJob, jobs, finished, disturbed, nil, nil)
	got := struct {
		PerJob, PerUndisturbed float64
		Undisturbed, Min, Max  int
	}{rep.PerJob, rep.PerUndisturbedJob, rep.Undisturbed, rep.PerJobMin, rep.PerJobMax}
	want := struct {
		PerJob, PerUndisturbed float64
		Undisturbed, Min, Max  int
	}{28.0 / 3, 7, 2, 6, 14}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
