package baseline

import (
	"fmt"
	"strings"
	"time"
)

// Record is one workload event as the audit sees it: the workload it is
// about (any key, e.g. "job/ns/name/uid"), its transition ("submitted",
// "admitted", "started", …) and its ce-time.
type Record struct {
	Workload   string
	Transition string
	Time       time.Time
	// Admission the event names (admitted, started, preempted, evicted,
	// stopped carry one); empty when it names none.
	Admission string
}

// OrderViolation is one event that a workload's life does not allow at that
// point.
type OrderViolation struct {
	Workload string
	Index    int    // of the offending event in Sequence
	Message  string // what is wrong
	// Sequence is the workload's events in stream order up to and including
	// the offending one.
	Sequence []Record
}

func (v OrderViolation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s; events:", v.Workload, v.Message)
	seq := v.Sequence
	const keep = 16
	if len(seq) > keep {
		fmt.Fprintf(&b, " …(%d earlier)", len(seq)-keep)
		seq = seq[len(seq)-keep:]
	}
	for _, r := range seq {
		fmt.Fprintf(&b, " %s@%s", r.Transition, r.Time.UTC().Format("15:04:05.000"))
		if r.Admission != "" {
			fmt.Fprintf(&b, "[%s]", r.Admission)
		}
	}
	return b.String()
}

// lifeState is what the audit knows of one workload.
type lifeState struct {
	seq []Record
	// admitted: an admitted came after the last preempted/evicted/stopped.
	admitted bool
	// started: a started came since that admitted.
	started bool
	// preempted: a preempted came and no admitted since.
	preempted bool
	// ended: finished or deleted came; its transition.
	ended string
	// current: the admission of the last admitted; stopping: the
	// admissions preempted or evicted so far.
	current  string
	stopping map[string]bool
}

// Audit walks each workload's events in the given (stream) order and
// reports every event its life does not allow there:
//
//   - started without an admitted since the last preempted, evicted or
//     stopped, or a second started after the same admitted;
//   - started after a preempted with no admitted in between;
//   - admitted twice with no stopped, preempted or evicted in between;
//   - anything but pending after finished or deleted;
//
// and, where events name their admission:
//
//   - started, preempted or evicted of an admission other than the
//     workload's latest admitted one;
//   - an admission preempted or evicted twice;
//   - started of an admission after its preempted or evicted.
//
// Other transitions (submitted, pending) are allowed anywhere before the
// end, and pending after it too: the admission service publishes pending
// reasons from its own view, which docs/events.md leaves unordered.
// Violations are returned in stream order.
func Audit(records []Record) []OrderViolation {
	states := map[string]*lifeState{}
	var out []OrderViolation
	for _, r := range records {
		s := states[r.Workload]
		if s == nil {
			s = &lifeState{}
			states[r.Workload] = s
		}
		s.seq = append(s.seq, r)
		// An event about an admission that is over says nothing of the
		// current one: it is reported, and the life goes on without it.
		msg, stale := s.stepAdmission(r)
		if !stale {
			if m := s.step(r.Transition); m != "" {
				msg = m
			}
		}
		if msg != "" {
			out = append(out, OrderViolation{Workload: r.Workload, Index: len(s.seq) - 1, Message: msg, Sequence: append([]Record(nil), s.seq...)})
		}
	}
	return out
}

// step applies one transition and says what is wrong with it, if anything.
func (s *lifeState) step(tr string) string {
	if s.ended != "" {
		if tr == "pending" {
			return ""
		}
		return fmt.Sprintf("%s after %s", tr, s.ended)
	}
	switch tr {
	case "started":
		var msg string
		switch {
		case s.preempted:
			msg = "started after preempted with no admitted in between"
		case !s.admitted:
			msg = "started without an admitted since the last preempted/evicted/stopped"
		case s.started:
			msg = "started twice after one admitted"
		}
		s.started = true
		return msg
	case "admitted":
		var msg string
		if s.admitted {
			msg = "admitted twice with no stopped/preempted/evicted in between"
		}
		s.admitted, s.started, s.preempted = true, false, false
		return msg
	case "preempted":
		s.admitted, s.started, s.preempted = false, false, true
	case "evicted", "stopped":
		s.admitted, s.started = false, false
	case "finished", "deleted":
		s.ended = tr
	}
	return ""
}

// stepAdmission checks an event against the admission it names. stale
// reports an event about an admission other than the latest admitted.
func (s *lifeState) stepAdmission(r Record) (msg string, stale bool) {
	if r.Admission == "" || s.ended != "" {
		return "", false
	}
	switch r.Transition {
	case "admitted":
		s.current = r.Admission
	case "started", "preempted", "evicted":
		if s.current != "" && r.Admission != s.current {
			return fmt.Sprintf("%s admission %s while the latest admitted is %s", r.Transition, r.Admission, s.current), true
		}
		if s.stopping[r.Admission] {
			if r.Transition == "started" {
				return fmt.Sprintf("started admission %s after it was preempted or evicted", r.Admission), false
			}
			return fmt.Sprintf("%s admission %s that was preempted or evicted before", r.Transition, r.Admission), false
		}
		if r.Transition != "started" {
			if s.stopping == nil {
				s.stopping = map[string]bool{}
			}
			s.stopping[r.Admission] = true
		}
	case "stopped":
		return "", s.current != "" && r.Admission != s.current
	}
	return "", false
}

// Tally counts, over the same records, what the order rules allow but a
// reader may want to know.
type Tally struct {
	// PreemptedNotStopped counts workloads that finished (or were deleted)
	// after a preempted with no stopped or admitted in between: the
	// preemption was never carried out.
	PreemptedNotStopped int
	// StoppedNotRunning counts stopped events while the workload was not
	// started since its last admitted (nothing was running to stop).
	StoppedNotRunning int
	// RepeatPreempted counts preempted events that repeat one since the
	// workload's last admitted.
	RepeatPreempted int
}

// TallyOf walks the records as Audit does.
func TallyOf(records []Record) Tally {
	type st struct{ running, preempted, ended bool }
	states := map[string]*st{}
	var t Tally
	for _, r := range records {
		s := states[r.Workload]
		if s == nil {
			s = &st{}
			states[r.Workload] = s
		}
		if s.ended {
			continue
		}
		switch r.Transition {
		case "admitted":
			s.running, s.preempted = false, false
		case "started":
			s.running = true
		case "preempted":
			if s.preempted {
				t.RepeatPreempted++
			}
			s.preempted = true
		case "stopped":
			if !s.running {
				t.StoppedNotRunning++
			}
			s.running, s.preempted = false, false
		case "evicted":
		case "finished", "deleted":
			if s.preempted {
				t.PreemptedNotStopped++
			}
			s.ended = true
		}
	}
	return t
}

// Stages is how long workloads spend between transitions, from the times
// of their events: what holds a Job's quota besides its runtime.
type Stages struct {
	// AdmittedToStarted: from an admission to the start of the same
	// admission (the integration's start).
	AdmittedToStarted Stats
	// StartedToFinished: from a workload's last start to its end (the
	// runtime, the status write, the integration noticing the end).
	StartedToFinished Stats
	// FinishedToReleased: from a workload's end to its quota.released.
	FinishedToReleased Stats
}

// StagesOf measures the stages over the records (in stream order) and the
// quota.released records.
func StagesOf(records, releases []Record) Stages {
	admitted := map[string]time.Time{} // by workload and admission
	lastStart := map[string]time.Time{}
	ended := map[string]time.Time{}
	var toStart, toEnd, toRelease []time.Duration
	for _, r := range records {
		switch r.Transition {
		case "admitted":
			admitted[r.Workload+"@"+r.Admission] = r.Time
		case "started":
			if t, ok := admitted[r.Workload+"@"+r.Admission]; ok {
				toStart = append(toStart, r.Time.Sub(t))
				delete(admitted, r.Workload+"@"+r.Admission)
			}
			lastStart[r.Workload] = r.Time
		case "finished", "deleted":
			if t, ok := lastStart[r.Workload]; ok {
				toEnd = append(toEnd, r.Time.Sub(t))
				delete(lastStart, r.Workload)
			}
			ended[r.Workload] = r.Time
		}
	}
	for _, r := range releases {
		// A release of a stop (before the end) is not the end's release.
		if t, ok := ended[r.Workload]; ok && !r.Time.Before(t) {
			toRelease = append(toRelease, r.Time.Sub(t))
			delete(ended, r.Workload)
		}
	}
	return Stages{AdmittedToStarted: StatsOf(toStart), StartedToFinished: StatsOf(toEnd), FinishedToReleased: StatsOf(toRelease)}
}
