package simulate

import (
	"container/heap"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/queueconfig"
)

// Source of every record, as a CloudEvents source URI reference.
const recordSource = "/sluice/simulate"

// DefaultStart is the virtual time of the start unless told otherwise.
var DefaultStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Options tune a run.
type Options struct {
	// Start is the virtual wall time of elapsed zero.
	Start time.Time
	// Until stops the run after this much virtual time; zero runs until
	// nothing more can happen.
	Until time.Duration
	// StopDelay, when positive, makes evictions take time as they do in
	// a live cluster: a preempted or evicted workload keeps its quota for
	// this long (its job stopping) before it is back in its queue, and its
	// preemptor waits for it. Zero: victims leave at once.
	StopDelay time.Duration
}

// Record is one output line, shaped like a CloudEvent in structured mode.
type Record struct {
	SpecVersion     string `json:"specversion"`
	ID              string `json:"id"`
	Source          string `json:"source"`
	Type            string `json:"type"`
	Time            string `json:"time"`
	Subject         string `json:"subject,omitempty"`
	DataContentType string `json:"datacontenttype"`
	Data            any    `json:"data"`
}

// WorkloadData is the payload of a workload transition.
type WorkloadData struct {
	Namespace    string                    `json:"namespace"`
	Name         string                    `json:"name"`
	ClusterQueue string                    `json:"clusterQueue"`
	LocalQueue   string                    `json:"localQueue"`
	Priority     int32                     `json:"priority"`
	PodSets      []engine.PodSetAssignment `json:"podSets,omitempty"`
	Reason       string                    `json:"reason,omitempty"`
	Preemptor    string                    `json:"preemptor,omitempty"`
	// Message details Reason (an admission check's message).
	Message string `json:"message,omitempty"`
	// Checks are a reservation's admission checks and their states.
	Checks []engine.CheckStatus `json:"checks,omitempty"`
}

// CheckData is the payload of an admission check's answer.
type CheckData struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Check     string `json:"check"`
	State     string `json:"state"`
	Message   string `json:"message,omitempty"`
	// RequeueAfterSeconds (Retry only) delays the next reservation.
	RequeueAfterSeconds *float64 `json:"requeueAfterSeconds,omitempty"`
}

// event kinds in the order they are handled at one instant.
const (
	evFinish = iota
	evReady
	// evCheck: an admission check answers (simEvent.check names it).
	evCheck
	// evPriority: a priority change (simEvent.change indexes it).
	evPriority
	evSubmit
	// evResize: an elastic workload's new pod counts (simEvent.change
	// indexes its spec.resizes).
	evResize
	// evGone: a workload asked to stop (Options.StopDelay) has stopped.
	evGone
	// evTimer only runs a cycle: a pods-ready timeout or a requeue
	// backoff ends.
	evTimer
)

type simEvent struct {
	at   time.Duration
	kind int
	seq  int
	wl   int
	run  int
	// change indexes the workload's spec.priorityChanges (evPriority)
	// or spec.resizes (evResize).
	change int
	// check and answer are an admission check's answer (evCheck).
	check  string
	answer SimCheckAnswer
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.seq < b.seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// count is a pod set's count now: as written, or as last resized.
func (r *wlRun) count(ps SimPodSet) int32 {
	if n, ok := r.counts[ps.Name]; ok {
		return n
	}
	return ps.Count
}

// wlRun tracks one workload through the run.
type wlRun struct {
	spec     *SimulatedWorkload
	idx      int
	key      string
	priority int32
	runtime  time.Duration // 0: never finishes
	// run counts admissions; a finish event of an older run is stale.
	run       int
	cq        string
	usage     map[frKey]int64
	state     string
	reason    string
	submitted time.Duration
	firstAdm  *time.Duration
	lastAdm   *time.Duration
	finished  *time.Duration
	admits    int
	preempted int
	evicted   int
	resizes   int
	// reservations counts the workload's reservations that waited for
	// admission checks; each check answers them in turn.
	reservations int
	// queued is each pod set's per-pod requests as the workload is
	// queued with them (after the resources block), by pod set name.
	queued map[string]corev1.ResourceList
	// counts are an elastic workload's pod counts after its resizes so
	// far, by pod set name; resizedAt when they last changed.
	counts    map[string]int32
	resizedAt time.Duration
}

type frKey struct{ cq, flavor, resource string }

// sim is one run in progress.
type sim struct {
	opts    Options
	eng     *engine.Engine
	wls     []*wlRun
	byKey   map[string]*wlRun
	events  eventHeap
	seq     int
	now     time.Duration
	records []Record
	// usage and area integrate each ClusterQueue's usage over time.
	usage   map[frKey]int64
	area    map[frKey]float64
	lastT   time.Duration
	nominal map[frKey]int64
	// podsReady: waitForPodsReady is on, so readiness is simulated.
	podsReady bool
	// timers holds the instants an evTimer is already queued for.
	timers map[time.Duration]bool
	// classes are the WorkloadPriorityClass values by name.
	classes map[string]int32
	// futile counts the instants in a row at which only timers fired
	// (timeouts, ends of backoffs); stopped says why the run ended early.
	futile  int
	stopped string
	// peak is the most each topology domain held, by flavor, domain and
	// resource, with its capacity.
	peak map[domainKey]*DomainResult
	// lqs are the LocalQueues, in the order of the input.
	lqs []engine.LocalQueue
}

type domainKey struct{ flavor, domain, resource string }

// maxFutileInstants ends a run in which nothing but waitForPodsReady's
// timers happen any more: workloads whose pods never get ready would be
// evicted and admitted again forever.
const maxFutileInstants = 1000

// Run simulates a loaded scenario. It returns every record in order, the
// summary last; an error means bad input, and then no record is returned.
func Run(sc *Scenario, opts Options) ([]Record, error) {
	if opts.Start.IsZero() {
		opts.Start = DefaultStart
	}
	cfg, err := queueconfig.ToEngine(sc.Config)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	s := &sim{
		opts:      opts,
		eng:       newEngine(cfg, sc.Nodes, opts.StopDelay > 0),
		byKey:     map[string]*wlRun{},
		usage:     map[frKey]int64{},
		area:      map[frKey]float64{},
		nominal:   map[frKey]int64{},
		podsReady: cfg.WaitForPodsReady != nil,
		timers:    map[time.Duration]bool{},
		lqs:       cfg.LocalQueues,
	}
	for _, cq := range cfg.ClusterQueues {
		for _, g := range cq.ResourceGroups {
			for _, f := range g.Flavors {
				for _, q := range f.Resources {
					s.nominal[frKey{cq.Name, f.Name, q.Resource}] = q.Nominal
				}
			}
		}
	}
	classes := map[string]int32{}
	for _, c := range sc.Config.PriorityClasses {
		classes[c.Name] = c.Value
	}
	var pre []*wlRun
	for i := range sc.Workloads {
		w := &sc.Workloads[i]
		r := &wlRun{spec: w, idx: i, key: w.Namespace + "/" + w.Name, state: "waiting", submitted: w.Spec.SubmitAt.Duration,
			queued: map[string]corev1.ResourceList{}}
		for _, ps := range w.Spec.PodSets {
			r.queued[ps.Name] = queueconfig.AddRequests(sc.Config.Resources.Apply(ps.Requests), ps.devices)
		}
		switch {
		case w.Spec.PriorityClassName != "":
			r.priority = classes[w.Spec.PriorityClassName]
		case w.Spec.Priority != nil:
			r.priority = *w.Spec.Priority
		}
		if w.Spec.Runtime != nil {
			r.runtime = w.Spec.Runtime.Duration
		}
		s.wls = append(s.wls, r)
		s.byKey[r.key] = r
		if w.Spec.Admitted != nil {
			r.submitted = 0
			ew := s.toEngine(r)
			if err := s.eng.Submit(ew); err != nil {
				return nil, docError(sc.where[r.key], fmt.Sprintf("spec.admitted: %v", err))
			}
			pre = append(pre, r)
			continue
		}
		s.push(simEvent{at: w.Spec.SubmitAt.Duration, kind: evSubmit, wl: i})
	}
	for i := range sc.Workloads {
		for j, c := range sc.Workloads[i].Spec.PriorityChanges {
			s.push(simEvent{at: c.At.Duration, kind: evPriority, wl: i, change: j})
		}
		for j, c := range sc.Workloads[i].Spec.Resizes {
			s.push(simEvent{at: c.At.Duration, kind: evResize, wl: i, change: j})
		}
	}
	s.classes = classes
	// Pre-admitted workloads are running at time 0.
	for _, r := range pre {
		s.emit(events.TypeWorkloadSubmittedV1, r, WorkloadData{})
		a := r.spec.Spec.Admitted
		var podSets []engine.PodSetAssignment
		for _, p := range a.PodSets {
			podSets = append(podSets, engine.PodSetAssignment{Name: p.Name, Count: p.Count, Flavors: p.Flavors, Topology: p.TopologyAssignment})
		}
		s.admitted(r, a.ClusterQueue, podSets, a.At.Duration)
	}
	s.loop()
	s.records = append(s.records, s.summary())
	return s.records, nil
}

// notePeaks records the most each topology domain has held so far.
func (s *sim) notePeaks() {
	for _, d := range s.eng.Domains() {
		k := domainKey{d.Flavor, strings.Join(d.Values, "/"), d.Resource}
		if s.peak == nil {
			s.peak = map[domainKey]*DomainResult{}
		}
		p := s.peak[k]
		if p == nil {
			p = &DomainResult{Flavor: d.Flavor, Domain: d.Values, Resource: d.Resource}
			s.peak[k] = p
		}
		p.Capacity = unit(d.Resource, float64(d.Capacity))
		p.Peak = max(p.Peak, unit(d.Resource, float64(d.Used)))
	}
}

// newEngine is the engine of a run, with the scenario's nodes.
func newEngine(cfg engine.Config, nodes []engine.Node, deferred bool) *engine.Engine {
	var opts []engine.Option
	if deferred {
		opts = append(opts, engine.WithDeferredEviction())
	}
	e := engine.New(cfg, opts...)
	if len(nodes) > 0 {
		e.SetNodes(nodes)
	}
	return e
}

func (s *sim) push(e simEvent) {
	e.seq = s.seq
	s.seq++
	heap.Push(&s.events, e)
}

func (s *sim) toEngine(r *wlRun) engine.Workload {
	w := r.spec
	ew := engine.Workload{
		Namespace: w.Namespace,
		Name:      w.Name,
		Queue:     w.Spec.QueueName,
		Priority:  r.priority,
		Submitted: s.opts.Start.Add(r.submitted),
	}
	if m := w.Spec.MaximumExecutionTimeSeconds; m != nil {
		ew.MaxExecution = time.Duration(*m) * time.Second
	}
	ew.Elastic = w.Spec.Elastic
	if r.counts != nil {
		ew.ResizedAt = s.opts.Start.Add(r.resizedAt)
	}
	for _, ps := range w.Spec.PodSets {
		eps := engine.PodSet{Name: ps.Name, Count: r.count(ps), Requests: map[string]int64{}, NodeSelector: ps.NodeSelector, Tolerations: ps.Tolerations,
			Topology: ps.topology}
		if ps.MinCount != nil {
			eps.MinCount = *ps.MinCount
		}
		for res, q := range r.queued[ps.Name] {
			eps.Requests[string(res)] = engine.Canonical(string(res), q)
		}
		ew.PodSets = append(ew.PodSets, eps)
	}
	if a := w.Spec.Admitted; a != nil {
		adm := &engine.Admission{ClusterQueue: a.ClusterQueue, At: s.opts.Start.Add(a.At.Duration)}
		for _, p := range a.PodSets {
			adm.PodSets = append(adm.PodSets, engine.PodSetAssignment{Name: p.Name, Count: p.Count, Flavors: p.Flavors, Topology: p.TopologyAssignment})
		}
		ew.Admission = adm
	}
	return ew
}

func (s *sim) loop() {
	first := true
	for first || s.events.Len() > 0 {
		t := time.Duration(0)
		if !first {
			if s.dropStale(); s.events.Len() == 0 {
				break
			}
			t = s.events[0].at
		}
		if s.opts.Until > 0 && t > s.opts.Until {
			break
		}
		s.advance(t)
		// Admission Fair Sharing: the LocalQueues' usage until now counts
		// what they held until now, before this instant's events change it.
		s.eng.SampleUsage(s.opts.Start.Add(t))
		onlyTimers := !first
		for s.events.Len() > 0 && s.events[0].at == t {
			ev := heap.Pop(&s.events).(simEvent)
			if ev.kind == evTimer {
				delete(s.timers, ev.at)
				continue
			}
			onlyTimers = false
			if s.stale(ev) {
				continue
			}
			r := s.wls[ev.wl]
			switch ev.kind {
			case evCheck:
				st := engine.CheckStatus{Name: ev.check, State: engine.CheckState(ev.answer.State), Message: ev.answer.Message}
				data := CheckData{Namespace: r.spec.Namespace, Name: r.spec.Name, Check: ev.check, State: ev.answer.State, Message: ev.answer.Message}
				if ra := ev.answer.RequeueAfter; ra != nil {
					st.RequeueAfter = ra.Duration
					secs := ra.Seconds()
					data.RequeueAfterSeconds = &secs
				}
				_ = s.eng.SetCheck(r.key, st)
				s.records = append(s.records, s.record(events.TypeCheckUpdatedV1, r.key, data))
			case evReady:
				_ = s.eng.SetPodsReady(r.key, true, s.opts.Start.Add(t))
				if r.runtime > 0 {
					s.push(simEvent{at: t + r.runtime, kind: evFinish, wl: r.idx, run: r.run})
				}
			case evGone:
				s.release(r)
				_ = s.eng.Evict(r.key)
				r.state = "waiting"
			case evFinish:
				s.release(r)
				_ = s.eng.Remove(r.key)
				r.state = "finished"
				d := t
				r.finished = &d
				s.emit(events.TypeWorkloadFinishedV1, r, WorkloadData{ClusterQueue: r.cq})
			case evPriority:
				c := r.spec.Spec.PriorityChanges[ev.change]
				if c.Priority != nil {
					r.priority = *c.Priority
				} else {
					r.priority = s.classes[c.PriorityClassName]
				}
				// Before its submission the new priority is simply the
				// one it is submitted with.
				if s.eng.Known(r.key) {
					_ = s.eng.SetPriority(r.key, r.priority)
				}
			case evResize:
				if r.counts == nil {
					r.counts = map[string]int32{}
				}
				maps.Copy(r.counts, r.spec.Spec.Resizes[ev.change].PodSets)
				r.resizedAt = t
				// Before its submission the new counts are simply those
				// it is submitted with.
				if s.eng.Known(r.key) {
					counts := make([]int32, len(r.spec.Spec.PodSets))
					for i, ps := range r.spec.Spec.PodSets {
						counts[i] = r.count(ps)
					}
					_ = s.eng.Resize(r.key, counts, s.opts.Start.Add(t))
				}
			case evSubmit:
				if r.spec.held {
					// The webhook suspends it; no workload is made.
					r.reason = HeldReason
					continue
				}
				// The scenario was checked, and keys are unique.
				_ = s.eng.Submit(s.toEngine(r))
				s.emit(events.TypeWorkloadSubmittedV1, r, WorkloadData{})
			}
		}
		first = false
		if onlyTimers {
			s.futile++
		} else {
			s.futile = 0
		}
		if s.futile > maxFutileInstants {
			s.stopped = fmt.Sprintf("stopped at %s: only waitForPodsReady's timers fired for %d instants in a row, so the workloads left would time out and be requeued forever", s.now, maxFutileInstants)
			break
		}
		s.cycle()
		if s.stopped != "" {
			break
		}
	}
	if s.opts.Until > 0 {
		s.advance(s.opts.Until)
	}
}

func (s *sim) cycle() {
	defer s.armTimer()
	defer s.notePeaks()
	for _, d := range s.eng.Cycle(s.opts.Start.Add(s.now)) {
		r := s.byKey[d.Key]
		switch d.Kind {
		case engine.KindReserved:
			s.reserved(r, d)
		case engine.KindAdmitted:
			s.admitted(r, d.ClusterQueue, d.PodSets, s.now)
		case engine.KindPreempted:
			s.stop(r)
			r.preempted++
			s.emit(events.TypeWorkloadPreemptedV1, r, WorkloadData{ClusterQueue: d.ClusterQueue, Reason: d.Reason, Preemptor: d.Preemptor})
		case engine.KindEvicted:
			s.stop(r)
			r.evicted++
			s.emit(events.TypeWorkloadEvictedV1, r, WorkloadData{ClusterQueue: d.ClusterQueue, Reason: d.Reason, Message: d.Message})
		case engine.KindResized:
			s.release(r)
			s.book(r, d.ClusterQueue, d.PodSets)
			r.resizes++
			s.emit(events.TypeWorkloadResizedV1, r, WorkloadData{ClusterQueue: d.ClusterQueue, PodSets: d.PodSets, Reason: d.Reason})
		case engine.KindPending:
			r.reason = d.Reason
			s.emit(events.TypeWorkloadPendingV1, r, WorkloadData{ClusterQueue: d.ClusterQueue, Reason: d.Reason})
		}
	}
}

// admitted books an admission; at is when it happened (negative for a
// workload admitted before the start).
func (s *sim) admitted(r *wlRun, cq string, podSets []engine.PodSetAssignment, at time.Duration) {
	wasReserved := r.state == "reserved"
	if !wasReserved {
		r.run++
		s.book(r, cq, podSets)
	}
	r.admits++
	r.state = "admitted"
	r.reason = ""
	a := at
	r.lastAdm = &a
	if r.firstAdm == nil {
		r.firstAdm = &a
	}
	s.emit(events.TypeWorkloadAdmittedV1, r, WorkloadData{ClusterQueue: cq, PodSets: podSets})
	s.schedule(r, at)
}

// reserved books a reservation that waits for admission checks, and
// queues the checks' answers: each check answers the workload's n-th
// reservation with its n-th answer (the last one repeating), Ready at once
// if the scenario says nothing.
func (s *sim) reserved(r *wlRun, d engine.Decision) {
	r.run++
	r.reservations++
	r.state = "reserved"
	r.reason = ""
	s.book(r, d.ClusterQueue, d.PodSets)
	s.emit(events.TypeWorkloadReservedV1, r, WorkloadData{ClusterQueue: d.ClusterQueue, PodSets: d.PodSets, Checks: d.Checks})
	if r.reservations > maxReservations && s.stopped == "" {
		s.stopped = fmt.Sprintf("stopped at %s: %s was reserved %d times; its admission checks keep asking to retry", s.now, r.key, maxReservations)
		return
	}
	for _, c := range d.Checks {
		a := SimCheckAnswer{State: string(engine.CheckReady)}
		for _, sc := range r.spec.Spec.AdmissionChecks {
			if sc.Name == c.Name && len(sc.Answers) > 0 {
				a = sc.Answers[min(r.reservations, len(sc.Answers))-1]
			}
		}
		s.push(simEvent{at: s.now + a.After.Duration, kind: evCheck, wl: r.idx, run: r.run, check: c.Name, answer: a})
	}
}

// maxReservations ends a run in which a workload's checks would say Retry
// forever.
const maxReservations = 1000

// book takes the quota of a reservation.
func (s *sim) book(r *wlRun, cq string, podSets []engine.PodSetAssignment) {
	r.cq = cq
	r.usage = map[frKey]int64{}
	for _, pa := range podSets {
		for _, ps := range r.spec.Spec.PodSets {
			if ps.Name != pa.Name {
				continue
			}
			// Usage is of what the workload is queued with: its
			// requests after the resources block.
			for res, q := range r.queued[ps.Name] {
				k := frKey{cq, pa.Flavors[string(res)], string(res)}
				v, _ := engine.MulAmount(engine.Canonical(string(res), q), int64(pa.Count))
				r.usage[k] += v
				s.usage[k] += v
			}
		}
	}
}

// schedule queues what follows an admission at at: the finish, or with
// waitForPodsReady the pods getting ready first.
func (s *sim) schedule(r *wlRun, at time.Duration) {
	if !s.podsReady {
		if r.runtime > 0 {
			s.push(simEvent{at: max(s.now, at+r.runtime), kind: evFinish, wl: r.idx, run: r.run})
		}
		return
	}
	// With waitForPodsReady the pods get ready podsReadyAfter the
	// admission, and the runtime counts from then; pods that are never
	// ready never finish.
	ra := r.spec.Spec.PodsReadyAfter
	if ra != nil && ra.Never {
		return
	}
	var after time.Duration
	if ra != nil {
		after = ra.After
	}
	s.push(simEvent{at: max(s.now, at+after), kind: evReady, wl: r.idx, run: r.run})
}

// dropStale drops events at the head of the queue that would do
// nothing: a timer the engine no longer waits for (the workload whose
// deadline it was finished or became ready), or the end, readiness or
// check answer of an admission that is over. They neither move the clock
// nor stretch the run.
func (s *sim) dropStale() {
	for s.events.Len() > 0 && s.stale(s.events[0]) {
		ev := heap.Pop(&s.events).(simEvent)
		if ev.kind == evTimer {
			delete(s.timers, ev.at)
		}
	}
}

func (s *sim) stale(ev simEvent) bool {
	switch ev.kind {
	case evTimer:
		next, ok := s.eng.NextTimer(s.opts.Start.Add(s.now))
		return !ok || next.After(s.opts.Start.Add(ev.at))
	case evCheck:
		r := s.wls[ev.wl]
		return ev.run != r.run || (r.state != "reserved" && r.state != "admitted")
	case evReady, evFinish:
		r := s.wls[ev.wl]
		return ev.run != r.run || r.state != "admitted"
	case evGone:
		r := s.wls[ev.wl]
		return ev.run != r.run || r.state != "stopping"
	}
	return false
}

// armTimer queues a cycle for when the engine next decides something
// because time passed.
func (s *sim) armTimer() {
	next, ok := s.eng.NextTimer(s.opts.Start.Add(s.now))
	if !ok {
		return
	}
	at := next.Sub(s.opts.Start)
	if s.timers[at] {
		return
	}
	s.timers[at] = true
	s.push(simEvent{at: at, kind: evTimer})
}

// stop takes an evicted workload's quota back: at once, or after
// Options.StopDelay, until when it keeps its quota and runs no more.
func (s *sim) stop(r *wlRun) {
	if s.opts.StopDelay <= 0 {
		s.release(r)
		r.state = "waiting"
		return
	}
	r.state = "stopping"
	s.push(simEvent{at: s.now + s.opts.StopDelay, kind: evGone, wl: r.idx, run: r.run})
}

func (s *sim) release(r *wlRun) {
	for k, v := range r.usage {
		s.usage[k] -= v
	}
	r.usage = nil
}

// advance integrates usage up to t.
func (s *sim) advance(t time.Duration) {
	dt := (t - s.lastT).Seconds()
	if dt > 0 {
		for k, v := range s.usage {
			if v != 0 {
				s.area[k] += float64(v) * dt
			}
		}
	}
	s.lastT = t
	s.now = t
}

func (s *sim) emit(typ string, r *wlRun, d WorkloadData) {
	d.Namespace, d.Name, d.LocalQueue, d.Priority = r.spec.Namespace, r.spec.Name, r.spec.Spec.QueueName, r.priority
	if d.ClusterQueue == "" {
		d.ClusterQueue = s.eng.ClusterQueueOf(r.key)
	}
	s.records = append(s.records, s.record(typ, r.key, d))
}

func (s *sim) record(typ, subject string, data any) Record {
	rec := Record{
		SpecVersion:     events.SpecVersion,
		ID:              fmt.Sprintf("sim-%d", len(s.records)+1),
		Source:          recordSource,
		Type:            typ,
		Time:            s.opts.Start.Add(s.now).UTC().Format(time.RFC3339Nano),
		Subject:         subject,
		DataContentType: "application/json",
		Data:            data,
	}
	return rec
}

// Summary is the payload of the last record.
type Summary struct {
	Start           string           `json:"start"`
	End             string           `json:"end"`
	ElapsedSeconds  float64          `json:"elapsedSeconds"`
	Workloads       []WorkloadResult `json:"workloads"`
	ClusterQueues   []QueueResult    `json:"clusterQueues"`
	AdmittedCount   int              `json:"admitted"`
	FinishedCount   int              `json:"finished"`
	PendingCount    int              `json:"pending"`
	PreemptionCount int              `json:"preemptions"`
	// ReservedCount counts workloads holding quota while they wait for
	// admission checks.
	ReservedCount int `json:"reserved,omitempty"`
	// Stopped says why the run ended before nothing more could happen.
	Stopped string `json:"stopped,omitempty"`
	// Domains are the lowest-level domains of topology-aware flavors,
	// each resource their workloads used, and the most they held.
	Domains []DomainResult `json:"domains,omitempty"`
	// LocalQueues is, with Admission Fair Sharing, each LocalQueue's
	// usage at the end, as its status would say.
	LocalQueues []LocalQueueResult `json:"localQueues,omitempty"`
}

// LocalQueueResult is a LocalQueue's Admission Fair Sharing usage: per
// resource in its unit (cores for cpu), and the share its workloads are
// ordered by (usage weighted, over the LocalQueue's weight; absent when
// infinite).
type LocalQueueResult struct {
	Namespace         string             `json:"namespace"`
	Name              string             `json:"name"`
	ConsumedResources map[string]float64 `json:"consumedResources"`
	WeightedShare     *float64           `json:"weightedShare,omitempty"`
}

// DomainResult is the use of one resource of one topology domain, in the
// resource's unit (cores for cpu).
type DomainResult struct {
	Flavor   string   `json:"flavor"`
	Domain   []string `json:"domain"`
	Resource string   `json:"resource"`
	Capacity float64  `json:"capacity"`
	Peak     float64  `json:"peak"`
}

// HeldReason is why a workload created without a queue, where such jobs
// are held, stays pending.
const HeldReason = "held: created without a queue name (manageJobsWithoutQueueName); it runs once given one"

// WorkloadResult is one workload's story in the summary.
type WorkloadResult struct {
	Namespace    string   `json:"namespace"`
	Name         string   `json:"name"`
	ClusterQueue string   `json:"clusterQueue"`
	Priority     int32    `json:"priority"`
	State        string   `json:"state"` // pending, reserved, admitted, finished
	Submitted    string   `json:"submitted"`
	Admitted     string   `json:"admitted,omitempty"`
	Finished     string   `json:"finished,omitempty"`
	WaitSeconds  *float64 `json:"waitSeconds,omitempty"`
	Admissions   int      `json:"admissions"`
	Preemptions  int      `json:"preemptions"`
	Evictions    int      `json:"evictions"`
	// Resizes counts an elastic workload's admitted scale-ups and
	// scale-downs.
	Resizes int    `json:"resizes,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// QueueResult is one ClusterQueue's utilization.
type QueueResult struct {
	Name      string           `json:"name"`
	Resources []ResourceResult `json:"resources"`
}

// ResourceResult is the use of one flavor × resource of a ClusterQueue.
// AverageUsage and Nominal are in the resource's unit (cores for cpu).
type ResourceResult struct {
	Flavor       string  `json:"flavor"`
	Resource     string  `json:"resource"`
	Nominal      float64 `json:"nominal"`
	AverageUsage float64 `json:"averageUsage"`
	// Utilization is AverageUsage ÷ Nominal; above 1 means borrowing.
	Utilization float64 `json:"utilization"`
}

func unit(res string, v float64) float64 {
	if res == "cpu" {
		return v / 1000
	}
	return v
}

func round(v float64) float64 {
	return float64(int64(v*1e6+0.5)) / 1e6
}

func (s *sim) summary() Record {
	at := func(d time.Duration) string { return s.opts.Start.Add(d).UTC().Format(time.RFC3339Nano) }
	sum := Summary{Start: at(0), End: at(s.now), ElapsedSeconds: round(s.now.Seconds()), Stopped: s.stopped}
	for _, r := range s.wls {
		wr := WorkloadResult{
			Namespace: r.spec.Namespace, Name: r.spec.Name, ClusterQueue: r.cq, Priority: r.priority,
			Submitted: at(r.submitted), Admissions: r.admits, Preemptions: r.preempted, Evictions: r.evicted,
			Resizes: r.resizes,
		}
		if wr.ClusterQueue == "" {
			wr.ClusterQueue = s.eng.ClusterQueueOf(r.key)
		}
		switch r.state {
		case "finished":
			wr.State = "finished"
			sum.FinishedCount++
		case "admitted":
			wr.State = "admitted"
			sum.AdmittedCount++
		case "reserved":
			wr.State = "reserved"
			sum.ReservedCount++
		default:
			wr.State = "pending"
			// The engine's own reason: a move behind another head of the
			// queue changes it without a decision.
			wr.Reason = s.eng.PendingReason(r.key)
			if wr.Reason == "" {
				wr.Reason = r.reason
			}
			sum.PendingCount++
		}
		sum.PreemptionCount += r.preempted
		if r.firstAdm != nil && r.submitted <= *r.firstAdm {
			w := round((*r.firstAdm - r.submitted).Seconds())
			wr.WaitSeconds = &w
		}
		if r.lastAdm != nil {
			wr.Admitted = at(*r.lastAdm)
		}
		if r.finished != nil {
			wr.Finished = at(*r.finished)
		}
		sum.Workloads = append(sum.Workloads, wr)
	}
	byCQ := map[string][]ResourceResult{}
	var names []string
	for k, nominal := range s.nominal {
		if _, ok := byCQ[k.cq]; !ok {
			names = append(names, k.cq)
		}
		avg := 0.0
		if s.now > 0 {
			avg = s.area[k] / s.now.Seconds()
		}
		rr := ResourceResult{Flavor: k.flavor, Resource: k.resource, Nominal: unit(k.resource, float64(nominal)), AverageUsage: round(unit(k.resource, avg))}
		if nominal > 0 {
			rr.Utilization = round(avg / float64(nominal))
		}
		byCQ[k.cq] = append(byCQ[k.cq], rr)
	}
	sort.Strings(names)
	for _, n := range names {
		rs := byCQ[n]
		sort.Slice(rs, func(i, j int) bool {
			if rs[i].Flavor != rs[j].Flavor {
				return rs[i].Flavor < rs[j].Flavor
			}
			return rs[i].Resource < rs[j].Resource
		})
		sum.ClusterQueues = append(sum.ClusterQueues, QueueResult{Name: n, Resources: rs})
	}
	sum.Domains = s.domainResults()
	sum.LocalQueues = s.localQueueResults()
	return s.record(events.TypeSimulationSummaryV1, "", sum)
}

// localQueueResults lists the usage of the LocalQueues of ClusterQueues
// that order by it, brought up to the end of the run.
func (s *sim) localQueueResults() []LocalQueueResult {
	s.eng.SampleUsage(s.opts.Start.Add(s.now))
	var out []LocalQueueResult
	for _, lq := range s.lqs {
		u, ok := s.eng.LocalQueueUsage(lq.Namespace, lq.Name)
		if !ok {
			continue
		}
		r := LocalQueueResult{Namespace: lq.Namespace, Name: lq.Name, ConsumedResources: map[string]float64{}}
		for res, v := range u.Consumed {
			r.ConsumedResources[res] = round(v)
		}
		if !math.IsInf(u.Share, 0) {
			share := round(u.Share)
			r.WeightedShare = &share
		}
		out = append(out, r)
	}
	return out
}

// domainResults lists the domains' peaks, leaving out resources no
// workload of the flavor ever used (pods, memory nobody asked for).
func (s *sim) domainResults() []DomainResult {
	used := map[[2]string]bool{}
	for k, p := range s.peak {
		if p.Peak > 0 {
			used[[2]string{k.flavor, k.resource}] = true
		}
	}
	var out []DomainResult
	for k, p := range s.peak {
		if used[[2]string{k.flavor, k.resource}] && k.resource != "pods" {
			out = append(out, *p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Flavor != b.Flavor {
			return a.Flavor < b.Flavor
		}
		if c := slices.Compare(a.Domain, b.Domain); c != 0 {
			return c < 0
		}
		return a.Resource < b.Resource
	})
	return out
}
