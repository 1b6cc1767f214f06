package engine

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The tests in this file hold the engine to its quota with amounts at the
// edge of int64: per-pod requests in exa-units, counts up to 2^31, quotas
// up to math.MaxInt64. Every check is done with math/big, so an overflow
// in the engine cannot hide behind the same overflow in the test.

func TestCanonicalChecked(t *testing.T) {
	cases := []struct {
		name, res, q string
		want         int64
		wantOK       bool
	}{
		{"whole cpu", "cpu", "2", 2000, true},
		{"milli cpu", "cpu", "500m", 500, true},
		{"a fraction of a milli-cpu rounds up", "cpu", "0.0001", 1, true},
		{"gpus", "nvidia.com/gpu", "8", 8, true},
		{"memory in binary units", "memory", "1Gi", 1 << 30, true},
		{"a fraction of a byte rounds up", "memory", "1.5", 2, true},
		{"exa-gpus are more than Sluice counts", "nvidia.com/gpu", "4E", TooLarge, false},
		{"exactly MaxAmount", "nvidia.com/gpu", fmt.Sprint(MaxAmount), MaxAmount, true},
		{"one above MaxAmount", "nvidia.com/gpu", fmt.Sprint(MaxAmount + 1), TooLarge, false},
		{"cpu whose milli-units overflow int64", "cpu", "10E", TooLarge, false},
		{"cpu just within MaxAmount in milli-units", "cpu", "1152921504606846976m", MaxAmount, true},
		{"cpu that counted as zero before", "cpu", "9223372036854775807", TooLarge, false},
		{"huge negative", "memory", "-8Ei", -TooLarge, false},
		{"small negative", "memory", "-1Ki", -1024, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := CanonicalChecked(tc.res, resource.MustParse(tc.q))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("CanonicalChecked(%s, %s) = %d, %t; want %d, %t", tc.res, tc.q, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestAmountArithmetic(t *testing.T) {
	cases := []struct {
		name       string
		got        func() (int64, bool)
		want       int64
		wantWithin bool
	}{
		{"small product", func() (int64, bool) { return MulAmount(4, 3) }, 12, true},
		{"product at the bound", func() (int64, bool) { return MulAmount(MaxAmount/2, 2) }, MaxAmount, true},
		{"product just over the bound", func() (int64, bool) { return MulAmount(MaxAmount/2+1, 2) }, TooLarge, false},
		{"product past 2^64", func() (int64, bool) { return MulAmount(math.MaxInt64, math.MaxInt32) }, TooLarge, false},
		{"negative factor", func() (int64, bool) { return MulAmount(-1, 3) }, 0, false},
		{"sum at the bound", func() (int64, bool) { return AddAmount(MaxAmount-1, 1) }, MaxAmount, true},
		{"sum over the bound", func() (int64, bool) { return AddAmount(MaxAmount, 1) }, TooLarge, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.got()
			if got != tc.want || ok != tc.wantWithin {
				t.Errorf("= %d, %t; want %d, %t", got, ok, tc.want, tc.wantWithin)
			}
		})
	}
	if got := mulDiv(MaxAmount*4, 1000, 3); got != math.MaxInt64 {
		t.Errorf("mulDiv past int64 = %d, want it saturated at MaxInt64", got)
	}
	if got := mulDiv(MaxAmount, 1000, MaxAmount); got != 1000 {
		t.Errorf("mulDiv(MaxAmount, 1000, MaxAmount) = %d, want 1000", got)
	}
}

// TestOverflowedRequestIsInvalid is the case a tenant found: 3 pods of 4E
// GPUs each in a queue of 8 GPUs. It must not be admitted, must say why,
// naming its pod set and resource, and must leave the 8 GPUs to others.
func TestOverflowedRequestIsInvalid(t *testing.T) {
	cases := []struct {
		name       string
		bad        Workload
		wantReason string
	}{
		{
			name:       "per-pod request beyond what Sluice counts",
			bad:        newWL("ns", "huge").pods("main", 3, "gpu", 0).obj(),
			wantReason: "invalid workload: pod set main: request of gpu per pod is more than Sluice can count (1Ei)",
		},
		{
			name:       "count × request overflows",
			bad:        newWL("ns", "huge").pods("workers", math.MaxInt32, "gpu", 1<<40).obj(),
			wantReason: "invalid workload: pod set workers: 2147483647 pods × 1Ti of gpu is more than Sluice can count (1Ei)",
		},
		{
			name:       "the sum over pod sets overflows",
			bad:        newWL("ns", "huge").pods("a", 1, "gpu", 1<<60).pods("b", 1, "gpu", 1).obj(),
			wantReason: "invalid workload: pod set b: the workload's pod sets request more gpu in all than Sluice can count (1Ei)",
		},
		{
			name:       "negative request",
			bad:        newWL("ns", "huge").pods("main", 1, "gpu", -8).obj(),
			wantReason: "invalid workload: pod set main: request of gpu is negative",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bad.PodSets[0].Requests["gpu"] == 0 {
				tc.bad.PodSets[0].Requests["gpu"] = TooLarge
			}
			e := New(Config{
				Flavors:       flavors("f"),
				ClusterQueues: []ClusterQueue{newCQ("cq").quota("f", "gpu", 8).obj()},
				LocalQueues:   lqs("ns", "cq"),
			})
			if err := e.Submit(tc.bad); err != nil {
				t.Fatal(err)
			}
			for _, w := range []Workload{newWL("ns", "a").pods("main", 1, "gpu", 8).at(1).obj(), newWL("ns", "b").pods("main", 1, "gpu", 8).at(2).obj()} {
				if err := e.Submit(w); err != nil {
					t.Fatal(err)
				}
			}
			var admitted []string
			for _, d := range e.Cycle(t0) {
				if d.Kind == KindAdmitted {
					admitted = append(admitted, d.Key)
				}
			}
			if diff := cmp.Diff([]string{"ns/a"}, admitted); diff != "" {
				t.Errorf("admitted (-want +got):\n%s", diff)
			}
			key := tc.bad.Key()
			if got := e.PendingReason(key); got != tc.wantReason || !Invalid(got) {
				t.Errorf("reason = %q (Invalid: %t), want %q", got, Invalid(got), tc.wantReason)
			}
			page, _ := e.PendingInClusterQueue("cq", 0, 0)
			var listed []string
			for _, it := range page.Items {
				listed = append(listed, it.Name+": "+it.Reason)
			}
			if len(listed) != 2 || !strings.HasPrefix(listed[0], "huge: invalid workload") {
				t.Errorf("pending API lists %q, want the invalid workload with its reason first, then b", listed)
			}
			if st := e.Stats(t0); st[0].Resources[0].Reserved != 8 {
				t.Errorf("reserved %d GPUs, want 8", st[0].Resources[0].Reserved)
			}
			// It holds nobody up: when a finishes, b is admitted.
			if err := e.Remove("ns/a"); err != nil {
				t.Fatal(err)
			}
			admitted = nil
			for _, d := range e.Cycle(t0) {
				if d.Kind == KindAdmitted {
					admitted = append(admitted, d.Key)
				}
			}
			if diff := cmp.Diff([]string{"ns/b"}, admitted); diff != "" {
				t.Errorf("after a finished, admitted (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHugeQuotasDoNotWrap: quotas at math.MaxInt64 in every queue of a
// cohort, which summed as plain int64 wrap negative, still admit.
func TestHugeQuotasDoNotWrap(t *testing.T) {
	var cqs []ClusterQueue
	var pairs []string
	for i := range 9 {
		name := fmt.Sprintf("cq%d", i)
		cqs = append(cqs, newCQ(name).cohort("all").quota("f", "cpu", math.MaxInt64).obj())
		pairs = append(pairs, "ns"+fmt.Sprint(i), name)
	}
	e := New(Config{Flavors: flavors("f"), ClusterQueues: cqs, LocalQueues: lqs(pairs...)})
	if err := e.Submit(newWL("ns0", "w").pods("main", 1024, "cpu", int(MaxAmount/1024)).obj()); err != nil {
		t.Fatal(err)
	}
	ds := e.Cycle(t0)
	if len(ds) != 1 || ds[0].Kind != KindAdmitted {
		t.Fatalf("decisions %+v, want ns0/w admitted", ds)
	}
	if err := e.Submit(newWL("ns1", "w").pods("main", 1, "cpu", 1).obj()); err != nil {
		t.Fatal(err)
	}
	// The cohort counts at most MaxAmount in all, and that is taken.
	if ds := e.Cycle(t0); len(ds) != 1 || ds[0].Kind != KindPending {
		t.Errorf("decisions %+v, want ns1/w pending", ds)
	}
}

// extremeAmounts are per-pod requests and quotas at the edges: small, near
// MaxAmount, past it, and at int64's end.
var extremeAmounts = []int64{0, 1, 7, 1000, 1 << 31, 1 << 40, MaxAmount / 3, MaxAmount / 2, MaxAmount - 1, MaxAmount, TooLarge, 1 << 62, math.MaxInt64}

var extremeCounts = []int32{1, 2, 3, 1000, 1 << 16, math.MaxInt32}

// TestPropertyExtremeQuantities drives the engine with random queues and
// workloads whose amounts come from extremeAmounts and extremeCounts, and
// checks after every cycle, in exact arithmetic, that no queue and no
// cohort holds more than its quota, and that a workload whose amounts
// cannot be counted is never admitted and says it is invalid.
func TestPropertyExtremeQuantities(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		if err := extremeRun(seed); err != "" {
			t.Fatalf("seed %d: %s", seed, err)
		}
	}
}

func extremeRun(seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 0xe11))
	res := []string{"cpu", "gpu"}
	var cfg Config
	cfg.Flavors = flavors("f")
	nominal := map[string]map[string]int64{} // cq → resource → nominal
	borrow := map[string]map[string]*int64{}
	for i := range 2 + r.IntN(3) {
		name := fmt.Sprintf("cq%d", i)
		b := newCQ(name).preemption(LowerPriority, propPick(r, Never, LowerPriority))
		if r.IntN(3) > 0 {
			b = b.cohort("c")
		}
		nominal[name], borrow[name] = map[string]int64{}, map[string]*int64{}
		for _, rs := range res {
			q := propPick(r, extremeAmounts...)
			var lim []Limit
			if b.cq.Cohort != "" && r.IntN(3) == 0 {
				l := propPick(r, extremeAmounts...)
				lim = append(lim, Limited(l))
				borrow[name][rs] = &l
			}
			b = b.quota("f", rs, q, lim...)
			nominal[name][rs] = q
		}
		cfg.ClusterQueues = append(cfg.ClusterQueues, b.obj())
		cfg.LocalQueues = append(cfg.LocalQueues, LocalQueue{Namespace: "ns" + fmt.Sprint(i), Name: "lq", ClusterQueue: name, StopPolicy: StopNone})
	}
	e := New(cfg)
	known := map[string]Workload{}
	admitted := map[string]Admission{}
	n := 0
	for step := range 40 {
		switch k := r.IntN(10); {
		case k < 6:
			n++
			lq := cfg.LocalQueues[r.IntN(len(cfg.LocalQueues))]
			w := Workload{Namespace: lq.Namespace, Name: fmt.Sprintf("w%d", n), Queue: "lq", Priority: int32(r.IntN(3)), Submitted: t0}
			for p := range 1 + r.IntN(2) {
				ps := PodSet{Name: fmt.Sprintf("ps%d", p), Count: propPick(r, extremeCounts...), Requests: map[string]int64{}}
				for _, rs := range res {
					if r.IntN(3) > 0 {
						ps.Requests[rs] = propPick(r, extremeAmounts...)
					}
				}
				w.PodSets = append(w.PodSets, ps)
			}
			if err := e.Submit(w); err != nil {
				return fmt.Sprintf("step %d: submit: %v", step, err)
			}
			known[w.Key()] = w
		case k < 9:
			for _, d := range e.Cycle(t0) {
				switch d.Kind {
				case KindAdmitted:
					admitted[d.Key] = Admission{ClusterQueue: d.ClusterQueue, PodSets: d.PodSets}
				case KindPreempted, KindEvicted:
					delete(admitted, d.Key)
				}
			}
		default:
			for key := range admitted {
				if err := e.Remove(key); err != nil {
					return fmt.Sprintf("step %d: remove: %v", step, err)
				}
				delete(admitted, key)
				delete(known, key)
				break
			}
		}
		for key := range admitted {
			if bigInvalid(known[key]) {
				return fmt.Sprintf("step %d: %s is admitted though its amounts cannot be counted: %+v", step, key, known[key].PodSets)
			}
		}
		for key, w := range known {
			if _, ok := admitted[key]; !ok && bigInvalid(w) {
				if why := e.PendingReason(key); why != "" && !Invalid(why) && e.ClusterQueueOf(key) != "" {
					return fmt.Sprintf("step %d: %s cannot be counted but waits for %q", step, key, why)
				}
			}
		}
		if why := extremeOverQuota(cfg, nominal, borrow, known, admitted); why != "" {
			return fmt.Sprintf("step %d: %s", step, why)
		}
	}
	return ""
}

// bigInvalid says, in exact arithmetic, whether a workload asks for an
// amount of some resource beyond MaxAmount, per pod or in all.
func bigInvalid(w Workload) bool {
	totals := map[string]*big.Int{}
	limit := big.NewInt(MaxAmount)
	for _, ps := range w.PodSets {
		for rs, v := range ps.Requests {
			if v > MaxAmount || v < 0 {
				return true
			}
			if totals[rs] == nil {
				totals[rs] = new(big.Int)
			}
			totals[rs].Add(totals[rs], new(big.Int).Mul(big.NewInt(v), big.NewInt(int64(ps.Count))))
			if totals[rs].Cmp(limit) > 0 {
				return true
			}
		}
	}
	return false
}

// extremeOverQuota checks, in exact arithmetic, that each ClusterQueue
// without a cohort uses at most its nominal quota, each with a borrowing
// limit at most nominal plus the limit, and the cohort at most the sum of
// its members' nominal quota.
func extremeOverQuota(cfg Config, nominal map[string]map[string]int64, borrow map[string]map[string]*int64, known map[string]Workload, admitted map[string]Admission) string {
	use := map[string]map[string]*big.Int{}
	for key, adm := range admitted {
		w := known[key]
		for _, psa := range adm.PodSets {
			for _, ps := range w.PodSets {
				if ps.Name != psa.Name {
					continue
				}
				for rs, v := range ps.Requests {
					if use[adm.ClusterQueue] == nil {
						use[adm.ClusterQueue] = map[string]*big.Int{}
					}
					if use[adm.ClusterQueue][rs] == nil {
						use[adm.ClusterQueue][rs] = new(big.Int)
					}
					use[adm.ClusterQueue][rs].Add(use[adm.ClusterQueue][rs], new(big.Int).Mul(big.NewInt(v), big.NewInt(int64(psa.Count))))
				}
			}
		}
	}
	for _, rs := range []string{"cpu", "gpu"} {
		cohortUse, cohortQuota := new(big.Int), new(big.Int)
		for _, cq := range cfg.ClusterQueues {
			u := use[cq.Name][rs]
			if u == nil {
				u = new(big.Int)
			}
			q := big.NewInt(nominal[cq.Name][rs])
			switch {
			case cq.Cohort == "" && u.Cmp(q) > 0:
				return fmt.Sprintf("%s uses %s of %s, above its nominal quota %s", cq.Name, u, rs, q)
			case cq.Cohort != "" && borrow[cq.Name][rs] != nil && u.Cmp(new(big.Int).Add(q, big.NewInt(*borrow[cq.Name][rs]))) > 0:
				return fmt.Sprintf("%s uses %s of %s, above nominal %s plus borrowingLimit %d", cq.Name, u, rs, q, *borrow[cq.Name][rs])
			case cq.Cohort != "":
				cohortUse.Add(cohortUse, u)
				cohortQuota.Add(cohortQuota, q)
			}
		}
		if cohortUse.Cmp(cohortQuota) > 0 {
			return fmt.Sprintf("the cohort uses %s of %s, above its quota %s", cohortUse, rs, cohortQuota)
		}
	}
	return ""
}

// FuzzEngineArithmetic admits a fuzzed workload of one or two pod sets
// into a queue with a fuzzed quota, beside a workload already holding
// some of it, and checks in exact arithmetic that the quota holds and
// that an uncountable workload is never admitted.
func FuzzEngineArithmetic(f *testing.F) {
	f.Add(int64(4_000_000_000_000_000_000), int32(3), int64(0), int32(0), int64(8), int64(1))
	f.Add(int64(1<<40), int32(math.MaxInt32), int64(1), int32(1), int64(math.MaxInt64), int64(1<<62))
	f.Add(int64(MaxAmount), int32(1), int64(1), int32(1), int64(MaxAmount), int64(0))
	f.Fuzz(func(t *testing.T, v1 int64, c1 int32, v2 int64, c2 int32, quota, held int64) {
		e := New(Config{
			Flavors:       flavors("f"),
			ClusterQueues: []ClusterQueue{newCQ("cq").quota("f", "gpu", quota).obj()},
			LocalQueues:   lqs("ns", "cq"),
		})
		w := Workload{Namespace: "ns", Name: "w", Queue: "lq", Submitted: t0,
			PodSets: []PodSet{{Name: "a", Count: c1, Requests: map[string]int64{"gpu": v1}}}}
		if c2 != 0 {
			w.PodSets = append(w.PodSets, PodSet{Name: "b", Count: c2, Requests: map[string]int64{"gpu": v2}})
		}
		running := newWL("ns", "running").pods("main", 1, "gpu", 0).obj()
		running.PodSets[0].Requests["gpu"] = held
		running.Admission = &Admission{ClusterQueue: "cq", PodSets: []PodSetAssignment{{Name: "main", Count: 1, Flavors: map[string]string{"gpu": "f"}}}}
		runningErr := e.Submit(running)
		if (held > MaxAmount || held < 0) != (runningErr != nil) {
			t.Fatalf("submitting a running workload of %d: %v", held, runningErr)
		}
		if err := e.Submit(w); err != nil {
			t.Fatal(err)
		}
		admitted := false
		for _, d := range e.Cycle(t0) {
			if d.Kind == KindAdmitted && d.Key == "ns/w" {
				admitted = true
			}
		}
		invalid := bigInvalid(w) || slicesAnyNegativeCount(w)
		if admitted && invalid {
			t.Fatalf("%+v admitted though it cannot be counted", w.PodSets)
		}
		if !admitted && invalid && !Invalid(e.PendingReason("ns/w")) {
			t.Fatalf("%+v waits for %q, not as invalid", w.PodSets, e.PendingReason("ns/w"))
		}
		if !admitted {
			return
		}
		total := new(big.Int)
		for _, ps := range w.PodSets {
			total.Add(total, new(big.Int).Mul(big.NewInt(ps.Requests["gpu"]), big.NewInt(int64(ps.Count))))
		}
		if total.Sign() == 0 {
			return // asks for nothing: fits anywhere
		}
		if runningErr == nil {
			total.Add(total, big.NewInt(held))
		}
		if total.Cmp(big.NewInt(max(quota, 0))) > 0 {
			t.Fatalf("admitted %+v beside %d held: %s in all, above the quota %d", w.PodSets, held, total, quota)
		}
	})
}

func slicesAnyNegativeCount(w Workload) bool {
	for _, ps := range w.PodSets {
		if ps.Count < 0 {
			return true
		}
	}
	return false
}
