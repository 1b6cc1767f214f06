package preemption_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/internal/workloads"
	"github.com/sluice-dev/sluice/services/preemption"
)

func ref(name string) events.WorkloadRef {
	return events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: name, UID: "uid-" + name}
}

func victim(name string) events.VictimV1 {
	return events.VictimV1{Workload: ref(name), ClusterQueue: "cq", Reason: engine.ReasonInClusterQueue}
}

func preempted(name, by string) events.WorkloadPreemptedV1 {
	return events.WorkloadPreemptedV1{Workload: ref(name), ClusterQueue: "cq", Reason: engine.ReasonInClusterQueue, Preemptor: ref(by),
		Admission: ledger.Reservation{}.Admission()}
}

func TestPreemption(t *testing.T) {
	request := func(preemptor string, victims ...string) events.PreemptionRequestedV1 {
		r := events.PreemptionRequestedV1{Preemptor: ref(preemptor), ClusterQueue: "cq"}
		for _, v := range victims {
			r.Victims = append(r.Victims, victim(v))
		}
		return r
	}
	cases := []struct {
		name    string
		holding []string
		// starting victims have a start in flight, which ends 150 ms in.
		starting []string
		// ended victims' jobs finished before the request was handled.
		ended []string
		// readmitted victims were admitted again (a later admission started)
		// though the ledger still shows the admission the request names.
		readmitted []string
		// late victims' admissions are announced 150 ms in (the replica
		// that reserved them is slow); the others' before the request.
		late []string
		// endedInFlight victims' stops were claimed in the fence (by an
		// earlier delivery of the request) and their jobs' ends announced
		// since: the end came between the fence and the announcement.
		endedInFlight []string
		requests      []events.PreemptionRequestedV1
		want          []events.WorkloadPreemptedV1
	}{
		{
			name:     "a victim whose start is in flight is preempted once the start is announced",
			holding:  []string{"low1"},
			starting: []string{"low1"},
			requests: []events.PreemptionRequestedV1{request("high", "low1")},
			want:     []events.WorkloadPreemptedV1{preempted("low1", "high")},
		},
		{
			name:     "every victim holding quota is preempted",
			holding:  []string{"low1", "low2"},
			requests: []events.PreemptionRequestedV1{request("high", "low1", "low2")},
			want:     []events.WorkloadPreemptedV1{preempted("low1", "high"), preempted("low2", "high")},
		},
		{
			name:     "a victim whose job already ended is not preempted",
			holding:  []string{"low1", "low2"},
			ended:    []string{"low1"},
			requests: []events.PreemptionRequestedV1{request("high", "low1", "low2")},
			want:     []events.WorkloadPreemptedV1{preempted("low2", "high")},
		},
		{
			name:     "a victim already gone is skipped",
			holding:  []string{"low2"},
			requests: []events.PreemptionRequestedV1{request("high", "low1", "low2")},
			want:     []events.WorkloadPreemptedV1{preempted("low2", "high")},
		},
		{
			name:    "a victim admitted again since it was chosen keeps its new admission",
			holding: []string{"low1", "low2"},
			requests: []events.PreemptionRequestedV1{func() events.PreemptionRequestedV1 {
				r := request("high", "low1", "low2")
				r.Victims[0].Admission = "an-earlier-admission"
				return r
			}()},
			want: []events.WorkloadPreemptedV1{preempted("low2", "high")},
		},
		{
			name:     "a victim asked by two preemptors is preempted once, by the first",
			holding:  []string{"low1"},
			requests: []events.PreemptionRequestedV1{request("high", "low1"), request("higher", "low1")},
			want:     []events.WorkloadPreemptedV1{preempted("low1", "high")},
		},
		{
			name:       "a victim admitted again after its ledger entry was read is not preempted",
			holding:    []string{"low1", "low2"},
			readmitted: []string{"low1"},
			requests:   []events.PreemptionRequestedV1{request("high", "low1", "low2")},
			want:       []events.WorkloadPreemptedV1{preempted("low2", "high")},
		},
		{
			name:     "a victim whose admission is not announced yet is preempted after its announcement",
			holding:  []string{"low1", "low2"},
			late:     []string{"low1"},
			requests: []events.PreemptionRequestedV1{request("high", "low1", "low2")},
			want:     []events.WorkloadPreemptedV1{preempted("low1", "high"), preempted("low2", "high")},
		},
		{
			name:          "a victim whose job's end is announced after its stop was fenced is not preempted after the end",
			holding:       []string{"low1", "low2"},
			endedInFlight: []string{"low1"},
			requests:      []events.PreemptionRequestedV1{request("high", "low1", "low2")},
			want:          []events.WorkloadPreemptedV1{preempted("low2", "high")},
		},
		{
			name:     "the same victim asked twice by one preemptor is preempted once",
			holding:  []string{"low1"},
			requests: []events.PreemptionRequestedV1{request("high", "low1"), request("high", "low1")},
			want:     []events.WorkloadPreemptedV1{preempted("low1", "high")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each stop waits out the consumer's pull (2s)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			js := natstest.JetStream(t)
			if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
				t.Fatal(err)
			}
			res := map[string]ledger.Reservation{}
			for _, n := range append(tc.holding, "marker") {
				res[workloads.EngineKey(ref(n))] = ledger.Reservation{ClusterQueue: "cq",
					PodSets: []engine.PodSetAssignment{{Name: "main", Count: 1, Flavors: map[string]string{"cpu": "default"}}}}
			}
			if _, err := ledger.NewWriter(js).Reserve(ctx, "cq/cq", 0, res); err != nil {
				t.Fatal(err)
			}
			fk, err := bus.OpenKV(ctx, js, fence.Bucket)
			if err != nil {
				t.Fatal(err)
			}
			admission := ledger.Reservation{}.Admission()
			for _, n := range tc.ended {
				if err := fence.Finish(ctx, fk, workloads.Key(ref(n)), admission, ref(n).UID, nil); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range tc.readmitted {
				later := ledger.Reservation{AdmittedAt: time.Unix(1, 0)}.Admission()
				if _, err := fence.BeginStart(ctx, fk, workloads.Key(ref(n)), later, ""); err != nil {
					t.Fatal(err)
				}
			}
			admPub := bus.NewPublisher(js, events.Source("admission"))
			announce := func(n string) {
				ev := events.WorkloadAdmittedV1{Workload: ref(n), ClusterQueue: "cq", Admission: admission,
					PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1, Flavors: map[string]string{"cpu": "default"}}}}
				if err := admPub.Publish(ctx, ev, workloads.AdmittedID(ref(n), admission)); err != nil {
					t.Errorf("announce %s: %v", n, err)
				}
			}
			var announcedLate atomic.Bool
			for _, n := range append(tc.holding, "marker") {
				if !slices.Contains(tc.late, n) {
					announce(n)
				}
			}
			for _, n := range tc.endedInFlight {
				stopID := events.ID(events.TypeWorkloadPreemptedV1, ref(n).UID, admission, ref("high").UID)
				if err := fence.Stop(ctx, fk, workloads.Key(ref(n)), admission, stopID); err != nil {
					t.Fatal(err)
				}
				fin := events.WorkloadFinishedV1{Workload: ref(n), ClusterQueue: "cq", Succeeded: true}
				if err := bus.NewPublisher(js, events.Source("integration")).Publish(ctx, fin, events.ID(fin.Type(), ref(n).UID)); err != nil {
					t.Fatal(err)
				}
			}
			if len(tc.late) > 0 {
				time.AfterFunc(150*time.Millisecond, func() {
					announcedLate.Store(true)
					for _, n := range tc.late {
						announce(n)
					}
				})
			}
			var ended atomic.Bool
			for _, n := range tc.starting {
				if _, err := fence.BeginStart(ctx, fk, workloads.Key(ref(n)), admission, ""); err != nil {
					t.Fatal(err)
				}
				time.AfterFunc(150*time.Millisecond, func() {
					ended.Store(true)
					if err := fence.EndStart(ctx, fk, workloads.Key(ref(n)), admission); err != nil {
						t.Errorf("end start: %v", err)
					}
				})
			}

			var mu sync.Mutex
			var got []events.WorkloadPreemptedV1
			cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{events.SubjectFilter("workload", "preempted", "", "")},
			})
			if err != nil {
				t.Fatal(err)
			}
			cc, err := cons.Consume(func(m jetstream.Msg) {
				env, err := events.DecodeParts(m.Subject(), m.Headers(), m.Data())
				var ev events.WorkloadPreemptedV1
				if err == nil {
					err = env.As(&ev)
				}
				if err != nil {
					t.Errorf("preempted event: %v", err)
					return
				}
				if slices.Contains(tc.late, ev.Workload.Name) && !announcedLate.Load() {
					t.Errorf("%s preempted before its admission was announced", ev.Workload.Name)
				}
				if len(tc.starting) > 0 && !ended.Load() {
					t.Errorf("%s preempted while its start was in flight", ev.Workload.Name)
				}
				mu.Lock()
				got = append(got, ev)
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Stop()

			s := preemption.New(js, bus.NewPublisher(js, events.Source("preemption")))
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(runCtx) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("preemption Run: %v", err)
				}
			}()

			pub := bus.NewPublisher(js, events.Source("admission"))
			for i, r := range append(tc.requests, request("marker-preemptor", "marker")) {
				if err := pub.Publish(ctx, r, events.ID(r.Type(), r.Preemptor.UID, i)); err != nil {
					t.Fatal(err)
				}
			}
			want := append(tc.want, preempted("marker", "marker-preemptor"))
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := len(got)
				last := events.WorkloadPreemptedV1{}
				if n > 0 {
					last = got[n-1]
				}
				mu.Unlock()
				if last.Workload.Name == "marker" || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("preempted events (-want +got):\n%s", d)
			}
			// A preempted admission never starts.
			for _, p := range want {
				if _, err := fence.BeginStart(ctx, fk, workloads.Key(p.Workload), admission, ""); !errors.Is(err, fence.ErrStopping) {
					t.Errorf("start of preempted %s: error %v, want %v", p.Workload.Name, err, fence.ErrStopping)
				}
			}
		})
	}
}
