package baseline

import (
	"fmt"
	"slices"
	"time"
)

// Stats summarises a set of durations.
type Stats struct {
	N                        int
	Mean, P50, P90, P99, Max time.Duration
}

// StatsOf computes Stats; percentiles are nearest-rank.
func StatsOf(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	pct := func(p float64) time.Duration {
		i := int(p*float64(len(s)) + 0.999999999) // ceil(p·n), nearest rank
		return s[min(max(i-1, 0), len(s)-1)]
	}
	return Stats{N: len(s), Mean: sum / time.Duration(len(s)), P50: pct(0.5), P90: pct(0.9), P99: pct(0.99), Max: s[len(s)-1]}
}

func (s Stats) String() string {
	if s.N == 0 {
		return "n=0"
	}
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("n=%d mean %s p50 %s p90 %s p99 %s max %s", s.N, r(s.Mean), r(s.P50), r(s.P90), r(s.P99), r(s.Max))
}
