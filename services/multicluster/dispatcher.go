package multicluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/services/integration"
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
	adapters map[string]integration.Adapter
	log      zerolog.Logger
	now      func() time.Time
	tick     time.Duration
	pub      checks.Publisher

	ctrl    *checks.Controller
	kv      jetstream.KeyValue
	configs cache.SharedIndexInformer

	mu         sync.Mutex
	dispatches map[string]*dispatch // by workload UID
	seen       map[string]time.Time // worker -> last heartbeat or report
	started    time.Time
	ready      bool
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
func NewDispatcher(dyn dynamic.Interface, js jetstream.JetStream, adapters []integration.Adapter, opts ...DispatcherOption) (*Dispatcher, error) {
	if dyn == nil || js == nil || len(adapters) == 0 {
		return nil, fmt.Errorf("%w: a Kubernetes client, JetStream and job kinds are all required", ErrConfig)
	}
	d := &Dispatcher{dyn: dyn, js: js, adapters: map[string]integration.Adapter{}, log: zerolog.Nop(), now: time.Now,
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
		kv, err := d.js.KeyValue(ctx, Bucket)
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
	d.started, d.ready = d.now(), true
	d.mu.Unlock()
	d.log.Info().Msg("multicluster dispatcher running")

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := consume(ctx, d.js, ReportsDurable, ReportsFilter, d.handleReport, d.log); err != nil && ctx.Err() == nil {
			d.log.Error().Err(err).Msg("workers' reports no longer read")
		}
	})
	wg.Go(func() {
		err := bus.Run(ctx, d.js, bus.ConsumerSpec{Stream: bus.StreamEvents, Durable: EndedDurable, FilterSubjects: []string{
			events.SubjectFilter("workload", "finished", "*", "*"), events.SubjectFilter("workload", "deleted", "*", "*"),
			events.SubjectFilter("workload", "evicted", "*", "*"), events.SubjectFilter("workload", "preempted", "*", "*"),
			events.SubjectFilter("workload", "stopped", "*", "*"),
		}}, d.ended, bus.WithLogger(d.log))
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

// load reads the dispatches kept in the bucket.
func (d *Dispatcher) load(ctx context.Context) error {
	keys, err := d.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("multicluster: list dispatches: %w", err)
	}
	for k := range keys.Keys() {
		e, err := d.kv.Get(ctx, k)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			return fmt.Errorf("multicluster: read dispatch %s: %w", k, err)
		}
		var rec dispatch
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			d.log.Warn().Err(err).Str("key", k).Msg("dispatch record not understood; dropped")
			_ = d.kv.Delete(ctx, k)
			continue
		}
		d.dispatches[k] = &rec
	}
	return nil
}

func (d *Dispatcher) save(ctx context.Context, rec *dispatch) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := d.kv.Put(ctx, rec.Workload.UID, raw); err != nil {
		return fmt.Errorf("multicluster: store dispatch of %s: %w", rec.Workload, err)
	}
	return nil
}

func (d *Dispatcher) forget(ctx context.Context, uid string) error {
	if err := d.kv.Delete(ctx, uid); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("multicluster: forget dispatch %s: %w", uid, err)
	}
	delete(d.dispatches, uid)
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

// alive reports whether a worker was heard from within lost. Right after
// the dispatcher starts every worker is, for as long.
func (d *Dispatcher) alive(worker string, lost time.Duration) bool {
	last, ok := d.seen[worker]
	if !ok || last.Before(d.started) {
		last = d.started
	}
	return d.now().Sub(last) < lost
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
	rec := d.dispatches[r.Workload.UID]
	if rec != nil && rec.Admission == r.Admission {
		if rec.Winner != "" {
			return readyAnswer(rec.Winner), nil
		}
		return checks.Answer{State: events.CheckPending}, d.offer(ctx, rec, rec.Offered)
	}
	ad, ok := d.adapters[r.Workload.Kind]
	if _, grouped := ad.(integration.Grouper); !ok || grouped {
		// Pods and pod groups stop by deletion and are queued by their
		// members: a copy of one object is not the workload.
		return checks.Answer{State: events.CheckRejected, Message: fmt.Sprintf("kind %q cannot be dispatched to worker clusters", r.Workload.Kind)}, nil
	}
	obj, err := d.dyn.Resource(ad.Kind().GVR()).Namespace(r.Workload.Namespace).Get(ctx, r.Workload.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && string(obj.GetUID()) != r.Workload.UID {
		return checks.Answer{}, nil // gone: its deletion releases the quota
	}
	if err != nil {
		return checks.Answer{}, fmt.Errorf("read %s: %w", r.Workload, err)
	}
	if _, err := remoteCopy(ad, obj); err != nil {
		return checks.Answer{State: events.CheckRejected, Message: "cannot copy the job to a worker: " + err.Error()}, nil
	}
	if rec != nil {
		// An earlier reservation's offers: the new ones replace them on
		// the workers offered again; the others withdraw.
		d.withdrawAll(ctx, rec, "offered again for a new reservation")
	}
	rec = &dispatch{Workload: r.Workload, Check: r.Check, Admission: r.Admission, ClusterQueue: r.ClusterQueue, Config: cfg.Name, RoundAt: d.now()}
	first := s.nominate(nil, func(w string) bool { return d.alive(w, s.lost) })
	if len(first) == 0 {
		return checks.Answer{State: events.CheckRejected, Message: "the MultiClusterConfig " + cfg.Name + " names no worker"}, nil
	}
	if err := d.offer(ctx, rec, first); err != nil {
		return checks.Answer{}, err
	}
	d.log.Info().Str("workload", r.Workload.String()).Strs("workers", first).Msg("offered to workers")
	return checks.Answer{State: events.CheckPending}, nil
}

func readyAnswer(worker string) checks.Answer {
	return checks.Answer{State: events.CheckReady, Cluster: worker, Message: "admitted by worker cluster " + worker}
}

// carrying is a message of type typ about rec with a copy of its job.
func (d *Dispatcher) carrying(ctx context.Context, rec *dispatch, typ string) (Message, error) {
	ad := d.adapters[rec.Workload.Kind]
	obj, err := d.dyn.Resource(ad.Kind().GVR()).Namespace(rec.Workload.Namespace).Get(ctx, rec.Workload.Name, metav1.GetOptions{})
	if err != nil {
		return Message{}, fmt.Errorf("read %s: %w", rec.Workload, err)
	}
	raw, err := remoteCopy(ad, obj)
	if err != nil {
		return Message{}, err
	}
	return Message{Type: typ, Workload: rec.Workload, Admission: rec.Admission, Object: raw}, nil
}

// offer sends the workload's job to workers and records them as offered.
// Called with d.mu held.
func (d *Dispatcher) offer(ctx context.Context, rec *dispatch, workers []string) error {
	m, err := d.carrying(ctx, rec, Offer)
	if err != nil {
		return err
	}
	for _, w := range workers {
		if err := d.send(ctx, w, m); err != nil {
			return err
		}
		if !slices.Contains(rec.Offered, w) {
			rec.Offered = append(rec.Offered, w)
		}
	}
	d.dispatches[rec.Workload.UID] = rec
	return d.save(ctx, rec)
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
func (d *Dispatcher) withdrawAll(ctx context.Context, rec *dispatch, reason string) {
	for _, w := range rec.Offered {
		d.withdraw(ctx, rec, w, reason)
	}
}

func (d *Dispatcher) withdraw(ctx context.Context, rec *dispatch, worker, reason string) {
	if err := d.send(ctx, worker, Message{Type: Withdraw, Workload: rec.Workload, Admission: rec.Admission, Reason: reason}); err != nil {
		// The worker's next report about the copy asks again.
		d.log.Warn().Err(err).Str("workload", rec.Workload.String()).Str("worker", worker).Msg("withdrawal not sent")
	}
}

// handleReport acts on a worker's report: the first admission wins,
// the winner's status is mirrored, the others withdraw.
func (d *Dispatcher) handleReport(ctx context.Context, m jetstream.Msg) error {
	worker, token, ok := splitFrom(m.Subject())
	if !ok {
		return fmt.Errorf("%w: subject %q", ErrBadMessage, m.Subject())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if now := d.now(); now.After(d.seen[worker]) {
		d.seen[worker] = now
	}
	if token == heartbeatToken {
		return nil
	}
	var r Report
	if err := json.Unmarshal(m.Data(), &r); err != nil {
		return fmt.Errorf("%w: report from %s: %v", ErrBadMessage, worker, err)
	}
	if err := r.Validate(); err != nil {
		return fmt.Errorf("report from %s: %w", worker, err)
	}
	rec := d.dispatches[r.Workload.UID]
	if rec == nil {
		if r.State != Gone {
			// About a workload the manager is done with: clean it up.
			d.withdraw(ctx, &dispatch{Workload: r.Workload, Admission: r.Admission}, worker, "the manager no longer dispatches this workload")
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
	req := checks.Request{Check: rec.Check, Workload: rec.Workload, Admission: rec.Admission, ClusterQueue: rec.ClusterQueue}
	switch {
	case v.retry != "":
		return d.retry(ctx, rec, v.retry)
	case v.withdraw:
		d.withdraw(ctx, rec, worker, "admitted by another worker")
		return nil
	case v.win:
		// The winner may run it; the others withdraw. Run goes first: a
		// winner that misses it keeps a held copy, never a running one.
		run, err := d.carrying(ctx, rec, Run)
		if err != nil {
			return err
		}
		if err := d.send(ctx, worker, run); err != nil {
			return err
		}
		rec.Winner = worker
		if err := d.save(ctx, rec); err != nil {
			return err
		}
		for _, w := range rec.Offered {
			if w != worker {
				d.withdraw(ctx, rec, w, "admitted by worker cluster "+worker)
			}
		}
		if err := d.ctrl.Answer(ctx, req, readyAnswer(worker)); err != nil {
			return err
		}
		log.Info().Msg("workload admitted by a worker")
	}
	if rec.Winner == "" && r.State == Gone && rec.Admission == r.Admission {
		if cfg, err := d.configNamed(rec.Config); err == nil && allGone(rec, settingsOf(cfg)) {
			return d.retry(ctx, rec, "no worker cluster could take the workload"+colon(r.Message))
		}
	}
	if v.mirror {
		return d.mirror(ctx, rec, r)
	}
	return nil
}

func (d *Dispatcher) configNamed(name string) (*v1beta1.MultiClusterConfig, error) {
	return d.config(&v1beta1.AdmissionCheckParametersReference{APIGroup: v1beta1.GroupVersion.Group, Kind: ConfigKind, Name: name})
}

// retry gives the workload's reservation up (the check asks to retry):
// it is reserved again and offered anew. Called with d.mu held.
func (d *Dispatcher) retry(ctx context.Context, rec *dispatch, why string) error {
	req := checks.Request{Check: rec.Check, Workload: rec.Workload, Admission: rec.Admission, ClusterQueue: rec.ClusterQueue}
	if err := d.ctrl.Answer(ctx, req, checks.Answer{State: events.CheckRetry, Message: why}); err != nil {
		return err
	}
	d.withdrawAll(ctx, rec, why)
	d.log.Info().Str("workload", rec.Workload.String()).Str("reason", why).Msg("dispatch given up; the workload is queued again")
	return d.forget(ctx, rec.Workload.UID)
}

// mirror writes the winner's status onto the manager's object.
func (d *Dispatcher) mirror(ctx context.Context, rec *dispatch, r Report) error {
	ad := d.adapters[rec.Workload.Kind]
	res := d.dyn.Resource(ad.Kind().GVR()).Namespace(rec.Workload.Namespace)
	cur, err := res.Get(ctx, rec.Workload.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && string(cur.GetUID()) != rec.Workload.UID {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", rec.Workload, err)
	}
	status, err := statusOf(r.Status)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(cur.Object["status"], status) {
		return nil
	}
	cur.Object["status"] = status
	if _, err := res.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			d.log.Warn().Err(err).Str("workload", rec.Workload.String()).Msg("worker's status refused by the manager's API server; not mirrored")
			return nil
		}
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
	rec := d.dispatches[e.Workload.UID]
	if rec == nil || e.Admission != "" && e.Admission != rec.Admission {
		return nil
	}
	d.withdrawAll(ctx, rec, "the workload's reservation in the manager ended ("+env.Type+")")
	d.log.Info().Str("workload", rec.Workload.String()).Str("event_type", env.Type).Msg("withdrawn from its workers")
	return d.forget(ctx, rec.Workload.UID)
}

// watch looks every tick for winners lost and rounds run out.
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
		for _, rec := range d.dispatches {
			cfg, err := d.configNamed(rec.Config)
			if err != nil {
				continue
			}
			s := settingsOf(cfg)
			switch {
			case rec.Winner != "" && !d.alive(rec.Winner, s.lost):
				if err := d.retry(ctx, rec, "worker cluster "+rec.Winner+" lost: not heard from for "+s.lost.String()); err != nil {
					d.log.Warn().Err(err).Str("workload", rec.Workload.String()).Msg("lost worker's workload not given up yet")
				}
			case rec.Winner == "" && s.incremental && d.now().Sub(rec.RoundAt) >= s.round:
				next := s.nominate(rec.Offered, func(w string) bool { return d.alive(w, s.lost) })
				if len(next) == 0 {
					continue
				}
				rec.RoundAt = d.now()
				if err := d.offer(ctx, rec, next); err != nil {
					d.log.Warn().Err(err).Str("workload", rec.Workload.String()).Msg("next round not offered yet")
				}
			}
		}
		d.mu.Unlock()
	}
}
