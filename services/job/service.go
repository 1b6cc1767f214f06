package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// Kind is this integration's name in workload keys and subjects.
const Kind = "job"

// StoppedAnnotation records the admission time of the reservation a Job
// was stopped from, so that the same reservation, still in the ledger
// until quota accounting releases it, never starts the Job again.
const StoppedAnnotation = "sluice.dev/stopped-reservation"

// Publisher publishes an event under its deterministic id.
type Publisher interface {
	Publish(ctx context.Context, ev events.Event, id string) error
}

// Config is the job integration's configuration.
type Config struct {
	// Workers reconcile Jobs in parallel.
	Workers int
	// Resync re-lists Jobs this often.
	Resync time.Duration
	// WebhookAddress serves the suspend-on-create webhook ("" disables
	// it; Jobs are then suspended right after creation, which lets their
	// pods start for a moment).
	WebhookAddress string
	// WebhookHost is the host name or IP the API server uses to reach the
	// webhook.
	WebhookHost string
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("job: workers %d: must be at least 1", c.Workers)
	}
	if c.Resync <= 0 {
		return fmt.Errorf("job: resync %s: must be positive", c.Resync)
	}
	if c.WebhookAddress != "" && c.WebhookHost == "" {
		return errors.New("job: a webhook address needs the host the API server reaches it by")
	}
	return nil
}

// Service is the batch/v1 Job integration.
type Service struct {
	cfg  Config
	kube kubernetes.Interface
	js   jetstream.JetStream
	pub  Publisher
	log  zerolog.Logger

	wlKV     jetstream.KeyValue
	fenceKV  jetstream.KeyValue
	events   jetstream.Stream
	lister   batchlisters.JobLister
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	// locks serialise the work on one Job across the workqueue and the
	// eviction consumer, so a start and a stop of the same Job never
	// interleave.
	locks keyLocks

	mu     sync.Mutex
	config *configstore.Store
	snap   configstore.Snapshot
	// held: reservations of Jobs in the ledger, by engine key.
	held map[string]ledger.Reservation
	// ledgerKeys: the Job reservations each ledger key holds.
	ledgerKeys map[string][]string
}

// New returns the integration.
func New(cfg Config, kube kubernetes.Interface, js jetstream.JetStream, pub Publisher, log zerolog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{
		cfg:        cfg,
		kube:       kube,
		js:         js,
		pub:        pub,
		log:        log,
		config:     configstore.New(),
		held:       map[string]ledger.Reservation{},
		ledgerKeys: map[string][]string{},
		locks:      keyLocks{m: map[string]*keyLock{}},
		// Per-Job backoff only: the default controller limiter adds a
		// queue-wide 10/s bucket, which throttles every Job once a burst
		// of write conflicts retries.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "job"}),
	}, nil
}

// Run reconciles Jobs until ctx ends, then finishes in-flight work.
func (s *Service) Run(ctx context.Context) error {
	var err error
	if s.wlKV, err = bus.OpenKV(ctx, s.js, workloads.Bucket); err != nil {
		return fmt.Errorf("job: open %s: %w", workloads.Bucket, err)
	}
	if s.fenceKV, err = bus.OpenKV(ctx, s.js, fence.Bucket); err != nil {
		return fmt.Errorf("job: open %s: %w", fence.Bucket, err)
	}
	if s.events, err = s.js.Stream(ctx, bus.StreamEvents); err != nil {
		return fmt.Errorf("job: open stream %s: %w", bus.StreamEvents, err)
	}
	cfgKV, err := bus.OpenKV(ctx, s.js, configstore.Bucket)
	if err != nil {
		return fmt.Errorf("job: open %s: %w", configstore.Bucket, err)
	}
	ledKV, err := bus.OpenKV(ctx, s.js, ledger.Bucket)
	if err != nil {
		return fmt.Errorf("job: open %s: %w", ledger.Bucket, err)
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	s.recorder = broadcaster.NewRecorder(scheme(), corev1.EventSource{Component: "sluice-job"})

	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 8)
	spawn := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil && runCtx.Err() == nil {
				errc <- fmt.Errorf("job: %s: %w", name, err)
			}
		}()
	}

	cfgSynced := make(chan struct{})
	spawn("configuration watch", func(ctx context.Context) error { return s.watchConfig(ctx, cfgKV, cfgSynced) })
	ledSynced := make(chan struct{})
	spawn("ledger watch", func(ctx context.Context) error { return s.watchLedger(ctx, ledKV, ledSynced) })

	factory := informers.NewSharedInformerFactoryWithOptions(s.kube, s.cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = v1beta1.QueueNameLabel }))
	inf := factory.Batch().V1().Jobs()
	s.lister = inf.Lister()
	enqueue := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(k)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(o, n any) {
			if relevant(o, n) {
				enqueue(n)
			}
		},
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("job: watch jobs: %w", err)
	}
	factory.Start(runCtx.Done())
	defer factory.Shutdown()

	if s.cfg.WebhookAddress != "" {
		wh, err := NewWebhook(WithAddress(s.cfg.WebhookAddress), WithHosts(s.cfg.WebhookHost), WithLogger(s.log))
		if err != nil {
			return err
		}
		if _, err := wh.Listen(); err != nil {
			return err
		}
		url, err := wh.URL(s.cfg.WebhookHost)
		if err != nil {
			return err
		}
		if err := EnsureWebhookConfiguration(ctx, s.kube, "sluice-job", url, wh.CABundle()); err != nil {
			return err
		}
		spawn("webhook", wh.Run)
	}

	// Decide nothing before the Jobs, the configuration and the ledger
	// are all known: a Job must never run without its reservation, and
	// must never be stopped for lack of one that is only not seen yet.
	for _, ch := range []<-chan struct{}{cfgSynced, ledSynced} {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil
	}

	spawn("eviction consumer", func(ctx context.Context) error {
		return bus.Run(ctx, s.js, bus.ConsumerSpec{
			Stream:  bus.StreamEvents,
			Durable: "job-evictions",
			FilterSubjects: []string{
				events.SubjectFilter("workload", "preempted", Kind, "*"),
				events.SubjectFilter("workload", "evicted", Kind, "*"),
			},
		}, s.handleEviction, bus.WithLogger(s.log))
	})
	spawn("pending consumer", func(ctx context.Context) error {
		return bus.Run(ctx, s.js, bus.ConsumerSpec{
			Stream:         bus.StreamEvents,
			Durable:        "job-pending",
			FilterSubjects: []string{events.SubjectFilter("workload", "pending", Kind, "*")},
		}, s.handlePending, bus.WithLogger(s.log))
	})
	workersDone := make(chan struct{})
	go func() {
		var ww sync.WaitGroup
		for range s.cfg.Workers {
			ww.Add(1)
			go func() {
				defer ww.Done()
				for s.next(ctx) {
				}
			}()
		}
		ww.Wait()
		close(workersDone)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	// Ordered shutdown: stop taking work, finish what is in flight, then
	// stop consumers and watches.
	s.queue.ShutDownWithDrain()
	<-workersDone
	cancel()
	return runErr
}

// relevant reports whether a Job update can change what Sluice does: most
// updates are pod counts in the status, which it ignores.
func relevant(o, n any) bool {
	oj, ok1 := o.(*batchv1.Job)
	nj, ok2 := n.(*batchv1.Job)
	if !ok1 || !ok2 {
		return true
	}
	if oj.ResourceVersion == nj.ResourceVersion {
		return true // a resync: reconcile anyway
	}
	if ptrBool(oj.Spec.Suspend) != ptrBool(nj.Spec.Suspend) || oj.UID != nj.UID {
		return true
	}
	of, _, _ := IsFinished(oj)
	nf, _, _ := IsFinished(nj)
	if of != nf {
		return true
	}
	return !equalMaps(oj.Labels, nj.Labels) || !equalMaps(oj.Annotations, nj.Annotations)
}

func ptrBool(b *bool) bool { return b != nil && *b }

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func (s *Service) next(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.sync(wctx, key); err != nil {
		if errors.Is(err, errNotAnnounced) {
			// The admission is stored but not yet announced; it will be
			// within a cycle.
			s.queue.AddAfter(key, announceWait)
			return true
		}
		s.log.Warn().Err(err).Str("workload", Kind+"/"+key).Msg("job not reconciled; retrying")
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	return true
}

// watchKV feeds every entry of a bucket to apply, closing synced once the
// initial values are in, until ctx ends.
func watchKV(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, synced chan<- struct{}, apply func(jetstream.KeyValueEntry, bool)) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	// After a reconnect the watch would resume only once its missed
	// heartbeats are noticed, about 20 s later; start it again at once.
	reconnected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(reconnected)
	done := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-reconnected:
			_ = w.Stop()
			if w, err = kv.WatchAll(ctx); err != nil {
				return err
			}
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("watch of %s closed", kv.Bucket())
			}
			if e == nil {
				if !done {
					done = true
					close(synced)
				}
				continue
			}
			apply(e, done)
		}
	}
}

func (s *Service) watchConfig(ctx context.Context, kv jetstream.KeyValue, synced chan<- struct{}) error {
	return watchKV(ctx, s.js.Conn(), kv, synced, func(e jetstream.KeyValueEntry, live bool) {
		s.mu.Lock()
		if e.Operation() == jetstream.KeyValuePut {
			s.config.Apply(e.Key(), e.Value())
		} else {
			s.config.Apply(e.Key(), nil)
		}
		s.snap, _ = s.config.Snapshot()
		s.mu.Unlock()
		if live && s.lister != nil {
			// A new queue or priority class may unblock Jobs.
			s.enqueueAll()
		}
	})
}

func (s *Service) enqueueAll() {
	jobs, err := s.lister.List(everything())
	if err != nil {
		return
	}
	for _, j := range jobs {
		s.queue.Add(j.Namespace + "/" + j.Name)
	}
}

func (s *Service) watchLedger(ctx context.Context, kv jetstream.KeyValue, synced chan<- struct{}) error {
	return watchKV(ctx, s.js.Conn(), kv, synced, func(e jetstream.KeyValueEntry, _ bool) {
		var ent ledger.Entry
		if e.Operation() == jetstream.KeyValuePut {
			var err error
			if ent, err = ledger.Decode(e.Value()); err != nil {
				s.log.Error().Err(err).Str("key", e.Key()).Msg("corrupt ledger entry")
				return
			}
		}
		for _, k := range s.setLedger(e.Key(), ent) {
			s.queue.Add(k)
		}
	})
}

// setLedger records one ledger key's Job reservations and returns the
// cache keys (namespace/name) of the Jobs whose reservation changed.
func (s *Service) setLedger(key string, ent ledger.Entry) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []string
	now := map[string]bool{}
	for wk, r := range ent.Reservations {
		if !strings.HasPrefix(wk, Kind+"/") {
			continue
		}
		now[wk] = true
		if old, ok := s.held[wk]; !ok || !old.AdmittedAt.Equal(r.AdmittedAt) {
			changed = append(changed, strings.TrimPrefix(wk, Kind+"/"))
		}
		s.held[wk] = r
	}
	for _, wk := range s.ledgerKeys[key] {
		if !now[wk] {
			delete(s.held, wk)
			changed = append(changed, strings.TrimPrefix(wk, Kind+"/"))
		}
	}
	keys := make([]string, 0, len(now))
	for wk := range now {
		keys = append(keys, wk)
	}
	sort.Strings(keys)
	s.ledgerKeys[key] = keys
	return changed
}

func (s *Service) reservation(ns, name string) (ledger.Reservation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.held[Kind+"/"+ns+"/"+name]
	return r, ok
}

// sync brings one Job and its workload record in line.
func (s *Service) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	defer s.locks.lock(key)()
	rk := workloads.Key(events.WorkloadRef{Kind: Kind, Namespace: ns, Name: name})
	rec, err := s.record(ctx, rk)
	if err != nil {
		return err
	}
	job, err := s.lister.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		if rec != nil {
			return s.gone(ctx, rk, rec, nil)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if rec != nil && rec.Workload.UID != string(job.UID) {
		// The Job was deleted and created again under the same name.
		if err := s.gone(ctx, rk, rec, nil); err != nil {
			return err
		}
		rec = nil
	}
	if finished, ok, msg := IsFinished(job); finished {
		if rec != nil {
			return s.gone(ctx, rk, rec, &events.WorkloadFinishedV1{Succeeded: ok, Message: msg})
		}
		return nil
	}
	if _, managed := job.Labels[v1beta1.QueueNameLabel]; !managed {
		return nil
	}
	if rec == nil {
		if rec, err = s.submit(ctx, rk, job); err != nil || rec == nil {
			return err
		}
	}
	r, held := s.reservation(ns, name)
	suspended := job.Spec.Suspend != nil && *job.Spec.Suspend
	switch {
	case held && suspended && job.Annotations[StoppedAnnotation] != r.Admission():
		return s.start(ctx, job, rec, r)
	case held && !suspended:
		return s.confirmStart(ctx, rec, r)
	case !held && !suspended:
		// Running without quota: suspended by the webhook's absence, or
		// its reservation is gone. Stop it; a Job only runs while its
		// workload holds a reservation. The informer may be behind a stop
		// that already happened: look at the Job itself first.
		fresh, err := s.kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if fresh.UID != job.UID || (fresh.Spec.Suspend != nil && *fresh.Spec.Suspend) {
			return nil
		}
		if finished, _, _ := IsFinished(fresh); finished {
			return nil
		}
		if _, still := s.reservation(ns, name); still {
			return nil // admitted meanwhile: the next sync starts it
		}
		return s.stop(ctx, fresh, rec.Workload, "", "NoReservation", "no quota is reserved for this job", "")
	}
	return nil
}

func (s *Service) record(ctx context.Context, rk string) (*events.WorkloadSubmittedV1, error) {
	e, err := s.wlKV.Get(ctx, rk)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read workload %s: %w", rk, err)
	}
	var rec events.WorkloadSubmittedV1
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("read workload %s: %w", rk, err)
	}
	return &rec, nil
}

// submit writes the workload record and announces it.
func (s *Service) submit(ctx context.Context, rk string, job *batchv1.Job) (*events.WorkloadSubmittedV1, error) {
	s.mu.Lock()
	prio := StaticPriorityResolver{WorkloadPriorityClasses: s.snap.WorkloadPriorityClasses, PriorityClasses: s.snap.PriorityClasses}
	s.mu.Unlock()
	w, err := WorkloadFromJob(job, prio)
	if err != nil {
		// Bad input is reported on the Job and not retried: a change to
		// the Job or the configuration brings it back.
		s.recorder.Eventf(job, corev1.EventTypeWarning, "InvalidWorkload", "not queued: %v", err)
		s.log.Warn().Err(err).Str("workload", Kind+"/"+job.Namespace+"/"+job.Name).Msg("job not queued")
		return nil, nil
	}
	rec := toEvent(w)
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if _, err := s.wlKV.Create(ctx, rk, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("write workload %s: %w", rk, err)
	}
	if err := s.pub.Publish(ctx, rec, events.ID(rec.Type(), rec.Workload.UID)); err != nil {
		return nil, err
	}
	return &rec, nil
}

func toEvent(w Workload) events.WorkloadSubmittedV1 {
	ev := events.WorkloadSubmittedV1{
		Workload:      events.WorkloadRef{Kind: Kind, Namespace: w.Namespace, Name: w.Name, UID: w.UID},
		LocalQueue:    w.LocalQueue,
		Priority:      w.Priority,
		PriorityClass: w.PriorityClass,
		CreationTime:  w.CreationTime,
	}
	for _, ps := range w.PodSets {
		p := events.PodSetV1{Name: ps.Name, Count: ps.Count, MinCount: ps.MinCount, Requests: map[string]string{},
			NodeSelector: ps.NodeSelector, Tolerations: ps.Tolerations}
		for r, q := range ps.Requests {
			p.Requests[string(r)] = q.String()
		}
		ev.PodSets = append(ev.PodSets, p)
	}
	return ev
}

// gone announces a Job that finished or disappeared and deletes its
// record; quota accounting then releases its reservation.
func (s *Service) gone(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, fin *events.WorkloadFinishedV1) error {
	r, _ := s.reservation(rec.Workload.Namespace, rec.Workload.Name)
	// The fence first, so no preemption of the admission is announced
	// after the end; then the record: whoever learns of the end from the
	// event then finds the record gone, and never queues the workload
	// again.
	if err := fence.Finish(ctx, s.fenceKV, rk, r.Admission()); err != nil {
		return err
	}
	if err := s.wlKV.Delete(ctx, rk); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete workload %s: %w", rk, err)
	}
	if fin != nil {
		fin.Workload, fin.ClusterQueue = rec.Workload, r.ClusterQueue
		return s.pub.Publish(ctx, *fin, events.ID(fin.Type(), rec.Workload.UID))
	}
	ev := events.WorkloadDeletedV1{Workload: rec.Workload}
	return s.pub.Publish(ctx, ev, events.ID(ev.Type(), rec.Workload.UID))
}

// start applies a reservation to a suspended Job: one API write. The
// write is fenced three ways, so that a Job never runs on a reservation
// that is gone or given away:
//   - the admission must be announced (its admitted event stored), so its
//     started event never comes first;
//   - the fence must let it start (no stop of this admission decided),
//     and holds off stops until the start is announced;
//   - the patch carries the resourceVersion the decision was made on, so a
//     stale view of the Job (the informer lagging behind a stop) fails
//     with a conflict instead of unsuspending it.
func (s *Service) start(ctx context.Context, job *batchv1.Job, rec *events.WorkloadSubmittedV1, r ledger.Reservation) error {
	a := Assignment{ClusterQueue: r.ClusterQueue}
	for _, ps := range r.PodSets {
		a.PodSets = append(a.PodSets, PodSetAssignment{Name: ps.Name, Count: ps.Count, Flavors: ps.Flavors})
	}
	s.mu.Lock()
	flavors := s.snap.Flavors
	s.mu.Unlock()
	patch, err := AdmissionPatch(job, a, flavors)
	if err != nil {
		s.recorder.Eventf(job, corev1.EventTypeWarning, "AdmissionFailed", "cannot apply admission: %v", err)
		return nil
	}
	if patch, err = withResourceVersion(patch, job.ResourceVersion); err != nil {
		return err
	}
	if err := s.announced(ctx, rec.Workload, r); err != nil {
		return err
	}
	rk := workloads.Key(rec.Workload)
	admission := r.Admission()
	if _, err := fence.BeginStart(ctx, s.fenceKV, rk, admission); err != nil {
		if errors.Is(err, fence.ErrStopping) {
			// Its preemption (or drain) was announced, maybe before this
			// service saw the reservation; stop it here so its quota is
			// released whichever came first.
			return s.stop(ctx, job, rec.Workload, r.ClusterQueue, "Stopped", "admission withdrawn before the job started: preempted or evicted", admission)
		}
		return err
	}
	if _, err := s.kube.BatchV1().Jobs(job.Namespace).Patch(ctx, job.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if aerr := fence.AbortStart(ctx, s.fenceKV, rk, admission); aerr != nil {
			s.log.Warn().Err(aerr).Str("workload", Kind+"/"+job.Namespace+"/"+job.Name).Msg("start not released; stops wait until it is retried")
		}
		return fmt.Errorf("unsuspend: %w", err)
	}
	s.recorder.Eventf(job, corev1.EventTypeNormal, "Admitted", "admitted by ClusterQueue %s: %s", r.ClusterQueue, describe(r))
	return s.announceStart(ctx, rec, r)
}

// announceStart publishes started and then lets stops of the admission
// proceed.
func (s *Service) announceStart(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation) error {
	ev := events.WorkloadStartedV1{Workload: rec.Workload, ClusterQueue: r.ClusterQueue}
	if err := s.pub.Publish(ctx, ev, events.ID(ev.Type(), rec.Workload.UID, r.Admission())); err != nil {
		return err
	}
	return fence.EndStart(ctx, s.fenceKV, workloads.Key(rec.Workload), r.Admission())
}

// confirmStart finishes a start that was applied but not announced (the
// service stopped between the two): stops of that admission wait for it.
func (s *Service) confirmStart(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation) error {
	st, err := fence.Get(ctx, s.fenceKV, workloads.Key(rec.Workload))
	if err != nil {
		return err
	}
	if st.Admission != r.Admission() || st.Phase != fence.Starting {
		return nil
	}
	return s.announceStart(ctx, rec, r)
}

// errNotAnnounced: the admission's event is not in the stream yet.
var errNotAnnounced = errors.New("admission not announced yet")

// announceWait is how long a Job whose admission is not announced yet
// waits before it is looked at again; about one admission cycle.
const announceWait = 20 * time.Millisecond

// announced checks that the admitted event of the reservation is the last
// one stored for the workload.
func (s *Service) announced(ctx context.Context, w events.WorkloadRef, r ledger.Reservation) error {
	msg, err := s.events.GetLastMsgForSubject(ctx, events.WorkloadSubject(events.TypeWorkloadAdmittedV1, w))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return errNotAnnounced
	}
	if err != nil {
		return fmt.Errorf("read admission of %s: %w", w, err)
	}
	if msg.Header.Get(jetstream.MsgIDHeader) != workloads.AdmittedID(w, r.Admission()) {
		return errNotAnnounced
	}
	return nil
}

// withResourceVersion adds metadata.resourceVersion to a merge patch: the
// API server then applies it only to that version of the object.
func withResourceVersion(patch []byte, rv string) ([]byte, error) {
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("fence patch on resourceVersion: %w", err)
	}
	meta, _ := p["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["resourceVersion"] = rv
	p["metadata"] = meta
	return json.Marshal(p)
}

func describe(r ledger.Reservation) string {
	var parts []string
	for _, ps := range r.PodSets {
		var fl []string
		for res, f := range ps.Flavors {
			fl = append(fl, res+"="+f)
		}
		sort.Strings(fl)
		parts = append(parts, fmt.Sprintf("%s×%d on %s", ps.Name, ps.Count, strings.Join(fl, ",")))
	}
	return strings.Join(parts, "; ")
}

// stop suspends a Job and restores its template, then announces it.
// admission names the admission it is stopped from when the caller knows
// it (a preemption or eviction names it); otherwise it is the one this
// service sees in the ledger, if any.
func (s *Service) stop(ctx context.Context, job *batchv1.Job, ref events.WorkloadRef, cq, reason, message, admission string) error {
	r, held := s.reservation(job.Namespace, job.Name)
	if admission == "" && held {
		admission = r.Admission()
	}
	if admission != "" {
		mark, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid": job.UID, "annotations": map[string]string{StoppedAnnotation: admission}}})
		if err != nil {
			return err
		}
		if _, err := s.kube.BatchV1().Jobs(job.Namespace).Patch(ctx, job.Name, types.MergePatchType, mark, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("mark stopped: %w", err)
		}
	}
	steps, err := EvictionSteps(job)
	if err != nil {
		return err
	}
	for _, st := range steps {
		var sub []string
		if st.Subresource != "" {
			sub = []string{st.Subresource}
		}
		if _, err := s.kube.BatchV1().Jobs(job.Namespace).Patch(ctx, job.Name, st.Type, st.Patch, metav1.PatchOptions{}, sub...); err != nil {
			return fmt.Errorf("evict (%s): %w", st.Name, err)
		}
		if st.Name == "suspend" || st.Name == "clear-start-time" {
			// The next step must see this one: re-read.
			if job, err = s.kube.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
	}
	s.recorder.Event(job, corev1.EventTypeNormal, reason, message)
	if cq == "" {
		cq = r.ClusterQueue
	}
	ev := events.WorkloadStoppedV1{Workload: ref, ClusterQueue: cq, Reason: reason, Admission: admission}
	return s.pub.Publish(ctx, ev, events.ID(ev.Type(), ref.UID, admission))
}

// handleEviction stops a preempted or evicted Job.
func (s *Service) handleEviction(ctx context.Context, env events.Envelope) error {
	var ref events.WorkloadRef
	var cq, reason, message, admission string
	switch env.Type {
	case events.TypeWorkloadPreemptedV1:
		var e events.WorkloadPreemptedV1
		if err := env.As(&e); err != nil {
			return bus.Poison(err)
		}
		ref, cq, admission = e.Workload, e.ClusterQueue, e.Admission
		reason = "Preempted"
		message = fmt.Sprintf("preempted (%s) by %s/%s", e.Reason, e.Preemptor.Namespace, e.Preemptor.Name)
	case events.TypeWorkloadEvictedV1:
		var e events.WorkloadEvictedV1
		if err := env.As(&e); err != nil {
			return bus.Poison(err)
		}
		ref, cq, reason, message, admission = e.Workload, e.ClusterQueue, "Evicted", "evicted: "+e.Reason, e.Admission
	default:
		return bus.Poison(fmt.Errorf("unexpected event type %s", env.Type))
	}
	defer s.locks.lock(ref.Namespace + "/" + ref.Name)()
	job, err := s.kube.BatchV1().Jobs(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && string(job.UID) != ref.UID) {
		return nil // gone: its deletion releases the quota
	}
	if err != nil {
		return err
	}
	if finished, _, _ := IsFinished(job); finished {
		return nil
	}
	if admission != "" && job.Annotations[StoppedAnnotation] == admission {
		if r, held := s.reservation(ref.Namespace, ref.Name); !held || r.Admission() != admission {
			// A late copy: the Job was stopped from that admission and
			// its quota released; it may run under a newer one now.
			return nil
		}
	}
	return s.stop(ctx, job, ref, cq, reason, message, admission)
}

// handlePending reports a changed pending reason on the Job.
func (s *Service) handlePending(_ context.Context, env events.Envelope) error {
	var e events.WorkloadPendingV1
	if err := env.As(&e); err != nil {
		return bus.Poison(err)
	}
	ref := &corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: e.Workload.Namespace, Name: e.Workload.Name, UID: types.UID(e.Workload.UID)}
	s.recorder.Event(ref, corev1.EventTypeNormal, "Pending", e.Reason)
	return nil
}

// keyLocks is a mutex per key, kept only while someone holds or waits for
// it.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

// lock takes key's mutex and returns its release.
func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
