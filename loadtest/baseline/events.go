package baseline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
)

// StreamName is the stream Sluice publishes its events to.
const StreamName = "SLUICE"

// EventsReport is what Sluice's event stream said about the run.
type EventsReport struct {
	Read     bool   // the stream was read
	Err      string // why it could not be read (completely)
	Messages int    // messages read from the stream, of any subject
	LastSeq  uint64 // stream sequence read up to

	// ByType counts the events about this run's Jobs (their workload, or
	// the preemptor of a preemption request) by "entity.transition", e.g.
	// "workload.admitted"; Other counts the rest of the stream the same way,
	// except for the events about the run's probe Jobs, which ProbeEvents
	// counts.
	ByType, Other map[string]int
	ProbeEvents   int
	// Events about the run's Jobs (probes not counted): per Job, the mean,
	// least and most.
	JobsSeen             int
	PerJob               float64
	PerJobMin, PerJobMax int
	// Undisturbed counts the run's Jobs never preempted nor evicted, and
	// PerUndisturbedJob is their mean events per Job: what issue 9 bounds
	// ("when no preemption happens to it").
	Undisturbed       int
	PerUndisturbedJob float64
	// NoFinished counts the run's Jobs without a workload.finished event.
	NoFinished int
	// DuplicateIDs counts messages whose Nats-Msg-Id an earlier message
	// already had: re-sends of one event past the stream's de-duplication
	// window (after a service restarted), which a subscriber drops by id,
	// by type in DuplicatesByType. IDCollisions counts those whose data
	// differs from the first message's: two different events under one
	// id, which a subscriber would lose.
	DuplicateIDs     int
	DuplicatesByType map[string]int
	IDCollisions     int
	// Undecodable counts messages that are not valid Sluice events.
	Undecodable int
	// Order lists the order audit's findings (Audit), for the run's Jobs;
	// Tally what else the same walk counted.
	Order []OrderViolation
	Tally Tally
	// Stages is how long the run's Jobs spent between transitions, by the
	// events' times.
	Stages Stages
}

// runJob is a Job of the run as the event reader needs it.
type runJob struct {
	name  string
	probe bool
}

// readEvents reads the stream from its start with an ordered consumer until
// it has caught up with the stream's last sequence 2 s after every Job of
// the run had its finished event, or until settle has passed since the
// first catch up.
func readEvents(ctx context.Context, url string, jobs map[string]runJob, settle time.Duration) (rep EventsReport, err error) {
	rep.ByType, rep.Other = map[string]int{}, map[string]int{}
	nc, err := nats.Connect(url, nats.Name("sluice-baseline"), nats.Timeout(5*time.Second), nats.MaxReconnects(3))
	if err != nil {
		return rep, fmt.Errorf("connect to %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return rep, err
	}
	stream, err := js.Stream(ctx, StreamName)
	if err != nil {
		return rep, fmt.Errorf("stream %s: %w", StreamName, err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return rep, fmt.Errorf("ordered consumer on %s: %w", StreamName, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(2048))
	if err != nil {
		return rep, err
	}
	msgs := make(chan jetstream.Msg, 4096)
	quit := make(chan struct{})
	defer func() { close(quit); iter.Stop() }()
	go func() {
		defer close(msgs)
		for {
			m, err := iter.Next()
			if err != nil {
				return
			}
			select {
			case msgs <- m:
			case <-quit:
				return
			}
		}
	}()

	rep.Read = true
	ids := map[string][]byte{}
	rep.DuplicatesByType = map[string]int{}
	perJob := map[string]int{}
	finished := map[string]bool{}
	disturbed := map[string]bool{}
	var records, releases []Record
	handle := func(m jetstream.Msg) {
		rep.Messages++
		if md, err := m.Metadata(); err == nil {
			rep.LastSeq = md.Sequence.Stream
		}
		if id := m.Headers().Get(events.HeaderMsgID); id != "" {
			if first, dup := ids[id]; dup {
				rep.DuplicateIDs++
				rep.DuplicatesByType[m.Headers().Get(events.HeaderType)]++
				if !bytes.Equal(first, m.Data()) {
					rep.IDCollisions++
				}
			} else {
				ids[id] = m.Data()
			}
		}
		env, err := events.DecodeParts(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			rep.Undecodable++
			return
		}
		entity, transition := splitType(env.Type)
		key := entity + "." + transition
		var refs struct {
			Workload, Preemptor *events.WorkloadRef
			Admission           string
		}
		_ = json.Unmarshal(env.Data, &refs)
		ref := refs.Workload
		if ref == nil {
			ref = refs.Preemptor
		}
		var j runJob
		ok := false
		if ref != nil {
			j, ok = jobs[ref.UID]
		}
		if !ok {
			rep.Other[key]++
			return
		}
		if j.probe {
			rep.ProbeEvents++
		} else {
			rep.ByType[key]++
			perJob[ref.UID]++
		}
		if key == "quota.released" {
			releases = append(releases, Record{Workload: ref.Kind + "/" + ref.Namespace + "/" + ref.Name, Transition: transition, Time: env.Time})
		}
		if entity == "workload" {
			records = append(records, Record{Workload: ref.Kind + "/" + ref.Namespace + "/" + ref.Name, Transition: transition, Time: env.Time,
				Admission: refs.Admission})
			if transition == "finished" {
				finished[ref.UID] = true
			}
			if transition == "preempted" || transition == "evicted" {
				disturbed[ref.UID] = true
			}
		}
	}
	allFinished := func() bool {
		for uid, j := range jobs {
			if !j.probe && !finished[uid] {
				return false
			}
		}
		return true
	}

	var deadline time.Time
	tail := false
	for {
		info, err := stream.Info(ctx)
		if err != nil {
			return rep, fmt.Errorf("stream info: %w", err)
		}
		target := info.State.LastSeq
		for rep.LastSeq < target {
			select {
			case m, ok := <-msgs:
				if !ok {
					return finish(&rep, perJob, jobs, finished, disturbed, records, releases), errors.New("the ordered consumer stopped")
				}
				handle(m)
			case <-time.After(10 * time.Second):
				return finish(&rep, perJob, jobs, finished, disturbed, records, releases), fmt.Errorf("no message for 10s at sequence %d of %d", rep.LastSeq, target)
			case <-ctx.Done():
				return finish(&rep, perJob, jobs, finished, disturbed, records, releases), ctx.Err()
			}
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(settle)
		}
		if !tail && allFinished() {
			// Catch up once more a little later, for what follows a
			// finish (quota.released).
			tail = true
			deadline = time.Now().Add(2 * time.Second)
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return finish(&rep, perJob, jobs, finished, disturbed, records, releases), ctx.Err()
		}
	}
	return finish(&rep, perJob, jobs, finished, disturbed, records, releases), nil
}

func finish(rep *EventsReport, perJob map[string]int, jobs map[string]runJob, finished, disturbed map[string]bool, records, releases []Record) EventsReport {
	n, total, calm := 0, 0, 0
	rep.PerJobMin = -1
	for uid, j := range jobs {
		if j.probe {
			continue
		}
		n++
		c := perJob[uid]
		total += c
		if c > 0 {
			rep.JobsSeen++
		}
		if rep.PerJobMin < 0 || c < rep.PerJobMin {
			rep.PerJobMin = c
		}
		rep.PerJobMax = max(rep.PerJobMax, c)
		if !finished[uid] {
			rep.NoFinished++
		}
		if !disturbed[uid] {
			rep.Undisturbed++
			calm += c
		}
	}
	if n > 0 {
		rep.PerJob = float64(total) / float64(n)
	}
	if rep.Undisturbed > 0 {
		rep.PerUndisturbedJob = float64(calm) / float64(rep.Undisturbed)
	}
	rep.PerJobMin = max(rep.PerJobMin, 0)
	rep.Order = Audit(records)
	rep.Stages = StagesOf(records, releases)
	rep.Tally = TallyOf(records)
	return *rep
}

// splitType splits "dev.sluice.workload.v1.admitted" into "workload" and
// "admitted".
func splitType(t string) (entity, transition string) {
	parts := strings.Split(strings.TrimPrefix(t, events.TypePrefix), ".")
	if len(parts) != 3 {
		return t, ""
	}
	return parts[0], parts[2]
}
