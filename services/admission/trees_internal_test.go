package admission

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestNumberTrees: trees are numbered oldest first, then by name, so that
// a tree created later never moves the others to another lease.
func TestNumberTrees(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		trees []string
		born  map[string]time.Time
		want  []string
	}{{
		name:  "no creation times (the simulator, tests): by name",
		trees: []string{"cq/b", "cohort/z", "cq/a"},
		want:  []string{"cohort/z", "cq/a", "cq/b"},
	}, {
		name:  "oldest first",
		trees: []string{"cohort/a", "cohort/b", "cq/c"},
		born:  map[string]time.Time{"cohort/a": t0.Add(2 * time.Second), "cohort/b": t0, "cq/c": t0.Add(time.Second)},
		want:  []string{"cohort/b", "cq/c", "cohort/a"},
	}, {
		name:  "a tree created later, first by name: numbered last, the others keep theirs",
		trees: []string{"cohort/a", "cohort/b", "cohort/c", "cohort/aa"},
		born:  map[string]time.Time{"cohort/a": t0, "cohort/b": t0, "cohort/c": t0, "cohort/aa": t0.Add(time.Minute)},
		want:  []string{"cohort/a", "cohort/b", "cohort/c", "cohort/aa"},
	}, {
		name:  "created in the same second: by name",
		trees: []string{"cq/y", "cq/x"},
		born:  map[string]time.Time{"cq/x": t0, "cq/y": t0},
		want:  []string{"cq/x", "cq/y"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, numberTrees(tc.trees, tc.born)); d != "" {
				t.Errorf("numbers (-want +got):\n%s", d)
			}
		})
	}
}
