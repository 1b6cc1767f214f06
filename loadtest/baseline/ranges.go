package baseline

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Ranges are the bounds a run's figures must stay within, as in Kueue's
// performance tests' range files: a regression guard, one file per scale
// (loadtest/ranges/).
type Ranges struct {
	// WallToBound bounds wall time ÷ capacity bound.
	WallToBound *Bound `json:"wallToBound,omitempty"`
	// TimeToAdmissionSeconds bounds the mean time to admission of each
	// class (small, medium, large), in seconds.
	TimeToAdmissionSeconds map[string]Bound `json:"timeToAdmissionSeconds,omitempty"`
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

// LoadRanges reads a range file; an unknown field or class is refused by
// name, so a typo does not silently check nothing.
func LoadRanges(path string) (Ranges, error) {
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
	for class := range r.TimeToAdmissionSeconds {
		if !slices.ContainsFunc(Classes, func(c Class) bool { return c.Name == class }) {
			return Ranges{}, fmt.Errorf("%s: timeToAdmissionSeconds.%s: no such class (small, medium, large)", path, class)
		}
	}
	if r.WallToBound == nil && r.TimeToAdmissionSeconds == nil && r.EventsPerJob == nil && r.Preemptions == nil && r.ResidentMemoryMB == nil {
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
