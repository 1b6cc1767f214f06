package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
)

// racingPublisher stores, between the look and the publish, what another
// replica announces meanwhile (the stop that won the race), once.
type racingPublisher struct {
	*bus.JetStreamPublisher
	before []events.Event
}

func (p *racingPublisher) PublishExpecting(ctx context.Context, ev events.Event, id, filter string, look func(context.Context) (uint64, bool, error)) (bool, error) {
	return p.JetStreamPublisher.PublishExpecting(ctx, ev, id, filter, func(ctx context.Context) (uint64, bool, error) {
		seq, publish, err := look(ctx)
		for _, b := range p.before {
			if err := p.Publish(ctx, b, idOf(b)); err != nil {
				return 0, false, err
			}
		}
		p.before = nil
		return seq, publish, err
	})
}

// TestStartedNeverFollowsItsStop: an admission's started is announced only
// if neither its stop nor its job's end was stored first, including when
// the stop lands between the look and the publish.
func TestStartedNeverFollowsItsStop(t *testing.T) {
	const admission, older = "2026-01-02T03:04:05Z", "2026-01-02T03:00:00Z"
	w := events.WorkloadRef{Kind: "job", Namespace: "ns", Name: "w", UID: "uid-1"}
	admitted := events.WorkloadAdmittedV1{Workload: w, ClusterQueue: "cq", Admission: admission, PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1}}}
	preempted := func(adm string) events.Event {
		return events.WorkloadPreemptedV1{Workload: w, ClusterQueue: "cq", Admission: adm, Reason: "InClusterQueue", Preemptor: events.WorkloadRef{Kind: "job", Namespace: "ns", Name: "p", UID: "uid-p"}}
	}
	started := events.WorkloadStartedV1{Workload: w, ClusterQueue: "cq", Admission: admission}
	startedID := events.ID(started.Type(), w.UID, admission)
	cases := []struct {
		name        string
		stored      []events.Event
		meanwhile   []events.Event
		wantErr     error
		wantStarted bool
	}{
		{name: "after its admission", stored: []events.Event{admitted}, wantStarted: true},
		{name: "after the stop of an older admission", stored: []events.Event{preempted(older), admitted}, wantStarted: true},
		{name: "after its stop", stored: []events.Event{admitted, preempted(admission)}, wantErr: errLookAgain},
		{name: "after its eviction", stored: []events.Event{admitted, events.WorkloadEvictedV1{Workload: w, ClusterQueue: "cq", Admission: admission, Reason: "Deactivated"}}, wantErr: errLookAgain},
		{name: "after the job finished", stored: []events.Event{admitted, events.WorkloadFinishedV1{Workload: w, ClusterQueue: "cq", Succeeded: true}}, wantErr: errLookAgain},
		{name: "its stop lands between the look and the publish", stored: []events.Event{admitted}, meanwhile: []events.Event{preempted(admission)}, wantErr: errLookAgain},
		{name: "something else lands between the look and the publish", stored: []events.Event{admitted}, meanwhile: []events.Event{preempted(older)}, wantStarted: true},
		{name: "announced before", stored: []events.Event{admitted, started}, wantStarted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			js := natstest.JetStream(t)
			if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
				t.Fatal(err)
			}
			stream, err := js.Stream(ctx, bus.StreamEvents)
			if err != nil {
				t.Fatal(err)
			}
			p := bus.NewPublisher(js, events.Source("test"))
			for i, ev := range tc.stored {
				if err := p.Publish(ctx, ev, idOf(ev)); err != nil {
					t.Fatalf("store event %d: %v", i, err)
				}
			}
			s := &Service{pub: &racingPublisher{JetStreamPublisher: p, before: tc.meanwhile}, events: stream, log: zerolog.Nop()}
			err = s.publishStarted(ctx, started, startedID)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("publishStarted = %v, want %v", err, tc.wantErr)
			}
			got := startedCount(t, ctx, stream, w)
			want := 0
			if tc.wantStarted {
				want = 1
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("started events stored (-want +got):\n%s", diff)
			}
		})
	}
}

func startedCount(t *testing.T, ctx context.Context, stream jetstream.Stream, w events.WorkloadRef) int {
	t.Helper()
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(events.WorkloadSubject(events.TypeWorkloadStartedV1, w)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n
}

// idOf names an event by its type, workload and admission, as the
// services do.
func idOf(ev events.Event) string {
	w, _ := events.WorkloadOf(ev)
	var admission string
	switch e := ev.(type) {
	case events.WorkloadAdmittedV1:
		admission = e.Admission
	case events.WorkloadStartedV1:
		admission = e.Admission
	case events.WorkloadPreemptedV1:
		admission = e.Admission
	case events.WorkloadEvictedV1:
		admission = e.Admission
	}
	return events.ID(ev.Type(), w.UID, admission)
}
