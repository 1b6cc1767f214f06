package queueconfig

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/engine"
)

func TestAdmissionFairSharingBlock(t *testing.T) {
	cases := []struct {
		name       string
		block      *AdmissionFairSharing
		wantErrs   []string
		wantEngine *engine.AdmissionFairSharing
	}{
		{name: "absent: off"},
		{
			name:       "the sampling interval defaults to Kueue's 5m",
			block:      &AdmissionFairSharing{UsageHalfLifeTime: metav1.Duration{Duration: 168 * time.Hour}},
			wantEngine: &engine.AdmissionFairSharing{HalfLife: 168 * time.Hour, SamplingInterval: 5 * time.Minute},
		},
		{
			name: "weights kept",
			block: &AdmissionFairSharing{UsageHalfLifeTime: metav1.Duration{Duration: time.Hour}, UsageSamplingInterval: metav1.Duration{Duration: time.Minute},
				ResourceWeights: map[string]float64{"cpu": 2, "memory": 1}},
			wantEngine: &engine.AdmissionFairSharing{HalfLife: time.Hour, SamplingInterval: time.Minute, ResourceWeights: map[string]float64{"cpu": 2, "memory": 1}},
		},
		{
			name: "negative values named",
			block: &AdmissionFairSharing{UsageHalfLifeTime: metav1.Duration{Duration: -time.Hour}, UsageSamplingInterval: metav1.Duration{Duration: -time.Minute},
				ResourceWeights: map[string]float64{"cpu": -1}},
			wantErrs: []string{
				`admissionFairSharing.usageHalfLifeTime: Invalid value: "-1h0m0s": must not be negative`,
				`admissionFairSharing.usageSamplingInterval: Invalid value: "-1m0s": must be greater than 0`,
				`admissionFairSharing.resourceWeights[cpu]: Invalid value: "-1": must not be negative`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range tc.block.Validate(field.NewPath("admissionFairSharing")) {
				got = append(got, e.Error())
			}
			if d := cmp.Diff(tc.wantErrs, got); d != "" {
				t.Fatalf("errors (-want +got):\n%s", d)
			}
			if len(got) > 0 {
				return
			}
			if d := cmp.Diff(tc.wantEngine, tc.block.Engine()); d != "" {
				t.Errorf("engine settings (-want +got):\n%s", d)
			}
		})
	}
}

func TestAdmissionFairSharingToEngine(t *testing.T) {
	usage := v1beta1.AdmissionScope{AdmissionMode: v1beta1.UsageBasedAdmissionFairSharing}
	none := v1beta1.AdmissionScope{AdmissionMode: v1beta1.NoAdmissionFairSharing}
	two, bad := q("2"), q("-1")
	o := Objects{
		ClusterQueues: []v1beta1.ClusterQueue{
			{ObjectMeta: metav1.ObjectMeta{Name: "by-usage"}, Spec: v1beta1.ClusterQueueSpec{AdmissionScope: &usage}},
			{ObjectMeta: metav1.ObjectMeta{Name: "none"}, Spec: v1beta1.ClusterQueueSpec{AdmissionScope: &none}},
			{ObjectMeta: metav1.ObjectMeta{Name: "unset"}},
		},
		LocalQueues: []v1beta1.LocalQueue{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "heavy"}, Spec: v1beta1.LocalQueueSpec{ClusterQueue: "by-usage", FairSharing: &v1beta1.FairSharing{Weight: &two}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"}, Spec: v1beta1.LocalQueueSpec{ClusterQueue: "by-usage"}},
		},
		AdmissionFairSharing: &engine.AdmissionFairSharing{HalfLife: time.Hour, SamplingInterval: time.Minute},
	}
	cfg, err := ToEngine(o)
	if err != nil {
		t.Fatal(err)
	}
	var modes []bool
	for _, cq := range cfg.ClusterQueues {
		modes = append(modes, cq.UsageBasedAdmission)
	}
	if d := cmp.Diff([]bool{true, false, false}, modes); d != "" {
		t.Errorf("UsageBasedAdmission of by-usage, none, unset (-want +got):\n%s", d)
	}
	if w := cfg.LocalQueues[0].FairWeight; w == nil || *w != 2 {
		t.Errorf("ns/heavy's weight = %v, want 2", w)
	}
	if w := cfg.LocalQueues[1].FairWeight; w != nil {
		t.Errorf("ns/plain's weight = %v, want unset (1)", *w)
	}
	if cfg.AdmissionFairSharing != o.AdmissionFairSharing {
		t.Errorf("the settings were not carried over")
	}
	lq := v1beta1.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "neg"}, Spec: v1beta1.LocalQueueSpec{ClusterQueue: "cq", FairSharing: &v1beta1.FairSharing{Weight: &bad}}}
	var got []string
	for _, e := range ValidateLocalQueue(&lq) {
		got = append(got, e.Error())
	}
	if d := cmp.Diff([]string{`spec.fairSharing.weight: Invalid value: "-1": must not be negative`}, got); d != "" {
		t.Errorf("a negative LocalQueue weight (-want +got):\n%s", d)
	}
}
