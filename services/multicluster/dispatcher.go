package multicluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/pod"
)

// ConfigGVR is the MultiClusterConfig resource.
var ConfigGVR = v1beta1.GroupVersion.WithResource("multiclusterconfigs")

// ConfigKind is the kind a multicluster check's parameters name.
const ConfigKind = "MultiClusterConfig"

// Bucket is the manager's KV bucket of dispatches, by workload UID.
const Bucket = "sluice-multicluster"

// EndedDurable is the dispatcher's consumer of the workload events that
// end a dispatch (finished, deleted, evicted, preempted, stopped).
var EndedDurable = checks.Durable(v1beta1.MultiClusterController) + "-ended"

// Dispatcher is the manager's multicluster admission check controller.
type Dispatcher struct {
	dyn      dynamic.Interface
	js       jetstream.JetStream
	adapters map[string]jobframework.Adapter
	log      zerolog.Logger
	now      func() time.Time
	tick     time.Duration
	pub      checks.Publisher

	ctrl    *checks.Controller
	kv      jetstream.KeyValue
	configs cache.SharedIndexInformer

	mu         sync.Mutex
	dispatches map[string]*dispatch // by workload UID: the cache the watch walks
	seen       map[string]time.Time // worker -> last heartbeat or report
	// reading: the reports consumer's last fetch worked; readingSince:
	// since when, without a failure.
	reading      bool
	readingSince time.Time
	ready        bool
}

// DispatcherOption tunes a Dispatcher.
type DispatcherOption func(*Dispatcher)

// WithDispatcherLogger sets the logger.
func WithDispatcherLogger(l zerolog.Logger) DispatcherOption {
	return func(d *Dispatcher) { d.log = l }
}

// WithDispatcherPublisher sets the publisher of check answers.
func WithDispatcherPublisher(p checks.Publisher) DispatcherOption {
	return func(d *Dispatcher) { d.pub = p }
}

// WithClock sets the clock and how often lost workers and rounds are
// looked for.
func WithClock(now func() time.Time, tick time.Duration) DispatcherOption {
	return func(d *Dispatcher) { d.now, d.tick = now, tick }
}

// NewDispatcher returns the dispatcher of the kinds' workloads.
func NewDispatcher(dyn dynamic.Interface, js jetstream.JetStream, adapters []jobframework.Adapter, opts ...DispatcherOption) (*Dispatcher, error) {
	if dyn == nil || js == nil || len(adapters) == 0 {
		return nil, fmt.Errorf("%w: a Kubernetes client, JetStream and job kinds are all required", ErrConfig)
	}
	d := &Dispatcher{dyn: dyn, js: js, adapters: map[string]jobframework.Adapter{}, log: zerolog.Nop(), now: time.Now,
		tick: time.Second, dispatches: map[string]*dispatch{}, seen: map[string]time.Time{}}
	for _, ad := range adapters {
		d.adapters[ad.Kind().Name] = ad
	}
	for _, o := range opts {
		o(d)
	}
	copts := []checks.Option{checks.WithLogger(d.log), checks.WithActivity(d.activity)}
	if d.pub != nil {
		copts = append(copts, checks.WithPublisher(d.pub))
	}
	ctrl, err := checks.New(v1beta1.MultiClusterController, js, dyn, checks.DeciderFunc(d.decide), copts...)
	if err != nil {
		return nil, err
	}
	d.ctrl = ctrl
	return d, nil
}

// Ready reports nil once the dispatches are loaded.
func (d *Dispatcher) Ready() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ready {
		return errors.New("loading dispatches and MultiClusterConfigs")
	}
	return nil
}

// Run dispatches until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	// The stream and the bucket are made by Setup (`sluice setup`, or
	// each service at start unless --setup=false).
	for n := 1; ; n++ {
		kv, err := bus.OpenKV(ctx, d.js, Bucket)
		if err == nil {
			d.kv = kv
			break
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("multicluster: bucket %s: %w", Bucket, err)
		}
		if n == 1 {
			d.log.Warn().Msg("bucket " + Bucket + " missing: waiting for sluice setup")
		}
		if !sleep(ctx, backoff(n)) {
			return ctx.Err()
		}
	}
	if err := d.load(ctx); err != nil {
		return err
	}
	if err := d.waitServed(ctx); err != nil {
		return err
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(d.dyn, 10*time.Minute)
	d.configs = factory.ForResource(ConfigGVR).Informer()
	if _, err := d.configs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { d.ctrl.Recheck(ctx) }, UpdateFunc: func(_, _ any) { d.ctrl.Recheck(ctx) }, DeleteFunc: func(any) { d.ctrl.Recheck(ctx) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), d.configs.HasSynced) {
		return ctx.Err()
	}
	d.mu.Lock()
	d.ready = true
	d.mu.Unlock()
	d.log.Info().Msg("multicluster dispatcher running")

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := consume(ctx, d.js, ReportsDurable, ReportsFilter, d.handleReport, d.log, d.fetched); err != nil && ctx.Err() == nil {
			d.log.Error().Err(err).Msg("workers' reports no longer read")
		}
	})
	wg.Go(func() {
		err := bus.Run(ctx, d.js, EndedConsumer(), d.ended, bus.WithLogger(d.log))
		if err != nil && ctx.Err() == nil {
			d.log.Error().Err(err).Msg("ended workloads no longer withdrawn")
		}
	})
	wg.Go(func() { d.watch(ctx) })
	return d.ctrl.Run(ctx)
}

// waitServed waits until the API server serves MultiClusterConfigs (its
// CRD is installed): ready meanwhile, as there is nothing to dispatch.
func (d *Dispatcher) waitServed(ctx context.Context) error {
	for told := false; ; told = true {
		_, err := d.dyn.Resource(ConfigGVR).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("multicluster: list %ss: %w", ConfigKind, err)
		}
		if !told {
			d.log.Info().Msg("MultiClusterConfigs not served (CRD not installed): waiting")
		}
		d.mu.Lock()
		d.ready = true
		d.mu.Unlock()
		if !sleep(ctx, 10*time.Second) {
			return ctx.Err()
		}
	}
}

// load reads the dispatches kept in the bucket into the cache the
// watch walks.
func (d *Dispatcher) load(ctx context.Context) error {
	keys, err := d.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("multicluster: list dispatches: %w", err)
	}
	for k := range keys.Keys() {
		if _, err := d.get(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// get reads a workload's dispatch from the bucket (nil: none), which is
// what holds: a second dispatcher (one replica replacing another) may
// have changed it. The cache follows.
func (d *Dispatcher) get(ctx context.Context, uid string) (*dispatch, error) {
	e, err := d.kv.Get(ctx, uid)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		delete(d.dispatches, uid)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("multicluster: read dispatch %s: %w", uid, err)
	}
	var rec dispatch
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		d.log.Warn().Err(err).Str("key", uid).Msg("dispatch record not understood; dropped")
		_ = bus.Remove(ctx, d.kv, uid, 0)
		delete(d.dispatches, uid)
		return nil, nil
	}
	rec.rev = e.Revision()
	d.dispatches[uid] = &rec
	return &rec, nil
}

// errConflict: the record changed under this dispatcher; the message is
// handled again, from the record as it is now.
var errConflict = errors.New("multicluster: dispatch changed meanwhile")

// save writes a dispatch, conditional on the revision it was read at (a
// new one only if there is none), so that two dispatchers never both
// pick a winner.
func (d *Dispatcher) save(ctx context.Context, rec *dispatch) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	var rev uint64
	if rec.rev == 0 {
		rev, err = d.kv.Create(ctx, rec.Workload.UID, raw)
	} else {
		rev, err = d.kv.Update(ctx, rec.Workload.UID, raw, rec.rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		delete(d.dispatches, rec.Workload.UID)
		return fmt.Errorf("%w: %s", errConflict, rec.Workload)
	}
	if err != nil {
		return fmt.Errorf("multicluster: store dispatch of %s: %w", rec.Workload, err)
	}
	rec.rev = rev
	d.dispatches[rec.Workload.UID] = rec
	return nil
}

func (d *Dispatcher) forget(ctx context.Context, rec *dispatch) error {
	err := bus.Remove(ctx, d.kv, rec.Workload.UID, rec.rev)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("%w: %s", errConflict, rec.Workload)
		}
		return fmt.Errorf("multicluster: forget dispatch %s: %w", rec.Workload, err)
	}
	delete(d.dispatches, rec.Workload.UID)
	return nil
}

// activity: a check is active when its parameters name a
// MultiClusterConfig that exists.
func (d *Dispatcher) activity(ac *v1beta1.AdmissionCheck) checks.Activity {
	if _, err := d.config(ac.Spec.Parameters); err != nil {
		return checks.Activity{Reason: "ConfigNotFound", Message: err.Error()}
	}
	return checks.Activity{Active: true, Reason: "Active", Message: "the multicluster dispatcher runs"}
}

var errNoConfig = errors.New("multicluster: no MultiClusterConfig for the check")

func (d *Dispatcher) config(p *v1beta1.AdmissionCheckParametersReference) (*v1beta1.MultiClusterConfig, error) {
	if p == nil || p.Kind != ConfigKind || p.APIGroup != v1beta1.GroupVersion.Group {
		return nil, fmt.Errorf("%w: parameters must name a %s of %s", errNoConfig, ConfigKind, v1beta1.GroupVersion.Group)
	}
	if d.configs == nil {
		return nil, fmt.Errorf("%w: not loaded yet", errNoConfig)
	}
	o, ok, err := d.configs.GetStore().GetByKey(p.Name)
	if err != nil || !ok {
		return nil, fmt.Errorf("%w: %s %q does not exist", errNoConfig, ConfigKind, p.Name)
	}
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("%w: %s %q not readable", errNoConfig, ConfigKind, p.Name)
	}
	var c v1beta1.MultiClusterConfig
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
		return nil, fmt.Errorf("%w: %s %q: %v", errNoConfig, ConfigKind, p.Name, err)
	}
	return &c, nil
}

// alive reports whether a worker was heard from within lost. Silence is
// counted only from when the dispatcher started and its reports consumer
// last came back from a failure: a worker is not lost because the
// manager could not read.
func (d *Dispatcher) alive(worker string, lost time.Duration) bool {
	if !d.reading {
		return true // no verdicts while the reports cannot be read
	}
	last := d.seen[worker]
	if last.Before(d.readingSince) {
		last = d.readingSince
	}
	return d.now().Sub(last) < lost
}

// fetched records whether the reports consumer could read.
func (d *Dispatcher) fetched(ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ok && !d.reading {
		d.readingSince = d.now()
	}
	d.reading = ok
}

// decide offers a reservation to the first workers.
func (d *Dispatcher) decide(ctx context.Context, r checks.Request) (checks.Answer, error) {
	ac, ok := d.ctrl.Check(r.Check)
	if !ok {
		return checks.Answer{}, fmt.Errorf("check %s not known", r.Check)
	}
	cfg, err := d.config(ac.Spec.Parameters)
	if err != nil {
		return checks.Answer{}, err
	}
	s := settingsOf(cfg)
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, err := d.get(ctx, r.Workload.UID)
	if err != nil {
		return checks.Answer{}, err
	}
	if rec != nil && rec.Admission == r.Admission {
		if rec.Winner != "" {
			return readyAnswer(rec.Winner), nil
		}
		return checks.Answer{State: events.CheckPending}, d.offer(ctx, rec, rec.Offered)
	}
	ad, ok := d.adapters[r.Workload.Kind]
	if !ok {
		return checks.Answer{State: events.CheckRejected, Message: fmt.Sprintf("kind %q cannot be dispatched to worker clusters", r.Workload.Kind)}, nil
	}
	objs, err := d.objects(ctx, ad, r.Workload)
	if err != nil {
		return checks.Answer{}, err
	}
	if len(objs) == 0 {
		return checks.Answer{}, nil // gone: its deletion releases the quota
	}
	size := 0
	for _, obj := range objs {
		raw, err := remoteCopy(ad, obj)
		if err != nil {
			return checks.Answer{State: events.CheckRejected, Message: "cannot copy the job to a worker: " + err.Error()}, nil
		}
		size += len(raw)
	}
	if size > maxOfferBytes {
		return checks.Answer{State: events.CheckRejected, Message: fmt.Sprintf("its copy (%d objects, %d bytes) is more than one message to a worker may carry (%d bytes)",
			len(objs), size, maxOfferBytes)}, nil
	}
	next := &dispatch{Workload: r.Workload, Check: r.Check, Admission: r.Admission, ClusterQueue: r.ClusterQueue, Config: cfg.Name, RoundAt: d.now()}
	if isGroup(r.Workload) {
		next.Members = len(objs)
		next.Growing = len(objs) < groupTotal(objs[0].GetAnnotations())
		next.Set = pod.LeaderWorkerSetOf(objs[0])
	}
	if rec != nil {
		// An earlier reservation's offers: the new ones replace them on
		// the workers offered again; the others withdraw.
		if err := d.withdrawAll(ctx, rec, "offered again for a new reservation"); err != nil {
			return checks.Answer{}, err
		}
		next.rev = rec.rev
	}
	first := s.nominate(nil, func(w string) bool { return d.alive(w, s.lost) })
	if w := d.setWorker(next, s); w != "" {
		first = []string{w}
	}
	if len(first) == 0 {
		return checks.Answer{State: events.CheckRejected, Message: "the MultiClusterConfig " + cfg.Name + " names no worker"}, nil
	}
	if err := d.offer(ctx, next, first); err != nil {
		return checks.Answer{}, err
	}
	d.log.Info().Str("workload", r.Workload.String()).Strs("workers", first).Msg("offered to workers")
	return checks.Answer{State: events.CheckPending}, nil
}

func readyAnswer(worker string) checks.Answer {
	return checks.Answer{State: events.CheckReady, Cluster: worker, Message: "admitted by worker cluster " + worker}
}

// setWorker is the worker, still heard from, that runs another group of
// rec's LeaderWorkerSet: rec goes there too ("" for none). Called with
// d.mu held.
func (d *Dispatcher) setWorker(rec *dispatch, s settings) string {
	if rec.Set == "" {
		return ""
	}
	for _, uid := range slices.Sorted(maps.Keys(d.dispatches)) {
		o := d.dispatches[uid]
		if uid != rec.Workload.UID && o.Set == rec.Set && o.Winner != "" && slices.Contains(s.clusters, o.Winner) && d.alive(o.Winner, s.lost) {
			return o.Winner
		}
	}
	return ""
}

// maxOfferBytes bounds the copies one offer carries, below NATS's default
// message size (1 MiB) with room for the rest of the message.
const maxOfferBytes = 960 << 10

// objects returns the manager's objects of workload w: its job, or a pod
// group's members that are not being deleted, oldest first; none when it
// is gone.
func (d *Dispatcher) objects(ctx context.Context, ad jobframework.Adapter, w events.WorkloadRef) ([]*unstructured.Unstructured, error) {
	res := d.dyn.Resource(ad.Kind().GVR()).Namespace(w.Namespace)
	if !isGroup(w) {
		obj, err := res.Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && string(obj.GetUID()) != jobframework.ObjectUID(w.UID) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", w, err)
		}
		return []*unstructured.Unstructured{obj}, nil
	}
	g, ok := ad.(jobframework.Grouper)
	if !ok {
		return nil, nil
	}
	l, err := res.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{g.GroupLabel(): w.Name}.String()})
	if err != nil {
		return nil, fmt.Errorf("list the members of %s: %w", w, err)
	}
	var out []*unstructured.Unstructured
	for i := range l.Items {
		if l.Items[i].GetDeletionTimestamp() == nil {
			out = append(out, &l.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b *unstructured.Unstructured) int {
		if c := a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time); c != 0 {
			return c
		}
		return strings.Compare(a.GetName(), b.GetName())
	})
	return out, nil
}

// carrying is a message of type typ about rec with a copy of its job (of
// each member of a pod group).
func (d *Dispatcher) carrying(ctx context.Context, rec *dispatch, typ string) (Message, error) {
	ad := d.adapters[rec.Workload.Kind]
	objs, err := d.objects(ctx, ad, rec.Workload)
	if err != nil {
		return Message{}, err
	}
	if len(objs) == 0 {
		return Message{}, fmt.Errorf("read %s: gone", rec.Workload)
	}
	m := Message{Type: typ, Workload: rec.Workload, Admission: rec.Admission}
	for _, obj := range objs {
		raw, err := remoteCopy(ad, obj)
		if err != nil {
			return Message{}, err
		}
		if isGroup(rec.Workload) {
			m.Members = append(m.Members, raw)
		} else {
			m.Object = raw
		}
	}
	if cfg, err := d.configNamed(rec.Config); err == nil {
		m.LostAfter = settingsOf(cfg).lost.String()
	}
	return m, nil
}

// offer records workers as offered the workload, then sends them its
// job. Called with d.mu held.
func (d *Dispatcher) offer(ctx context.Context, rec *dispatch, workers []string) error {
	m, err := d.carrying(ctx, rec, Offer)
	if err != nil {
		return err
	}
	for _, w := range workers {
		if !slices.Contains(rec.Offered, w) {
			rec.Offered = append(rec.Offered, w)
		}
	}
	// Recorded first: a worker offered but not recorded would be told to
	// withdraw its copy when it reports.
	if err := d.save(ctx, rec); err != nil {
		return err
	}
	for _, w := range workers {
		if err := d.send(ctx, w, m); err != nil {
			return err
		}
	}
	return nil
}

func (d *Dispatcher) send(ctx context.Context, worker string, m Message) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := d.js.Publish(ctx, ToWorker(worker, m.Workload.UID), raw); err != nil {
		return fmt.Errorf("multicluster: %s to %s: %w", m.Type, worker, err)
	}
	return nil
}

// withdrawAll withdraws the workload from every worker offered it.
// Called with d.mu held.
func (d *Dispatcher) withdrawAll(ctx context.Context, rec *dispatch, reason string) error {
	for _, w := range rec.Offered {
		if err := d.withdraw(ctx, rec, w, reason); err != nil {
			return err
		}
	}
	return nil
}

func (d *Dispatcher) withdraw(ctx context.Context, rec *dispatch, worker, reason string) error {
	return d.send(ctx, worker, Message{Type: Withdraw, Workload: rec.Workload, Admission: rec.Admission, Reason: reason})
}

// handleReport acts on a worker's report: the first admission wins,
// the winner's status is mirrored, the others withdraw.
func (d *Dispatcher) handleReport(ctx context.Context, m jetstream.Msg) error {
	worker, r, heartbeat, err := parseReport(m.Subject(), m.Data())
	if worker == "" {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if now := d.now(); now.After(d.seen[worker]) {
		d.seen[worker] = now
	}
	if heartbeat || err != nil {
		return err
	}
	rec, err := d.get(ctx, r.Workload.UID)
	if err != nil {
		return err
	}
	if rec == nil {
		if r.State != Gone {
			// About a workload the manager is done with: clean it up.
			return d.withdraw(ctx, &dispatch{Workload: r.Workload, Admission: r.Admission}, worker, "the manager no longer dispatches this workload")
		}
		return nil
	}
	log := d.log.With().Str("workload", rec.Workload.String()).Str("worker", worker).Str("state", r.State).Logger()
	if r.State == Gone && !slices.Contains(rec.Given, worker) && r.Admission == rec.Admission {
		rec.Given = append(rec.Given, worker)
		if err := d.save(ctx, rec); err != nil {
			return err
		}
		log.Info().Str("message", r.Message).Msg("worker gave the workload up")
	}
	v := judge(rec, worker, r)
	switch {
	case v.retry != "":
		return d.retry(ctx, rec, v.retry, 0)
	case v.withdraw:
		return d.withdraw(ctx, rec, worker, "admitted by another worker")
	case v.win:
		// Recorded before anything is said, conditionally: of two
		// dispatchers only one picks. Then the winner may run it, the
		// others withdraw, and the check is answered.
		rec.Winner = worker
		if err := d.save(ctx, rec); err != nil {
			return err
		}
		log.Info().Msg("workload admitted by a worker")
	}
	if rec.Winner == worker && !rec.Answered {
		if err := d.confirm(ctx, rec); err != nil {
			return err
		}
	}
	if rec.Winner == "" && r.State == Gone && rec.Admission == r.Admission {
		if cfg, err := d.configNamed(rec.Config); err == nil && allGone(rec, settingsOf(cfg)) {
			return d.retry(ctx, rec, "no worker cluster could take the workload"+colon(r.Message), refusedRetry)
		}
	}
	if v.mirror {
		return d.mirror(ctx, rec, r)
	}
	return nil
}

// parseReport reads a message from a worker: the worker its subject
// names (which its NATS permissions vouch for: "" when the subject is not
// a worker's), whether it is a heartbeat, and otherwise its report. A
// report must be about the workload its subject names: a worker may only
// speak of a workload on that workload's own subject.
func parseReport(subject string, data []byte) (worker string, r Report, heartbeat bool, err error) {
	worker, token, ok := splitFrom(subject)
	if !ok {
		return "", r, false, fmt.Errorf("%w: subject %q", ErrBadMessage, subject)
	}
	if token == heartbeatToken {
		return worker, r, true, nil
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return worker, r, false, fmt.Errorf("%w: report from %s: %v", ErrBadMessage, worker, err)
	}
	if err := r.Validate(); err != nil {
		return worker, r, false, fmt.Errorf("report from %s: %w", worker, err)
	}
	if r.Workload.UID != token {
		return worker, r, false, fmt.Errorf("%w: report from %s on the subject of workload %s is about workload %s", ErrBadMessage, worker, token, r.Workload.UID)
	}
	return worker, r, false, nil
}

// refusedRetry is how long a workload every worker refused waits before
// it is reserved and offered again.
const refusedRetry = 30 * time.Second

// confirm tells the winner to run the workload, the others to withdraw,
// and answers the check Ready; each step is repeated until all are done.
// Called with d.mu held.
func (d *Dispatcher) confirm(ctx context.Context, rec *dispatch) error {
	run, err := d.carrying(ctx, rec, Run)
	if err != nil {
		return err
	}
	if err := d.send(ctx, rec.Winner, run); err != nil {
		return err
	}
	sent(rec, run)
	for _, w := range rec.Offered {
		if w != rec.Winner {
			if err := d.withdraw(ctx, rec, w, "admitted by worker cluster "+rec.Winner); err != nil {
				return err
			}
		}
	}
	req := checks.Request{Check: rec.Check, Workload: rec.Workload, Admission: rec.Admission, ClusterQueue: rec.ClusterQueue}
	if err := d.ctrl.Answer(ctx, req, readyAnswer(rec.Winner)); err != nil {
		return err
	}
	rec.Answered = true
	return d.save(ctx, rec)
}

func (d *Dispatcher) configNamed(name string) (*v1beta1.MultiClusterConfig, error) {
	return d.config(&v1beta1.AdmissionCheckParametersReference{APIGroup: v1beta1.GroupVersion.Group, Kind: ConfigKind, Name: name})
}

// retry gives the workload's reservation up (the check asks to retry,
// after delay): it is reserved again and offered anew. Called with d.mu
// held.
func (d *Dispatcher) retry(ctx context.Context, rec *dispatch, why string, delay time.Duration) error {
	if err := d.withdrawAll(ctx, rec, why); err != nil {
		return err
	}
	req := checks.Request{Check: rec.Check, Workload: rec.Workload, Admission: rec.Admission, ClusterQueue: rec.ClusterQueue}
	if err := d.ctrl.Answer(ctx, req, checks.Answer{State: events.CheckRetry, Message: why, RequeueAfter: delay}); err != nil {
		return err
	}
	d.log.Info().Str("workload", rec.Workload.String()).Str("reason", why).Msg("dispatch given up; the workload is queued again")
	return d.forget(ctx, rec)
}

// mirror writes the winner's status onto the manager's object (each
// member's onto each member of a pod group).
func (d *Dispatcher) mirror(ctx context.Context, rec *dispatch, r Report) error {
	ad := d.adapters[rec.Workload.Kind]
	res := d.dyn.Resource(ad.Kind().GVR()).Namespace(rec.Workload.Namespace)
	if !isGroup(rec.Workload) {
		cur, err := res.Get(ctx, rec.Workload.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && string(cur.GetUID()) != jobframework.ObjectUID(rec.Workload.UID) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", rec.Workload, err)
		}
		return d.mirrorOne(ctx, res, rec, cur, r.Status, r.State)
	}
	g, ok := ad.(jobframework.Grouper)
	if !ok {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(r.Members)) {
		cur, err := res.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && cur.GetLabels()[g.GroupLabel()] != rec.Workload.Name {
			continue // not a member (any more)
		}
		if err != nil {
			return fmt.Errorf("read %s of %s: %w", name, rec.Workload, err)
		}
		if err := d.mirrorOne(ctx, res, rec, cur, r.Members[name], r.State); err != nil {
			return err
		}
	}
	return nil
}

// mirrorOne writes a copy's status onto the manager's object cur.
func (d *Dispatcher) mirrorOne(ctx context.Context, res dynamic.ResourceInterface, rec *dispatch, cur *unstructured.Unstructured, raw json.RawMessage, state string) error {
	status, err := statusOf(raw)
	if err != nil {
		return err
	}
	// Compared as JSON: the object read holds int64s where the report
	// decoded float64s.
	if was, err := json.Marshal(cur.Object["status"]); err == nil && bytes.Equal(was, jsonOf(status)) {
		return nil // a report handled again
	}
	prev, _ := cur.Object["status"].(map[string]any)
	cur.Object["status"] = status
	_, err = res.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	if (apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)) && state == Finished {
		// The end must reach the manager, or its job never finishes. A
		// status the API server refuses as a successor of the one it has
		// (counters going down after a re-dispatch) keeps the higher
		// counters.
		cur.Object["status"] = keepCounters(prev, status)
		_, err = res.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	}
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		d.log.Error().Err(err).Str("workload", rec.Workload.String()).Str("object", cur.GetName()).Str("state", state).Msg("worker's status refused by the manager's API server; not mirrored")
		return nil
	}
	if err != nil {
		return fmt.Errorf("mirror status of %s: %w", rec.Workload, err) // a conflict reads again
	}
	return nil
}

// ended withdraws a workload whose manager-side reservation ended.
func (d *Dispatcher) ended(ctx context.Context, env events.Envelope) error {
	var e struct {
		Workload  events.WorkloadRef `json:"workload"`
		Admission string             `json:"admission"`
	}
	if err := env.As(&e); err != nil {
		return fmt.Errorf("%w: %v", bus.ErrPoison, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, err := d.get(ctx, e.Workload.UID)
	if err != nil {
		return err
	}
	if rec == nil || e.Admission != "" && e.Admission != rec.Admission {
		return nil
	}
	if err := d.withdrawAll(ctx, rec, "the workload's reservation in the manager ended ("+env.Type+")"); err != nil {
		return err
	}
	d.log.Info().Str("workload", rec.Workload.String()).Str("event_type", env.Type).Msg("withdrawn from its workers")
	return d.forget(ctx, rec)
}

// watch looks every tick for winners lost, workers to offer to, and
// confirmations not finished.
func (d *Dispatcher) watch(ctx context.Context) {
	t := time.NewTicker(d.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		for _, uid := range slices.Sorted(maps.Keys(d.dispatches)) {
			if err := d.look(ctx, d.dispatches[uid]); err != nil && ctx.Err() == nil {
				d.log.Warn().Err(err).Str("workload", d.dispatches[uid].Workload.String()).Msg("dispatch not followed up yet")
			}
		}
		d.mu.Unlock()
	}
}

// look follows one dispatch up. Called with d.mu held.
func (d *Dispatcher) look(ctx context.Context, cached *dispatch) error {
	cfg, err := d.configNamed(cached.Config)
	if err != nil {
		return nil // its config is gone: nothing to go by
	}
	s := settingsOf(cfg)
	alive := func(w string) bool { return d.alive(w, s.lost) }
	switch {
	case cached.Winner != "" && !alive(cached.Winner):
	case cached.Winner != "" && !cached.Answered:
	case cached.Winner != "" && cached.Growing:
	case cached.Winner == "" && (!s.incremental || d.now().Sub(cached.RoundAt) >= s.round):
		if len(s.nominate(cached.Offered, alive)) == 0 {
			return nil
		}
	default:
		return nil
	}
	rec, err := d.get(ctx, cached.Workload.UID)
	if err != nil || rec == nil {
		return err
	}
	switch {
	case rec.Winner != "" && !alive(rec.Winner):
		return d.retry(ctx, rec, "worker cluster "+rec.Winner+" lost: not heard from for "+s.lost.String(), 0)
	case rec.Winner != "" && !rec.Answered:
		return d.confirm(ctx, rec)
	case rec.Winner != "" && rec.Growing:
		return d.grow(ctx, rec)
	case rec.Winner == "":
		if d.setWorker(rec, s) != "" {
			return nil // offered where its set's other groups run
		}
		next := s.nominate(rec.Offered, alive)
		if len(next) == 0 {
			return nil
		}
		rec.RoundAt = d.now()
		return d.offer(ctx, rec, next)
	}
	return nil
}

// grow sends the winner the members a pod group admitted on its first
// (fast admission) gained since it was dispatched, until it has them all.
// Called with d.mu held.
func (d *Dispatcher) grow(ctx context.Context, rec *dispatch) error {
	m, err := d.carrying(ctx, rec, Run)
	if err != nil {
		return err
	}
	if len(m.Members) <= rec.Members {
		return nil
	}
	if err := d.send(ctx, rec.Winner, m); err != nil {
		return err
	}
	sent(rec, m)
	d.log.Info().Str("workload", rec.Workload.String()).Int("members", rec.Members).Msg("new members sent to the worker")
	return d.save(ctx, rec)
}

// sent records in rec how many members of a pod group m carries, and
// whether the group has more to come.
func sent(rec *dispatch, m Message) {
	if len(m.Members) == 0 {
		return
	}
	rec.Members = len(m.Members)
	var first struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(m.Members[0], &first); err == nil {
		rec.Growing = len(m.Members) < groupTotal(first.Metadata.Annotations)
	}
}

// jsonOf encodes a status decoded from JSON (which cannot fail).
func jsonOf(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// EndedConsumer is the dispatcher's durable consumer of the events that
// end a dispatch.
func EndedConsumer() bus.ConsumerSpec {
	return bus.ConsumerSpec{Stream: bus.StreamEvents, Durable: EndedDurable, FilterSubjects: []string{
		events.SubjectFilter("workload", "finished", "*", "*"), events.SubjectFilter("workload", "deleted", "*", "*"),
		events.SubjectFilter("workload", "evicted", "*", "*"), events.SubjectFilter("workload", "preempted", "*", "*"),
		events.SubjectFilter("workload", "stopped", "*", "*"),
	}}
}
