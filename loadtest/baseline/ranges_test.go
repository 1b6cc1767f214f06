package baseline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRanges(t *testing.T) {
	res := &Result{Wall: 30 * time.Second, CapacityBound: 10 * time.Second, Preemptions: 0,
		TimeToAdmission: map[string]Stats{"large": {N: 3, Mean: 2 * time.Second}, "small": {N: 9, Mean: 90 * time.Second}},
		Usage:           map[string]float64{"cq": 31.5},
		Events:          EventsReport{Read: true, PerJob: 8.5}}
	p := MustProfile("baseline")
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "r.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r, err := LoadRanges(write("wallToBound: {max: 2.5}\nwallSeconds: {max: 20}\ntimeToAdmissionSeconds: {small: {max: 60}, large: {max: 5}, medium: {max: 1}}\n"+
		"usagePercent: {cq: {min: 40}}\neventsPerJob: {min: 1, max: 9}\npreemptions: {min: 1}\nresidentMemoryMB: {max: 100}\n"), p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"wall ÷ capacity bound 3.00 is above its range (max 2.5)",
		"wall time (s) 30.00 is above its range (max 20)",
		"usage of ClusterQueue class cq (%) 31.50 is below its range (min 40)",
		"time to admission of medium Jobs: none measured",
		"mean time to admission of small Jobs (s) 90.00 is above its range (max 60)",
		"preemptions 0.00 is below its range (min 1)",
	}
	if d := cmp.Diff(want, r.Check(res)); d != "" {
		t.Errorf("Check (-want +got):\n%s", d)
	}
	if got := r.CheckMemory(200 << 20); len(got) != 1 || !strings.Contains(got[0], "peak resident memory (MB) 200.00 is above its range (max 100)") {
		t.Errorf("CheckMemory = %v", got)
	}
	for body, wantErr := range map[string]string{
		"wallToBound: {maximum: 2}\n":                `unknown field "wallToBound.maximum"`,
		"timeToAdmissionSeconds: {huge: {max: 1}}\n": "timeToAdmissionSeconds.huge: profile baseline has no such class (small, medium, large)",
		"usagePercent: {small: {min: 1}}\n":          "usagePercent.small: profile baseline has no such ClusterQueue class (cq)",
		"profile: tas\npreemptions: {min: 1}\n":      "the ranges are for profile tas, the run is of baseline",
		"# nothing\n":                                "no range in it",
	} {
		if _, err := LoadRanges(write(body), p); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("LoadRanges(%q) = %v, want an error with %q", body, err, wantErr)
		}
	}
	for f, profile := range map[string]string{"ci.yaml": "baseline", "full.yaml": "baseline", "large-scale.yaml": "large-scale"} {
		if _, err := LoadRanges(filepath.Join("..", "ranges", f), MustProfile(profile)); err != nil {
			t.Errorf("the shipped %s: %v", f, err)
		}
	}
}
