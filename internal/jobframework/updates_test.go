package jobframework_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

func TestMergeUpdates(t *testing.T) {
	gpu := corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists}
	cases := []struct {
		name        string
		byCheck     map[string][]events.PodSetUpdateV1
		want        map[string]*jobframework.PodSetUpdate
		wantErrText string
	}{
		{name: "no checks, no updates"},
		{
			name: "two checks' updates of one pod set join",
			byCheck: map[string][]events.PodSetUpdateV1{
				"prov": {{Name: "main", Annotations: map[string]string{"a": "1"}, Tolerations: []corev1.Toleration{gpu}}},
				"zone": {{Name: "main", NodeSelector: map[string]string{"zone": "z1"}, Annotations: map[string]string{"a": "1"}, Tolerations: []corev1.Toleration{gpu}}},
			},
			want: map[string]*jobframework.PodSetUpdate{"main": {
				Annotations: map[string]string{"a": "1"}, NodeSelector: map[string]string{"zone": "z1"}, Tolerations: []corev1.Toleration{gpu}}},
		},
		{
			name: "updates of two pod sets stay apart",
			byCheck: map[string][]events.PodSetUpdateV1{
				"prov": {{Name: "driver", Labels: map[string]string{"l": "d"}}, {Name: "workers", Labels: map[string]string{"l": "w"}}},
			},
			want: map[string]*jobframework.PodSetUpdate{
				"driver":  {Labels: map[string]string{"l": "d"}},
				"workers": {Labels: map[string]string{"l": "w"}},
			},
		},
		{
			name: "two checks that disagree on a key",
			byCheck: map[string][]events.PodSetUpdateV1{
				"a": {{Name: "main", NodeSelector: map[string]string{"zone": "z1"}}},
				"b": {{Name: "main", NodeSelector: map[string]string{"zone": "z2"}}},
			},
			wantErrText: `pod set "main": checks "a" and "b" set nodeSelector zone to "z1" and "z2"`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := jobframework.MergeUpdates(tc.byCheck)
			if tc.wantErrText != "" {
				if !errors.Is(err, jobframework.ErrPodSetUpdateConflict) || !strings.Contains(err.Error(), tc.wantErrText) {
					t.Fatalf("MergeUpdates() error = %v, want ErrPodSetUpdateConflict containing %q", err, tc.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatalf("MergeUpdates() unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("MergeUpdates() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
