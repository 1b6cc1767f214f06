package fence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/natstest"
)

// step is one call on the fence of workload "job.ns.w".
type step struct {
	op        string // begin, end, abort, stop, finish, ready, notready
	admission string
	uid       string
	stopID    string // stop: the decision's announcement; "p1" when empty
	// requeue: stop records this requeue state with the stop.
	requeue *fence.Requeue
	wantErr error
}

// readyAt stamps readiness and requeues in the tests.
var readyAt = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// Admissions named by their admission time, as the ledger names them.
const (
	t1 = "2026-11-25T12:11:56.034Z"
	t2 = "2026-11-25T12:11:57.4Z" // later than t1, though it sorts first as text
)

func TestFence(t *testing.T) {
	cases := []struct {
		name      string
		steps     []step
		wantState fence.State
	}{
		{
			name:      "a start claimed and ended is started",
			steps:     []step{{op: "begin", admission: "a1"}, {op: "end", admission: "a1"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Started, EverStarted: true},
		},
		{
			name:      "a stop waits while a start is in flight",
			steps:     []step{{op: "begin", admission: "a1"}, {op: "stop", admission: "a1", wantErr: fence.ErrStarting}},
			wantState: fence.State{Admission: "a1", Phase: fence.Starting},
		},
		{
			name:      "a started admission can be stopped",
			steps:     []step{{op: "begin", admission: "a1"}, {op: "end", admission: "a1"}, {op: "stop", admission: "a1"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Stopping, StopID: "p1", EverStarted: true},
		},
		{
			name:      "a stopped admission never starts",
			steps:     []step{{op: "stop", admission: "a1"}, {op: "begin", admission: "a1", wantErr: fence.ErrStopping}},
			wantState: fence.State{Admission: "a1", Phase: fence.Stopping, StopID: "p1"},
		},
		{
			name:      "a new admission starts after the old one was stopped",
			steps:     []step{{op: "stop", admission: "a1"}, {op: "begin", admission: "a2"}},
			wantState: fence.State{Admission: "a2", Phase: fence.Starting},
		},
		{
			name:      "a retried start of the same admission is let through",
			steps:     []step{{op: "begin", admission: "a1"}, {op: "begin", admission: "a1"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Starting},
		},
		{
			name:      "an aborted start lets the stop through",
			steps:     []step{{op: "begin", admission: "a1"}, {op: "abort", admission: "a1"}, {op: "stop", admission: "a1"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Stopping, StopID: "p1"},
		},
		{
			name:      "ending the start of an admission being stopped changes nothing",
			steps:     []step{{op: "stop", admission: "a1"}, {op: "end", admission: "a1"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Stopping, StopID: "p1"},
		},
		{
			name:      "stopping twice is one stop",
			steps:     []step{{op: "stop", admission: "a1"}, {op: "stop", admission: "a1"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Stopping, StopID: "p1"},
		},
		{
			name:      "an ended job's admission is not stopped",
			steps:     []step{{op: "begin", admission: "a1"}, {op: "end", admission: "a1"}, {op: "finish", admission: "a1"}, {op: "stop", admission: "a1", wantErr: fence.ErrFinished}},
			wantState: fence.State{Admission: "a1", Phase: fence.Finished},
		},
		{
			name:      "an end names the job that ended",
			steps:     []step{{op: "begin", admission: "a1"}, {op: "finish", admission: "a1", uid: "u1"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Finished, UID: "u1"},
		},
		{
			name:      "an ended job's admission never starts again",
			steps:     []step{{op: "finish", admission: "a1"}, {op: "begin", admission: "a1", wantErr: fence.ErrStopping}},
			wantState: fence.State{Admission: "a1", Phase: fence.Finished},
		},
		{
			name:      "a job created again under the same name starts with its own admission",
			steps:     []step{{op: "finish", admission: "a1"}, {op: "begin", admission: "b1"}},
			wantState: fence.State{Admission: "b1", Phase: fence.Starting},
		},
		{
			name:      "admissions that are not times have no order: a stop of another one replaces the state",
			steps:     []step{{op: "finish", admission: "a2"}, {op: "stop", admission: "a1"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Stopping, StopID: "p1"},
		},
		{
			name:      "a stop of an older admission does not undo an end",
			steps:     []step{{op: "finish", admission: t2}, {op: "stop", admission: t1, wantErr: fence.ErrSuperseded}},
			wantState: fence.State{Admission: t2, Phase: fence.Finished},
		},
		{
			name: "a stale stop of an older admission leaves a later start in flight alone",
			steps: []step{{op: "stop", admission: t1}, {op: "begin", admission: t2},
				{op: "stop", admission: t1, stopID: "p2", wantErr: fence.ErrSuperseded}},
			wantState: fence.State{Admission: t2, Phase: fence.Starting},
		},
		{
			name: "a second decision to stop one admission is refused",
			steps: []step{{op: "begin", admission: t1}, {op: "end", admission: t1}, {op: "stop", admission: t1},
				{op: "stop", admission: t1, stopID: "p2", wantErr: fence.ErrStopTaken}},
			wantState: fence.State{Admission: t1, Phase: fence.Stopping, StopID: "p1", EverStarted: true},
		},
		{
			name:      "the same decision redelivered stops it again",
			steps:     []step{{op: "stop", admission: t1, stopID: "p2"}, {op: "stop", admission: t1, stopID: "p2"}},
			wantState: fence.State{Admission: t1, Phase: fence.Stopping, StopID: "p2"},
		},
		{
			name:      "the readiness of a started admission is recorded, and changes",
			steps:     []step{{op: "begin", admission: "a1"}, {op: "end", admission: "a1"}, {op: "ready", admission: "a1"}, {op: "notready", admission: "a1"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Started, Ready: &fence.Readiness{Ready: false, At: readyAt}, EverStarted: true},
		},
		{
			name:      "the readiness of an admission still starting, or of another one, is ignored",
			steps:     []step{{op: "begin", admission: "a1"}, {op: "ready", admission: "a1"}, {op: "ready", admission: "a2"}},
			wantState: fence.State{Admission: "a1", Phase: fence.Starting},
		},
		{
			name: "the requeue state of a stop is kept through the next admission; readiness is not",
			steps: []step{{op: "begin", admission: t1}, {op: "end", admission: t1}, {op: "ready", admission: t1},
				{op: "stop", admission: t1, requeue: &fence.Requeue{Count: 1, At: readyAt}},
				{op: "begin", admission: t2}, {op: "end", admission: t2}},
			wantState: fence.State{Admission: t2, Phase: fence.Started, Requeue: &fence.Requeue{Count: 1, At: readyAt}, EverStarted: true},
		},
		{
			name: "a redelivered stop updates the requeue state it carries",
			steps: []step{{op: "stop", admission: t1, requeue: &fence.Requeue{Count: 1, At: readyAt}},
				{op: "stop", admission: t1, requeue: &fence.Requeue{Count: 2, Deactivated: "too many"}}},
			wantState: fence.State{Admission: t1, Phase: fence.Stopping, StopID: "p1", Requeue: &fence.Requeue{Count: 2, Deactivated: "too many"}},
		},
		{
			name:      "the end of the job forgets the requeue state",
			steps:     []step{{op: "stop", admission: t1, requeue: &fence.Requeue{Count: 1, At: readyAt}}, {op: "finish", admission: t1, uid: "u1"}},
			wantState: fence.State{Admission: t1, Phase: fence.Finished, UID: "u1"},
		},
		{
			name: "a job that ended is not stopped under an admission its end was not recorded with",
			steps: []step{{op: "finish", admission: t1, uid: "u1"},
				{op: "stop", admission: t2, uid: "u1", wantErr: fence.ErrFinished}},
			wantState: fence.State{Admission: t1, Phase: fence.Finished, UID: "u1"},
		},
		{
			name:      "a new job of the same name is stopped after the old one ended",
			steps:     []step{{op: "finish", admission: t1, uid: "u1"}, {op: "stop", admission: t2, uid: "u2"}},
			wantState: fence.State{Admission: t2, Phase: fence.Stopping, StopID: "p1"},
		},
		{
			name:      "a later admission is stopped over an earlier one",
			steps:     []step{{op: "stop", admission: t1}, {op: "stop", admission: t2, stopID: "p2"}},
			wantState: fence.State{Admission: t2, Phase: fence.Stopping, StopID: "p2"},
		},
	}
	ctx, raw := bucket(t)
	// The moves give the same answers and states on the bucket itself,
	// through one process's memory of its writes (Remember), and through
	// two processes' memories taking turns, each stale after the other's
	// write.
	writers := map[string]func() []fence.KV{
		"bucket":                 func() []fence.KV { return []fence.KV{raw} },
		"remembered":             func() []fence.KV { return []fence.KV{fence.Remember(raw)} },
		"two remembering":        func() []fence.KV { return []fence.KV{fence.Remember(raw), fence.Remember(raw)} },
		"one of two remembering": func() []fence.KV { return []fence.KV{raw, fence.Remember(raw)} },
	}
	i := 0
	for wname, mk := range writers {
		for _, tc := range cases {
			i++
			t.Run(wname+"/"+tc.name, func(t *testing.T) {
				key := fmt.Sprintf("job.ns.w%d", i)
				kvs := mk()
				for j, s := range tc.steps {
					kv := kvs[j%len(kvs)]
					var err error
					switch s.op {
					case "begin":
						_, err = fence.BeginStart(ctx, kv, key, s.admission, "")
					case "end":
						err = fence.EndStart(ctx, kv, key, s.admission)
					case "abort":
						err = fence.AbortStart(ctx, kv, key, s.admission)
					case "stop":
						id := s.stopID
						if id == "" {
							id = "p1"
						}
						var opts []fence.StopOption
						if s.requeue != nil {
							opts = append(opts, fence.WithRequeue(*s.requeue))
						}
						if s.uid != "" {
							opts = append(opts, fence.OfJob(s.uid))
						}
						err = fence.Stop(ctx, kv, key, s.admission, id, opts...)
					case "ready", "notready":
						err = fence.SetReady(ctx, kv, key, s.admission, s.op == "ready", readyAt)
					case "finish":
						err = fence.Finish(ctx, kv, key, s.admission, s.uid, nil)
					}
					if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
						t.Fatalf("step %d (%s %s): error %v, want %v", j, s.op, s.admission, err, s.wantErr)
					}
				}
				got, err := fence.Get(ctx, raw, key)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(tc.wantState, got); d != "" {
					t.Errorf("state (-want +got):\n%s", d)
				}
			})
		}
	}
}

// TestFenceRace: a start and a stop of one admission race from many
// goroutines; exactly one kind wins, and a start never succeeds after a
// stop did.
func TestFenceRace(t *testing.T) {
	ctx, kv := bucket(t)
	for round := range 50 {
		key := "job.ns.race"
		admission := time.Unix(int64(round), 0).UTC().Format(time.RFC3339Nano)
		type result struct {
			start bool
			err   error
		}
		res := make(chan result, 8)
		for g := range 8 {
			go func() {
				if g%2 == 0 {
					_, err := fence.BeginStart(ctx, kv, key, admission, "")
					res <- result{start: true, err: err}
					return
				}
				res <- result{err: fence.Stop(ctx, kv, key, admission, "p1")}
			}()
		}
		var started, stopped int
		for range 8 {
			r := <-res
			switch {
			case r.err == nil && r.start:
				started++
			case r.err == nil:
				stopped++
			case !errors.Is(r.err, fence.ErrStarting) && !errors.Is(r.err, fence.ErrStopping):
				t.Fatalf("round %d: %v", round, r.err)
			}
		}
		if started > 0 && stopped > 0 {
			t.Fatalf("round %d: %d starts and %d stops of one admission both succeeded", round, started, stopped)
		}
		if started+stopped == 0 {
			t.Fatalf("round %d: neither a start nor a stop succeeded", round)
		}
	}
}

// TestCollect: ended workloads' keys go once old enough; live ones stay.
func TestCollect(t *testing.T) {
	ctx, js, kv := bucketOn(t)
	if err := fence.Finish(ctx, kv, "job.ns.ended", "a1", "u1", &fence.End{Succeeded: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := fence.BeginStart(ctx, kv, "job.ns.running", "a1", ""); err != nil {
		t.Fatal(err)
	}
	if err := fence.Stop(ctx, kv, "job.ns.stopping", "a1", "p1"); err != nil {
		t.Fatal(err)
	}
	// Too young: nothing goes.
	if n, err := fence.Collect(ctx, kv, time.Hour, time.Now()); err != nil || n != 0 {
		t.Fatalf("Collect(age 1h) = %d, %v; want 0, nil", n, err)
	}
	n, err := fence.Collect(ctx, kv, time.Minute, time.Now().Add(2*time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("Collect = %d, %v; want 1, nil", n, err)
	}
	var left []string
	for _, k := range []string{"job.ns.ended", "job.ns.running", "job.ns.stopping"} {
		st, err := fence.Get(ctx, kv, k)
		if err != nil {
			t.Fatal(err)
		}
		if st.Phase != "" {
			left = append(left, k+"="+string(st.Phase))
		}
	}
	if d := cmp.Diff([]string{"job.ns.running=starting", "job.ns.stopping=stopping"}, left); d != "" {
		t.Errorf("keys left (-want +got):\n%s", d)
	}
	// The collected key's marker expires, taking the key with it.
	stream, err := js.Stream(ctx, "KV_"+fence.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, "$KV."+fence.Bucket+".job.ns.ended")
	if err != nil {
		t.Fatal(err)
	}
	if op, ttl := m.Header.Get("KV-Operation"), m.Header.Get("Nats-TTL"); op != "DEL" || ttl != bus.DeleteMarkerTTL.String() {
		t.Errorf("marker of the collected key: operation %q, TTL %q; want DEL, %s", op, ttl, bus.DeleteMarkerTTL)
	}
}

// bucket is the fence's bucket on a fresh embedded JetStream server.
func bucket(t *testing.T) (context.Context, jetstream.KeyValue) {
	t.Helper()
	ctx, _, kv := bucketOn(t)
	return ctx, kv
}

// bucketOn is bucket with the server's JetStream context.
func bucketOn(t *testing.T) (context.Context, jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js := natstest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenKV(ctx, js, fence.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, js, kv
}

// Only the first start of a workload is reported as first, through stops
// and later admissions.
func TestEndStartFirstOnlyOnce(t *testing.T) {
	ctx, kv := bucket(t)
	key := "job.ns.first"
	var got []bool
	for _, adm := range []string{"2026-11-26T10:00:00Z", "2026-11-26T10:01:00Z"} {
		if _, err := fence.BeginStart(ctx, kv, key, adm, ""); err != nil {
			t.Fatal(err)
		}
		first, err := fence.EndStartFirst(ctx, kv, key, adm)
		if err != nil {
			t.Fatal(err)
		}
		// A redelivered end of the same start is not a first either.
		again, err := fence.EndStartFirst(ctx, kv, key, adm)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, first, again)
		if err := fence.Stop(ctx, kv, key, adm, "stop-"+adm); err != nil {
			t.Fatal(err)
		}
	}
	if d := cmp.Diff([]bool{true, false, false, false}, got); d != "" {
		t.Errorf("first starts (-want +got):\n%s", d)
	}
}

// TestReopen: only the end of a workload whose job lives on (as the
// caller says) is cleared, for the job's own UID; a finished or deleted
// job's end stays, so a stale view of it is never queued again.
func TestReopen(t *testing.T) {
	left := func(e fence.End) bool { return e.Reason == "QueueNameRemoved" }
	cases := []struct {
		name      string
		end       *fence.End
		uid       string
		wantEnded bool
		wantPhase fence.Phase
	}{
		{name: "left its queue: cleared", end: &fence.End{Deleted: true, Reason: "QueueNameRemoved"}, uid: "u1", wantEnded: true, wantPhase: ""},
		{name: "deleted: kept", end: &fence.End{Deleted: true}, uid: "u1", wantPhase: fence.Finished},
		{name: "finished: kept", end: &fence.End{Succeeded: true}, uid: "u1", wantPhase: fence.Finished},
		{name: "another object of the same name: kept", end: &fence.End{Deleted: true, Reason: "QueueNameRemoved"}, uid: "u2", wantPhase: fence.Finished},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, kv := bucket(t)
			if err := fence.Finish(ctx, kv, "job.ns.j", "a1", "u1", tc.end); err != nil {
				t.Fatal(err)
			}
			ended, err := fence.Reopen(ctx, kv, "job.ns.j", tc.uid, left)
			if err != nil {
				t.Fatal(err)
			}
			if (ended != nil) != tc.wantEnded {
				t.Errorf("fence.Reopen() = %+v, want an end: %t", ended, tc.wantEnded)
			}
			st, err := fence.Get(ctx, kv, "job.ns.j")
			if err != nil {
				t.Fatal(err)
			}
			if st.Phase != tc.wantPhase {
				t.Errorf("phase after Reopen = %q, want %q", st.Phase, tc.wantPhase)
			}
			if tc.wantEnded {
				// A new admission of the new workload starts as usual.
				if _, err := fence.BeginStart(ctx, kv, "job.ns.j", "a2", ""); err != nil {
					t.Errorf("BeginStart after Reopen: %v", err)
				}
			}
		})
	}
}

// TestCorruptFenceFailsClosed: a value that cannot be read is no fence
// to start or stop by (read as none, a preempted admission could start
// again); the job's end still overwrites it.
func TestCorruptFenceFailsClosed(t *testing.T) {
	ctx, kv := bucket(t)
	if _, err := kv.Put(ctx, "job.ns.j", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := fence.BeginStart(ctx, kv, "job.ns.j", "a1", ""); !errors.Is(err, fence.ErrCorrupt) {
		t.Errorf("BeginStart over a corrupt fence: %v, want ErrCorrupt", err)
	}
	if err := fence.Stop(ctx, kv, "job.ns.j", "a1", "stop-1"); !errors.Is(err, fence.ErrCorrupt) {
		t.Errorf("Stop over a corrupt fence: %v, want ErrCorrupt", err)
	}
	if _, err := fence.Get(ctx, kv, "job.ns.j"); !errors.Is(err, fence.ErrCorrupt) {
		t.Errorf("Get of a corrupt fence: %v, want ErrCorrupt", err)
	}
	if err := fence.Finish(ctx, kv, "job.ns.j", "a1", "u1", &fence.End{Deleted: true}); err != nil {
		t.Fatalf("Finish over a corrupt fence: %v", err)
	}
	if st, err := fence.Get(ctx, kv, "job.ns.j"); err != nil || st.Phase != fence.Finished {
		t.Errorf("after Finish: %+v, %v; want Finished", st, err)
	}
}

// TestReactivate: a new value of the reactivate annotation starts a
// deactivated workload's requeue state over, once; while the workload is
// active it is only remembered; a workload never deactivated (no requeue
// state) gets nothing written.
func TestReactivate(t *testing.T) {
	deactivated := fence.Requeue{Count: 3, At: time.Unix(100, 0).UTC(), Deactivated: "deactivated: exceeding the maximum number of re-queuing retries", Executed: time.Minute}
	cases := []struct {
		name            string
		requeue         *fence.Requeue
		token           string
		wantReactivated bool
		wantRequeue     *fence.Requeue
	}{
		{name: "deactivated: started over", requeue: &deactivated, token: "t1", wantReactivated: true,
			wantRequeue: &fence.Requeue{Reactivations: 1, Reactivation: "t1"}},
		{name: "the same value again: nothing", requeue: &fence.Requeue{Deactivated: "again", Reactivations: 1, Reactivation: "t1"}, token: "t1",
			wantRequeue: &fence.Requeue{Deactivated: "again", Reactivations: 1, Reactivation: "t1"}},
		{name: "a new value after a second deactivation", requeue: &fence.Requeue{Deactivated: "again", Reactivations: 1, Reactivation: "t1"}, token: "t2", wantReactivated: true,
			wantRequeue: &fence.Requeue{Reactivations: 2, Reactivation: "t2"}},
		{name: "active: only remembered", requeue: &fence.Requeue{Count: 1}, token: "t1",
			wantRequeue: &fence.Requeue{Count: 1, Reactivation: "t1"}},
		{name: "never deactivated: nothing written", token: "t1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, kv := bucket(t)
			key := "job.ns.j"
			if tc.requeue != nil {
				if err := fence.Stop(ctx, kv, key, "a1", "stop-1", fence.WithRequeue(*tc.requeue)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := fence.Reactivate(ctx, kv, key, tc.token)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantReactivated {
				t.Errorf("Reactivate() = %t, want %t", got, tc.wantReactivated)
			}
			st, err := fence.Get(ctx, kv, key)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantRequeue, st.Requeue); diff != "" {
				t.Errorf("requeue state (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClusterQueueOutlivesItsAdmission: the ClusterQueue of the admission
// last started stays in the fence through its stop and a later admission's
// abandoned start, so that a job ending after its reservation went still
// names where it ran.
func TestClusterQueueOutlivesItsAdmission(t *testing.T) {
	ctx, _, kv := bucketOn(t)
	const key = "job.ns.j"
	if _, err := fence.BeginStart(ctx, kv, key, "a1", "cq-gpu"); err != nil {
		t.Fatal(err)
	}
	if err := fence.EndStart(ctx, kv, key, "a1"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Stop(ctx, kv, key, "a1", "p1"); err != nil {
		t.Fatal(err)
	}
	if _, err := fence.BeginStart(ctx, kv, key, "a2", ""); err != nil {
		t.Fatal(err)
	}
	if err := fence.AbortStart(ctx, kv, key, "a2"); err != nil {
		t.Fatal(err)
	}
	st, err := fence.Get(ctx, kv, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClusterQueue != "cq-gpu" || !st.EverStarted {
		t.Errorf("fence after stop and an abandoned start: %+v; want ClusterQueue cq-gpu, ever started", st)
	}
	if _, err := fence.BeginStart(ctx, kv, key, "a3", "cq-cpu"); err != nil {
		t.Fatal(err)
	}
	if st, _ := fence.Get(ctx, kv, key); st.ClusterQueue != "cq-cpu" {
		t.Errorf("fence after a start in another ClusterQueue: %+v; want cq-cpu", st)
	}
}

// countingKV counts the reads of a fence bucket.
type countingKV struct {
	fence.KV
	gets int
}

func (c *countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	c.gets++
	return c.KV.Get(ctx, key)
}

// TestRememberedMoves: through Remember, a move after this process's own
// write does not read the key; a memory another writer made stale never
// decides: its write is refused and the move reads, and a refusal or a
// decision not to write is taken again on a read.
func TestRememberedMoves(t *testing.T) {
	ctx, raw := bucket(t)
	t.Run("moves after the process's own writes read nothing", func(t *testing.T) {
		reads := &countingKV{KV: raw}
		kv := fence.Remember(reads)
		key := "job.ns.own"
		if _, err := fence.BeginStart(ctx, kv, key, t1, "cq"); err != nil {
			t.Fatal(err)
		}
		first, err := fence.EndStartFirst(ctx, kv, key, t1)
		if err != nil || !first {
			t.Fatalf("EndStartFirst = %v, %v; want the first start", first, err)
		}
		if err := fence.SetReady(ctx, kv, key, t1, true, readyAt); err != nil {
			t.Fatal(err)
		}
		if err := fence.Finish(ctx, kv, key, t1, "u1", nil); err != nil {
			t.Fatal(err)
		}
		if reads.gets != 1 {
			t.Errorf("four moves read the key %d times, want once (the first)", reads.gets)
		}
		// A finished fence is not kept: the next move reads.
		if _, err := fence.BeginStart(ctx, kv, key, t2, "cq"); err != nil {
			t.Fatal(err)
		}
		if reads.gets != 2 {
			t.Errorf("a move after the finish read %d times in all, want 2", reads.gets)
		}
	})
	t.Run("a start remembered as claimed is refused once another stopped it", func(t *testing.T) {
		kv := fence.Remember(raw)
		key := "job.ns.stopped"
		if _, err := fence.BeginStart(ctx, kv, key, t1, "cq"); err != nil {
			t.Fatal(err)
		}
		if err := fence.EndStart(ctx, raw, key, t1); err != nil {
			t.Fatal(err)
		}
		if err := fence.Stop(ctx, raw, key, t1, "p1"); err != nil {
			t.Fatal(err)
		}
		if _, err := fence.BeginStart(ctx, kv, key, t1, "cq"); !errors.Is(err, fence.ErrStopping) {
			t.Errorf("a retried start after the stop: %v, want ErrStopping", err)
		}
	})
	t.Run("an end of a start another aborted writes nothing", func(t *testing.T) {
		kv := fence.Remember(raw)
		key := "job.ns.aborted"
		if _, err := fence.BeginStart(ctx, kv, key, t1, "cq"); err != nil {
			t.Fatal(err)
		}
		if err := fence.AbortStart(ctx, raw, key, t1); err != nil {
			t.Fatal(err)
		}
		first, err := fence.EndStartFirst(ctx, kv, key, t1)
		if err != nil || first {
			t.Errorf("EndStartFirst after the abort = %v, %v; want nothing done", first, err)
		}
		got, err := fence.Get(ctx, raw, key)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(fence.State{Admission: t1, ClusterQueue: "cq"}, got); diff != "" {
			t.Errorf("state (-want +got):\n%s", diff)
		}
	})
}
