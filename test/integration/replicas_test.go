package integration

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// TestTwoAdmissionReplicasNeverOverAdmit runs two admission replicas on one
// cohort tree while ~300 workloads arrive at once and random reservations
// are removed (finished jobs) by compare-and-set. Every ledger revision
// must stay within the configured quota, no workload may be reserved
// twice, and every workload must be admitted exactly once.
func TestTwoAdmissionReplicasNeverOverAdmit(t *testing.T) {
	const n = 300
	e := newEnv(t, 50*time.Second)
	e.configure(nil)
	ws := generate(rand.New(rand.NewPCG(1, 2)), n, false)
	chk := newChecker(ws)
	e.followLedger("checker", chk.observe)

	_, pubA := e.startAdmission("admission-a")
	_, pubB := e.startAdmission("admission-b")

	_, sjs := e.connect("submitter")
	submitted := make(chan error, 1)
	go func() { submitted <- e.submit(sjs, ws, nil, 0, nil) }()

	// The finisher: pick a random reservation, delete its record as the
	// job integration does, and remove the reservation by compare-and-set
	// as quota accounting does.
	_, fjs := e.connect("finisher")
	led, err := bus.OpenKV(e.ctx, fjs, ledger.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	wl, err := bus.OpenKV(e.ctx, fjs, workloads.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	done := map[string]bool{}
	var removals int
	// finishOne finishes a random reserved workload; it reports the
	// number of reservations left before it acted.
	finishOne := func() (int, error) {
		v, err := ledger.Read(e.ctx, led)
		if err != nil || len(v.Reservations) == 0 {
			return 0, err
		}
		held := len(v.Reservations)
		keys := make([]string, 0, held)
		for k := range v.Reservations {
			// A job ends only after it started, and it starts only once
			// its admission is announced.
			if pubA.has(k) || pubB.has(k) {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			return held, nil
		}
		sort.Strings(keys)
		k := keys[rng.IntN(len(keys))]
		h := v.Reservations[k]
		chk.markFinished(k, h.Revision)
		done[k] = true
		rec, _ := ws.get(k)
		if err := wl.Delete(e.ctx, workloads.Key(rec.Workload)); err != nil {
			return 0, fmt.Errorf("delete record %s: %w", k, err)
		}
		_, released, err := ledger.NewWriter(fjs).ReleaseIf(e.ctx, led, k, "finisher "+k, func(r ledger.Reservation) bool { return r.Admission() == h.Admission() })
		if err != nil {
			return 0, err
		}
		if !released {
			now, ok, err := ledger.Get(e.ctx, led, k)
			return 0, fmt.Errorf("reservation of %s (admission %s) vanished while the finisher was removing it: now %v %s %v", k, h.Admission(), ok, now.Admission(), err)
		}
		removals++
		return held, nil
	}
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for time.Now().Before(deadline) {
		held, err := finishOne()
		if err != nil {
			t.Fatalf("finisher: %v", err)
		}
		if held == 0 && len(done) == n {
			break
		}
		if held > 0 {
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond) // pacing of finishes
		} else {
			time.Sleep(time.Millisecond) // nothing reserved right now
		}
	}
	if err := <-submitted; err != nil {
		t.Fatalf("submitter: %v", err)
	}
	elapsed := time.Since(start)

	// Let the checker catch up with the last revision.
	v, err := e.readLedger(fjs)
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return chk.seen() >= v.Last }) {
		t.Errorf("checker saw revision %d, ledger is at %d", chk.seen(), v.Last)
	}
	chk.report(t)
	if early := e.exitedEarly(); len(early) > 0 {
		t.Errorf("services exited on their own: %s", strings.Join(early, "; "))
	}

	t.Logf("%d of %d workloads admitted and finished in %s (%d reservations removed); admitted events published: replica a %d, replica b %d",
		len(done), n, elapsed.Round(time.Millisecond), removals, pubA.count(), pubB.count())
	if pubA.count() == 0 || pubB.count() == 0 {
		t.Logf("note: one replica won every race (a %d, b %d)", pubA.count(), pubB.count())
	}

	evs, err := e.readEvents(fjs, events.SubjectFilter("workload", "", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	admitted := map[string]int{}
	lastPending := map[string]string{}
	for _, env := range evs {
		switch env.Type {
		case events.TypeWorkloadAdmittedV1:
			var ev events.WorkloadAdmittedV1
			if err := env.As(&ev); err != nil {
				t.Fatal(err)
			}
			admitted[workloads.EngineKey(ev.Workload)]++
		case events.TypeWorkloadPendingV1:
			var ev events.WorkloadPendingV1
			if err := env.As(&ev); err != nil {
				t.Fatal(err)
			}
			lastPending[workloads.EngineKey(ev.Workload)] = ev.Reason
		}
	}
	var notAdmitted, twice []string
	for _, k := range ws.keys {
		switch r := chk.times(k); {
		case r > 1:
			twice = append(twice, fmt.Sprintf("%s reserved %d times", k, r))
		case r == 0 && chk.gapCount() == 0:
			// With a gap, the checker may have missed a short-lived
			// reservation (one revision per key: its release replaced it
			// before the watch read it); the admitted events say then.
			twice = append(twice, fmt.Sprintf("%s reserved 0 times", k))
		}
		switch a := admitted[k]; {
		case a == 0:
			notAdmitted = append(notAdmitted, fmt.Sprintf("%s (last pending reason: %q)", k, lastPending[k]))
		case a > 1:
			twice = append(twice, fmt.Sprintf("%s announced admitted %d times", k, a))
		}
	}
	if len(twice) > 0 {
		t.Errorf("workloads admitted more than once (%d): %s", len(twice), strings.Join(first(twice, 20), "; "))
	}
	if len(notAdmitted) > 0 {
		t.Errorf("workloads never admitted within the deadline (%d): %s", len(notAdmitted), strings.Join(first(notAdmitted, 20), "; "))
	}
	if got, err := e.readLedger(fjs); err != nil || len(got.Reservations) != 0 {
		t.Errorf("ledger after every workload finished: %v, %v; want empty", got.Workloads(), err)
	}
	checkNoDeadLetters(t, e, fjs)
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}

// checkNoDeadLetters: no consumer gave up on an event.
func checkNoDeadLetters(t *testing.T, e *env, js jetstream.JetStream) {
	t.Helper()
	s, err := js.Stream(e.ctx, "SLUICE_DLQ")
	if err != nil {
		t.Errorf("DLQ stream: %v", err)
		return
	}
	info, err := s.Info(e.ctx)
	if err != nil {
		t.Errorf("DLQ stream: %v", err)
		return
	}
	if info.State.Msgs == 0 {
		return
	}
	var lines []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && len(lines) < 10; seq++ {
		m, err := s.GetMsg(e.ctx, seq)
		if err != nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s from %s: %s (%s)", m.Header.Get("Sluice-Dlq-Consumer"), m.Header.Get("Sluice-Dlq-Subject"),
			m.Header.Get("Sluice-Dlq-Reason"), m.Header.Get("Sluice-Dlq-Error")))
	}
	t.Errorf("%d dead letters: %s", info.State.Msgs, strings.Join(lines, "; "))
}
