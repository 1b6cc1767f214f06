package engine

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	"gopkg.in/inf.v0"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxAmount is the largest amount of one resource the engine counts: one
// pod's request, a workload's total, a quota, a cohort's sum of quotas.
// It is 2^60: a thousand peta-cores of cpu (in milli-units), an exbibyte
// of memory. Keeping every amount at or below it means that any two of
// them add up without overflowing int64, which is what each comparison of
// usage plus a request against a quota relies on. A quota above it is
// counted as MaxAmount (no cluster holds more); a request above it cannot
// be counted, and its workload is never admitted (see TooLarge).
const MaxAmount int64 = 1 << 60

// TooLarge is what Canonical returns for a quantity above MaxAmount: more
// than any quota, and recognisably not an amount.
const TooLarge int64 = MaxAmount + 1

var (
	maxAmountDec = inf.NewDec(MaxAmount, 0)
	thousand     = inf.NewDec(1000, 0)
)

// Canonical converts a quantity of the named resource to the engine's unit:
// milli-units for cpu (so 500m is 500), whole units otherwise, rounded up.
// A quantity whose amount exceeds MaxAmount (10E of cpu, say, which int64
// milli-units cannot hold) is TooLarge, and one below -MaxAmount is
// -TooLarge, never a wrapped or truncated number.
func Canonical(res string, q resource.Quantity) int64 {
	v, _ := CanonicalChecked(res, q)
	return v
}

// CanonicalChecked is Canonical that also reports whether the quantity
// was within ±MaxAmount.
func CanonicalChecked(res string, q resource.Quantity) (int64, bool) {
	if v, ok := q.AsInt64(); ok && v <= MaxAmount/1000 && v >= -MaxAmount/1000 {
		// The common case, exact and cheap: a whole number of units.
		if res == "cpu" {
			return v * 1000, true
		}
		return v, true
	}
	d := q.AsDec()
	if res == "cpu" {
		d = new(inf.Dec).Mul(d, thousand)
	}
	// Kubernetes rounds a fraction of the unit up (MilliValue, Value).
	r := new(inf.Dec).Round(d, 0, inf.RoundCeil)
	abs := new(inf.Dec).Abs(r)
	if abs.Cmp(maxAmountDec) > 0 {
		if r.Sign() < 0 {
			return -TooLarge, false
		}
		return TooLarge, false
	}
	u := r.UnscaledBig()
	return u.Int64(), true
}

// ClampQuota bounds a quota value to [0, MaxAmount]: a larger quota is as
// good as unlimited, a negative one is none.
func ClampQuota(v int64) int64 { return min(max(v, 0), MaxAmount) }

// MulAmount returns v × n, and false when the product exceeds MaxAmount
// or v or n is negative.
func MulAmount(v int64, n int64) (int64, bool) {
	if v < 0 || n < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(v), uint64(n))
	if hi != 0 || lo > uint64(MaxAmount) {
		return TooLarge, false
	}
	return int64(lo), true
}

// AddAmount returns a + b for two amounts in [0, MaxAmount], and false
// when the sum exceeds MaxAmount.
func AddAmount(a, b int64) (int64, bool) {
	s := a + b // both at most 2^60: no overflow
	if s > MaxAmount || a < 0 || b < 0 {
		return TooLarge, false
	}
	return s, true
}

// mulDiv returns a × b / c for non-negative a and b and positive c,
// rounding down, saturated at math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// Format renders a canonical value back as a Kubernetes quantity string.
func Format(res string, v int64) string {
	switch {
	case v >= TooLarge || v <= -TooLarge:
		return "more than " + Format(res, MaxAmount)
	case res == "cpu":
		return resource.NewMilliQuantity(v, resource.DecimalSI).String()
	case res == "memory" || res == "ephemeral-storage":
		if v%1024 == 0 {
			return resource.NewQuantity(v, resource.BinarySI).String()
		}
		return resource.NewQuantity(v, resource.DecimalSI).String()
	case v != 0 && v%(1<<20) == 0:
		// An extended resource counted in bytes (accelerator memory,
		// hugepages): 10Gi, not 10737418240. No count of devices is a
		// multiple of 2^20.
		return resource.NewQuantity(v, resource.BinarySI).String()
	default:
		return resource.NewQuantity(v, resource.DecimalSI).String()
	}
}

// invalidPrefix starts the pending reason of a workload that can never be
// admitted as it is written (see Invalid).
const invalidPrefix = "invalid workload: "

// Invalid reports whether a pending reason says the workload itself is
// invalid: it is never admitted until it is changed, whatever quota frees.
func Invalid(reason string) bool { return strings.HasPrefix(reason, invalidPrefix) }

// validate checks a workload's requests: each pod set's count and
// requests, and each resource's total over pod sets, within MaxAmount.
// It returns "" or the reason, naming the pod set and the resource.
func validate(w *Workload) string {
	totals := map[string]int64{}
	for _, ps := range w.PodSets {
		if ps.Count < 0 {
			return fmt.Sprintf("%spod set %s: count %d is negative", invalidPrefix, ps.Name, ps.Count)
		}
		if why := validTopology(&ps); why != "" {
			return fmt.Sprintf("%spod set %s: %s", invalidPrefix, ps.Name, why)
		}
		for _, r := range sortedKeys(ps.Requests) {
			v := ps.Requests[r]
			switch {
			case v < 0:
				return fmt.Sprintf("%spod set %s: request of %s is negative", invalidPrefix, ps.Name, r)
			case v > MaxAmount:
				return fmt.Sprintf("%spod set %s: request of %s per pod is more than Sluice can count (%s)", invalidPrefix, ps.Name, r, Format(r, MaxAmount))
			}
			total, ok := MulAmount(v, int64(ps.Count))
			if !ok {
				return fmt.Sprintf("%spod set %s: %d pods × %s of %s is more than Sluice can count (%s)",
					invalidPrefix, ps.Name, ps.Count, Format(r, v), r, Format(r, MaxAmount))
			}
			if totals[r], ok = AddAmount(totals[r], total); !ok {
				return fmt.Sprintf("%spod set %s: the workload's pod sets request more %s in all than Sluice can count (%s)",
					invalidPrefix, ps.Name, r, Format(r, MaxAmount))
			}
		}
	}
	return ""
}
