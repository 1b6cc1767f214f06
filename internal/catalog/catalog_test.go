package catalog_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/catalog"
	"github.com/sluice-dev/sluice/internal/visibility"
)

var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// story feeds events to a catalog, one second and one sequence apart.
type story struct {
	cat *catalog.Catalog
	seq uint64
}

func newStory(opts ...catalog.Option) *story { return &story{cat: catalog.New(opts...)} }

func (s *story) at() time.Time { return t0.Add(time.Duration(s.seq) * time.Second) }

func (s *story) add(evs ...events.Event) *story {
	for _, ev := range evs {
		s.seq++
		s.cat.Apply(s.seq, events.Envelope{Type: ev.Type(), Time: s.at(),
			TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, ev)
	}
	return s
}

func ref(ns, name string) events.WorkloadRef {
	return events.WorkloadRef{Kind: "job", Namespace: ns, Name: name, UID: "uid-" + name}
}

func submitted(ns, name string) events.WorkloadSubmittedV1 {
	return events.WorkloadSubmittedV1{Workload: ref(ns, name), LocalQueue: "lq", Priority: 10, CreationTime: t0,
		PodSets: []events.PodSetV1{{Name: "main", Count: 2}}}
}

func admitted(ns, name string) events.WorkloadAdmittedV1 {
	return events.WorkloadAdmittedV1{Workload: ref(ns, name), ClusterQueue: "cq", Admission: "a1",
		PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 2, Flavors: map[string]string{"cpu": "on-demand", "nvidia.com/gpu": "a100"}}}}
}

// row is what a test compares of a listed workload.
type row struct {
	Name, State, ClusterQueue, Reason string
	Flavors                           []string
}

func rows(ws []visibility.Workload) []row {
	var out []row
	for _, w := range ws {
		out = append(out, row{Name: w.Namespace + "/" + w.Name, State: w.Status.State, ClusterQueue: w.Status.ClusterQueue,
			Reason: w.Status.Reason, Flavors: w.Status.Flavors})
	}
	return out
}

func TestStates(t *testing.T) {
	wantFlavors := []string{"cpu=on-demand", "nvidia.com/gpu=a100"}
	cases := []struct {
		name   string
		events []events.Event
		want   []row
	}{
		{
			name:   "submitted is pending",
			events: []events.Event{submitted("a", "w")},
			want:   []row{{Name: "a/job.w", State: "Pending"}},
		},
		{
			name: "a pending event gives the ClusterQueue and the reason",
			events: []events.Event{submitted("a", "w"),
				events.WorkloadPendingV1{Workload: ref("a", "w"), ClusterQueue: "cq", Reason: "insufficient unused quota"}},
			want: []row{{Name: "a/job.w", State: "Pending", ClusterQueue: "cq", Reason: "insufficient unused quota"}},
		},
		{
			name: "reserved waits for its checks",
			events: []events.Event{submitted("a", "w"),
				events.WorkloadReservedV1{Workload: ref("a", "w"), ClusterQueue: "cq", Admission: "a1", PodSets: admitted("a", "w").PodSets}},
			want: []row{{Name: "a/job.w", State: "Reserved", ClusterQueue: "cq", Flavors: wantFlavors}},
		},
		{
			name:   "admitted, then running",
			events: []events.Event{submitted("a", "w"), admitted("a", "w"), events.WorkloadStartedV1{Workload: ref("a", "w"), ClusterQueue: "cq"}},
			want:   []row{{Name: "a/job.w", State: "Running", ClusterQueue: "cq", Flavors: wantFlavors}},
		},
		{
			name: "preempted is evicted, with who preempted it",
			events: []events.Event{submitted("a", "w"), admitted("a", "w"),
				events.WorkloadPreemptedV1{Workload: ref("a", "w"), ClusterQueue: "cq", Reason: "InClusterQueue", Preemptor: ref("a", "urgent")},
				events.WorkloadStoppedV1{Workload: ref("a", "w"), ClusterQueue: "cq", Reason: "Preempted"}},
			want: []row{{Name: "a/job.w", State: "Evicted", ClusterQueue: "cq", Reason: "Preempted: InClusterQueue by a/urgent", Flavors: wantFlavors}},
		},
		{
			name: "evicted, then waiting again",
			events: []events.Event{submitted("a", "w"), admitted("a", "w"),
				events.WorkloadEvictedV1{Workload: ref("a", "w"), ClusterQueue: "cq", Reason: "PodsReadyTimeout"},
				events.WorkloadPendingV1{Workload: ref("a", "w"), ClusterQueue: "cq", Reason: "insufficient unused quota"}},
			want: []row{{Name: "a/job.w", State: "Pending", ClusterQueue: "cq", Reason: "insufficient unused quota"}},
		},
		{
			name: "evicted for good is deactivated",
			events: []events.Event{submitted("a", "w"), admitted("a", "w"),
				events.WorkloadEvictedV1{Workload: ref("a", "w"), ClusterQueue: "cq", Reason: "Deactivated", Message: "admission check prov rejected the workload"}},
			want: []row{{Name: "a/job.w", State: "Deactivated", ClusterQueue: "cq", Reason: "Deactivated: admission check prov rejected the workload", Flavors: wantFlavors}},
		},
		{
			name: "waiting deactivated",
			events: []events.Event{submitted("a", "w"),
				events.WorkloadPendingV1{Workload: ref("a", "w"), ClusterQueue: "cq", Reason: "deactivated: by its user (sluice.dev/active: false)"}},
			want: []row{{Name: "a/job.w", State: "Deactivated", ClusterQueue: "cq", Reason: "deactivated: by its user (sluice.dev/active: false)"}},
		},
		{
			name: "finished names its ClusterQueue and how it ended",
			events: []events.Event{submitted("a", "w"), admitted("a", "w"),
				events.WorkloadFinishedV1{Workload: ref("a", "w"), ClusterQueue: "cq", Succeeded: false, Message: "BackoffLimitExceeded"}},
			want: []row{{Name: "a/job.w", State: "Finished", ClusterQueue: "cq", Reason: "Failed: BackoffLimitExceeded", Flavors: wantFlavors}},
		},
		{
			name:   "deleted is gone",
			events: []events.Event{submitted("a", "w"), submitted("b", "v"), events.WorkloadDeletedV1{Workload: ref("a", "w")}},
			want:   []row{{Name: "b/job.v", State: "Pending"}},
		},
		{
			name:   "events of a workload never submitted are ignored",
			events: []events.Event{admitted("a", "w"), events.WorkloadStartedV1{Workload: ref("a", "w"), ClusterQueue: "cq"}},
		},
		{
			name:   "submitted again starts over",
			events: []events.Event{submitted("a", "w"), admitted("a", "w"), submitted("a", "w")},
			want:   []row{{Name: "a/job.w", State: "Pending"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStory().add(tc.events...)
			got, seq := s.cat.List("", s.at())
			if d := cmp.Diff(tc.want, rows(got)); d != "" {
				t.Errorf("workloads (-want +got):\n%s", d)
			}
			if seq != s.seq {
				t.Errorf("as of %d; want %d", seq, s.seq)
			}
		})
	}
}

func TestObject(t *testing.T) {
	s := newStory().add(submitted("a", "w"), admitted("a", "w"))
	w, ok := s.cat.Get("a", "job.w", s.at())
	if !ok {
		t.Fatal("job.w not found")
	}
	if w.UID != "uid-w" || w.ResourceVersion != "2" || !w.CreationTimestamp.Time.Equal(t0) || w.Spec.LocalQueue != "lq" ||
		w.Spec.Priority != 10 || w.Status.TraceID != "0af7651916cd43dd8448eb211c80319c" || w.Status.AdmittedAt == nil ||
		!w.Status.LastTransitionTime.Time.Equal(t0.Add(2*time.Second)) {
		t.Errorf("object: %+v", w)
	}
	if _, ok := s.cat.Get("a", "jobset.w", s.at()); ok {
		t.Error("jobset.w found; only job.w exists")
	}
}

func TestFinishedAreKeptForARetention(t *testing.T) {
	s := newStory(catalog.WithRetention(10*time.Second), catalog.WithMaxFinished(2))
	for _, n := range []string{"f1", "f2", "f3"} {
		s.add(submitted("a", n), events.WorkloadFinishedV1{Workload: ref("a", n), ClusterQueue: "cq", Succeeded: true})
	}
	got, _ := s.cat.List("a", s.at())
	if d := cmp.Diff([]string{"a/job.f2", "a/job.f3"}, names(got)); d != "" {
		t.Errorf("at most 2 finished (-want +got):\n%s", d)
	}
	// Past the retention: hidden at once, forgotten at the next event.
	later := s.at().Add(20 * time.Second)
	if got, _ := s.cat.List("a", later); len(got) != 0 {
		t.Errorf("past the retention: %v listed", names(got))
	}
	s.seq += 20
	s.add(submitted("b", "new"))
	got, _ = s.cat.List("", s.at())
	if d := cmp.Diff([]string{"b/job.new"}, names(got)); d != "" {
		t.Errorf("after the next event (-want +got):\n%s", d)
	}
	evs, _, _, ok := s.cat.Since("a", 6)
	if !ok || len(evs) != 2 || evs[0].Type != "DELETED" || evs[1].Type != "DELETED" {
		t.Errorf("changes of a since 6: %v, %+v; want the two finished ones DELETED", ok, evs)
	}
}

func names(ws []visibility.Workload) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Namespace+"/"+w.Name)
	}
	return out
}

func TestSince(t *testing.T) {
	s := newStory(catalog.WithChanges(3)).add(submitted("a", "w"), submitted("b", "v"))
	evs, last, _, ok := s.cat.Since("", 0)
	if !ok || last != 2 || len(evs) != 2 || evs[0].Type != "ADDED" || evs[1].Workload.Namespace != "b" {
		t.Fatalf("Since(0) = %+v, %d, %v", evs, last, ok)
	}
	evs, _, woken, _ := s.cat.Since("a", 2)
	if len(evs) != 0 {
		t.Fatalf("Since(2) = %+v; want nothing yet", evs)
	}
	s.add(admitted("a", "w"))
	select {
	case <-woken:
	default:
		t.Fatal("a change did not wake a watch")
	}
	evs, _, _, _ = s.cat.Since("a", 2)
	if len(evs) != 1 || evs[0].Type != "MODIFIED" || evs[0].Workload.Status.State != "Admitted" {
		t.Errorf("Since(2) after admission: %+v", evs)
	}
	// Two more changes push the first out of a ring of three.
	s.add(events.WorkloadStartedV1{Workload: ref("a", "w"), ClusterQueue: "cq"}, submitted("c", "u"))
	if _, _, _, ok := s.cat.Since("", 0); ok {
		t.Error("Since(0) after the ring let go of seq 1: ok; want expired")
	}
	if evs, _, _, ok := s.cat.Since("", 2); !ok || len(evs) != 3 {
		t.Errorf("Since(2) = %+v, %v; want the 3 kept", evs, ok)
	}
}

func TestHistory(t *testing.T) {
	cat := catalog.New()
	seq := uint64(0)
	at := func(d time.Duration, ev events.Event) {
		seq++
		cat.Apply(seq, events.Envelope{Type: ev.Type(), Time: t0.Add(d)}, ev)
	}
	usage := func(gpus string) events.QuotaUsageV1 {
		return events.QuotaUsageV1{ClusterQueue: "cq", Usage: map[string]map[string]string{"a100": {"nvidia.com/gpu": gpus, "cpu": "1500m"}}, Admitted: 1}
	}
	at(0, submitted("a", "w"))
	at(10*time.Second, admitted("a", "w"))
	at(11*time.Second, usage("2"))
	at(20*time.Second, usage("4")) // the same 30-second step: replaces the sample before
	at(70*time.Second, events.WorkloadPreemptedV1{Workload: ref("a", "w"), ClusterQueue: "cq", Reason: "InClusterQueue", Preemptor: ref("a", "x")})
	at(75*time.Second, usage("0"))
	h := cat.History(t0.Add(2 * time.Minute))
	if len(h.Minutes) != 60 {
		t.Fatalf("%d minutes; want 60", len(h.Minutes))
	}
	got := h.Minutes[57:59]
	want := []catalog.Minute{{Start: t0, Submitted: 1, Admitted: 1}, {Start: t0.Add(time.Minute), Evicted: 1}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("minutes (-want +got):\n%s", d)
	}
	if len(h.Usage) != 1 || len(h.Usage[0].Samples) != 2 || h.Usage[0].Samples[0].Usage["a100/nvidia.com/gpu"] != 4 ||
		h.Usage[0].Samples[0].Usage["a100/cpu"] != 1.5 || h.Usage[0].Samples[1].Usage["a100/nvidia.com/gpu"] != 0 {
		t.Errorf("usage: %+v", h.Usage)
	}
	// Two hours on: the minutes are empty, one sample is kept as the
	// usage the window starts with.
	at(2*time.Hour, usage("1"))
	h = cat.History(t0.Add(2 * time.Hour))
	total := 0
	for _, m := range h.Minutes {
		total += m.Submitted + m.Admitted + m.Evicted + m.Finished
	}
	if total != 0 || len(h.Usage[0].Samples) != 2 || h.Usage[0].Samples[1].Usage["a100/nvidia.com/gpu"] != 1 {
		t.Errorf("two hours on: %d counted, usage %+v", total, h.Usage)
	}
}
