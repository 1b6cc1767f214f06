// Package natsperm says which NATS subjects each Sluice service may publish
// and subscribe to: its own events, the JetStream API calls on the streams
// and buckets it uses, and replies on its own inbox prefix. A NATS server
// configured with these permissions (one user per service; see
// ServerConfig) refuses a service that publishes outside its part.
//
// The table is the one place these rules live: the NATS configuration in
// docs/deploy.md and the chart's example are rendered from it, and a test
// runs the services against a real server that enforces it.
package natsperm

import (
	"fmt"
	"strconv"

	"slices"
	"sort"
	"strings"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/lqusage"
	"github.com/sluice-dev/sluice/internal/natsconn"
	"github.com/sluice-dev/sluice/internal/nodecap"
	"github.com/sluice-dev/sluice/internal/workloads"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/services/multicluster"
	"github.com/sluice-dev/sluice/services/provisioning"
)

// Permissions of one NATS user. PublishDeny wins over Publish.
type Permissions struct {
	Publish     []string
	PublishDeny []string
	Subscribe   []string
}

// rules accumulates subjects without duplicates.
type rules struct{ pub, deny, sub map[string]bool }

func newRules(client string) *rules {
	r := &rules{pub: map[string]bool{}, deny: map[string]bool{}, sub: map[string]bool{}}
	r.sub[natsconn.InboxPrefix(client)+".>"] = true
	// Opening a stream or bucket asks for its info; the account's limits
	// are read once per JetStream context.
	r.pub["$JS.API.INFO"] = true
	return r
}

func (r *rules) publish(subjects ...string) *rules {
	for _, s := range subjects {
		r.pub[s] = true
	}
	return r
}

// readStream: reads of a stream's info and of its messages by direct
// gets: the last one of a subject, or pages of them (bus.Page). No user
// but setup may create a consumer: whoever may can have stored messages
// delivered to any subject (bus.Page).
func (r *rules) readStream(stream string) *rules {
	return r.publish("$JS.API.STREAM.INFO."+stream, "$JS.API.STREAM.MSG.GET."+stream, "$JS.API.DIRECT.GET."+stream, "$JS.API.DIRECT.GET."+stream+".>")
}

// consume: pulls and acks of a durable pull consumer `sluice setup` made;
// dead letters go to sluice.dlq.<durable>.
func (r *rules) consume(stream, durable string) *rules {
	return r.publish(
		"$JS.API.CONSUMER.INFO."+stream+"."+durable, "$JS.API.CONSUMER.MSG.NEXT."+stream+"."+durable,
		"$JS.ACK."+stream+"."+durable+".>", "sluice.dlq."+durable,
	)
}

// kvRead: gets, pages and watches of a bucket; a watch follows the copies
// the bucket's stream republishes (bus.WatchKV).
func (r *rules) kvRead(bucket string) *rules {
	r.readStream("KV_" + bucket)
	r.sub[bus.WatchSubject(bucket)+".>"] = true
	return r
}

// kvWrite: puts, compare-and-set updates and deletes (no purge: only the
// setup user purges, bus.PurgeLegacyMarkers).
func (r *rules) kvWrite(bucket string) *rules {
	r.kvRead(bucket)
	return r.publish("$KV." + bucket + ".>")
}

func (r *rules) done() Permissions {
	p := Permissions{}
	for s := range r.pub {
		p.Publish = append(p.Publish, s)
	}
	for s := range r.sub {
		p.Subscribe = append(p.Subscribe, s)
	}
	for s := range r.deny {
		p.PublishDeny = append(p.PublishDeny, s)
	}
	sort.Strings(p.PublishDeny)
	sort.Strings(p.Publish)
	sort.Strings(p.Subscribe)
	return p
}

// event subjects by producer (docs/events.md's table).
func workloadEvents(types ...string) []string {
	var out []string
	for _, t := range types {
		out = append(out, "sluice.workload.v1."+t+".>")
	}
	return out
}

// Services names the users, one per service, plus "setup" (creates the
// streams and buckets: `sluice setup`) and "reader" (a read-only subscriber
// for external tools: `sluice events tail`). Each admission check
// controller Sluice ships is a service of its own (provisioning,
// multicluster); one of your own gets a user by WithCheckControllers.
var Services = []string{"admission", "integration", "preemption", "quota", "watcher", "provisioning", "multicluster", "setup", "reader"}

// CheckControllerUser names the user of an admission check controller of
// your own (WithCheckControllers): its consumer's name, checks.Durable.
// It connects as the client "sluice-<user>", whose inbox prefix its
// permissions allow (natsconn.Config.Options).
func CheckControllerUser(controllerName string) string { return checks.Durable(controllerName) }

// Users names every user the options give: Services, then one per check
// controller of your own.
func Users(opts ...Option) []string {
	var set settings
	for _, o := range opts {
		o(&set)
	}
	out := slices.Clone(Services)
	for _, c := range slices.Compact(slices.Sorted(slices.Values(set.checkControllers))) {
		out = append(out, CheckControllerUser(c))
	}
	return out
}

// Option widens the users' permissions.
type Option func(*settings)

type settings struct {
	checkControllers []string
	workers          []string
	managerDomain    string
	// agent is the worker cluster whose agent gets a user ("worker") on
	// the worker's own NATS.
	agent, agentDomain string
	// hashes are bcrypt hashes of the users' passwords, by user; a user
	// without one reads its password from the environment.
	hashes map[string]string
}

// WithPasswordHashes writes each user's password into the configuration
// as its bcrypt hash, which nats-server checks at login, instead of the
// environment variable: the server never holds the passwords themselves.
func WithPasswordHashes(byUser map[string]string) Option {
	return func(s *settings) { s.hashes = byUser }
}

// LoginUsers names every user ServerConfig writes, in its order: Users,
// the worker agent's, then each worker cluster's.
func LoginUsers(opts ...Option) []string {
	var set settings
	for _, o := range opts {
		o(&set)
	}
	out := Users(opts...)
	if set.agent != "" {
		out = append(out, "worker")
	}
	return append(out, set.workers...)
}

// WithCheckControllers adds a user per admission check controller of your
// own (CheckControllerUser), allowed to consume reservations with its own
// durable consumer (checks.Durable) and answer. NATS subject wildcards
// match whole tokens only, so each consumer is named.
func WithCheckControllers(names ...string) Option {
	return func(s *settings) { s.checkControllers = append(s.checkControllers, names...) }
}

// WithWorkers adds a user per worker cluster, the user its NATS server
// joins the manager's as a leaf node with: it may only read its own
// offers and write its own reports (multicluster.WorkerPermissions).
// managerDomain is the manager's JetStream domain.
func WithWorkers(managerDomain string, names ...string) Option {
	return func(s *settings) {
		s.managerDomain = managerDomain
		s.workers = append(s.workers, names...)
	}
}

// WithWorkerAgent adds the user "worker" for the agent of the worker
// cluster named name, on that cluster's own NATS: the same subjects as
// the worker's leaf node user on the manager's (its requests cross the
// leaf node), reaching the manager's JetStream in managerDomain.
func WithWorkerAgent(managerDomain, name string) Option {
	return func(s *settings) { s.agent, s.agentDomain = name, managerDomain }
}

// BuiltinCheckControllers are the admission check controllers Sluice
// ships; the checks user may always run them.
var BuiltinCheckControllers = []string{v1beta1.MultiClusterController, v1beta1.ProvisioningRequestController}

// For returns the permissions of a service's user.
func For(service string, opts ...Option) (Permissions, error) {
	var set settings
	for _, o := range opts {
		o(&set)
	}
	r := newRules("sluice-" + service)
	switch service {
	case "admission":
		r.publish(workloadEvents("pending", "reserved", "admitted", "evicted", "moved", "resized")...)
		r.publish("sluice.preemption.v1.requested.>")
		// Admission checks' answers, recorded in the ledger.
		r.consume(bus.StreamEvents, "admission-checks")
		r.readStream(bus.StreamEvents)
		r.kvRead(configstore.Bucket).kvRead(workloads.Bucket).kvWrite(ledger.Bucket).kvWrite(fence.Bucket)
		// The replicas share the cohort trees by leases.
		r.kvWrite(bus.BucketShards)
		// Topology-aware flavors place pods within the nodes' capacity.
		r.kvRead(nodecap.Bucket)
		// Admission Fair Sharing's usage of each LocalQueue, kept by the
		// replica deciding for its tree.
		r.kvWrite(lqusage.Bucket)
		// The web view's live feed follows the workload events.
		r.sub[events.SubjectFilter("workload", "", "", "")] = true
	case "integration":
		r.publish(workloadEvents("submitted", "started", "stopped", "finished", "deleted")...)
		r.readStream(bus.StreamEvents)
		// Each kind's consumer of pending reasons: <kind>-pending.
		for _, kind := range kinds.QueuedNames() {
			r.consume(bus.StreamEvents, kind+"-pending")
		}
		r.kvRead(configstore.Bucket).kvRead(ledger.Bucket).kvWrite(workloads.Bucket).kvWrite(fence.Bucket).kvWrite(bus.BucketShards)
	case "preemption":
		r.publish(workloadEvents("preempted")...)
		r.consume(bus.StreamEvents, "preemption")
		// A victim's admission must be announced before its preemption.
		r.readStream(bus.StreamEvents)
		r.kvRead(ledger.Bucket).kvWrite(fence.Bucket)
	case "quota":
		r.publish("sluice.quota.v1.>")
		r.consume(bus.StreamEvents, "quota")
		// Reconciliation reads a stopped job's stop from the stream, and
		// how far the consumers that may stop a job have come (a fence
		// is kept until they are past its job's end).
		r.readStream(bus.StreamEvents)
		for _, d := range []string{"preemption", "quota", "admission-checks"} {
			r.publish("$JS.API.CONSUMER.INFO." + bus.StreamEvents + "." + d)
		}
		r.kvRead(configstore.Bucket).kvRead(workloads.Bucket).kvWrite(ledger.Bucket).kvWrite(fence.Bucket)
	case "watcher":
		r.publish("sluice.config.v1.>")
		// Queue status: usage from the ledger, pending counts from records
		// less the workloads deactivated (their fences say so).
		r.kvWrite(configstore.Bucket).kvRead(ledger.Bucket).kvRead(workloads.Bucket).kvRead(fence.Bucket)
		// LocalQueues' Admission Fair Sharing usage, for their status.
		r.kvRead(lqusage.Bucket)
		// The capacity of the nodes of topology-aware flavors.
		r.kvWrite(nodecap.Bucket)
		// The storage metrics: each stream's and bucket's size and bound.
		for _, st := range []string{bus.StreamEvents, bus.StreamDLQ, "KV_" + bus.BucketShards} {
			r.publish("$JS.API.STREAM.INFO." + st)
		}
	case "provisioning":
		answerChecks(r, v1beta1.ProvisioningRequestController)
		// It deletes the requests of ended workloads.
		r.consume(bus.StreamEvents, provisioning.EndedDurable)
	case "multicluster":
		answerChecks(r, v1beta1.MultiClusterController)
		// The dispatcher offers workloads to workers, reads their
		// reports, withdraws what ended, and keeps its dispatches.
		r.publish(multicluster.ToWorker("*", ">"))
		r.consume(multicluster.Stream, multicluster.ReportsDurable)
		r.consume(bus.StreamEvents, multicluster.EndedDurable)
		r.kvWrite(multicluster.Bucket)
	case "setup":
		r.publish("$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.UPDATE.*", "$JS.API.STREAM.INFO.*", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST")
		// The durable consumers of every service, check controller and
		// worker cluster: only setup makes consumers.
		for _, st := range []string{bus.StreamEvents, multicluster.Stream} {
			r.publish("$JS.API.CONSUMER.CREATE."+st+".>", "$JS.API.CONSUMER.INFO."+st+".>")
		}
		// Delete markers an older Sluice left that never expire: listed
		// by a watch of its own and purged, key by key
		// (bus.PurgeLegacyMarkers).
		for _, b := range []string{workloads.Bucket, fence.Bucket, multicluster.Bucket} {
			s := "KV_" + b
			r.kvRead(b).publish("$JS.API.STREAM.PURGE."+s, "$JS.API.CONSUMER.CREATE."+s+".>", "$JS.API.CONSUMER.DELETE."+s+".>",
				"$JS.API.CONSUMER.INFO."+s+".>", "$JS.FC."+s+".>")
		}
	case "reader":
		// Pages of the stream by direct gets, and the events as they are
		// published, to learn that there are more: no consumer.
		r.readStream(bus.StreamEvents)
		for _, subj := range bus.StreamSubjects {
			r.sub[subj] = true
		}
	default:
		c, ok := controllerOf(service, set.checkControllers)
		if !ok {
			return Permissions{}, fmt.Errorf("natsperm: unknown user %q (known: %s)", service, strings.Join(Users(opts...), ", "))
		}
		answerChecks(r, c)
	}
	return r.done(), nil
}

// answerChecks: an admission check controller consumes reservations with
// its own durable consumer, check-<name>, reads the last events of a
// workload, and answers.
func answerChecks(r *rules, controller string) {
	r.publish(events.CheckAnswers(controller))
	r.consume(bus.StreamEvents, checks.Durable(controller))
	r.readStream(bus.StreamEvents)
}

// controllerOf finds the check controller of your own whose user is user.
func controllerOf(user string, controllers []string) (string, bool) {
	for _, c := range controllers {
		if CheckControllerUser(c) == user {
			return c, true
		}
	}
	return "", false
}

// ServerConfig renders the authorization block of a nats-server
// configuration with one user per service; each password is the
// environment variable SLUICE_<SERVICE>_PASSWORD, which the server reads
// at start.
func ServerConfig(opts ...Option) string {
	var set settings
	for _, o := range opts {
		o(&set)
	}
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	for _, svc := range Users(opts...) {
		p, _ := For(svc, opts...)
		writeUser(&b, "", svc, set.password(svc, envName(svc)), p)
	}
	if set.agent != "" {
		pub, sub := multicluster.WorkerPermissions(set.agent, set.agentDomain)
		writeUser(&b, "the agent of this worker cluster, "+set.agent, "worker", set.password("worker", "WORKER"), Permissions{Publish: pub, Subscribe: sub})
	}
	for _, w := range set.workers {
		pub, sub := multicluster.WorkerPermissions(w, set.managerDomain)
		writeUser(&b, "worker cluster "+w+": its leaf node logs in as this user", w, set.password(w, "WORKER_"+envName(w)), Permissions{Publish: pub, Subscribe: sub})
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// password is a user's password as the configuration gives it: its hash,
// or the variable SLUICE_<env>_PASSWORD.
func (s settings) password(user, env string) string {
	if h, ok := s.hashes[user]; ok {
		return strconv.Quote(h)
	}
	return "$SLUICE_" + env + "_PASSWORD"
}

// writeUser renders one user.
func writeUser(b *strings.Builder, comment, user, password string, p Permissions) {
	b.WriteString("    {\n")
	if comment != "" {
		fmt.Fprintf(b, "      # %s\n", comment)
	}
	fmt.Fprintf(b, "      user: %q\n      password: %s\n      permissions: {\n", user, password)
	if len(p.PublishDeny) > 0 {
		fmt.Fprintf(b, "        publish: { allow: %s, deny: %s }\n", quoteList(p.Publish), quoteList(p.PublishDeny))
	} else {
		fmt.Fprintf(b, "        publish: { allow: %s }\n", quoteList(p.Publish))
	}
	fmt.Fprintf(b, "        subscribe: { allow: %s }\n", quoteList(p.Subscribe))
	b.WriteString("      }\n    }\n")
}

// envName is a worker name as it appears in an environment variable.
func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
