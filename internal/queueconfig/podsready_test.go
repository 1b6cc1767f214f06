package queueconfig

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/internal/engine"
)

func TestWaitForPodsReadyEngine(t *testing.T) {
	no, yes := false, true
	three := int32(3)
	secs := func(v int32) *int32 { return &v }
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	cases := []struct {
		name string
		in   *WaitForPodsReady
		want *engine.WaitForPodsReady
	}{
		{name: "no block: off", in: nil, want: nil},
		{name: "enable false: off", in: &WaitForPodsReady{Enable: &no, Timeout: dur(time.Minute)}, want: nil},
		{
			name: "an empty block: on, with Kueue's defaults",
			in:   &WaitForPodsReady{},
			want: &engine.WaitForPodsReady{Timeout: 5 * time.Minute, RecoveryTimeout: 5 * time.Minute, BackoffBase: time.Minute, BackoffMax: time.Hour},
		},
		{
			name: "every field set",
			in: &WaitForPodsReady{Enable: &yes, Timeout: dur(time.Minute), RecoveryTimeout: dur(0), BlockAdmission: &yes,
				RequeuingStrategy: &RequeuingStrategy{Timestamp: "Creation", BackoffLimitCount: &three, BackoffBaseSeconds: secs(5), BackoffMaxSeconds: secs(50)}},
			want: &engine.WaitForPodsReady{Timeout: time.Minute, BlockAdmission: true, RequeueByCreation: true,
				BackoffLimitCount: &three, BackoffBase: 5 * time.Second, BackoffMax: 50 * time.Second},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, tc.in.Engine()); d != "" {
				t.Errorf("Engine() (-want +got):\n%s", d)
			}
		})
	}
}

func TestWaitForPodsReadyValidate(t *testing.T) {
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	neg := int32(-1)
	secs := func(v int32) *int32 { return &v }
	cases := []struct {
		name string
		in   *WaitForPodsReady
		want []string
	}{
		{name: "nil", in: nil},
		{name: "zero timeout", in: &WaitForPodsReady{Timeout: dur(0)}, want: []string{`w.timeout: Invalid value: "0s": must be positive`}},
		{name: "negative recovery", in: &WaitForPodsReady{RecoveryTimeout: dur(-time.Second)}, want: []string{`w.recoveryTimeout: Invalid value: "-1s": must not be negative`}},
		{
			name: "requeuing strategy out of range",
			in:   &WaitForPodsReady{RequeuingStrategy: &RequeuingStrategy{BackoffLimitCount: &neg, BackoffBaseSeconds: secs(60), BackoffMaxSeconds: secs(10)}},
			want: []string{
				"w.requeuingStrategy.backoffLimitCount: Invalid value: -1: must not be negative",
				"w.requeuingStrategy.backoffMaxSeconds: Invalid value: 10: must not be less than backoffBaseSeconds",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range tc.in.Validate(field.NewPath("w")) {
				got = append(got, e.Error())
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Validate (-want +got):\n%s", d)
			}
		})
	}
}
