// Package workloads names the workload records that job integrations keep
// in the sluice-workloads KV bucket: one key per job, holding the submitted
// workload (pod sets, queue, priority) as JSON. The record exists from
// submission until the job finishes or is deleted; it is what lets every
// service rebuild its state after a restart.
package workloads

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
)

// Bucket is the KV bucket of workload records.
const Bucket = "sluice-workloads"

// Name names a workload by its kind, namespace and name (one name holds
// one workload at a time; its UID tells them apart). It is spelled two
// ways: in the workloads bucket, the fences and the stream's subjects as
// kind.namespace.name (KV), and in the admission engine and the ledger as
// kind/namespace/name (Engine). Kinds and namespaces hold neither a dot
// nor a slash, so the name is everything after the second separator.
type Name struct {
	Kind, Namespace, Name string
}

// NameOf is the name of the workload w refers to.
func NameOf(w events.WorkloadRef) Name {
	return Name{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name}
}

// KV is the name as a key of the workloads bucket: kind.namespace.name.
func (n Name) KV() string { return n.Kind + "." + n.Namespace + "." + n.Name }

// Engine is the name as the engine's key: kind/namespace/name.
func (n Name) Engine() string { return n.Kind + "/" + n.Namespace + "/" + n.Name }

// Object is namespace/name: the key of the workload's object (or group)
// in its kind's informer and work queue.
func (n Name) Object() string { return n.Namespace + "/" + n.Name }

// Ref is the reference to the workload of this name with the given UID.
func (n Name) Ref(uid string) events.WorkloadRef {
	return events.WorkloadRef{Kind: n.Kind, Namespace: n.Namespace, Name: n.Name, UID: uid}
}

// ParseKV reads a key of the workloads bucket; ok is false for a key
// without all three parts.
func ParseKV(key string) (Name, bool) { return parse(key, ".") }

// ParseEngine reads an engine key; ok is false for a key without all three
// parts.
func ParseEngine(key string) (Name, bool) { return parse(key, "/") }

func parse(key, sep string) (Name, bool) {
	parts := strings.SplitN(key, sep, 3)
	if len(parts) != 3 {
		return Name{}, false
	}
	return Name{Kind: parts[0], Namespace: parts[1], Name: parts[2]}, true
}

// Key is the KV key of a workload: NameOf(w).KV().
func Key(w events.WorkloadRef) string { return NameOf(w).KV() }

// EngineKey is the engine's key for a workload: NameOf(w).Engine().
func EngineKey(w events.WorkloadRef) string { return NameOf(w).Engine() }

// EngineKeyFromKV turns a KV key into the engine's key; a key that is not
// a workload's is returned as it is.
func EngineKeyFromKV(key string) string {
	if n, ok := ParseKV(key); ok {
		return n.Engine()
	}
	return key
}

// KVKeyFromEngine turns the engine's key into a KV key; a key that is not
// a workload's is returned as it is.
func KVKeyFromEngine(key string) string {
	if n, ok := ParseEngine(key); ok {
		return n.KV()
	}
	return key
}

// AdmittedID is the event id of the announcement of one admission
// (dev.sluice.workload.v1.admitted), named by ledger.Reservation.Admission.
// The admission service publishes under it, and an integration looks for
// it before it starts the job, so a start never precedes its admission.
func AdmittedID(w events.WorkloadRef, admission string) string {
	return events.ID(events.TypeWorkloadAdmittedV1, w.UID, admission)
}

// LastMsgReader reads the last message stored on a subject of the event
// stream (a jetstream.Stream).
type LastMsgReader interface {
	GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error)
}

// Latest is the last event stored about a workload.
type Latest struct {
	// Seq is its stream sequence; 0 when nothing about the workload is
	// stored.
	Seq uint64
	// Type and ID are its CloudEvents type and id.
	Type, ID string
	// UID and Admission are the workload UID and the admission it names,
	// where it names them.
	UID, Admission string
	// Reason is a pending event's reason (with its UID).
	Reason string
}

// Ended reports whether the event is the end (finished or deleted) of the
// job with the given UID (of any job when uid is empty).
func (l Latest) Ended(uid string) bool {
	switch l.Type {
	case events.TypeWorkloadFinishedV1, events.TypeWorkloadDeletedV1:
		return uid == "" || l.UID == uid
	}
	return false
}

// PendingFor returns the reason of a pending event about the workload with
// the given UID, and whether the event is one.
func (l Latest) PendingFor(uid string) (string, bool) {
	if l.Type != events.TypeWorkloadPendingV1 || l.UID != uid {
		return "", false
	}
	return l.Reason, true
}

// Stopped reports whether the event is the stop (preempted or evicted) of
// the given admission.
func (l Latest) Stopped(admission string) bool {
	switch l.Type {
	case events.TypeWorkloadPreemptedV1, events.TypeWorkloadEvictedV1:
		return l.Admission == admission
	}
	return false
}

// Last reads the last event stored about w, of any type. An announcement
// about w published expecting its sequence on WorkloadFilter(w) is refused
// if anything about w came since, so a publisher that looks at it first
// never announces after an end or a stop it did not see.
func Last(ctx context.Context, s LastMsgReader, w events.WorkloadRef) (Latest, error) {
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
	msg, err := s.GetLastMsgForSubject(ctx, events.WorkloadFilter(w))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Latest{}, nil
	}
	if err != nil {
		return Latest{}, fmt.Errorf("read the last event about %s: %w", EngineKey(w), err)
	}
	l := Latest{Seq: msg.Sequence, Type: msg.Header.Get(events.HeaderType), ID: msg.Header.Get(jetstream.MsgIDHeader)}
	switch l.Type {
	case events.TypeWorkloadFinishedV1, events.TypeWorkloadDeletedV1, events.TypeWorkloadPreemptedV1, events.TypeWorkloadEvictedV1, events.TypeWorkloadPendingV1:
		var ev struct {
			Workload  events.WorkloadRef `json:"workload"`
			Admission string             `json:"admission"`
			Reason    string             `json:"reason"`
		}
		if json.Unmarshal(msg.Data, &ev) == nil {
			l.UID, l.Admission, l.Reason = ev.Workload.UID, ev.Admission, ev.Reason
		}
	}
	return l, nil
}

// LastEvent reads the last event stored about w (Last): its stream
// sequence (0: none yet) and whether it is the end of w's job.
func LastEvent(ctx context.Context, s LastMsgReader, w events.WorkloadRef) (seq uint64, ended bool, err error) {
	l, err := Last(ctx, s, w)
	if err != nil {
		return 0, false, err
	}
	return l.Seq, l.Ended(w.UID), nil
}

// ReservedID is the event id of the announcement of a reservation that
// waits for admission checks (dev.sluice.workload.v1.reserved).
func ReservedID(w events.WorkloadRef, admission string) string {
	return events.ID(events.TypeWorkloadReservedV1, w.UID, admission)
}

// Reserved reports whether the admission is announced, as admitted or as
// reserved (waiting for its admission checks): either is what a stop of
// it must follow on the stream.
func Reserved(ctx context.Context, s LastMsgReader, w events.WorkloadRef, admission string) (bool, error) {
	ok, err := Announced(ctx, s, w, admission)
	if err != nil || ok {
		return ok, err
	}
	return lastIs(ctx, s, events.WorkloadSubject(events.TypeWorkloadReservedV1, w), ReservedID(w, admission))
}

// lastIs reports whether the last message on subject has the given id.
func lastIs(ctx context.Context, s LastMsgReader, subject, id string) (bool, error) {
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
	msg, err := s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the last event on %s: %w", subject, err)
	}
	return msg.Header.Get(jetstream.MsgIDHeader) == id, nil
}

// Announced reports whether the admission is the last one announced for
// the workload: its admitted event is the last stored on the workload's
// admitted subject. Whoever acts on an admission read from the ledger (to
// start it, to preempt it, to evict it) asks first, so that on the stream
// nothing about an admission comes before its admitted event, even when
// the replica that reserved it is slow to announce it or stopped before.
func Announced(ctx context.Context, s LastMsgReader, w events.WorkloadRef, admission string) (bool, error) {
	return lastIs(ctx, s, events.WorkloadSubject(events.TypeWorkloadAdmittedV1, w), AdmittedID(w, admission))
}

// ExpectingPublisher publishes an event only while the last message on a
// subject filter is the one look saw (bus.JetStreamPublisher).
type ExpectingPublisher interface {
	PublishExpecting(ctx context.Context, ev events.Event, id, filter string, look func(context.Context) (uint64, bool, error)) (bool, error)
}

// AnnounceUnlessEnded publishes ev (with id) about w, unless w's job
// ended first. It is how a stop (preempted or evicted) is announced, and
// an admission a stop must follow. The stop's fence refuses a stop of an
// admission whose job ended, but the end can come between the fence and
// the announcement (the integration records the end in the fence over a
// stop it has not seen announced, then announces the end): so ev is
// published expecting the last event about w to be the one read, and
// dropped once that is the end. An end stored after ev is fine: ev was
// decided first. A publisher that cannot expect (or no stream to read)
// publishes ev as it is.
func AnnounceUnlessEnded(ctx context.Context, p events.Publisher, s LastMsgReader, ev events.Event, id string, w events.WorkloadRef) error {
	ep, expecting := p.(ExpectingPublisher)
	if !expecting || s == nil {
		return p.Publish(ctx, ev, id)
	}
	_, err := ep.PublishExpecting(ctx, ev, id, events.WorkloadFilter(w), func(ctx context.Context) (uint64, bool, error) {
		last, err := Last(ctx, s, w)
		switch {
		case err != nil:
			return 0, false, err
		case last.ID == id, last.Ended(w.UID):
			return 0, false, nil // announced already, or too late
		}
		return last.Seq, true, nil
	})
	return err
}
