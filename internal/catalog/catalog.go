// Package catalog keeps every workload as the event stream tells it: its
// queue, state, flavors, reason and trace, from its submission until its
// job is deleted, and for a while after it finished. It is what
// `kubectl get workloads` lists (the visibility API's workloads) and what
// the web view's workload pages and charts read. Everything comes from
// the stream, so any admission replica that follows it answers the same,
// with the stream's sequence as the resourceVersion.
//
// A Catalog is fed by Apply (Follow reads the stream into it); it does no
// I/O and reads no clock itself.
package catalog

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/visibility"
)

// Defaults of the options.
const (
	// DefaultRetention is how long a finished workload stays listed.
	DefaultRetention = time.Hour
	// DefaultMaxFinished bounds the finished workloads kept.
	DefaultMaxFinished = 10000
	// DefaultChanges bounds the changes kept for watches that resume.
	DefaultChanges = 4096
)

// Option tunes New.
type Option func(*Catalog)

// WithRetention keeps finished workloads listed for d.
func WithRetention(d time.Duration) Option { return func(c *Catalog) { c.retention = d } }

// WithMaxFinished keeps at most n finished workloads (the oldest go).
func WithMaxFinished(n int) Option { return func(c *Catalog) { c.maxFinished = max(0, n) } }

// WithChanges keeps the last n changes for watches (default
// DefaultChanges); a watch resuming from before them is told to list
// again.
func WithChanges(n int) Option { return func(c *Catalog) { c.maxChanges = max(1, n) } }

// entry is one workload. Strings come from the events; the object is
// built when read.
type entry struct {
	kind, namespace, name, uid string
	localQueue, priorityClass  string
	priority                   int32
	created                    time.Time
	podSets                    []visibility.WorkloadPods
	elastic                    bool
	maxExec                    int32

	state, clusterQueue, reason, admission, trace string
	flavors                                       []string
	succeeded                                     *bool
	transition, admitted, finished                time.Time
	// seq is the stream sequence of the last event applied.
	seq uint64
}

// change is one change a watch sends: the workload after it.
type change struct {
	seq     uint64
	typ     string
	wl      visibility.Workload
	deleted bool
}

// Catalog is the workloads by namespace/KIND.NAME. Safe for concurrent
// use.
type Catalog struct {
	retention   time.Duration
	maxFinished int
	maxChanges  int

	mu  sync.RWMutex
	wls map[string]*entry
	// done holds the keys of finished workloads, oldest first (a key
	// queued again is skipped when it comes up).
	done []string
	// seq is the last stream sequence applied.
	seq uint64
	// changes is a ring of the last changes; first is the oldest's index.
	changes []change
	first   int
	// dropped is the last sequence of a change the ring let go.
	dropped uint64
	// woken closes (and is replaced) when changes are added.
	woken chan struct{}
	// hist is the last hour, for the web view's charts.
	hist history
}

// New is an empty catalog.
func New(opts ...Option) *Catalog {
	c := &Catalog{retention: DefaultRetention, maxFinished: DefaultMaxFinished, maxChanges: DefaultChanges,
		wls: map[string]*entry{}, woken: make(chan struct{}), hist: newHistory()}
	for _, o := range opts {
		o(c)
	}
	return c
}

func key(namespace, name string) string { return namespace + "/" + name }

// Seq is the last stream sequence applied.
func (c *Catalog) Seq() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.seq
}

// Apply takes one event stored at seq: a workload's, or a ClusterQueue's
// usage (for the history); others, and any seq not after the last, are
// ignored.
func (c *Catalog) Apply(seq uint64, env events.Envelope, ev events.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq <= c.seq {
		return
	}
	c.seq = seq
	if u, ok := ev.(events.QuotaUsageV1); ok {
		c.hist.sample(u, env.Time)
		return
	}
	ref, ok := events.WorkloadOf(ev)
	if !ok || ref.Kind == "" || ref.Namespace == "" || ref.Name == "" {
		return
	}
	c.hist.count(ev, env.Time)
	k := key(ref.Namespace, visibility.WorkloadName(ref.Kind, ref.Name))
	e := c.wls[k]
	at := env.Time
	c.collect(at, seq)
	if sub, ok := ev.(events.WorkloadSubmittedV1); ok {
		// A new workload, or the same job queued again: start over.
		e = &entry{kind: ref.Kind, namespace: ref.Namespace, name: ref.Name, uid: ref.UID,
			localQueue: sub.LocalQueue, priority: sub.Priority, priorityClass: sub.PriorityClass, created: sub.CreationTime,
			elastic: sub.Elastic, maxExec: sub.MaximumExecutionTimeSeconds, state: visibility.StatePending, transition: at}
		for _, ps := range sub.PodSets {
			e.podSets = append(e.podSets, visibility.WorkloadPods{Name: ps.Name, Count: ps.Count})
		}
		if e.created.IsZero() {
			e.created = at
		}
		typ := "MODIFIED"
		if c.wls[k] == nil {
			typ = "ADDED"
		}
		c.wls[k] = e
		e.seq, e.trace = seq, env.TraceID()
		c.record(change{seq: seq, typ: typ, wl: e.object()})
		return
	}
	if e == nil {
		// Its submission is older than the stream's history, or it ended
		// already: only a later submission makes it known.
		return
	}
	if _, ok := ev.(events.WorkloadDeletedV1); ok {
		delete(c.wls, k)
		e.seq = seq
		c.record(change{seq: seq, typ: "DELETED", wl: e.object(), deleted: true})
		return
	}
	prev := e.state
	switch v := ev.(type) {
	case events.WorkloadPendingV1:
		e.clusterQueue, e.reason = v.ClusterQueue, v.Reason
		e.state = visibility.StatePending
		if strings.HasPrefix(v.Reason, "deactivated") {
			e.state = visibility.StateDeactivated
		}
		e.flavors = nil
	case events.WorkloadReservedV1:
		e.clusterQueue, e.reason, e.admission = v.ClusterQueue, "", v.Admission
		e.flavors = flavorsOf(v.PodSets)
		e.state = visibility.StateReserved
	case events.WorkloadAdmittedV1:
		e.clusterQueue, e.reason, e.admission = v.ClusterQueue, "", v.Admission
		e.flavors, e.admitted = flavorsOf(v.PodSets), at
		e.state = visibility.StateAdmitted
	case events.WorkloadMovedV1:
		e.clusterQueue, e.admission, e.flavors = v.ClusterQueue, v.Admission, flavorsOf(v.PodSets)
	case events.WorkloadResizedV1:
		e.clusterQueue, e.admission, e.flavors = v.ClusterQueue, v.Admission, flavorsOf(v.PodSets)
		for _, ps := range v.PodSets {
			for i := range e.podSets {
				if e.podSets[i].Name == ps.Name {
					e.podSets[i].Count = ps.Count
				}
			}
		}
	case events.WorkloadStartedV1:
		e.clusterQueue, e.state, e.reason = v.ClusterQueue, visibility.StateRunning, ""
	case events.WorkloadPreemptedV1:
		e.state, e.reason = visibility.StateEvicted, "Preempted: "+v.Reason+" by "+v.Preemptor.Namespace+"/"+v.Preemptor.Name
	case events.WorkloadEvictedV1:
		e.state, e.reason = visibility.StateEvicted, v.Reason+colon(v.Message)
		if v.Reason == "Deactivated" {
			e.state = visibility.StateDeactivated
		}
	case events.WorkloadStoppedV1:
		// The job was stopped for an eviction announced before: it stays
		// evicted (or deactivated) until it waits again.
		if e.state != visibility.StateDeactivated {
			e.state = visibility.StateEvicted
		}
		if e.reason == "" {
			e.reason = v.Reason
		}
	case events.WorkloadFinishedV1:
		ok := v.Succeeded
		e.state, e.succeeded, e.finished = visibility.StateFinished, &ok, at
		if v.ClusterQueue != "" {
			e.clusterQueue = v.ClusterQueue
		}
		e.reason = "Succeeded"
		if !ok {
			e.reason = "Failed"
		}
		e.reason += colon(v.Message)
		c.done = append(c.done, k)
		defer c.collect(at, seq) // after its own change: the bound holds at once
	default:
		return
	}
	if e.state != prev {
		e.transition = at
	}
	if t := env.TraceID(); t != "" {
		e.trace = t
	}
	e.seq = seq
	c.record(change{seq: seq, typ: "MODIFIED", wl: e.object()})
}

func colon(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// flavorsOf lists an admission's resource=flavor pairs, sorted, once each.
func flavorsOf(podSets []events.PodSetAssignmentV1) []string {
	seen := map[string]bool{}
	var out []string
	for _, ps := range podSets {
		for r, f := range ps.Flavors {
			if p := r + "=" + f; !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// collect forgets finished workloads past the retention or the bound, as
// of at (the time of the event being applied, stamped seq).
func (c *Catalog) collect(at time.Time, seq uint64) {
	drop := 0
	for drop < len(c.done) {
		k := c.done[drop]
		e := c.wls[k]
		if e == nil || e.state != visibility.StateFinished {
			drop++ // gone, or queued again since
			continue
		}
		if len(c.done)-drop <= c.maxFinished && at.Sub(e.finished) < c.retention {
			break
		}
		delete(c.wls, k)
		c.record(change{seq: seq, typ: "DELETED", wl: e.object(), deleted: true})
		drop++
	}
	if drop > 0 {
		c.done = append(c.done[:0], c.done[drop:]...)
	}
}

// record keeps a change for watches and wakes them.
func (c *Catalog) record(ch change) {
	if len(c.changes) < c.maxChanges {
		c.changes = append(c.changes, ch)
	} else {
		c.dropped = c.changes[c.first].seq
		c.changes[c.first] = ch
		c.first = (c.first + 1) % len(c.changes)
	}
	close(c.woken)
	c.woken = make(chan struct{})
}

// object is the API object of an entry.
func (e *entry) object() visibility.Workload {
	w := visibility.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: visibility.WorkloadName(e.kind, e.name), Namespace: e.namespace,
			UID: types.UID(e.uid), CreationTimestamp: metav1.NewTime(e.created), ResourceVersion: strconv.FormatUint(e.seq, 10)},
		Spec: visibility.WorkloadSpec{JobKind: e.kind, JobName: e.name, LocalQueue: e.localQueue, Priority: e.priority,
			PriorityClass: e.priorityClass, PodSets: append([]visibility.WorkloadPods(nil), e.podSets...), Elastic: e.elastic},
		Status: visibility.WorkloadStatus{State: e.state, ClusterQueue: e.clusterQueue, Flavors: e.flavors, Admission: e.admission,
			Reason: e.reason, Succeeded: e.succeeded, LastTransitionTime: metav1.NewTime(e.transition), TraceID: e.trace},
	}
	if e.maxExec > 0 {
		w.Spec.MaxExecution = &metav1.Duration{Duration: time.Duration(e.maxExec) * time.Second}
	}
	if !e.admitted.IsZero() {
		t := metav1.NewTime(e.admitted)
		w.Status.AdmittedAt = &t
	}
	if !e.finished.IsZero() {
		t := metav1.NewTime(e.finished)
		w.Status.FinishedAt = &t
	}
	return w
}

// List is the workloads of namespace (every namespace for ""), sorted by
// namespace and name, finished ones past the retention as of now left
// out, and the sequence they are as of.
func (c *Catalog) List(namespace string, now time.Time) ([]visibility.Workload, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]visibility.Workload, 0, len(c.wls))
	for _, e := range c.wls {
		if (namespace == "" || e.namespace == namespace) && c.shown(e, now) {
			out = append(out, e.object())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, c.seq
}

// shown: not a finished workload past the retention (collected at the
// next event).
func (c *Catalog) shown(e *entry, now time.Time) bool {
	return e.state != visibility.StateFinished || now.Sub(e.finished) < c.retention
}

// Get is one workload by namespace and KIND.NAME.
func (c *Catalog) Get(namespace, name string, now time.Time) (visibility.Workload, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.wls[key(namespace, name)]
	if e == nil || !c.shown(e, now) {
		return visibility.Workload{}, false
	}
	return e.object(), true
}

// Since is every change of namespace's workloads after seq ("" namespace:
// all), and a channel that closes at the next change. ok is false when
// changes after seq were dropped already.
func (c *Catalog) Since(namespace string, seq uint64) (out []visibility.WorkloadWatchEvent, last uint64, woken <-chan struct{}, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if seq < c.dropped {
		// The ring let go of changes after seq.
		return nil, c.seq, c.woken, false
	}
	n := len(c.changes)
	for i := range n {
		ch := c.changes[(c.first+i)%n]
		if ch.seq <= seq || (namespace != "" && ch.wl.Namespace != namespace) {
			continue
		}
		out = append(out, visibility.WorkloadWatchEvent{Type: ch.typ, Workload: ch.wl})
	}
	return out, c.seq, c.woken, true
}

// Counts is how many workloads are in each state, finished ones past the
// retention as of now left out.
func (c *Catalog) Counts(now time.Time) map[string]int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := map[string]int{}
	for _, e := range c.wls {
		if c.shown(e, now) {
			out[e.state]++
		}
	}
	return out
}
