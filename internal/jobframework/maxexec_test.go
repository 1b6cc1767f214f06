package jobframework_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

func TestMaxExecution(t *testing.T) {
	cases := []struct {
		name        string
		labels      map[string]string
		want        int32
		wantErrText string // empty: no error
	}{
		{name: "no label: no maximum", labels: map[string]string{"app": "x"}, want: 0},
		{name: "Sluice's label", labels: map[string]string{v1beta1.MaxExecTimeLabel: "60"}, want: 60},
		{name: "Kueue's label", labels: map[string]string{v1beta1.KueueMaxExecTimeLabel: "3600"}, want: 3600},
		{name: "Sluice's label wins over Kueue's", labels: map[string]string{v1beta1.MaxExecTimeLabel: "10", v1beta1.KueueMaxExecTimeLabel: "20"}, want: 10},
		{name: "zero is refused", labels: map[string]string{v1beta1.MaxExecTimeLabel: "0"}, wantErrText: `label sluice.dev/max-exec-time-seconds: "0"`},
		{name: "negative is refused", labels: map[string]string{v1beta1.KueueMaxExecTimeLabel: "-5"}, wantErrText: `label kueue.x-k8s.io/max-exec-time-seconds: "-5"`},
		{name: "a duration is not seconds", labels: map[string]string{v1beta1.MaxExecTimeLabel: "1h"}, wantErrText: `"1h" is not a whole number of seconds above 0`},
		{name: "beyond int32 is refused", labels: map[string]string{v1beta1.MaxExecTimeLabel: "4294967296"}, wantErrText: `"4294967296" is more than 2147483647 seconds`},
		{name: "a huge negative is not a number of seconds", labels: map[string]string{v1beta1.MaxExecTimeLabel: "-99999999999"}, wantErrText: `"-99999999999" is not a whole number of seconds above 0`},
		{name: "a bad Sluice label is refused even with a good Kueue one", labels: map[string]string{v1beta1.MaxExecTimeLabel: "", v1beta1.KueueMaxExecTimeLabel: "20"}, wantErrText: `label sluice.dev/max-exec-time-seconds: ""`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := jobframework.MaxExecution(tc.labels)
			if tc.wantErrText != "" {
				if err == nil || !errors.Is(err, jobframework.ErrInvalidJob) || !strings.Contains(err.Error(), tc.wantErrText) {
					t.Fatalf("MaxExecution() error = %v, want ErrInvalidJob containing %q", err, tc.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatalf("MaxExecution() error = %v", err)
			}
			if got != tc.want {
				t.Errorf("MaxExecution() = %d, want %d", got, tc.want)
			}
		})
	}
}
