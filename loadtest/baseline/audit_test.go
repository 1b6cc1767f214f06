package baseline

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAudit(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// seq builds records of workload "w" one millisecond apart; "x:" prefixes
	// an event of another workload "x"; "@a1" suffixes the admission named.
	seq := func(trs ...string) []Record {
		var out []Record
		for i, tr := range trs {
			w := "w"
			if s, ok := strings.CutPrefix(tr, "x:"); ok {
				w, tr = "x", s
			}
			tr, adm, _ := strings.Cut(tr, "@")
			out = append(out, Record{Workload: w, Transition: tr, Admission: adm, Time: t0.Add(time.Duration(i) * time.Millisecond)})
		}
		return out
	}
	type want struct {
		index int // within the workload's own events
		msg   string
	}
	tests := []struct {
		name   string
		events []Record
		want   []want
	}{
		{"empty", nil, nil},
		{"normal life", seq("submitted", "pending", "admitted", "started", "finished"), nil},
		{"a pending reason published from a view behind the end", seq("submitted", "admitted", "started", "finished", "pending"), nil},
		{"preempted after finished", seq("submitted", "admitted", "started", "finished", "preempted"),
			[]want{{4, "preempted after finished"}}},
		{"preempted and readmitted",
			seq("submitted", "admitted", "started", "preempted", "stopped", "pending", "admitted", "started", "finished"), nil},
		{"evicted and readmitted", seq("submitted", "admitted", "started", "evicted", "stopped", "admitted", "started", "finished"), nil},
		{"stopped only", seq("submitted", "admitted", "stopped", "admitted", "started"), nil},
		{"preempted before started", seq("submitted", "admitted", "preempted", "stopped", "admitted", "started"), nil},
		{"started without admitted", seq("submitted", "started"),
			[]want{{1, "started without an admitted"}}},
		{"started twice", seq("submitted", "admitted", "started", "started"),
			[]want{{3, "started twice"}}},
		{"started after preempted", seq("submitted", "admitted", "started", "preempted", "started"),
			[]want{{4, "started after preempted with no admitted in between"}}},
		{"started after preempted and stopped", seq("submitted", "admitted", "preempted", "stopped", "started"),
			[]want{{4, "started after preempted"}}},
		{"started after evicted", seq("submitted", "admitted", "evicted", "started"),
			[]want{{3, "started without an admitted"}}},
		{"admitted twice", seq("submitted", "admitted", "started", "admitted", "started"),
			[]want{{3, "admitted twice"}}},
		{"admitted twice, pending between", seq("submitted", "admitted", "pending", "admitted"),
			[]want{{3, "admitted twice"}}},
		{"after finished", seq("submitted", "admitted", "started", "finished", "stopped", "deleted"),
			[]want{{4, "stopped after finished"}, {5, "deleted after finished"}}},
		{"after deleted", seq("submitted", "deleted", "admitted"),
			[]want{{2, "admitted after deleted"}}},
		{"admissions named: preempted and readmitted",
			seq("submitted", "admitted@a1", "started@a1", "preempted@a1", "stopped@a1", "admitted@a2", "started@a2", "finished"), nil},
		{"a stale preemption of an admission that is over",
			seq("submitted", "admitted@a1", "preempted@a1", "stopped@a1", "admitted@a2", "preempted@a1", "started@a2"),
			[]want{{5, "preempted admission a1 while the latest admitted is a2"}}},
		{"one admission preempted twice",
			seq("submitted", "admitted@a1", "started@a1", "preempted@a1", "preempted@a1", "stopped@a1"),
			[]want{{4, "preempted admission a1 that was preempted or evicted before"}}},
		{"an admission evicted after it was preempted",
			seq("submitted", "admitted@a1", "preempted@a1", "evicted@a1"),
			[]want{{3, "evicted admission a1 that was preempted or evicted before"}}},
		{"a start of an older admission",
			seq("submitted", "admitted@a1", "stopped@a1", "admitted@a2", "started@a1"),
			[]want{{4, "started admission a1 while the latest admitted is a2"}}},
		{"workloads are separate", seq("submitted", "x:submitted", "admitted", "x:started", "started", "x:admitted", "x:started"),
			[]want{{1, "started without an admitted"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Audit(tt.events)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d violations %v, want %d", len(got), got, len(tt.want))
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Index != w.index || !strings.Contains(g.Message, w.msg) {
					t.Errorf("violation %d = index %d %q, want index %d containing %q", i, g.Index, g.Message, w.index, w.msg)
				}
				if len(g.Sequence) != g.Index+1 || g.Sequence[g.Index].Workload != g.Workload {
					t.Errorf("violation %d: sequence %v does not end at the offending event", i, g.Sequence)
				}
			}
		})
	}
}

func TestOrderViolationString(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v := Audit([]Record{{Workload: "job/ns/a", Transition: "submitted", Time: t0},
		{Workload: "job/ns/a", Transition: "started", Time: t0.Add(1500 * time.Millisecond), Admission: "a1"}})
	if len(v) != 1 {
		t.Fatalf("got %v", v)
	}
	want := "job/ns/a: started without an admitted since the last preempted/evicted/stopped; events: submitted@03:04:05.000 started@03:04:06.500[a1]"
	if got := v[0].String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestTallyOf(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var recs []Record
	add := func(w string, trs ...string) {
		for _, tr := range trs {
			recs = append(recs, Record{Workload: w, Transition: tr, Time: t0})
			t0 = t0.Add(time.Millisecond)
		}
	}
	add("a", "submitted", "admitted", "started", "preempted", "preempted", "finished")
	add("b", "submitted", "admitted", "started", "preempted", "stopped", "admitted", "stopped", "started", "finished")
	add("c", "submitted", "admitted", "started", "finished", "preempted")
	add("d", "submitted", "admitted", "preempted", "stopped", "admitted", "started", "preempted", "stopped", "finished")
	got := TallyOf(recs)
	want := Tally{PreemptedNotStopped: 1, StoppedNotRunning: 2, RepeatPreempted: 1}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestStagesOf(t *testing.T) {
	at := func(ms int) time.Time {
		return time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
	}
	records := []Record{
		{Workload: "job/ns/a", Transition: "submitted", Time: at(0)},
		{Workload: "job/ns/a", Transition: "admitted", Admission: "1", Time: at(100)},
		{Workload: "job/ns/a", Transition: "started", Admission: "1", Time: at(300)},
		{Workload: "job/ns/a", Transition: "preempted", Admission: "1", Time: at(400)},
		{Workload: "job/ns/a", Transition: "stopped", Admission: "1", Time: at(500)},
		{Workload: "job/ns/a", Transition: "admitted", Admission: "2", Time: at(1000)},
		{Workload: "job/ns/a", Transition: "started", Admission: "2", Time: at(1100)},
		{Workload: "job/ns/a", Transition: "finished", Time: at(2100)},
		{Workload: "job/ns/b", Transition: "admitted", Admission: "1", Time: at(0)},
		{Workload: "job/ns/b", Transition: "started", Admission: "1", Time: at(400)},
		{Workload: "job/ns/b", Transition: "deleted", Time: at(900)},
	}
	releases := []Record{
		{Workload: "job/ns/a", Transition: "released", Time: at(600)}, // the stop's
		{Workload: "job/ns/a", Transition: "released", Time: at(2400)},
		{Workload: "job/ns/b", Transition: "released", Time: at(1000)},
	}
	got := StagesOf(records, releases)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	want := Stages{
		AdmittedToStarted:  StatsOf([]time.Duration{ms(200), ms(100), ms(400)}),
		StartedToFinished:  StatsOf([]time.Duration{ms(1000), ms(500)}),
		FinishedToReleased: StatsOf([]time.Duration{ms(300), ms(100)}),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stages (-want +got):\n%s", d)
	}
}
