package multicluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Stream is the manager's JetStream stream that carries offers to the
// workers and their reports back.
const Stream = "SLUICE_MULTICLUSTER"

const subjectPrefix = "sluice.multicluster.v1."

// MaxAge bounds how long a message about a workload is kept: a report or
// an offer older than this is about a workload long gone.
const MaxAge = 7 * 24 * time.Hour

// Messages to a worker.
const (
	// Offer: create the job object (if absent) and report on it.
	Offer = "offer"
	// Withdraw: delete the copy.
	Withdraw = "withdraw"
	// Run: the worker won; its copy may start (created if absent, as
	// from an offer).
	Run = "run"
)

// States a worker reports of its copy.
const (
	// Queued: created, waiting for the worker's admission.
	Queued = "Queued"
	// Admitted: the worker admitted it: its quota is reserved there, and
	// the copy is held until the manager says Run (or runs, after that).
	Admitted = "Admitted"
	// Finished: it ended; Status holds the final status.
	Finished = "Finished"
	// Gone: withdrawn, or the copy could not be created (Message says
	// why).
	Gone = "Gone"
	// Stopped: the copy ran in the worker and was stopped there
	// (preempted, evicted): the manager takes the workload back and may
	// dispatch it elsewhere.
	Stopped = "Stopped"
)

// heartbeatToken is the last token of a worker's heartbeat subject (a
// UID never is).
const heartbeatToken = "heartbeat"

// Errors.
var (
	// ErrBadMessage: a message that cannot be read; it is parked.
	// It is poison to the bus (bus.IsPoison): the message is parked.
	ErrBadMessage = fmt.Errorf("multicluster: bad message (%w)", bus.ErrPoison)
	// ErrConfig: the service cannot be built as asked.
	ErrConfig = errors.New("multicluster: invalid configuration")
)

// ToWorker is the subject of messages to a worker about one workload.
func ToWorker(worker, uid string) string { return subjectPrefix + worker + ".to." + uid }

// FromWorker is the subject of a worker's reports about one workload.
func FromWorker(worker, uid string) string { return subjectPrefix + worker + ".from." + uid }

// Heartbeat is the subject of a worker's heartbeats.
func Heartbeat(worker string) string { return FromWorker(worker, heartbeatToken) }

// WorkerDurable is the name of a worker's consumer of its offers.
func WorkerDurable(worker string) string { return "worker-" + worker }

// ReportsDurable is the manager's consumer of every worker's reports.
const ReportsDurable = "multicluster-reports"

// WorkerFilter is the subject filter of a worker's offers.
func WorkerFilter(worker string) string { return subjectPrefix + worker + ".to.>" }

// ReportsFilter is the subject filter of all workers' reports.
const ReportsFilter = subjectPrefix + "*.from.>"

// splitFrom returns the worker and the last token of a report subject.
func splitFrom(subject string) (worker, uid string, ok bool) {
	rest, found := strings.CutPrefix(subject, subjectPrefix)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || parts[1] != "from" || parts[0] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[0], parts[2], true
}

// Message is what the manager tells a worker about one workload.
type Message struct {
	Type string `json:"type"`
	// Workload is the manager's workload (its job there, and its UID).
	Workload events.WorkloadRef `json:"workload"`
	// Admission names the manager's reservation the offer is for.
	Admission string `json:"admission"`
	// Object (Offer, Run) is the job object to create: its apiVersion, kind,
	// name, namespace, labels, annotations and spec.
	Object json.RawMessage `json:"object,omitempty"`
	// Members (Offer, Run), in place of Object for a pod group (a
	// workload whose UID starts with jobframework.GroupUIDPrefix and
	// whose name is the group's): each member to create, as Object.
	Members []json.RawMessage `json:"members,omitempty"`
	// Reason (Withdraw) says why, for the worker's log.
	Reason string `json:"reason,omitempty"`
	// LostAfter (Offer, Run) is the config's workerLostTimeout, as a Go
	// duration: a worker the manager does not hear from for that long is
	// given up and its workloads dispatched again, so a worker that
	// cannot reach the manager removes its copy before then (self-fence).
	// Empty: no fence.
	LostAfter string `json:"lostAfter,omitempty"`
}

// Validate checks a message.
func (m Message) Validate() error {
	if m.Type != Offer && m.Type != Withdraw && m.Type != Run {
		return fmt.Errorf("%w: type %q: must be %s, %s or %s", ErrBadMessage, m.Type, Offer, Run, Withdraw)
	}
	if err := m.Workload.Validate(); err != nil {
		return fmt.Errorf("%w: workload: %w", ErrBadMessage, err)
	}
	if m.Workload.UID == "" {
		return fmt.Errorf("%w: workload %s: no uid", ErrBadMessage, m.Workload)
	}
	if m.Type != Withdraw && (m.Admission == "" || len(m.Object) == 0 && len(m.Members) == 0) {
		return fmt.Errorf("%w: %s of %s: an admission and an object (or a group's members) are required", ErrBadMessage, m.Type, m.Workload)
	}
	if len(m.Members) > 0 && (len(m.Object) > 0 || !isGroup(m.Workload)) {
		return fmt.Errorf("%w: %s of %s: members are a pod group's, in place of an object", ErrBadMessage, m.Type, m.Workload)
	}
	if m.LostAfter != "" {
		if d, err := time.ParseDuration(m.LostAfter); err != nil || d <= 0 {
			return fmt.Errorf("%w: lostAfter %q of %s: not a positive duration", ErrBadMessage, m.LostAfter, m.Workload)
		}
	}
	return nil
}

// Report is what a worker tells the manager about its copy of a
// workload.
type Report struct {
	// Workload is the manager's workload, as offered.
	Workload  events.WorkloadRef `json:"workload"`
	Admission string             `json:"admission"`
	State     string             `json:"state"`
	// Status is the copy's status, to mirror on the manager's object.
	Status json.RawMessage `json:"status,omitempty"`
	// Members is, for a pod group, each member copy's status by name.
	Members map[string]json.RawMessage `json:"members,omitempty"`
	Message string                     `json:"message,omitempty"`
}

// Validate checks a report.
func (r Report) Validate() error {
	switch r.State {
	case Queued, Admitted, Finished, Gone, Stopped:
	default:
		return fmt.Errorf("%w: state %q: must be %s, %s, %s, %s or %s", ErrBadMessage, r.State, Queued, Admitted, Finished, Gone, Stopped)
	}
	if err := r.Workload.Validate(); err != nil {
		return fmt.Errorf("%w: workload: %w", ErrBadMessage, err)
	}
	if r.Workload.UID == "" {
		return fmt.Errorf("%w: workload %s: no uid", ErrBadMessage, r.Workload)
	}
	return nil
}

// isGroup reports whether w is a pod group's workload: its members travel
// together.
func isGroup(w events.WorkloadRef) bool {
	return strings.HasPrefix(w.UID, jobframework.GroupUIDPrefix)
}

// Setup creates or updates the stream and the dispatcher's bucket in the
// manager's JetStream.
func Setup(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if err := SetupStream(ctx, js, replicas); err != nil {
		return err
	}
	// One revision per key and per-message TTLs: a forgotten dispatch's
	// delete marker expires (bus.Remove), so the bucket does not keep a
	// key for every workload ever dispatched.
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: Bucket,
		Description: "Sluice multicluster: workloads offered to worker clusters", Storage: jetstream.FileStorage, Replicas: max(replicas, 1),
		History: 1, LimitMarkerTTL: bus.LimitMarkerTTL}); err != nil {
		return fmt.Errorf("multicluster: bucket %s: %w", Bucket, err)
	}
	return bus.PurgeLegacyMarkers(ctx, js, Bucket)
}

// SetupStream creates or updates the stream in the manager's JetStream.
func SetupStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas < 1 {
		replicas = 1
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        Stream,
		Description: "Sluice multicluster: offers to worker clusters and their reports (the last message per subject)",
		Subjects:    []string{subjectPrefix + ">"},
		// A message replaces the one before it on its subject: what a
		// worker or the manager reads is what holds now.
		MaxMsgsPerSubject: 1,
		MaxAge:            MaxAge,
		Storage:           jetstream.FileStorage,
		Replicas:          replicas,
		Discard:           jetstream.DiscardOld,
	})
	if err != nil {
		return fmt.Errorf("multicluster: stream %s: %w", Stream, err)
	}
	return nil
}

// InboxPrefix is the inbox prefix of a worker's connection: the replies
// it may receive through its leaf node are only its own.
func InboxPrefix(worker string) string { return "_INBOX_" + worker }

// WorkerPermissions are the subjects a worker's leaf node may send into
// the manager's NATS (publish) and receive from it (subscribe): its own
// consumer of its own offers, and its own reports.
func WorkerPermissions(worker, managerDomain string) (publish, subscribe []string) {
	api := "$JS.API."
	if managerDomain != "" {
		api = "$JS." + managerDomain + ".API."
	}
	durable := Stream + "." + WorkerDurable(worker)
	publish = []string{
		FromWorker(worker, ">"),
		api + "CONSUMER.INFO." + durable,
		api + "CONSUMER.MSG.NEXT." + durable,
		"$JS.ACK." + durable + ".>",
	}
	return publish, []string{InboxPrefix(worker) + ".>"}
}
