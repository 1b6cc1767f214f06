package baseline

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Ranges are the bounds a run's figures must stay within, as in Kueue's
// performance tests' range files: a regression guard, one file per scale
// (loadtest/ranges/).
type Ranges struct {
	// Profile is the profile the ranges are for (default baseline): a
	// built-in profile's name, or the generator file's path as given.
	Profile string `json:"profile,omitempty"`
	// WallToBound bounds wall time ÷ capacity bound.
	WallToBound *Bound `json:"wallToBound,omitempty"`
	// WallSeconds bounds the wall time itself, in seconds.
	WallSeconds *Bound `json:"wallSeconds,omitempty"`
	// TimeToAdmissionSeconds bounds the mean time to admission of each
	// workload class of the profile (small, medium, large), in seconds.
	TimeToAdmissionSeconds map[string]Bound `json:"timeToAdmissionSeconds,omitempty"`
	// UsagePercent bounds the usage of each ClusterQueue class of the
	// profile (Result.Usage), as Kueue's clusterQueueClassesMinUsage.
	UsagePercent map[string]Bound `json:"usagePercent,omitempty"`
	// EventsPerJob bounds the mean number of events per Job.
	EventsPerJob *Bound `json:"eventsPerJob,omitempty"`
	// Preemptions bounds how often a running Job was suspended again.
	Preemptions *Bound `json:"preemptions,omitempty"`
	// ResidentMemoryMB bounds the peak resident memory of the process
	// under test, when the caller can read it (CheckMemory).
	ResidentMemoryMB *Bound `json:"residentMemoryMB,omitempty"`
}

// Bound is an inclusive range; a missing end is open.
type Bound struct {
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
}

// check says how v breaks the bound, or "".
func (b Bound) check(what string, v float64) string {
	switch {
	case b.Min != nil && v < *b.Min:
		return fmt.Sprintf("%s %.2f is below its range (min %g)", what, v, *b.Min)
	case b.Max != nil && v > *b.Max:
		return fmt.Sprintf("%s %.2f is above its range (max %g)", what, v, *b.Max)
	}
	return ""
}

// LoadRanges reads a range file for a run of profile p; an unknown field,
// or a class the profile does not have, is refused by name, so a typo does
// not silently check nothing.
func LoadRanges(path string, p *Profile) (Ranges, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Ranges{}, err
	}
	js, err := yaml.YAMLToJSON(bytes.TrimSpace(b))
	if err != nil {
		return Ranges{}, fmt.Errorf("%s: %w", path, err)
	}
	var r Ranges
	strict, err := sigsjson.UnmarshalStrict(js, &r)
	if err != nil {
		return Ranges{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(strict) > 0 {
		return Ranges{}, fmt.Errorf("%s: %w", path, errors.Join(strict...))
	}
	if want := cmp.Or(r.Profile, "baseline"); want != p.Name {
		return Ranges{}, fmt.Errorf("%s: the ranges are for profile %s, the run is of %s", path, want, p.Name)
	}
	var classes, queueClasses []string
	for _, c := range p.Classes {
		classes = append(classes, c.Name)
	}
	for _, q := range p.Queues {
		if !slices.Contains(queueClasses, q.Class) {
			queueClasses = append(queueClasses, q.Class)
		}
	}
	for class := range r.TimeToAdmissionSeconds {
		if !slices.Contains(classes, class) {
			return Ranges{}, fmt.Errorf("%s: timeToAdmissionSeconds.%s: profile %s has no such class (%s)", path, class, p.Name, strings.Join(classes, ", "))
		}
	}
	for class := range r.UsagePercent {
		if !slices.Contains(queueClasses, class) {
			return Ranges{}, fmt.Errorf("%s: usagePercent.%s: profile %s has no such ClusterQueue class (%s)", path, class, p.Name, strings.Join(queueClasses, ", "))
		}
	}
	if r.WallToBound == nil && r.WallSeconds == nil && r.TimeToAdmissionSeconds == nil && r.UsagePercent == nil && r.EventsPerJob == nil &&
		r.Preemptions == nil && r.ResidentMemoryMB == nil {
		return Ranges{}, fmt.Errorf("%s: %w", path, errors.New("no range in it"))
	}
	return r, nil
}

// Check lists every figure of res outside its range.
func (r Ranges) Check(res *Result) []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
		}
	}
	if b := r.WallToBound; b != nil && res.CapacityBound > 0 {
		add(b.check("wall ÷ capacity bound", res.Wall.Seconds()/res.CapacityBound.Seconds()))
	}
	if b := r.WallSeconds; b != nil {
		add(b.check("wall time (s)", res.Wall.Seconds()))
	}
	for _, c := range slices.Sorted(maps.Keys(r.UsagePercent)) {
		u, ok := res.Usage[c]
		if !ok {
			out = append(out, fmt.Sprintf("usage of ClusterQueue class %s: none measured", c))
			continue
		}
		add(r.UsagePercent[c].check("usage of ClusterQueue class "+c+" (%)", u))
	}
	names := make([]string, 0, len(r.TimeToAdmissionSeconds))
	for c := range r.TimeToAdmissionSeconds {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		st, ok := res.TimeToAdmission[c]
		if !ok || st.N == 0 {
			out = append(out, fmt.Sprintf("time to admission of %s Jobs: none measured", c))
			continue
		}
		add(r.TimeToAdmissionSeconds[c].check("mean time to admission of "+c+" Jobs (s)", st.Mean.Seconds()))
	}
	if b := r.EventsPerJob; b != nil {
		if !res.Events.Read {
			out = append(out, "events per Job: the stream was not read")
		} else {
			add(b.check("events per Job", res.Events.PerJob))
		}
	}
	if b := r.Preemptions; b != nil {
		add(b.check("preemptions", float64(res.Preemptions)))
	}
	return out
}

// CheckMemory checks a peak resident memory, in bytes, against its range.
func (r Ranges) CheckMemory(bytes int64) []string {
	if r.ResidentMemoryMB == nil {
		return nil
	}
	if s := r.ResidentMemoryMB.check("peak resident memory (MB)", float64(bytes)/(1<<20)); s != "" {
		return []string{s}
	}
	return nil
}
