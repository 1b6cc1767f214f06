package queueconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/engine"
)

func q(s string) resource.Quantity { return resource.MustParse(s) }
func qp(s string) *resource.Quantity {
	v := resource.MustParse(s)
	return &v
}

func cpuGroup(nominal string, borrow, lend *resource.Quantity) []v1beta1.ResourceGroup {
	return []v1beta1.ResourceGroup{{
		CoveredResources: []corev1.ResourceName{"cpu"},
		Flavors: []v1beta1.FlavorQuotas{{Name: "default", Resources: []v1beta1.ResourceQuota{
			{Name: "cpu", NominalQuota: q(nominal), BorrowingLimit: borrow, LendingLimit: lend},
		}}},
	}}
}

func TestValidateClusterQueue(t *testing.T) {
	bad := v1beta1.StopPolicy("Pause")
	cases := []struct {
		name     string
		spec     v1beta1.ClusterQueueSpec
		wantErrs []string
	}{
		{name: "valid", spec: v1beta1.ClusterQueueSpec{Cohort: "all", ResourceGroups: cpuGroup("10", qp("5"), qp("2"))}},
		{
			name:     "negative quota",
			spec:     v1beta1.ClusterQueueSpec{ResourceGroups: cpuGroup("-1", nil, nil)},
			wantErrs: []string{`spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: "-1": must not be negative`},
		},
		{
			name: "limits without a cohort",
			spec: v1beta1.ClusterQueueSpec{ResourceGroups: cpuGroup("10", qp("5"), qp("2"))},
			wantErrs: []string{
				"spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: Forbidden: needs a cohort",
				"spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Forbidden: needs a cohort",
			},
		},
		{
			name: "flavor misses a covered resource",
			spec: v1beta1.ClusterQueueSpec{ResourceGroups: []v1beta1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{"cpu", "memory"},
				Flavors:          []v1beta1.FlavorQuotas{{Name: "default", Resources: []v1beta1.ResourceQuota{{Name: "cpu", NominalQuota: q("1")}}}},
			}}},
			wantErrs: []string{"spec.resourceGroups[0].flavors[0].resources: Required value: flavor default must give quota for covered resource memory"},
		},
		{
			name:     "lendingLimit above nominalQuota",
			spec:     v1beta1.ClusterQueueSpec{Cohort: "all", ResourceGroups: cpuGroup("2", nil, qp("2001m"))},
			wantErrs: []string{`spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "2001m": must not be more than nominalQuota`},
		},
		{
			name: "borrowWithinCohort without reclaiming",
			spec: v1beta1.ClusterQueueSpec{Preemption: &v1beta1.ClusterQueuePreemption{
				BorrowWithinCohort: &v1beta1.BorrowWithinCohort{Policy: v1beta1.PreemptionLowerPriority}}},
			wantErrs: []string{`spec.preemption.borrowWithinCohort: Invalid value: "LowerPriority": borrowWithinCohort needs reclaimWithinCohort other than Never`},
		},
		{
			name: "Kueue's MayStopSearch in both fungibility fields",
			spec: v1beta1.ClusterQueueSpec{FlavorFungibility: &v1beta1.FlavorFungibility{
				WhenCanBorrow: v1beta1.MayStopSearch, WhenCanPreempt: v1beta1.MayStopSearch}},
		},
		{
			name: "Admission Fair Sharing by usage",
			spec: v1beta1.ClusterQueueSpec{AdmissionScope: &v1beta1.AdmissionScope{AdmissionMode: v1beta1.UsageBasedAdmissionFairSharing}},
		},
		{
			name:     "an admission mode Kueue does not have",
			spec:     v1beta1.ClusterQueueSpec{AdmissionScope: &v1beta1.AdmissionScope{AdmissionMode: "ByUsage"}},
			wantErrs: []string{`spec.admissionScope.admissionMode: Unsupported value: "ByUsage": supported values: "UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"`},
		},
		{
			name:     "an admissionScope without a mode",
			spec:     v1beta1.ClusterQueueSpec{AdmissionScope: &v1beta1.AdmissionScope{}},
			wantErrs: []string{"spec.admissionScope.admissionMode: Required value: UsageBasedAdmissionFairSharing or NoAdmissionFairSharing"},
		},
		{
			name:     "unknown stop policy",
			spec:     v1beta1.ClusterQueueSpec{StopPolicy: &bad},
			wantErrs: []string{`spec.stopPolicy: Unsupported value: "Pause": supported values: "None", "Hold", "HoldAndDrain"`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cq := &v1beta1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "cq"}, Spec: tc.spec}
			var got []string
			for _, e := range ValidateClusterQueue(cq) {
				got = append(got, e.Error())
			}
			if d := cmp.Diff(tc.wantErrs, got); d != "" {
				t.Errorf("errors (-want +got):\n%s", d)
			}
		})
	}
}

func TestToEngine(t *testing.T) {
	hold := v1beta1.Hold
	o := Objects{
		ClusterQueues: []v1beta1.ClusterQueue{{
			ObjectMeta: metav1.ObjectMeta{Name: "cq"},
			Spec: v1beta1.ClusterQueueSpec{
				Cohort:            "all",
				ResourceGroups:    cpuGroup("1500m", qp("2"), nil),
				QueueingStrategy:  v1beta1.StrictFIFO,
				NamespaceSelector: &metav1.LabelSelector{},
				FlavorFungibility: &v1beta1.FlavorFungibility{WhenCanBorrow: v1beta1.TryNextFlavor, WhenCanPreempt: v1beta1.Preempt},
				Preemption:        &v1beta1.ClusterQueuePreemption{WithinClusterQueue: v1beta1.PreemptionLowerPriority},
				StopPolicy:        &hold,
				FairSharing:       &v1beta1.FairSharing{Weight: qp("0.5")},
			},
		}, {ObjectMeta: metav1.ObjectMeta{Name: "bare"}}},
	}
	cfg, err := ToEngine(o)
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.ClusterQueues[0]
	if got.NamespaceSelector == nil || !got.NamespaceSelector.Empty() {
		t.Errorf("an empty namespaceSelector must select everything, got %v", got.NamespaceSelector)
	}
	if cfg.ClusterQueues[1].NamespaceSelector != nil {
		t.Errorf("an unset namespaceSelector must select nothing")
	}
	got.NamespaceSelector = nil
	want := engine.ClusterQueue{
		Name:   "cq",
		Cohort: "all",
		ResourceGroups: []engine.ResourceGroup{{
			CoveredResources: []string{"cpu"},
			Flavors:          []engine.FlavorQuotas{{Name: "default", Resources: []engine.Quota{{Resource: "cpu", Nominal: 1500, BorrowingLimit: engine.Limited(2000)}}}},
		}},
		QueueingStrategy: engine.StrictFIFO,
		WhenCanBorrow:    engine.TryNextFlavor,
		WhenCanPreempt:   engine.Preempt,
		Preemption:       engine.Preemption{WithinClusterQueue: engine.LowerPriority, ReclaimWithinCohort: engine.Never, BorrowWithinCohort: engine.Never},
		StopPolicy:       engine.Hold,
		FairWeight:       500,
	}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b engine.Limit) bool { return a == b })); d != "" {
		t.Errorf("ToEngine (-want +got):\n%s", d)
	}
	if w := cfg.ClusterQueues[1].FairWeight; w != 1000 {
		t.Errorf("default weight = %d, want 1000", w)
	}
	if s := cfg.ClusterQueues[1].StopPolicy; !strings.EqualFold(string(s), "None") {
		t.Errorf("default stop policy = %q, want None", s)
	}
}

// Kueue's names reach the engine as the values they name.
func TestKueueNamesToEngine(t *testing.T) {
	cases := []struct {
		name             string
		fungibility      v1beta1.FlavorFungibility
		cohort           v1beta1.CohortSpec
		wantBorrow       engine.FungibilityPolicy
		wantPreempt      engine.FungibilityPolicy
		wantCohortParent string
	}{
		{name: "MayStopSearch in both, parentName",
			fungibility: v1beta1.FlavorFungibility{WhenCanBorrow: v1beta1.MayStopSearch, WhenCanPreempt: v1beta1.MayStopSearch},
			cohort:      v1beta1.CohortSpec{ParentName: "company"},
			wantBorrow:  engine.Borrow, wantPreempt: engine.Preempt, wantCohortParent: "company"},
		{name: "TryNextFlavor in both, parent",
			fungibility: v1beta1.FlavorFungibility{WhenCanBorrow: v1beta1.TryNextFlavor, WhenCanPreempt: v1beta1.TryNextFlavor},
			cohort:      v1beta1.CohortSpec{Parent: "company"},
			wantBorrow:  engine.TryNextFlavor, wantPreempt: engine.TryNextFlavor, wantCohortParent: "company"},
		{name: "Sluice's own names, no parent",
			fungibility: v1beta1.FlavorFungibility{WhenCanBorrow: v1beta1.Borrow, WhenCanPreempt: v1beta1.Preempt},
			wantBorrow:  engine.Borrow, wantPreempt: engine.Preempt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fungibility
			cfg, err := ToEngine(Objects{
				ClusterQueues: []v1beta1.ClusterQueue{{ObjectMeta: metav1.ObjectMeta{Name: "cq"}, Spec: v1beta1.ClusterQueueSpec{FlavorFungibility: &f}}},
				Cohorts:       []v1beta1.Cohort{{ObjectMeta: metav1.ObjectMeta{Name: "research"}, Spec: tc.cohort}},
			})
			if err != nil {
				t.Fatal(err)
			}
			got := []string{string(cfg.ClusterQueues[0].WhenCanBorrow), string(cfg.ClusterQueues[0].WhenCanPreempt), cfg.Cohorts[0].Parent}
			want := []string{string(tc.wantBorrow), string(tc.wantPreempt), tc.wantCohortParent}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("whenCanBorrow, whenCanPreempt, cohort parent (-want +got):\n%s", d)
			}
		})
	}
}
