package engine

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func i32(v int32) *int32 { return &v }

func TestQuotaTree(t *testing.T) {
	two := func(a, b ClusterQueue) Config {
		return Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{a, b}, LocalQueues: lqs("a", "cq-a", "b", "cq-b")}
	}
	runCases(t, []cycleCase{
		{
			name:         "borrows unused quota of the cohort",
			cfg:          two(newCQ("cq-a").cohort("all").quota("default", "cpu", 10000).obj(), newCQ("cq-b").cohort("all").quota("default", "cpu", 10000).obj()),
			workloads:    []Workload{newWL("a", "big").pods("main", 1, "cpu", 15000).obj()},
			wantAdmitted: map[string]string{"a/big": "cq-a main=1:cpu=default"},
		},
		{
			name:      "without a cohort a queue never borrows",
			cfg:       two(newCQ("cq-a").quota("default", "cpu", 10000).obj(), newCQ("cq-b").quota("default", "cpu", 10000).obj()),
			workloads: []Workload{newWL("a", "big").pods("main", 1, "cpu", 15000).obj()},
			wantPending: map[string]string{
				"a/big": "pod set main: insufficient quota for cpu in flavor default: requested 15, more than the ClusterQueue can ever use (10)",
			},
		},
		{
			name: "borrowingLimit caps borrowing",
			cfg: two(newCQ("cq-a").cohort("all").quota("default", "cpu", 10000, Limited(2000)).obj(),
				newCQ("cq-b").cohort("all").quota("default", "cpu", 10000).obj()),
			workloads: []Workload{
				newWL("a", "too-big").pods("main", 1, "cpu", 13000).obj(),
				newWL("a", "fits").at(time.Second).pods("main", 1, "cpu", 12000).obj(),
			},
			wantAdmitted: map[string]string{"a/fits": "cq-a main=1:cpu=default"},
			wantPending: map[string]string{
				"a/too-big": "pod set main: insufficient quota for cpu in flavor default: requested 13, more than the ClusterQueue can ever use (12)",
			},
		},
		{
			name: "lendingLimit keeps part of a queue's quota from the cohort",
			cfg: two(newCQ("cq-a").cohort("all").quota("default", "cpu", 10000).obj(),
				newCQ("cq-b").cohort("all").quota("default", "cpu", 10000, noLimit, Limited(4000)).obj()),
			workloads: []Workload{
				newWL("a", "too-big").pods("main", 1, "cpu", 15000).obj(),
				newWL("a", "fits").at(time.Second).pods("main", 1, "cpu", 14000).obj(),
				newWL("b", "own").at(2*time.Second).pods("main", 1, "cpu", 6000).obj(),
			},
			wantAdmitted: map[string]string{
				"a/fits": "cq-a main=1:cpu=default",
				"b/own":  "cq-b main=1:cpu=default",
			},
			wantPending: map[string]string{
				"a/too-big": "pod set main: insufficient quota for cpu in flavor default: requested 15, more than the ClusterQueue can ever use (14)",
			},
		},
		{
			name: "hierarchical cohorts lend a parent's own quota down the tree",
			cfg: Config{
				Flavors: flavors("default"),
				Cohorts: []Cohort{
					{Name: "org", ResourceGroups: addQuota(nil, "default", "cpu", 10000), FairWeight: 1000},
					{Name: "team", Parent: "org", FairWeight: 1000},
				},
				ClusterQueues: []ClusterQueue{newCQ("cq-a").cohort("team").quota("default", "cpu", 5000).obj()},
				LocalQueues:   lqs("a", "cq-a"),
			},
			workloads: []Workload{
				newWL("a", "first").pods("main", 1, "cpu", 12000).obj(),
				newWL("a", "second").at(time.Second).pods("main", 1, "cpu", 4000).obj(),
			},
			wantAdmitted: map[string]string{"a/first": "cq-a main=1:cpu=default"},
			wantPending: map[string]string{
				"a/second": "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 3",
			},
		},
		{
			name: "a cohort's lendingLimit bounds what leaves its subtree",
			cfg: Config{
				Flavors: flavors("default"),
				Cohorts: []Cohort{
					{Name: "root", FairWeight: 1000},
					{Name: "left", Parent: "root", ResourceGroups: addQuota(nil, "default", "cpu", 10000, noLimit, Limited(3000)), FairWeight: 1000},
					{Name: "right", Parent: "root", FairWeight: 1000},
				},
				ClusterQueues: []ClusterQueue{
					newCQ("cq-l").cohort("left").quota("default", "cpu", 0).obj(),
					newCQ("cq-r").cohort("right").quota("default", "cpu", 0).obj(),
				},
				LocalQueues: lqs("l", "cq-l", "r", "cq-r"),
			},
			workloads: []Workload{
				newWL("r", "too-big").pods("main", 1, "cpu", 4000).obj(),
				newWL("r", "fits").at(time.Second).pods("main", 1, "cpu", 3000).obj(),
				newWL("l", "home").at(2*time.Second).pods("main", 1, "cpu", 7000).obj(),
			},
			wantAdmitted: map[string]string{
				"r/fits": "cq-r main=1:cpu=default",
				"l/home": "cq-l main=1:cpu=default",
			},
			wantPending: map[string]string{
				"r/too-big": "pod set main: insufficient quota for cpu in flavor default: requested 4, more than the ClusterQueue can ever use (3)",
			},
		},
		{
			name: "a resource no group covers is named",
			cfg:  two(newCQ("cq-a").quota("default", "cpu", 10000).obj(), newCQ("cq-b").obj()),
			workloads: []Workload{
				newWL("a", "gpu").pods("main", 1, "cpu", 1000, "nvidia.com/gpu", 1).obj(),
			},
			wantPending: map[string]string{
				"a/gpu": "pod set main: resource nvidia.com/gpu is not covered by any resource group of ClusterQueue cq-a",
			},
		},
		{
			name: "pod sets of one workload add up on a shared flavor",
			cfg:  two(newCQ("cq-a").quota("default", "cpu", 10000).obj(), newCQ("cq-b").obj()),
			workloads: []Workload{
				newWL("a", "two-sets").pods("driver", 1, "cpu", 4000).pods("workers", 2, "cpu", 4000).obj(),
			},
			wantPending: map[string]string{
				"a/two-sets": "pod set workers: insufficient quota for cpu in flavor default: requested 12, more than the ClusterQueue can ever use (10)",
			},
		},
	})
}

func TestFlavorAssignment(t *testing.T) {
	twoFlavors := func(cq *cqBuilder, fl ...Flavor) Config {
		return Config{Flavors: fl, ClusterQueues: []ClusterQueue{cq.obj()}, LocalQueues: lqs("ns", "cq")}
	}
	spot := Flavor{Name: "spot", NodeLabels: map[string]string{"tier": "spot"},
		NodeTaints: []corev1.Taint{{Key: "spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}}}
	onDemand := Flavor{Name: "on-demand", NodeLabels: map[string]string{"tier": "on-demand"}}
	tolerating := newWL("ns", "tolerant").pods("main", 1, "cpu", 1000).obj()
	tolerating.PodSets[0].Tolerations = []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	runCases(t, []cycleCase{
		{
			name:      "flavors are tried in order, skipping a tainted one the pods do not tolerate",
			cfg:       twoFlavors(newCQ("cq").quota("spot", "cpu", 10000).quota("on-demand", "cpu", 10000), spot, onDemand),
			workloads: []Workload{newWL("ns", "plain").pods("main", 1, "cpu", 1000).obj(), tolerating},
			wantAdmitted: map[string]string{
				"ns/plain":    "cq main=1:cpu=on-demand",
				"ns/tolerant": "cq main=1:cpu=spot",
			},
		},
		{
			name: "a nodeSelector that contradicts a flavor's labels skips it",
			cfg: twoFlavors(newCQ("cq").quota("a100", "nvidia.com/gpu", 8).quota("h100", "nvidia.com/gpu", 8),
				Flavor{Name: "a100", NodeLabels: map[string]string{"gpu": "a100"}}, Flavor{Name: "h100", NodeLabels: map[string]string{"gpu": "h100"}}),
			workloads: []Workload{
				newWL("ns", "wants-h100").pods("main", 2, "nvidia.com/gpu", 1).selector("gpu", "h100").obj(),
				newWL("ns", "other-key").pods("main", 2, "nvidia.com/gpu", 1).selector("zone", "x").obj(),
				newWL("ns", "impossible").pods("main", 2, "nvidia.com/gpu", 1).selector("gpu", "v100").obj(),
			},
			wantAdmitted: map[string]string{
				"ns/wants-h100": "cq main=2:nvidia.com/gpu=h100",
				"ns/other-key":  "cq main=2:nvidia.com/gpu=a100",
			},
			wantPending: map[string]string{
				"ns/impossible": "pod set main: flavor a100 does not match nodeSelector gpu=v100 of pod set main; flavor h100 does not match nodeSelector gpu=v100 of pod set main",
			},
		},
		{
			name: "a flavor is judged only on the label keys it defines itself",
			cfg: twoFlavors(newCQ("cq").quota("zone-a", "cpu", 4000).quota("unlabelled", "cpu", 4000),
				Flavor{Name: "zone-a", NodeLabels: map[string]string{"zone": "a"}}, Flavor{Name: "unlabelled"}),
			workloads: []Workload{
				newWL("ns", "wants-b").pods("main", 1, "cpu", 1000).selector("zone", "b").obj(),
				newWL("ns", "wants-gpu").at(time.Second).pods("main", 1, "cpu", 1000).selector("gpu", "h100").obj(),
			},
			wantAdmitted: map[string]string{
				// zone-a sets zone to another value; the unlabelled flavor matches any selector.
				"ns/wants-b": "cq main=1:cpu=unlabelled",
				// zone-a does not define gpu, so the selector says nothing against it.
				"ns/wants-gpu": "cq main=1:cpu=zone-a",
			},
		},
		{
			name: "whenCanBorrow Borrow takes the first flavor even if it borrows",
			cfg: Config{
				Flavors: flavors("first", "second"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq").cohort("all").quota("first", "cpu", 2000).quota("second", "cpu", 10000).obj(),
					newCQ("lender").cohort("all").quota("first", "cpu", 10000).obj(),
				},
				LocalQueues: lqs("ns", "cq"),
			},
			workloads:    []Workload{newWL("ns", "w").pods("main", 1, "cpu", 5000).obj()},
			wantAdmitted: map[string]string{"ns/w": "cq main=1:cpu=first"},
		},
		{
			name: "whenCanBorrow TryNextFlavor prefers a later flavor that fits without borrowing",
			cfg: Config{
				Flavors: flavors("first", "second"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq").cohort("all").fungibility(TryNextFlavor, TryNextFlavor).quota("first", "cpu", 2000).quota("second", "cpu", 10000).obj(),
					newCQ("lender").cohort("all").quota("first", "cpu", 10000).obj(),
				},
				LocalQueues: lqs("ns", "cq"),
			},
			workloads:    []Workload{newWL("ns", "w").pods("main", 1, "cpu", 5000).obj()},
			wantAdmitted: map[string]string{"ns/w": "cq main=1:cpu=second"},
		},
		{
			name: "whenCanPreempt TryNextFlavor moves on to a flavor that fits",
			cfg: Config{
				Flavors:       flavors("first", "second"),
				ClusterQueues: []ClusterQueue{newCQ("cq").preemption(LowerPriority, Never).quota("first", "cpu", 4000).quota("second", "cpu", 4000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "low").pods("main", 1, "cpu", 4000).admittedIn("cq", "first", -time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 4000).obj(),
			},
			wantAdmitted: map[string]string{"ns/high": "cq main=1:cpu=second"},
		},
		{
			name: "whenCanPreempt Preempt preempts in the first flavor",
			cfg: Config{
				Flavors:       flavors("first", "second"),
				ClusterQueues: []ClusterQueue{newCQ("cq").preemption(LowerPriority, Never).fungibility(Borrow, Preempt).quota("first", "cpu", 4000).quota("second", "cpu", 4000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "low").pods("main", 1, "cpu", 4000).admittedIn("cq", "first", -time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 4000).obj(),
			},
			// The victim is requeued and lands in the second flavor.
			wantAdmitted: map[string]string{
				"ns/high": "cq main=1:cpu=first",
				"ns/low":  "cq main=1:cpu=second",
			},
			wantPreempted: map[string]string{"ns/low": "InClusterQueue by ns/high"},
		},
		{
			name: "reclaiming quota lent to another queue is preferred to preempting in one's own queue",
			cfg: Config{
				Flavors: flavors("first", "second"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq").cohort("all").preemption(LowerPriority, Any).quota("first", "cpu", 4000).quota("second", "cpu", 4000).obj(),
					newCQ("lender").cohort("all").quota("first", "cpu", 0).quota("second", "cpu", 0).obj(),
				},
				LocalQueues: lqs("ns", "cq", "other", "lender"),
			},
			workloads: []Workload{
				newWL("ns", "own-low").pods("main", 1, "cpu", 4000).admittedIn("cq", "first", -time.Minute).obj(),
				newWL("other", "borrower").prio(50).pods("main", 1, "cpu", 4000).admittedIn("lender", "second", -time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 4000).obj(),
			},
			wantAdmitted:  map[string]string{"ns/high": "cq main=1:cpu=second"},
			wantPreempted: map[string]string{"other/borrower": "InCohortReclamation by ns/high"},
			wantPending: map[string]string{
				"other/borrower": "pod set main: insufficient unused quota for cpu in flavor first: requested 4, available 0; " +
					"insufficient unused quota for cpu in flavor second: requested 4, available 0",
			},
		},
		{
			name: "by default a flavor that fits by borrowing beats one that needs preemption",
			cfg: Config{
				Flavors: flavors("first", "second"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq").cohort("all").preemption(LowerPriority, Never).fungibility(TryNextFlavor, TryNextFlavor).
						quota("first", "cpu", 0).quota("second", "cpu", 4000).obj(),
					newCQ("lender").cohort("all").quota("first", "cpu", 4000).quota("second", "cpu", 0).obj(),
				},
				LocalQueues: lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "own-low").pods("main", 1, "cpu", 4000).admittedIn("cq", "second", -time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 4000).obj(),
			},
			wantAdmitted: map[string]string{"ns/high": "cq main=1:cpu=first"},
		},
		{
			name: "preference PreemptionOverBorrowing takes the flavor that needs no borrowing",
			cfg: Config{
				Flavors: flavors("first", "second"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq").cohort("all").preemption(LowerPriority, Never).fungibility(TryNextFlavor, TryNextFlavor).
						preference(PreemptionOverBorrowing).quota("first", "cpu", 0).quota("second", "cpu", 4000).obj(),
					newCQ("lender").cohort("all").quota("first", "cpu", 4000).quota("second", "cpu", 0).obj(),
				},
				LocalQueues: lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "own-low").pods("main", 1, "cpu", 4000).admittedIn("cq", "second", -time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 4000).obj(),
			},
			// The victim is requeued and borrows the first flavor.
			wantAdmitted: map[string]string{
				"ns/high":    "cq main=1:cpu=second",
				"ns/own-low": "cq main=1:cpu=first",
			},
			wantPreempted: map[string]string{"ns/own-low": "InClusterQueue by ns/high"},
		},
		{
			name: "resource groups get flavors independently",
			cfg: Config{
				Flavors: flavors("cpu-pool", "a100"),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("cpu-pool", "cpu", 16000).quota("cpu-pool", "memory", 64<<30).
					group().quota("a100", "nvidia.com/gpu", 4).obj()},
				LocalQueues: lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "train").pods("main", 4, "cpu", 2000, "memory", 8<<30, "nvidia.com/gpu", 1).obj(),
			},
			wantAdmitted: map[string]string{"ns/train": "cq main=4:cpu=cpu-pool,memory=cpu-pool,nvidia.com/gpu=a100"},
		},
	})
}

func TestPreemption(t *testing.T) {
	oneCQ := func(cq *cqBuilder) Config {
		return Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{cq.obj()}, LocalQueues: lqs("ns", "cq")}
	}
	cohortOf := func(a, b *cqBuilder) Config {
		return Config{Flavors: flavors("default"), ClusterQueues: []ClusterQueue{a.cohort("all").obj(), b.cohort("all").obj()}, LocalQueues: lqs("a", "cq-a", "b", "cq-b")}
	}
	runCases(t, []cycleCase{
		{
			name: "withinClusterQueue LowerPriority evicts a lower priority workload",
			cfg:  oneCQ(newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("ns", "low").prio(1).pods("main", 1, "cpu", 8000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 5000).obj(),
			},
			wantAdmitted:  map[string]string{"ns/high": "cq main=1:cpu=default"},
			wantPreempted: map[string]string{"ns/low": "InClusterQueue by ns/high"},
			wantPending: map[string]string{
				"ns/low": "pod set main: insufficient unused quota for cpu in flavor default: requested 8, available 5",
			},
		},
		{
			name: "withinClusterQueue Never leaves the preemptor waiting",
			cfg:  oneCQ(newCQ("cq").quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("ns", "low").prio(1).pods("main", 1, "cpu", 8000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 5000).obj(),
			},
			wantPending: map[string]string{
				"ns/high": "pod set main: insufficient unused quota for cpu in flavor default: requested 5, available 2",
			},
		},
		{
			name: "LowerPriority does not evict equal priority",
			cfg:  oneCQ(newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("ns", "running").prio(5).at(time.Second).pods("main", 1, "cpu", 8000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "waiting").prio(5).pods("main", 1, "cpu", 5000).obj(),
			},
			wantPending: map[string]string{
				"ns/waiting": "pod set main: insufficient unused quota for cpu in flavor default: requested 5, available 2",
			},
		},
		{
			name: "LowerOrNewerEqualPriority evicts a newer workload of equal priority",
			cfg:  oneCQ(newCQ("cq").preemption(LowerOrNewerEqualPriority, Never).quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("ns", "newer").prio(5).at(time.Second).pods("main", 1, "cpu", 8000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "older").prio(5).pods("main", 1, "cpu", 5000).obj(),
			},
			wantAdmitted:  map[string]string{"ns/older": "cq main=1:cpu=default"},
			wantPreempted: map[string]string{"ns/newer": "InClusterQueue by ns/older"},
			wantPending: map[string]string{
				"ns/newer": "pod set main: insufficient unused quota for cpu in flavor default: requested 8, available 5",
			},
		},
		{
			name: "LowerOrNewerEqualPriority spares an older workload of equal priority",
			cfg:  oneCQ(newCQ("cq").preemption(LowerOrNewerEqualPriority, Never).quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("ns", "older").prio(5).pods("main", 1, "cpu", 8000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "newer").prio(5).at(time.Second).pods("main", 1, "cpu", 5000).obj(),
			},
			wantPending: map[string]string{
				"ns/newer": "pod set main: insufficient unused quota for cpu in flavor default: requested 5, available 2",
			},
		},
		{
			name: "victims: lowest priority first, then most recently admitted, and no more than needed",
			cfg:  oneCQ(newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("ns", "mid").prio(3).pods("main", 1, "cpu", 3000).admittedIn("cq", "default", -3*time.Minute).obj(),
				newWL("ns", "low-old").prio(1).pods("main", 1, "cpu", 3000).admittedIn("cq", "default", -2*time.Minute).obj(),
				newWL("ns", "low-new").prio(1).pods("main", 1, "cpu", 3000).admittedIn("cq", "default", -1*time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 4000).obj(),
			},
			wantAdmitted:  map[string]string{"ns/high": "cq main=1:cpu=default"},
			wantPreempted: map[string]string{"ns/low-new": "InClusterQueue by ns/high"},
			wantPending: map[string]string{
				"ns/low-new": "pod set main: insufficient unused quota for cpu in flavor default: requested 3, available 0",
			},
		},
		{
			name: "fill-back keeps a victim whose eviction turns out unnecessary",
			cfg:  oneCQ(newCQ("cq").preemption(LowerPriority, Never).quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("ns", "small").prio(1).pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -1*time.Minute).obj(),
				newWL("ns", "large").prio(2).pods("main", 1, "cpu", 8000).admittedIn("cq", "default", -2*time.Minute).obj(),
				newWL("ns", "high").prio(10).pods("main", 1, "cpu", 8000).obj(),
			},
			wantAdmitted:  map[string]string{"ns/high": "cq main=1:cpu=default"},
			wantPreempted: map[string]string{"ns/large": "InClusterQueue by ns/high"},
			wantPending: map[string]string{
				"ns/large": "pod set main: insufficient unused quota for cpu in flavor default: requested 8, available 1",
			},
		},
		{
			name: "reclaimWithinCohort Any takes back nominal quota from a borrower",
			cfg: cohortOf(newCQ("cq-a").preemption(Never, Any).quota("default", "cpu", 10000),
				newCQ("cq-b").quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("b", "borrower").prio(100).pods("main", 1, "cpu", 15000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "owner").prio(1).pods("main", 1, "cpu", 8000).obj(),
			},
			wantAdmitted:  map[string]string{"a/owner": "cq-a main=1:cpu=default"},
			wantPreempted: map[string]string{"b/borrower": "InCohortReclamation by a/owner"},
			wantPending: map[string]string{
				"b/borrower": "pod set main: insufficient unused quota for cpu in flavor default: requested 15, available 12",
			},
		},
		{
			name: "reclaimWithinCohort LowerPriority spares a higher priority borrower",
			cfg: cohortOf(newCQ("cq-a").preemption(Never, LowerPriority).quota("default", "cpu", 10000),
				newCQ("cq-b").quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("b", "borrower").prio(100).pods("main", 1, "cpu", 15000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "owner").prio(1).pods("main", 1, "cpu", 8000).obj(),
			},
			wantPending: map[string]string{
				"a/owner": "pod set main: insufficient unused quota for cpu in flavor default: requested 8, available 5",
			},
		},
		{
			name: "no reclaiming from a queue within its nominal quota",
			cfg: cohortOf(newCQ("cq-a").preemption(Never, Any).quota("default", "cpu", 10000),
				newCQ("cq-b").quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("a", "borrower").pods("main", 1, "cpu", 12000).admittedIn("cq-a", "default", -time.Minute).obj(),
				newWL("b", "home").pods("main", 1, "cpu", 8000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "more").prio(10).pods("main", 1, "cpu", 1000).obj(),
			},
			wantPending: map[string]string{
				"a/more": "pod set main: insufficient unused quota for cpu in flavor default: requested 1, available 0",
			},
		},
		{
			name: "borrowWithinCohort preempts a lower priority borrower while borrowing",
			cfg: Config{
				Flavors: flavors("default"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq-a").cohort("all").preemption(Never, Any).borrowWithinCohort(nil).quota("default", "cpu", 5000).obj(),
					newCQ("cq-b").cohort("all").quota("default", "cpu", 5000).obj(),
				},
				LocalQueues: lqs("a", "cq-a", "b", "cq-b"),
			},
			workloads: []Workload{
				newWL("b", "low").prio(1).pods("main", 1, "cpu", 8000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "high").prio(10).pods("main", 1, "cpu", 7000).obj(),
			},
			wantAdmitted:  map[string]string{"a/high": "cq-a main=1:cpu=default"},
			wantPreempted: map[string]string{"b/low": "InCohortReclaimWhileBorrowing by a/high"},
			wantPending: map[string]string{
				"b/low": "pod set main: insufficient unused quota for cpu in flavor default: requested 8, available 3",
			},
		},
		{
			name: "borrowWithinCohort maxPriorityThreshold protects workloads above it",
			cfg: Config{
				Flavors: flavors("default"),
				ClusterQueues: []ClusterQueue{
					newCQ("cq-a").cohort("all").preemption(Never, Any).borrowWithinCohort(i32(0)).quota("default", "cpu", 5000).obj(),
					newCQ("cq-b").cohort("all").quota("default", "cpu", 5000).obj(),
				},
				LocalQueues: lqs("a", "cq-a", "b", "cq-b"),
			},
			workloads: []Workload{
				newWL("b", "low").prio(1).pods("main", 1, "cpu", 8000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "high").prio(10).pods("main", 1, "cpu", 7000).obj(),
			},
			wantPending: map[string]string{
				"a/high": "pod set main: insufficient unused quota for cpu in flavor default: requested 7, available 2",
			},
		},
		{
			name: "without borrowWithinCohort a request above nominal cannot preempt",
			cfg: cohortOf(newCQ("cq-a").preemption(LowerPriority, Any).quota("default", "cpu", 5000),
				newCQ("cq-b").quota("default", "cpu", 5000)),
			workloads: []Workload{
				newWL("b", "low").prio(1).pods("main", 1, "cpu", 8000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "high").prio(10).pods("main", 1, "cpu", 7000).obj(),
			},
			wantPending: map[string]string{
				"a/high": "pod set main: insufficient unused quota for cpu in flavor default: requested 7, available 2",
			},
		},
		{
			name: "other queues' borrowers go before the preemptor's own workloads",
			cfg: cohortOf(newCQ("cq-a").preemption(LowerPriority, Any).quota("default", "cpu", 10000),
				newCQ("cq-b").quota("default", "cpu", 10000)),
			workloads: []Workload{
				newWL("a", "own-low").prio(1).pods("main", 1, "cpu", 5000).admittedIn("cq-a", "default", -time.Minute).obj(),
				newWL("b", "borrower").prio(50).pods("main", 1, "cpu", 15000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "high").prio(10).pods("main", 1, "cpu", 5000).obj(),
			},
			wantAdmitted:  map[string]string{"a/high": "cq-a main=1:cpu=default"},
			wantPreempted: map[string]string{"b/borrower": "InCohortReclamation by a/high"},
			wantPending: map[string]string{
				"b/borrower": "pod set main: insufficient unused quota for cpu in flavor default: requested 15, available 10",
			},
		},
	})
}

func TestHierarchicalPreemption(t *testing.T) {
	// org holds two sub-cohorts; each ClusterQueue sits in one of them.
	tree := func(cohorts []Cohort, cqs ...*cqBuilder) Config {
		cfg := Config{Flavors: flavors("default"), Cohorts: cohorts}
		for _, q := range cqs {
			cfg.ClusterQueues = append(cfg.ClusterQueues, q.obj())
		}
		cfg.LocalQueues = lqs("a", "cq-a", "b", "cq-b", "b2", "cq-b2", "c", "cq-c")
		return cfg
	}
	cohort := func(name, parent string, cpu int64) Cohort {
		c := Cohort{Name: name, Parent: parent, FairWeight: 1000}
		if cpu > 0 {
			c.ResourceGroups = addQuota(nil, "default", "cpu", cpu)
		}
		return c
	}
	runCases(t, []cycleCase{
		{
			name: "a queue takes back its cohort's quota from another subtree whatever the borrower's priority",
			cfg: tree([]Cohort{cohort("org", "", 0), cohort("team-a", "org", 10000), cohort("team-b", "org", 0)},
				newCQ("cq-a").cohort("team-a").preemption(Never, Any).quota("default", "cpu", 0),
				newCQ("cq-b").cohort("team-b").quota("default", "cpu", 0)),
			workloads: []Workload{
				newWL("b", "borrower").prio(100).pods("main", 1, "cpu", 10000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "owner").prio(1).pods("main", 1, "cpu", 6000).obj(),
			},
			wantAdmitted:  map[string]string{"a/owner": "cq-a main=1:cpu=default"},
			wantPreempted: map[string]string{"b/borrower": "InCohortReclamation by a/owner"},
			wantPending: map[string]string{
				"b/borrower": "pod set main: insufficient unused quota for cpu in flavor default: requested 10, available 4",
			},
		},
		{
			name: "a borrower inside a subtree that stays within its quota is not a candidate",
			cfg: tree([]Cohort{cohort("org", "", 0), cohort("team-a", "org", 0), cohort("team-b", "org", 0)},
				newCQ("cq-a").cohort("team-a").preemption(Never, Any).quota("default", "cpu", 4000),
				newCQ("cq-b").cohort("team-b").quota("default", "cpu", 4000),
				newCQ("cq-b2").cohort("team-b").quota("default", "cpu", 4000),
				newCQ("cq-c").cohort("org").quota("default", "cpu", 0)),
			workloads: []Workload{
				// cq-b borrows 2 from cq-b2, inside team-b, which uses no
				// more than its own quota: nothing of team-a's is there.
				newWL("b", "inside").prio(0).pods("main", 1, "cpu", 6000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("b2", "home").prio(0).pods("main", 1, "cpu", 2000).admittedIn("cq-b2", "default", -time.Minute).obj(),
				// cq-c borrows cq-a's unused 4.
				newWL("c", "borrower").prio(5).pods("main", 1, "cpu", 4000).admittedIn("cq-c", "default", -time.Minute).obj(),
				newWL("a", "owner").prio(1).pods("main", 1, "cpu", 4000).obj(),
			},
			wantAdmitted:  map[string]string{"a/owner": "cq-a main=1:cpu=default"},
			wantPreempted: map[string]string{"c/borrower": "InCohortReclamation by a/owner"},
			wantPending: map[string]string{
				"c/borrower": "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 0",
			},
		},
		{
			name: "without a claim below the root, priority decides and borrowWithinCohort lets the preemptor borrow",
			cfg: tree([]Cohort{cohort("org", "", 10000), cohort("team-a", "org", 0), cohort("team-b", "org", 0)},
				newCQ("cq-a").cohort("team-a").preemption(Never, LowerPriority).borrowWithinCohort(nil).quota("default", "cpu", 0),
				newCQ("cq-b").cohort("team-b").quota("default", "cpu", 0)),
			workloads: []Workload{
				newWL("b", "low").prio(1).pods("main", 1, "cpu", 10000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "high").prio(10).pods("main", 1, "cpu", 5000).obj(),
			},
			wantAdmitted:  map[string]string{"a/high": "cq-a main=1:cpu=default"},
			wantPreempted: map[string]string{"b/low": "InCohortReclaimWhileBorrowing by a/high"},
			wantPending: map[string]string{
				"b/low": "pod set main: insufficient unused quota for cpu in flavor default: requested 10, available 5",
			},
		},
		{
			name: "without a claim below the root and without borrowWithinCohort, a borrowing preemptor waits",
			cfg: tree([]Cohort{cohort("org", "", 10000), cohort("team-a", "org", 0), cohort("team-b", "org", 0)},
				newCQ("cq-a").cohort("team-a").preemption(Never, Any).quota("default", "cpu", 0),
				newCQ("cq-b").cohort("team-b").quota("default", "cpu", 0)),
			workloads: []Workload{
				newWL("b", "low").prio(1).pods("main", 1, "cpu", 10000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "high").prio(10).pods("main", 1, "cpu", 5000).obj(),
			},
			wantPending: map[string]string{
				"a/high": "pod set main: insufficient unused quota for cpu in flavor default: requested 5, available 0",
			},
		},
		{
			name: "a lending limit keeps a cohort's quota local, and the claim on it holds",
			cfg: tree([]Cohort{cohort("org", "", 0),
				{Name: "team-a", Parent: "org", FairWeight: 1000, ResourceGroups: addQuota(nil, "default", "cpu", 10000, noLimit, Limited(4000))},
				cohort("team-b", "org", 0)},
				newCQ("cq-a").cohort("team-a").preemption(Never, Any).quota("default", "cpu", 0),
				newCQ("cq-b").cohort("team-b").quota("default", "cpu", 0)),
			workloads: []Workload{
				// team-a lends at most 4 of its 10 to the rest of org.
				newWL("b", "borrower").prio(100).pods("main", 1, "cpu", 4000).admittedIn("cq-b", "default", -time.Minute).obj(),
				newWL("a", "fits-local").prio(1).pods("main", 1, "cpu", 6000).obj(),
				newWL("a", "needs-lent").at(time.Second).prio(1).pods("main", 1, "cpu", 2000).obj(),
			},
			wantAdmitted: map[string]string{
				"a/fits-local": "cq-a main=1:cpu=default",
				"a/needs-lent": "cq-a main=1:cpu=default",
			},
			wantPreempted: map[string]string{"b/borrower": "InCohortReclamation by a/needs-lent"},
			wantPending: map[string]string{
				"b/borrower": "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 2",
			},
		},
	})
}

func TestFairSharing(t *testing.T) {
	cfg := func(fair bool, wa, wb int64) Config {
		return Config{
			Flavors: flavors("default"),
			ClusterQueues: []ClusterQueue{
				newCQ("cq-a").cohort("all").weight(wa).preemption(Never, Any).quota("default", "cpu", 10000).obj(),
				newCQ("cq-b").cohort("all").weight(wb).preemption(Never, Any).quota("default", "cpu", 10000).obj(),
				newCQ("cq-c").cohort("all").quota("default", "cpu", 10000).obj(),
			},
			LocalQueues: lqs("a", "cq-a", "b", "cq-b", "c", "cq-c"),
			FairSharing: fair,
		}
	}
	runCases(t, []cycleCase{
		{
			name: "the queue with the lower share borrows first",
			cfg:  cfg(true, 1000, 1000),
			workloads: []Workload{
				newWL("a", "running").pods("main", 1, "cpu", 14000).admittedIn("cq-a", "default", -time.Minute).obj(),
				newWL("a", "more").prio(100).pods("main", 1, "cpu", 12000).obj(),
				newWL("b", "more").at(time.Second).pods("main", 1, "cpu", 12000).obj(),
			},
			wantAdmitted: map[string]string{"b/more": "cq-b main=1:cpu=default"},
			wantPending: map[string]string{
				"a/more": "pod set main: insufficient unused quota for cpu in flavor default: requested 12, available 4",
			},
		},
		{
			name: "a heavier weight wins the borrowing race",
			cfg:  cfg(true, 3000, 1000),
			workloads: []Workload{
				newWL("a", "more").at(time.Second).pods("main", 1, "cpu", 16000).obj(),
				newWL("b", "more").pods("main", 1, "cpu", 16000).obj(),
			},
			wantAdmitted: map[string]string{"a/more": "cq-a main=1:cpu=default"},
			wantPending: map[string]string{
				"b/more": "pod set main: insufficient unused quota for cpu in flavor default: requested 16, available 14",
			},
		},
		{
			name: "fair sharing preempts from the queue with the highest share",
			cfg:  cfg(true, 1000, 1000),
			workloads: []Workload{
				newWL("a", "w1").pods("main", 1, "cpu", 5000).admittedIn("cq-a", "default", -4*time.Minute).obj(),
				newWL("a", "w2").pods("main", 1, "cpu", 5000).admittedIn("cq-a", "default", -3*time.Minute).obj(),
				newWL("a", "w3").pods("main", 1, "cpu", 5000).admittedIn("cq-a", "default", -2*time.Minute).obj(),
				newWL("a", "w4").pods("main", 1, "cpu", 5000).admittedIn("cq-a", "default", -1*time.Minute).obj(),
				newWL("c", "w1").pods("main", 1, "cpu", 10000).admittedIn("cq-c", "default", -1*time.Minute).obj(),
				newWL("b", "mine").pods("main", 1, "cpu", 5000).obj(),
			},
			wantAdmitted:  map[string]string{"b/mine": "cq-b main=1:cpu=default"},
			wantPreempted: map[string]string{"a/w4": "InCohortFairSharing by b/mine"},
			wantPending: map[string]string{
				"a/w4": "pod set main: insufficient unused quota for cpu in flavor default: requested 5, available 0",
			},
		},
	})
}

func TestFairSharingStrategies(t *testing.T) {
	// Both queues borrow the cohort's own 10 CPUs. cq-b's one workload of
	// 8 CPUs gives it a share of 0.8; cq-a asks for 4 (0.4 once admitted).
	// Without the victim cq-b's share would be 0, below cq-a's 0.4, so
	// LessThanOrEqualToFinalShare refuses; cq-b's share now, 0.8, is above
	// 0.4, so LessThanInitialShare allows it.
	cfg := func(strategies ...string) Config {
		return Config{
			Flavors: flavors("default"),
			Cohorts: []Cohort{{Name: "all", ResourceGroups: addQuota(nil, "default", "cpu", 10000), FairWeight: 1000}},
			ClusterQueues: []ClusterQueue{
				newCQ("cq-a").cohort("all").preemption(Never, Any).quota("default", "cpu", 0).obj(),
				newCQ("cq-b").cohort("all").quota("default", "cpu", 0).obj(),
			},
			LocalQueues:    lqs("a", "cq-a", "b", "cq-b"),
			FairSharing:    true,
			FairStrategies: strategies,
		}
	}
	wls := []Workload{
		newWL("b", "big").pods("main", 1, "cpu", 8000).admittedIn("cq-b", "default", -time.Minute).obj(),
		newWL("a", "small").pods("main", 1, "cpu", 4000).obj(),
	}
	preempted := map[string]string{"b/big": "InCohortFairSharing by a/small"}
	admitted := map[string]string{"a/small": "cq-a main=1:cpu=default"}
	bigWaits := map[string]string{"b/big": "pod set main: insufficient unused quota for cpu in flavor default: requested 8, available 6"}
	runCases(t, []cycleCase{
		{name: "by default the second strategy takes one workload from a queue above the preemptor's share",
			cfg: cfg(), workloads: wls, wantAdmitted: admitted, wantPreempted: preempted, wantPending: bigWaits},
		{name: "LessThanOrEqualToFinalShare alone refuses a victim whose queue would drop below the preemptor",
			cfg: cfg(LessThanOrEqualToFinalShare), workloads: wls,
			wantPending: map[string]string{"a/small": "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 2"}},
		{name: "LessThanInitialShare alone compares with the target queue's share before the preemption",
			cfg: cfg(LessThanInitialShare), workloads: wls, wantAdmitted: admitted, wantPreempted: preempted, wantPending: bigWaits},
	})
}

func TestPartialAdmission(t *testing.T) {
	runCases(t, []cycleCase{
		{
			name: "admits the largest count that fits",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 10000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "elastic").pods("workers", 8, "cpu", 2000).minCount(2).obj(),
			},
			wantAdmitted: map[string]string{"ns/elastic": "cq workers=5:cpu=default"},
		},
		{
			name: "stays pending when even minCount does not fit",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 3000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "elastic").pods("workers", 8, "cpu", 2000).minCount(2).obj(),
			},
			wantPending: map[string]string{
				// The reason is about the minimum: even 2 pods can never fit.
				"ns/elastic": "pod set workers: insufficient quota for cpu in flavor default: requested 4, more than the ClusterQueue can ever use (3)",
			},
		},
		{
			name: "waits for room at its minimum, not for a full count the queue can never hold",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 8000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads: []Workload{
				newWL("ns", "holder").pods("main", 1, "cpu", 8000).admittedIn("cq", "default", -time.Minute).obj(),
				newWL("ns", "elastic").pods("workers", 6, "cpu", 2000).minCount(2).obj(),
			},
			wantPending: map[string]string{
				"ns/elastic": "pod set workers: insufficient unused quota for cpu in flavor default: requested 4, available 0",
			},
		},
	})
}

func TestQueuePolicies(t *testing.T) {
	hold, drain := Hold, HoldAndDrain
	runCases(t, []cycleCase{
		{
			name: "a ClusterQueue on Hold admits nothing",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").stop(hold).quota("default", "cpu", 10000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads:   []Workload{newWL("ns", "w").pods("main", 1, "cpu", 1000).obj()},
			wantPending: map[string]string{"ns/w": "ClusterQueue cq is stopped (stopPolicy Hold)"},
		},
		{
			name: "a LocalQueue on Hold keeps its workloads waiting",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("default", "cpu", 10000).obj()},
				LocalQueues:   []LocalQueue{{Namespace: "ns", Name: "lq", ClusterQueue: "cq", StopPolicy: hold}, {Namespace: "ns", Name: "open", ClusterQueue: "cq", StopPolicy: StopNone}},
			},
			workloads: []Workload{
				newWL("ns", "held").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "free").queue("open").pods("main", 1, "cpu", 1000).obj(),
			},
			wantAdmitted: map[string]string{"ns/free": "cq main=1:cpu=default"},
			wantPending:  map[string]string{"ns/held": "LocalQueue ns/lq is stopped (stopPolicy Hold)"},
		},
		{
			name: "HoldAndDrain evicts what runs",
			cfg: Config{
				Flavors:       flavors("default"),
				ClusterQueues: []ClusterQueue{newCQ("cq").stop(drain).quota("default", "cpu", 10000).obj()},
				LocalQueues:   lqs("ns", "cq"),
			},
			workloads:   []Workload{newWL("ns", "w").pods("main", 1, "cpu", 1000).admittedIn("cq", "default", -time.Minute).obj()},
			wantPending: map[string]string{"ns/w": "ClusterQueue cq is stopped (stopPolicy HoldAndDrain)"},
		},
		{
			name: "namespaceSelector: unset selects nothing, a selector selects by labels",
			cfg: Config{
				Flavors: flavors("default"),
				ClusterQueues: []ClusterQueue{
					newCQ("unset").selector(nil).quota("default", "cpu", 10000).obj(),
					newCQ("labelled").selector(labels.SelectorFromSet(labels.Set{"team": "ml"})).quota("default", "cpu", 10000).obj(),
				},
				LocalQueues:    lqs("x", "unset", "ml", "labelled", "web", "labelled"),
				NamespaceLabel: map[string]map[string]string{"ml": {"team": "ml"}, "web": {"team": "web"}},
			},
			workloads: []Workload{
				newWL("x", "w").pods("main", 1, "cpu", 1000).obj(),
				newWL("ml", "w").pods("main", 1, "cpu", 1000).obj(),
				newWL("web", "w").pods("main", 1, "cpu", 1000).obj(),
			},
			wantAdmitted: map[string]string{"ml/w": "labelled main=1:cpu=default"},
			wantPending: map[string]string{
				"x/w":   "namespace x is not selected by the namespaceSelector of ClusterQueue unset",
				"web/w": "namespace web is not selected by the namespaceSelector of ClusterQueue labelled",
			},
		},
		{
			name: "missing LocalQueue, missing ClusterQueue and missing flavor are named",
			cfg: Config{
				Flavors:       flavors(),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("ghost", "cpu", 10000).obj()},
				LocalQueues:   lqs("ns", "cq", "orphan", "nowhere"),
			},
			workloads: []Workload{
				newWL("ns", "no-lq").queue("missing").pods("main", 1, "cpu", 1000).obj(),
				newWL("orphan", "w").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "w").pods("main", 1, "cpu", 1000).obj(),
			},
			wantPending: map[string]string{
				"ns/no-lq": "LocalQueue ns/missing does not exist",
				"orphan/w": "ClusterQueue nowhere of LocalQueue orphan/lq does not exist",
				"ns/w":     "ClusterQueue cq is inactive: ResourceFlavor ghost does not exist",
			},
		},
	})
}
