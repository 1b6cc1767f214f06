package simulate

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestElasticWorkloads: an elastic workload's resizes in virtual time. A
// scale-up waits for quota while the workload keeps its admission, and is
// admitted when a release makes room; a scale-down gives quota back at
// once, in time for a waiting workload; a resize before submission is the
// count it is submitted with.
func TestElasticWorkloads(t *testing.T) {
	elastic := func(name, submitAt, runtime string, count int, resizes string) string {
		spec := "  queueName: lq\n  elastic: true\n"
		if submitAt != "" {
			spec += "  submitAt: " + submitAt + "\n"
		}
		if runtime != "" {
			spec += "  runtime: " + runtime + "\n"
		}
		spec += "  podSets: [{name: main, count: " + strconv.Itoa(count) + ", requests: {cpu: 1}}]\n  resizes:\n" + resizes
		return workload("default", name, spec)
	}
	cases := []struct {
		name string
		docs []string
		want []step
	}{
		{
			name: "a scale-up waits for quota and is admitted when a release makes room",
			docs: append(oneQueue(""),
				elastic("e", "", "1h", 2, "  - {at: 5m, podSets: {main: 4}}\n"),
				cpuJob("other", "1m", "10m", 1)),
			want: []step{
				{0, "admitted", "default/e", "cq main×2 cpu=default"},
				{time.Minute, "admitted", "default/other", "cq main×1 cpu=default"},
				{11 * time.Minute, "resized", "default/e", "cq main×4 ScaledUp"},
			},
		},
		{
			name: "a scale-down gives quota back in time for a waiting workload",
			docs: append(oneQueue(""),
				elastic("e", "", "1h", 4, "  - {at: 5m, podSets: {main: 1}}\n"),
				cpuJob("next", "1m", "10m", 3)),
			want: []step{
				{0, "admitted", "default/e", "cq main×4 cpu=default"},
				{5 * time.Minute, "resized", "default/e", "cq main×1 ScaledDown"},
				{5 * time.Minute, "admitted", "default/next", "cq main×3 cpu=default"},
			},
		},
		{
			name: "a resize before submission is the count it is submitted with",
			docs: append(oneQueue(""),
				elastic("e", "10m", "1h", 4, "  - {at: 5m, podSets: {main: 3}}\n")),
			want: []step{
				{10 * time.Minute, "admitted", "default/e", "cq main×3 cpu=default"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := steps(t, run(t, scenario(tc.docs...), Options{}), "admitted", "resized")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
		})
	}
}

// TestElasticResizesAreChecked: resizes of a workload that is not
// elastic, of a pod set it does not have, or to a negative count are
// refused, each naming its field.
func TestElasticResizesAreChecked(t *testing.T) {
	cases := []struct {
		name, spec, want string
	}{
		{"not elastic", "  queueName: lq\n  podSets: [{name: main, count: 1, requests: {cpu: 1}}]\n  resizes: [{at: 1m, podSets: {main: 2}}]\n", "spec.resizes"},
		{"no such pod set", "  queueName: lq\n  elastic: true\n  podSets: [{name: main, count: 1, requests: {cpu: 1}}]\n  resizes: [{at: 1m, podSets: {workers: 2}}]\n", "spec.resizes[0].podSets[workers]"},
		{"negative", "  queueName: lq\n  elastic: true\n  podSets: [{name: main, count: 1, requests: {cpu: 1}}]\n  resizes: [{at: 1m, podSets: {main: -1}}]\n", "spec.resizes[0].podSets[main]"},
		{"partial admission", "  queueName: lq\n  elastic: true\n  podSets: [{name: main, count: 2, minCount: 1, requests: {cpu: 1}}]\n", "spec.podSets[0].minCount"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(scenario(append(oneQueue(""), workload("default", "w", tc.spec))...))}})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, want ErrInvalid naming %s", err, tc.want)
			}
		})
	}
}
