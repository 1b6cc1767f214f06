package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/shard"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// Publisher publishes an event under its deterministic id.
type Publisher interface {
	Publish(ctx context.Context, ev events.Event, id string) error
}

// Config is an integration process's configuration.
type Config struct {
	// Workers reconcile objects of each kind in parallel.
	Workers int
	// Resync re-lists objects this often.
	Resync time.Duration
	// WebhookAddress serves the suspend-on-create webhook ("" disables
	// it; objects are then suspended right after creation, which lets
	// their pods start for a moment).
	WebhookAddress string
	// WebhookHost is the host name or IP the API server uses to reach the
	// webhook.
	WebhookHost string
	// WebhookCertDir holds the webhook's serving certificate as tls.crt
	// and tls.key (a Kubernetes TLS Secret mounted); empty generates a
	// self-signed one at start.
	WebhookCertDir string
	// KueueLabels: objects labelled with Kueue's queue label (and not
	// Sluice's) are Sluice's too; the webhook gives them Sluice's labels.
	KueueLabels bool
	// ExternalWebhookConfiguration: the MutatingWebhookConfigurations are
	// installed by someone else (the Helm chart), so the process neither
	// writes them nor needs the permission to.
	ExternalWebhookConfiguration bool
	// Replica names this process among the replicas of its kinds (a
	// subject token); empty picks a random one.
	Replica string
	// QueueMetrics receives the kinds' work queue metrics; nil keeps them
	// unexported.
	QueueMetrics *QueueMetrics
	// ReportPodsReady writes into each started workload's fence whether
	// its pods are all ready, for admission's waitForPodsReady.
	ReportPodsReady bool
	// Tracing makes each kind's tracer (service.name sluice-<kind>); nil
	// records no spans.
	Tracing *tracing.Factory
	// Requests turns one pod's effective requests into those its workload
	// is queued with (Kueue's resources block); nil keeps them.
	Requests func(corev1.ResourceList) corev1.ResourceList
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Workers < 1 {
		return fmt.Errorf("integration: workers %d: must be at least 1", c.Workers)
	}
	if c.Resync <= 0 {
		return fmt.Errorf("integration: resync %s: must be positive", c.Resync)
	}
	if c.WebhookAddress != "" && c.WebhookHost == "" && !c.ExternalWebhookConfiguration {
		return errors.New("integration: a webhook address needs the host the API server reaches it by")
	}
	if c.ExternalWebhookConfiguration && c.WebhookCertDir == "" && c.WebhookAddress != "" {
		return errors.New("integration: an external webhook configuration needs the serving certificate it trusts (a certificate directory)")
	}
	if c.Replica != "" && !validToken(c.Replica) {
		return fmt.Errorf("integration: replica %q: use letters, digits, '-' and '_' only", c.Replica)
	}
	return nil
}

func validToken(s string) bool {
	for _, r := range s {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// Service runs the integrations of one or more kinds: one process, any
// number of replicas sharing the work through the bus.
type Service struct {
	// synced opens once objects, configuration, ledger and fences are
	// loaded and the webhook serves (Ready).
	synced *health.Gate
	cfg    Config
	kube   kubernetes.Interface
	dyn    dynamic.Interface
	js     jetstream.JetStream
	pub    Publisher
	log    zerolog.Logger
	kinds  map[string]*kindRunner
	// reconfigured tells requeueOnConfig that the configuration changed.
	reconfigured chan struct{}

	wlKV     jetstream.KeyValue
	fenceKV  jetstream.KeyValue
	shardKV  jetstream.KeyValue
	events   jetstream.Stream
	recorder record.EventRecorder

	mu     sync.Mutex
	config *configstore.Store
	snap   configstore.Snapshot
	// held: reservations of the kinds run here, by engine key.
	held map[string]ledger.Reservation
	// legacyKeys: the reservations of those kinds each tree key written
	// by an older Sluice holds; ownKey: those read from their own key.
	legacyKeys map[string][]string
	ownKey     map[string]bool
	// fences: the fence state of each workload of those kinds, by KV key.
	fences map[string]fence.State
	// stopsAnnounced: the admission whose stop this replica announced, by
	// KV key, so that the object is not stopped again while quota
	// accounting has yet to release the reservation.
	stopsAnnounced map[string]string
	// unverified: workloads (KV keys) taken over whose announcements are
	// to be checked at their next look.
	unverified map[string]bool
}

// kindRunner is the part of the service that belongs to one kind.
type kindRunner struct {
	ad    jobframework.Adapter
	kind  jobframework.Kind
	inf   cache.SharedIndexInformer
	queue workqueue.TypedRateLimitingInterface[string]
	// owner holds this replica's shards of the kind: it acts only on the
	// objects of those.
	owner *shard.Owner
	// locks serialise the work on one object, so a start and a stop of
	// the same object never interleave.
	locks keyLocks
	// tracer records the spans of the kind's workloads.
	tracer *tracing.Tracer
}

// New returns an integration of the adapters' kinds. Each kind must be
// served by the API server (see Installed).
func New(cfg Config, adapters []jobframework.Adapter, kube kubernetes.Interface, dyn dynamic.Interface, js jetstream.JetStream, pub Publisher, log zerolog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(adapters) == 0 {
		return nil, errors.New("integration: no kinds to run")
	}
	if cfg.Replica == "" {
		cfg.Replica = nuid.Next()
	}
	if cfg.QueueMetrics == nil {
		cfg.QueueMetrics = NewQueueMetrics() // kept, not exported
	}
	s := &Service{
		synced:         health.NewGate("objects, configuration, ledger or fences not loaded yet"),
		cfg:            cfg,
		kube:           kube,
		dyn:            dyn,
		js:             js,
		pub:            pub,
		log:            log.With().Str("replica", cfg.Replica).Logger(),
		kinds:          map[string]*kindRunner{},
		config:         configstore.New(),
		held:           map[string]ledger.Reservation{},
		legacyKeys:     map[string][]string{},
		ownKey:         map[string]bool{},
		fences:         map[string]fence.State{},
		stopsAnnounced: map[string]string{},
		unverified:     map[string]bool{},
		reconfigured:   make(chan struct{}, 1),
	}
	for _, ad := range adapters {
		k := ad.Kind()
		if k.Name == "" || strings.ContainsAny(k.Name, "/. *>") {
			return nil, fmt.Errorf("integration: kind name %q: must be a single word", k.Name)
		}
		if _, dup := s.kinds[k.Name]; dup {
			return nil, fmt.Errorf("integration: kind %q given twice", k.Name)
		}
		tr, err := cfg.Tracing.For(context.Background(), strings.ToLower(k.Name))
		if err != nil {
			return nil, fmt.Errorf("integration: kind %s: %w", k.Name, err)
		}
		s.kinds[k.Name] = &kindRunner{
			ad:     ad,
			kind:   k,
			tracer: tr,
			locks:  keyLocks{m: map[string]*keyLock{}},
			// Per-object backoff only: the default controller limiter adds
			// a queue-wide 10/s bucket, which throttles every object once
			// a burst of write conflicts retries.
			queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
				workqueue.TypedRateLimitingQueueConfig[string]{Name: k.Name, MetricsProvider: cfg.QueueMetrics}),
		}
	}
	return s, nil
}

// Kinds returns the names of the kinds the service runs, sorted.
func (s *Service) Kinds() []string {
	out := make([]string, 0, len(s.kinds))
	for n := range s.kinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Ready reports whether the service has loaded what it decides on.
func (s *Service) Ready() error { return s.synced.Check() }

// Run reconciles objects until ctx ends, then finishes in-flight work.
func (s *Service) Run(ctx context.Context) error {
	var err error
	if s.wlKV, err = bus.OpenKV(ctx, s.js, workloads.Bucket); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	if s.fenceKV, err = bus.OpenKV(ctx, s.js, fence.Bucket); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	if s.shardKV, err = bus.OpenKV(ctx, s.js, bus.BucketShards); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	for _, k := range s.kinds {
		if k.owner, err = shard.New(s.shardKV, k.kind.Name, s.cfg.Replica, shard.WithLogger(s.log)); err != nil {
			return fmt.Errorf("integration: %w", err)
		}
	}
	if s.events, err = s.js.Stream(ctx, bus.StreamEvents); err != nil {
		return fmt.Errorf("integration: open stream %s: %w", bus.StreamEvents, err)
	}
	cfgKV, err := bus.OpenKV(ctx, s.js, configstore.Bucket)
	if err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	ledKV, err := bus.OpenKV(ctx, s.js, ledger.Bucket)
	if err != nil {
		return fmt.Errorf("integration: %w", err)
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	s.recorder = broadcaster.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: "sluice-integration", Host: s.cfg.Replica})

	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 8+4*len(s.kinds))
	spawn := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil && runCtx.Err() == nil {
				errc <- fmt.Errorf("integration: %s: %w", name, err)
			}
		}()
	}

	cfgSynced := make(chan struct{})
	spawn("configuration watch", func(ctx context.Context) error { return s.watchConfig(ctx, cfgKV, cfgSynced) })
	ledSynced := make(chan struct{})
	spawn("ledger watch", func(ctx context.Context) error { return s.watchLedger(ctx, ledKV, ledSynced) })
	fenceSynced := make(chan struct{})
	spawn("fence watch", func(ctx context.Context) error { return s.watchFences(ctx, fenceSynced) })

	for _, k := range s.kinds {
		if err := s.startInformer(runCtx, k); err != nil {
			return err
		}
	}

	if s.cfg.WebhookAddress != "" {
		var ads []jobframework.Adapter
		for _, name := range s.Kinds() {
			ads = append(ads, s.kinds[name].ad)
		}
		opts := []jobframework.WebhookOption{jobframework.WithAddress(s.cfg.WebhookAddress), jobframework.WithLogger(s.log)}
		if s.cfg.KueueLabels {
			opts = append(opts, jobframework.WithKueueLabels())
		}
		if s.cfg.WebhookCertDir != "" {
			opts = append(opts, jobframework.WithCertFiles(filepath.Join(s.cfg.WebhookCertDir, "tls.crt"), filepath.Join(s.cfg.WebhookCertDir, "tls.key")))
			if ca, err := os.ReadFile(filepath.Join(s.cfg.WebhookCertDir, "ca.crt")); err == nil {
				opts = append(opts, jobframework.WithCABundle(ca))
			}
		} else {
			opts = append(opts, jobframework.WithHosts(s.cfg.WebhookHost))
		}
		wh, err := jobframework.NewWebhook(ads, opts...)
		if err != nil {
			return err
		}
		if _, err := wh.Listen(); err != nil {
			return err
		}
		if !s.cfg.ExternalWebhookConfiguration {
			for _, ad := range ads {
				url, err := wh.URL(s.cfg.WebhookHost, ad.Kind())
				if err != nil {
					return err
				}
				if err := jobframework.EnsureWebhookConfiguration(ctx, s.kube, ad.Kind(), url, wh.CABundle(), s.cfg.KueueLabels); err != nil {
					return err
				}
			}
		}
		spawn("webhook", wh.Run)
	}

	// Decide nothing before the objects, the configuration and the ledger
	// are all known: an object must never run without its reservation,
	// and must never be stopped for lack of one that is only not seen yet.
	if err := s.waitSynced(ctx, errc, map[string]<-chan struct{}{
		"configuration": cfgSynced, "ledger": ledSynced, "fences": fenceSynced,
	}); err != nil || ctx.Err() != nil {
		return err
	}
	s.synced.Open()

	// Leases: this replica takes its share of each kind's shards, and
	// looks at every object of a shard it takes.
	leaseCtx, stopLeases := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLeases()
	var leases sync.WaitGroup
	for _, k := range s.kinds {
		leases.Add(1)
		go func() {
			defer leases.Done()
			_ = k.owner.Run(leaseCtx, func(shards []int) { s.enqueueShards(ctx, k, shards) })
		}()
	}
	spawn("requeue on configuration changes", s.requeueOnConfig)
	for _, k := range s.kinds {
		spawn(k.kind.Name+" pending consumer", func(ctx context.Context) error {
			return bus.Run(ctx, s.js, PendingConsumer(k.kind.Name), func(ctx context.Context, env events.Envelope) error { return s.handlePending(ctx, k, env) }, bus.WithLogger(s.log))
		})
	}
	workersDone := make(chan struct{})
	go func() {
		var ww sync.WaitGroup
		for _, k := range s.kinds {
			for range s.cfg.Workers {
				ww.Add(1)
				go func() {
					defer ww.Done()
					for s.next(ctx, k) {
					}
				}()
			}
		}
		ww.Wait()
		close(workersDone)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	// Ordered shutdown: stop taking work, finish what is in flight, give
	// the shards back (the other replicas take them at once), then stop
	// consumers and watches.
	for _, k := range s.kinds {
		k.queue.ShutDownWithDrain()
	}
	<-workersDone
	stopLeases()
	leases.Wait()
	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	for _, k := range s.kinds {
		k.owner.Release(relCtx)
	}
	relCancel()
	cancel()
	return runErr
}

// waitSynced waits for the buckets' initial values and every kind's
// informer, naming in readiness and in a periodic log line what is still
// missing, so a replica that stays unready says why.
func (s *Service) waitSynced(ctx context.Context, errc <-chan error, buckets map[string]<-chan struct{}) error {
	type part struct {
		name string
		done <-chan struct{}
	}
	var parts []part
	for name, ch := range buckets {
		parts = append(parts, part{name, ch})
	}
	for _, name := range s.Kinds() {
		k := s.kinds[name]
		ch := make(chan struct{})
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), k.inf.HasSynced) {
				close(ch)
			}
		}()
		parts = append(parts, part{name + " objects", ch})
	}
	for _, p := range parts {
		s.synced.Wait(p.name)
	}
	var loaded sync.WaitGroup
	for _, p := range parts {
		loaded.Go(func() {
			select {
			case <-p.done:
				s.synced.Loaded(p.name)
			case <-ctx.Done():
			}
		})
	}
	all := make(chan struct{})
	go func() { loaded.Wait(); close(all) }()
	start := time.Now()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-all:
			if ctx.Err() != nil {
				return nil
			}
			done = true
		case <-tick.C:
			s.log.Warn().Strs("waiting_for", s.synced.Waiting()).Dur("after", time.Since(start)).Msg("integration not ready yet")
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		}
	}
	s.log.Info().Dur("after", time.Since(start)).Msg("objects, configuration, ledger and fences loaded")
	return nil
}

// startInformer starts the watch of one kind's labelled objects.
func (s *Service) startInformer(ctx context.Context, k *kindRunner) error {
	if src, ok := k.ad.(jobframework.InformerSource); ok {
		k.inf = src.NewInformer(s.kube, s.cfg.Resync, v1beta1.QueueNameLabel)
	} else {
		k.inf = dynamicinformer.NewFilteredDynamicInformer(s.dyn, k.kind.GVR(), metav1.NamespaceAll, s.cfg.Resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) { o.LabelSelector = v1beta1.QueueNameLabel }).Informer()
	}
	if err := k.inf.SetTransform(cacheTransform(k.ad)); err != nil {
		return fmt.Errorf("integration: watch %s: %w", k.kind.Resource, err)
	}
	if err := indexGroups(k.ad, k.inf); err != nil {
		return fmt.Errorf("integration: index %s: %w", k.kind.Resource, err)
	}
	enqueue := func(obj any) {
		if key, ok := jobframework.WorkKey(k.ad, obj); ok {
			k.queue.Add(key)
		}
	}
	if _, err := k.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(o, n any) {
			if relevant(k.ad, o, n, s.cfg.ReportPodsReady) {
				enqueue(n)
			}
		},
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("integration: watch %s: %w", k.kind.Resource, err)
	}
	go k.inf.Run(ctx.Done())
	return nil
}

// lastApplied is kubectl's copy of the manifest it applied.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// cacheTransform returns what an adapter's informer does to each object
// it receives before keeping it: trim it (trimForCache, the adapter's
// CacheTrimmer), and pack it when the informer is typed (packed), its
// labels and annotations kept decoded for a Grouper's index.
func cacheTransform(ad jobframework.Adapter) cache.TransformFunc {
	trimmer, _ := ad.(jobframework.CacheTrimmer)
	_, typed := ad.(jobframework.InformerSource)
	_, grouper := ad.(jobframework.Grouper)
	return func(obj any) (any, error) {
		o, ok := obj.(runtime.Object)
		if !ok {
			return obj, nil
		}
		if trimmer != nil {
			trimmer.TrimForCache(o)
		}
		trimForCache(o)
		if typed {
			return jobframework.Pack(o, grouper), nil
		}
		return o, nil
	}
}

// trimForCache drops from the informer's copy of an object what no
// decision reads: its managed fields, often as large as the rest of the
// object, and kubectl's last-applied manifest. Patches are computed
// between two copies of the cached object, so what is dropped here is
// never written back or removed.
func trimForCache(obj runtime.Object) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return // no metadata to trim
	}
	m.SetManagedFields(nil)
	if a := m.GetAnnotations(); a[lastApplied] != "" {
		trimmed := make(map[string]string, len(a)-1)
		for k, v := range a {
			if k != lastApplied {
				trimmed[k] = v
			}
		}
		m.SetAnnotations(trimmed)
	}
}

// relevant reports whether an update can change what Sluice does: most
// updates are pod counts in the status, which it ignores.
func relevant(ad jobframework.Adapter, o, n any, podsReady bool) bool {
	oo, ok1 := o.(runtime.Object)
	no, ok2 := n.(runtime.Object)
	if !ok1 || !ok2 {
		return true
	}
	oj, err1 := ad.Decode(oo)
	nj, err2 := ad.Decode(no)
	if err1 != nil || err2 != nil {
		return true
	}
	om, nm := oj.Meta(), nj.Meta()
	if om.GetResourceVersion() == nm.GetResourceVersion() {
		return true // a resync: reconcile anyway
	}
	if oj.IsSuspended() != nj.IsSuspended() || om.GetUID() != nm.GetUID() {
		return true
	}
	of, _, _ := oj.Finished()
	nf, _, _ := nj.Finished()
	if of != nf {
		return true
	}
	if podsReady {
		or, ok1 := oj.(jobframework.PodsReadier)
		nr, ok2 := nj.(jobframework.PodsReadier)
		if ok1 && ok2 && or.PodsReady() != nr.PodsReady() {
			return true
		}
	}
	return !maps.Equal(om.GetLabels(), nm.GetLabels()) || !maps.Equal(om.GetAnnotations(), nm.GetAnnotations())
}

func (s *Service) next(ctx context.Context, k *kindRunner) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.sync(wctx, k, key); err != nil {
		if errors.Is(err, errStopNotAnnounced) {
			// Announced right after the fence moved, normally; if the
			// stopper died in between, its retry may take a while.
			k.queue.AddRateLimited(key)
			return true
		}
		if errors.Is(err, errNotAnnounced) || errors.Is(err, errLookAgain) {
			// The admission is stored but not yet announced (it will be
			// within a cycle), or a first write waits to be seen.
			k.queue.AddAfter(key, announceWait)
			return true
		}
		s.log.Warn().Err(err).Str("workload", k.kind.Name+"/"+key).Msg("not reconciled; retrying")
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

// watchKV feeds every entry of a bucket to apply, closing synced once the
// initial values are in, until ctx ends (bus.WatchKV).
func watchKV(ctx context.Context, log zerolog.Logger, kv jetstream.KeyValue, synced chan<- struct{}, apply func(jetstream.KeyValueEntry, bool)) error {
	return bus.WatchKV(ctx, kv, synced, apply, bus.WithWatchLogger(log.With().Str("component", "watch").Logger()))
}

func (s *Service) watchConfig(ctx context.Context, kv jetstream.KeyValue, synced chan<- struct{}) error {
	return watchKV(ctx, s.log, kv, synced, func(e jetstream.KeyValueEntry, live bool) {
		s.mu.Lock()
		if e.Operation() == jetstream.KeyValuePut {
			s.config.Apply(e.Key(), e.Value())
		} else {
			s.config.Apply(e.Key(), nil)
		}
		s.snap, _ = s.config.Snapshot()
		s.mu.Unlock()
		if live {
			// A new queue or priority class may unblock objects: look at
			// all of them, once for a burst of changes (requeueOnConfig).
			select {
			case s.reconfigured <- struct{}{}:
			default:
			}
		}
	})
}

// configSettle is how long requeueOnConfig waits after looking at every
// object, so that a burst of configuration changes (every queue rewritten
// at a start, a chart upgrade) costs a few passes over the objects, not
// one per change.
const configSettle = 250 * time.Millisecond

// requeueOnConfig looks at every object after the configuration changed.
func (s *Service) requeueOnConfig(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.reconfigured:
		}
		s.enqueueAll()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(configSettle):
		}
	}
}

func (s *Service) enqueueAll() {
	for _, k := range s.kinds {
		if k.inf == nil {
			continue
		}
		for _, key := range k.inf.GetStore().ListKeys() {
			k.queue.Add(key)
		}
	}
}

func (s *Service) watchLedger(ctx context.Context, kv jetstream.KeyValue, synced chan<- struct{}) error {
	return watchKV(ctx, s.log, kv, synced, func(e jetstream.KeyValueEntry, _ bool) {
		c, err := ledger.Parse(e)
		if err != nil {
			s.log.Error().Err(err).Str("key", e.Key()).Msg("ledger entry not understood; ignoring it")
			if errors.Is(err, ledger.ErrCorrupt) && c.Workload != "" {
				s.tellUnreadable(c.Workload)
			}
			return
		}
		var changed []string
		if c.Tree != "" {
			changed = s.setLegacy(c.Tree, c.Legacy)
		} else {
			changed = s.setReservation(c.Workload, c.Reservation)
		}
		for _, wk := range changed {
			kind, key, _ := strings.Cut(wk, "/")
			k := s.kinds[kind]
			if c.Tree == "" && c.Reservation == nil && s.finishedInCache(k, key) {
				// The release of a finished object: its end was handled
				// on its own update, and there is nothing left to stop.
				continue
			}
			k.queue.Add(key)
		}
	})
}

// tellUnreadable puts a Warning Event on the job whose reservation cannot
// be read: the admission service holds its cohort back until the key is
// repaired, and the job's owner is the first to ask why.
func (s *Service) tellUnreadable(wk string) {
	kind, key, _ := strings.Cut(wk, "/")
	k := s.kinds[kind]
	if k == nil {
		return
	}
	job, err := s.cached(k, key)
	if err != nil || job == nil {
		return
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "ReservationUnreadable",
		"its reservation in %s cannot be read; its cohort admits nothing until the key %s there is repaired or deleted",
		ledger.Bucket, ledger.ReservationKey(wk))
}

// finishedInCache reports whether the informer holds the object finished.
// Finished is final, so a stale cache cannot say so wrongly.
func (s *Service) finishedInCache(k *kindRunner, key string) bool {
	job, err := s.cached(k, key)
	if err != nil || job == nil {
		return false
	}
	done, _, _ := job.Finished()
	return done
}

// watchFences keeps the fence state of the workloads of the kinds run
// here: a stop decided elsewhere (a preemption, a drain) shows first as
// the fence of its admission moving to stopping, and the replica owning
// the object carries it out.
func (s *Service) watchFences(ctx context.Context, synced chan<- struct{}) error {
	return watchKV(ctx, s.log, s.fenceKV, synced, func(e jetstream.KeyValueEntry, _ bool) {
		kind, key, ok := strings.Cut(workloads.EngineKeyFromKV(e.Key()), "/")
		k := s.kinds[kind]
		if !ok || k == nil {
			return
		}
		var st fence.State
		if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &st) != nil {
			s.log.Error().Str("key", e.Key()).Msg("corrupt fence entry")
			return
		}
		s.mu.Lock()
		if st.Phase == "" {
			delete(s.fences, e.Key())
		} else {
			s.fences[e.Key()] = st
		}
		s.mu.Unlock()
		if st.Phase == fence.Stopping {
			k.queue.Add(key)
		}
	})
}

func (s *Service) fenceOf(rk string) fence.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fences[rk]
}

// enqueueShards looks at every object of the shards this replica just
// took: those the informer holds, and those only a workload record or a
// reservation remembers (deleted while no replica owned their shard).
func (s *Service) enqueueShards(ctx context.Context, k *kindRunner, shards []int) {
	in := map[int]bool{}
	for _, sh := range shards {
		in[sh] = true
	}
	add := func(key string) {
		if in[k.owner.Of(key)] {
			s.markUnverified(workloads.KVKeyFromEngine(k.kind.Name + "/" + key))
			k.queue.Add(key)
		}
	}
	for _, obj := range k.inf.GetStore().List() {
		if key, ok := jobframework.WorkKey(k.ad, obj); ok {
			add(key)
		}
	}
	s.mu.Lock()
	var keys []string
	for wk := range s.held {
		if kind, key, _ := strings.Cut(wk, "/"); kind == k.kind.Name {
			keys = append(keys, key)
		}
	}
	// Ended workloads whose end this replica may have to announce.
	for fk, st := range s.fences {
		if kind, key, _ := strings.Cut(workloads.EngineKeyFromKV(fk), "/"); kind == k.kind.Name && st.Phase == fence.Finished {
			keys = append(keys, key)
		}
	}
	s.mu.Unlock()
	for _, key := range keys {
		add(key)
	}
	l, err := s.wlKV.ListKeys(ctx)
	if err != nil {
		if !errors.Is(err, jetstream.ErrNoKeysFound) {
			s.log.Warn().Err(err).Msg("list workload records; objects deleted meanwhile are seen at the next resync")
		}
		return
	}
	for rk := range l.Keys() {
		if kind, key, _ := strings.Cut(workloads.EngineKeyFromKV(rk), "/"); kind == k.kind.Name {
			add(key)
		}
	}
}

// markUnverified notes that a workload's announcements are to be checked
// at its next look (reannounce).
func (s *Service) markUnverified(rk string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unverified[rk] = true
}

// takeUnverified reports and clears the note.
func (s *Service) takeUnverified(rk string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.unverified[rk] {
		return false
	}
	delete(s.unverified, rk)
	return true
}

// setLedger records one ledger key's reservations of the kinds run here
// and returns the engine keys of the workloads whose reservation changed.
// setReservation records one workload's reservation (nil: released) and
// reports the workload if it is of a kind run here and its reservation
// changed.
func (s *Service) setReservation(wk string, r *ledger.Reservation) []string {
	kind, _, _ := strings.Cut(wk, "/")
	if _, ours := s.kinds[kind]; !ours {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.held[wk]
	if r == nil {
		delete(s.ownKey, wk)
		if !had {
			return nil
		}
		delete(s.held, wk)
		return []string{wk}
	}
	s.held[wk] = *r
	s.ownKey[wk] = true
	if had && old.AdmittedAt.Equal(r.AdmittedAt) && old.Startable() == r.Startable() {
		return nil // the same reservation, still as startable as it was
	}
	return []string{wk}
}

// setLegacy records the reservations an older Sluice kept in a tree key's
// value, until admission moves them to their own keys (a move books the
// reservation's own key before it empties the tree's).
func (s *Service) setLegacy(key string, res map[string]ledger.Reservation) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed []string
	now := map[string]bool{}
	for wk, r := range res {
		kind, _, _ := strings.Cut(wk, "/")
		if _, ours := s.kinds[kind]; !ours {
			continue
		}
		now[wk] = true
		if old, ok := s.held[wk]; !ok || !old.AdmittedAt.Equal(r.AdmittedAt) {
			changed = append(changed, wk)
		}
		s.held[wk] = r
	}
	for _, wk := range s.legacyKeys[key] {
		if !now[wk] {
			if !s.ownKey[wk] {
				delete(s.held, wk)
				changed = append(changed, wk)
			}
		}
	}
	keys := make([]string, 0, len(now))
	for wk := range now {
		keys = append(keys, wk)
	}
	sort.Strings(keys)
	s.legacyKeys[key] = keys
	return changed
}

func (s *Service) reservation(ref events.WorkloadRef) (ledger.Reservation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.held[ref.Kind+"/"+ref.Namespace+"/"+ref.Name]
	return r, ok
}

// cached returns the informer's copy of an object, decoded; nil when the
// informer has none.
func (s *Service) cached(k *kindRunner, key string) (jobframework.Job, error) {
	obj, exists, err := k.inf.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("informer of %s holds a %T", k.kind.Resource, obj)
	}
	return k.decode(ro)
}

// fetch reads an object from the API server, decoded; nil when it is gone.
func (s *Service) fetch(ctx context.Context, k *kindRunner, ns, name string) (jobframework.Job, error) {
	u, err := s.dyn.Resource(k.kind.GVR()).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return k.decode(u)
}

// patch sends a merge patch to an object (subresource "" or "status").
// The answer, the whole patched object, is not decoded: nothing reads it
// (the informer brings the change), and decoding it was a tenth of a
// start's cost.
func (s *Service) patch(ctx context.Context, k *kindRunner, ns, name string, patch []byte, subresource ...string) error {
	gvr := k.kind.GVR()
	path := []string{"/apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		path = []string{"/api", gvr.Version}
	}
	path = append(append(path, "namespaces", ns, gvr.Resource, name), subresource...)
	return s.kube.CoreV1().RESTClient().Patch(types.MergePatchType).AbsPath(path...).Body(patch).Do(ctx).Error()
}

// delete deletes an object, only the one with uid; one already gone is
// fine.
func (s *Service) delete(ctx context.Context, k *kindRunner, ns, name, uid string) error {
	uidp := types.UID(uid)
	bg := metav1.DeletePropagationBackground
	err := s.dyn.Resource(k.kind.GVR()).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uidp}, PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// sync brings one object and its workload record in line.
func (s *Service) sync(ctx context.Context, k *kindRunner, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	defer k.locks.lock(key)()
	// Only the replica owning the object's shard acts on it, and only
	// while its lease lasts.
	deadline, owned := k.owner.Deadline(key)
	if !owned {
		return nil
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	ref := events.WorkloadRef{Kind: k.kind.Name, Namespace: ns, Name: name}
	rk := workloads.Key(ref)
	rec, err := s.record(ctx, rk)
	if err != nil {
		return err
	}
	if s.takeUnverified(rk) {
		if err := s.reannounce(ctx, rk, ref, rec); err != nil {
			s.markUnverified(rk)
			return err
		}
	}
	if g, ok := k.ad.(jobframework.Grouper); ok {
		members, err := s.members(k, key)
		if err != nil {
			return err
		}
		if jobframework.IsGroupRecord(rec) || (rec == nil && len(members) > 0) {
			return s.syncGroup(ctx, k, g, ref, rk, rec, members)
		}
	}
	job, err := s.cached(k, key)
	if err != nil {
		return err
	}
	if job != nil && jobframework.GroupOf(k.ad, job.Meta()) != "" {
		job = nil // a member of a group: the group's key covers it
	}
	if rec != nil && (job == nil || jobframework.ObjectUID(rec.Workload.UID) != string(job.Meta().GetUID())) {
		// Deleted, or deleted and created again under the same name. The
		// informer may only be behind (this replica just took the shard
		// from another that saw the object first): ask the API server
		// before forgetting a workload.
		fresh, err := s.fetch(ctx, k, ns, name)
		if err != nil {
			return err
		}
		if fresh != nil && string(fresh.Meta().GetUID()) == jobframework.ObjectUID(rec.Workload.UID) && jobframework.GroupOf(k.ad, fresh.Meta()) == "" {
			if _, labelled := fresh.Meta().GetLabels()[v1beta1.QueueNameLabel]; !labelled {
				// Not deleted: it left its queue (the informer
				// only holds labelled objects).
				return s.leave(ctx, k, rk, rec, fresh)
			}
			return errLookAgain
		}
		if err := s.gone(ctx, rk, rec, nil); err != nil {
			return err
		}
		rec = nil
	}
	if job == nil {
		return nil
	}
	m := job.Meta()
	if finished, ok, msg := job.Finished(); finished {
		if rec != nil {
			return s.gone(ctx, rk, rec, &events.WorkloadFinishedV1{Succeeded: ok, Message: msg})
		}
		return nil
	}
	if m.GetDeletionTimestamp() != nil {
		return nil // going away: its deletion ends the workload
	}
	if _, managed := m.GetLabels()[v1beta1.QueueNameLabel]; !managed {
		return nil
	}
	if ig, ok := job.(jobframework.Ignorer); ok && ig.Ignored() {
		return nil
	}
	if rec != nil && m.GetLabels()[v1beta1.QueueNameLabel] != rec.LocalQueue {
		// Moved to another LocalQueue: its workload ends, and a new one
		// queues in the other.
		if err := s.move(ctx, k, rk, rec, job); err != nil {
			return err
		}
		rec = nil
	}
	if rec == nil {
		if rec, err = s.submit(ctx, k, rk, job); err != nil || rec == nil {
			return err
		}
	} else if rec, err = s.reprioritize(ctx, rk, rec, job); err != nil {
		return err
	}
	if stopping, err := s.fencedStop(ctx, rk, rec, func(cq, reason, message, admission string) error {
		// The informer may not have seen the start yet (it was applied
		// before the fence moved): stop what the API server holds, or a
		// stale suspended copy would announce a stop that never happened.
		fresh, err := s.fetch(ctx, k, ns, name)
		if err != nil {
			return err
		}
		if fresh == nil || fresh.Meta().GetUID() != m.GetUID() {
			return errLookAgain // deleted: its deletion ends the workload
		}
		if done, _, _ := fresh.Finished(); done {
			return errLookAgain // ended: its end releases the quota
		}
		return s.stop(ctx, k, fresh, rec.Workload, cq, reason, message, admission)
	}); stopping {
		return err
	}
	r, held := s.reservation(rec.Workload)
	if held && r.UID != "" && r.UID != rec.Workload.UID {
		// The reservation of an earlier workload of the same job (it
		// left its queue or moved, and came back), on its way out: not
		// this workload's to start with.
		held = false
	}
	suspended := job.IsSuspended()
	if _, hold := m.GetAnnotations()[jobframework.HoldAnnotation]; hold && suspended {
		// Held back: admitted or not, it does not start. Its annotation
		// says which admission it holds, for whoever releases it.
		want := ""
		if held && r.Startable() && m.GetAnnotations()[jobframework.StoppedAnnotation] != r.Admission() {
			want = r.Admission()
		}
		return s.markHeld(ctx, k, job, want)
	}
	switch {
	case held && suspended && !r.Startable():
		return nil // quota reserved: it waits for its admission checks
	case held && r.DispatchedTo != "":
		// Dispatched to a worker cluster: it runs there, this object
		// stays suspended and mirrors the worker's status.
		return s.startRemote(ctx, job, rec, r)
	case held && suspended && m.GetAnnotations()[jobframework.StoppedAnnotation] != r.Admission():
		return s.start(ctx, k, job, rec, r)
	case held && !suspended:
		if err := s.confirmStart(ctx, rec, r); err != nil {
			return err
		}
		return s.reportReady(ctx, rk, podsReady(job), r)
	case !held && !suspended:
		// Running without quota: suspended by the webhook's absence, or
		// its reservation is gone. Stop it; an object only runs while its
		// workload holds a reservation. The informer may be behind a stop
		// that already happened: look at the object itself first.
		fresh, err := s.fetch(ctx, k, ns, name)
		if err != nil || fresh == nil {
			return err
		}
		if fresh.Meta().GetUID() != m.GetUID() || fresh.IsSuspended() {
			return nil
		}
		if finished, _, _ := fresh.Finished(); finished {
			return nil
		}
		if _, still := s.reservation(rec.Workload); still {
			return nil // admitted meanwhile: the next sync starts it
		}
		return s.stop(ctx, k, fresh, rec.Workload, "", "NoReservation", "no quota is reserved for this workload", "")
	}
	return nil
}

func (s *Service) record(ctx context.Context, rk string) (*events.WorkloadSubmittedV1, error) {
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
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

// reprioritize follows a change of the priority class label of a queued
// or admitted object, as Kueue does: the record takes the class's value,
// and admission applies it to the queue's order and to preemption from its
// next cycle. A class that does not exist is reported on the object and
// the old priority stays; creating the class brings the object back here.
func (s *Service) reprioritize(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, job jobframework.Job) (*events.WorkloadSubmittedV1, error) {
	m := job.Meta()
	name := m.GetLabels()[v1beta1.PriorityClassLabel]
	if name == "" || name == rec.PriorityClass || jobframework.ObjectUID(rec.Workload.UID) != string(m.GetUID()) {
		return rec, nil
	}
	s.mu.Lock()
	prio := s.priorities()
	s.mu.Unlock()
	v, err := prio.WorkloadPriorityClass(name)
	if err != nil {
		s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "PriorityClassNotFound", "priority not changed: label %s: %v", v1beta1.PriorityClassLabel, err)
		return rec, nil
	}
	gctx, cancel := bus.Bounded(ctx)
	e, err := s.wlKV.Get(gctx, rk)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("read workload %s: %w", rk, err)
	}
	upd := *rec
	upd.PriorityClass, upd.Priority = name, v
	b, err := json.Marshal(upd)
	if err != nil {
		return nil, err
	}
	// Compare-and-set: another replica or a delete in between makes this
	// sync run again on what is stored now.
	if _, err := s.wlKV.Update(ctx, rk, b, e.Revision()); err != nil {
		return nil, fmt.Errorf("change priority of %s: %w", rk, err)
	}
	was := fmt.Sprint(rec.Priority)
	if rec.PriorityClass != "" {
		was += " (" + rec.PriorityClass + ")"
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "PriorityChanged", "priority %d (%s), was %s", v, name, was)
	s.log.Info().Str("workload", rk).Int32("priority", v).Int32("was", rec.Priority).Msg("priority changed")
	return &upd, nil
}

// submit writes the workload record and announces it.
func (s *Service) submit(ctx context.Context, k *kindRunner, rk string, job jobframework.Job) (*events.WorkloadSubmittedV1, error) {
	s.mu.Lock()
	prio := s.priorities()
	s.mu.Unlock()
	st, err := fence.Get(ctx, s.fenceKV, rk)
	if err != nil {
		return nil, err
	}
	incarnation := 0
	if reopenable(st, string(job.Meta().GetUID())) {
		// Its earlier workload ended when it left its queue, or moved:
		// it is queued again, as a new workload.
		if job, err = s.reopen(ctx, k, rk, job.Meta().GetNamespace(), job.Meta().GetName(), st); err != nil || job == nil {
			return nil, err
		}
		incarnation = jobframework.IncarnationOf(st.UID) + 1
		if st, err = fence.Get(ctx, s.fenceKV, rk); err != nil {
			return nil, err
		}
	}
	// WorkloadOf changes its argument (Pristine): give it a copy.
	view, err := k.decode(job.Object())
	if err != nil {
		return nil, err
	}
	w, err := jobframework.WorkloadOf(k.kind.Name, view, prio, s.workloadOptions()...)
	if err == nil {
		w.UID = jobframework.WorkloadUID(w.UID, incarnation)
		var rec *events.WorkloadSubmittedV1
		if rec, err = s.storeFenced(ctx, k, rk, w, st); !errors.Is(err, jobframework.ErrInvalidJob) {
			return rec, err
		}
	}
	// Bad input is reported on the object and not retried: a change to
	// the object or the configuration brings it back.
	s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "InvalidWorkload", "not queued: %v", err)
	s.log.Warn().Err(err).Str("workload", rk).Msg("not queued")
	return nil, nil
}

// reopenable reports whether a fence says the job of uid had a workload
// that ended while the job lives on: it left its queue or moved to
// another (see leave and move).
func reopenable(st fence.State, uid string) bool {
	return st.Phase == fence.Finished && jobframework.ObjectUID(st.UID) == uid && st.End != nil && leftQueue(*st.End)
}

// leftQueue: an end that was the job leaving its queue, not the job's.
func leftQueue(e fence.End) bool {
	return e.Reason == ReasonQueueNameRemoved || e.Reason == ReasonQueueNameChanged
}

// reopen clears the fence of a workload that ended when its job left its
// queue, so that the job queues again. The informer may be behind a
// removal of the label, so the object is read from the API server: only
// one that is labelled, suspended and unfinished now is queued again. It
// returns that object, or nil when there is none to queue.
func (s *Service) reopen(ctx context.Context, k *kindRunner, rk, ns, name string, st fence.State) (jobframework.Job, error) {
	fresh, err := s.fetch(ctx, k, ns, name)
	if err != nil || fresh == nil {
		return nil, err
	}
	m := fresh.Meta()
	if string(m.GetUID()) != jobframework.ObjectUID(st.UID) || m.GetLabels()[v1beta1.QueueNameLabel] == "" || !fresh.IsSuspended() || m.GetDeletionTimestamp() != nil {
		return nil, nil
	}
	if done, _, _ := fresh.Finished(); done {
		return nil, nil
	}
	// The end is told before the fence that keeps it for a successor
	// goes.
	ref := events.WorkloadRef{Kind: k.kind.Name, Namespace: ns, Name: name, UID: st.UID}
	ev, id := endEvent(ref, st.End)
	if err := s.ensureAnnounced(ctx, ev, id); err != nil {
		return nil, err
	}
	ended, err := fence.Reopen(ctx, s.fenceKV, rk, st.UID, leftQueue)
	if err != nil {
		return nil, err
	}
	if ended == nil {
		return nil, errLookAgain // the fence moved meanwhile
	}
	s.log.Info().Str("workload", rk).Str("uid", st.UID).Msg("queued again after leaving its queue")
	return fresh, nil
}

// maxRecordBytes bounds a workload record: it travels as one NATS
// message, which the server caps at 1 MiB by default; the rest is left
// for headers. A job whose record is larger is refused, never retried.
const maxRecordBytes = 1<<20 - 32<<10

// store writes a workload's record and announces it; nil, nil for an
// object that ended already.
func (s *Service) store(ctx context.Context, k *kindRunner, rk string, w jobframework.Workload) (*events.WorkloadSubmittedV1, error) {
	st, err := fence.Get(ctx, s.fenceKV, rk)
	if err != nil {
		return nil, err
	}
	return s.storeFenced(ctx, k, rk, w, st)
}

// storeFenced is store with the workload's fence read already.
func (s *Service) storeFenced(ctx context.Context, k *kindRunner, rk string, w jobframework.Workload, st fence.State) (*events.WorkloadSubmittedV1, error) {
	// An object that ended is never queued again, even when this
	// replica's informer is behind the replica that saw it end (nor is
	// one that left its queue, unless submit found it back in one).
	if st.Phase == fence.Finished && jobframework.ObjectUID(st.UID) == jobframework.ObjectUID(w.UID) {
		return nil, nil
	}
	rec := toEvent(k.kind.Name, w)
	// A record the stream would refuse is refused here, with the reason,
	// rather than written and then retried forever.
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("workload record: %v: %w", err, jobframework.ErrInvalidJob)
	}
	ctx, span := k.tracer.Start(ctx, rec.Workload, tracing.SpanSubmit, trace.WithAttributes(
		tracing.AttrLocalQueue.String(rec.LocalQueue), tracing.AttrPriority.Int64(int64(rec.Priority))))
	err := s.writeRecord(ctx, rk, rec)
	endSpan(span, err)
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// writeRecord writes a new workload's record and announces it.
func (s *Service) writeRecord(ctx context.Context, rk string, rec events.WorkloadSubmittedV1) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if len(b) > maxRecordBytes {
		return fmt.Errorf("its workload record is %d bytes, more than the %d a record may have (its pod sets' node selectors, tolerations or requests are too large): %w",
			len(b), maxRecordBytes, jobframework.ErrInvalidJob)
	}
	if _, err := s.wlKV.Create(ctx, rk, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("write workload %s: %w", rk, err)
	}
	return s.pub.Publish(ctx, rec, events.ID(rec.Type(), rec.Workload.UID))
}

func toEvent(kind string, w jobframework.Workload) events.WorkloadSubmittedV1 {
	ev := events.WorkloadSubmittedV1{
		Workload:      events.WorkloadRef{Kind: kind, Namespace: w.Namespace, Name: w.Name, UID: w.UID},
		LocalQueue:    w.LocalQueue,
		Priority:      w.Priority,
		PriorityClass: w.PriorityClass,
		CreationTime:  w.CreationTime,
		// Kueue's maximumExecutionTimeSeconds.
		MaximumExecutionTimeSeconds: w.MaxExecutionSeconds,
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

// Reasons of the deleted event of a workload whose object lives on: its
// queue label was removed (it left its queue), or changed (it moved to
// another; a new workload queues there).
const (
	ReasonQueueNameRemoved = "QueueNameRemoved"
	ReasonQueueNameChanged = "QueueNameChanged"
)

// leave ends the workload of an object whose queue label was removed. A
// suspended object's workload ends at once, as if the object were
// deleted (reservation, fence and record released, one deleted event),
// and from then on the object is not Sluice's. One that still runs (the
// webhook refuses that change, so only while it was not asked) is
// stopped first: it runs on its workload's quota.
func (s *Service) leave(ctx context.Context, k *kindRunner, rk string, rec *events.WorkloadSubmittedV1, job jobframework.Job) error {
	if finished, ok, msg := job.Finished(); finished {
		return s.gone(ctx, rk, rec, &events.WorkloadFinishedV1{Succeeded: ok, Message: msg})
	}
	if !job.IsSuspended() {
		return s.stopFirst(ctx, k, job, rec, ReasonQueueNameRemoved,
			fmt.Sprintf("label %s removed while running: stopped, and no longer queued", v1beta1.QueueNameLabel))
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "LeftQueue",
		"label %s removed: no longer queued in LocalQueue %s; Sluice does not manage this job any more", v1beta1.QueueNameLabel, rec.LocalQueue)
	s.log.Info().Str("workload", rk).Str("queue", rec.LocalQueue).Msg("left its queue: workload ended")
	return s.end(ctx, rk, rec, &fence.End{Deleted: true, Reason: ReasonQueueNameRemoved})
}

// stopFirst stops a running object whose queue label changed (possible
// only while the webhook was not asked), on its workload's admission; the
// caller's change follows once the stop is seen (errLookAgain).
func (s *Service) stopFirst(ctx context.Context, k *kindRunner, job jobframework.Job, rec *events.WorkloadSubmittedV1, reason, message string) error {
	r, _ := s.reservation(rec.Workload)
	if err := s.stop(ctx, k, job, rec.Workload, "", reason, message, r.Admission()); err != nil {
		return err
	}
	return errLookAgain
}

// move ends the workload of an object whose queue label now names another
// LocalQueue; the caller then queues a new workload there (submit). A
// suspended object moves at once, keeping nothing of its place or any
// reservation in the old queue, as in Kueue. One that still runs (the
// webhook refuses that change) is stopped first.
func (s *Service) move(ctx context.Context, k *kindRunner, rk string, rec *events.WorkloadSubmittedV1, job jobframework.Job) error {
	to := job.Meta().GetLabels()[v1beta1.QueueNameLabel]
	if !job.IsSuspended() {
		return s.stopFirst(ctx, k, job, rec, ReasonQueueNameChanged,
			fmt.Sprintf("label %s changed from %s to %s while running: stopped, to queue in %s", v1beta1.QueueNameLabel, rec.LocalQueue, to, to))
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "QueueChanged", "moved from LocalQueue %s to %s", rec.LocalQueue, to)
	s.log.Info().Str("workload", rk).Str("queue", to).Str("was", rec.LocalQueue).Msg("moved to another queue: workload ended, a new one queues")
	return s.end(ctx, rk, rec, &fence.End{Deleted: true, Reason: ReasonQueueNameChanged})
}

// gone announces an object that finished or disappeared and deletes its
// record; quota accounting then releases its reservation.
func (s *Service) gone(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, fin *events.WorkloadFinishedV1) error {
	end := &fence.End{Deleted: fin == nil}
	if fin != nil {
		end.Succeeded, end.Message = fin.Succeeded, fin.Message
	}
	return s.end(ctx, rk, rec, end)
}

// end ends a workload: the fence, then the record, then the announcement.
func (s *Service) end(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, end *fence.End) error {
	r, _ := s.reservation(rec.Workload)
	// The fence first, so no preemption of the admission is announced
	// after the end; then the record: whoever learns of the end from the
	// event then finds the record gone, and never queues the workload
	// again.
	// The fence keeps the announcement too, for whoever takes over if
	// this replica stops before making it.
	end.ClusterQueue = r.ClusterQueue
	if err := fence.Finish(ctx, s.fenceKV, rk, r.Admission(), rec.Workload.UID, end); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.stopsAnnounced, rk)
	s.mu.Unlock()
	if err := bus.Remove(ctx, s.wlKV, rk, 0); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete workload %s: %w", rk, err)
	}
	ev, id := endEvent(rec.Workload, end)
	return s.pub.Publish(ctx, ev, id)
}

// endEvent is the announcement of a workload's end and its id.
func endEvent(w events.WorkloadRef, end *fence.End) (events.Event, string) {
	if end.Deleted {
		ev := events.WorkloadDeletedV1{Workload: w, Reason: end.Reason}
		return ev, events.ID(ev.Type(), w.UID)
	}
	ev := events.WorkloadFinishedV1{Workload: w, ClusterQueue: end.ClusterQueue, Succeeded: end.Succeeded, Message: end.Message}
	return ev, events.ID(ev.Type(), w.UID)
}

// reannounce makes sure what a replica stored about a workload was also
// announced, for a workload this replica just took over (at its start, or
// from a replica that stopped between storing and announcing): the record
// (submitted) and, for an ended workload, its end (kept in its fence). An
// announcement is looked up by its id as the last one on its subject;
// publishing it again keeps that id.
func (s *Service) reannounce(ctx context.Context, rk string, ref events.WorkloadRef, rec *events.WorkloadSubmittedV1) error {
	if rec != nil {
		if err := s.ensureAnnounced(ctx, *rec, events.ID(rec.Type(), rec.Workload.UID)); err != nil {
			return err
		}
	}
	st := s.fenceOf(rk)
	if st.Phase != fence.Finished || st.End == nil || st.UID == "" {
		return nil
	}
	ref.UID = st.UID
	ev, id := endEvent(ref, st.End)
	return s.ensureAnnounced(ctx, ev, id)
}

func (s *Service) ensureAnnounced(ctx context.Context, ev events.Event, id string) error {
	lctx, cancel := bus.Bounded(ctx)
	defer cancel()
	msg, err := s.events.GetLastMsgForSubject(lctx, ev.NATSSubject())
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fmt.Errorf("read the last %s: %w", ev.Type(), err)
	case msg.Header.Get(jetstream.MsgIDHeader) == id:
		return nil
	}
	s.log.Info().Str("event_type", ev.Type()).Str("subject", ev.NATSSubject()).Msg("announcing what a stopped replica stored but did not announce")
	return s.pub.Publish(ctx, ev, id)
}

// start applies a reservation to a suspended object: one API write. The
// write is fenced three ways, so that an object never runs on a
// reservation that is gone or given away:
//   - the admission must be announced (its admitted event stored), so its
//     started event never comes first;
//   - the fence must let it start (no stop of this admission decided),
//     and holds off stops until the start is announced;
//   - the patch carries the resourceVersion the decision was made on, so a
//     stale view of the object (the informer lagging behind a stop) fails
//     with a conflict instead of resuming it.
func (s *Service) start(ctx context.Context, k *kindRunner, job jobframework.Job, rec *events.WorkloadSubmittedV1, r ledger.Reservation) (err error) {
	ctx, span := s.startSpan(ctx, rec, r)
	defer func() { endSpan(span, err) }()
	s.mu.Lock()
	flavors := s.snap.Flavors
	s.mu.Unlock()
	m := job.Meta()
	admitted, err := k.decode(job.Object())
	if err != nil {
		return err
	}
	a, err := assignmentOf(r)
	if err == nil {
		err = jobframework.Admit(admitted, a, flavors)
	}
	if err != nil {
		s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "AdmissionFailed", "cannot apply admission: %v", err)
		return nil
	}
	if u, ok := job.(jobframework.Unlocker); ok {
		if p := u.UnlockPatch(); p != nil {
			// Stopped earlier without its templates unlocked (Sluice had not
			// changed them): unlock now, start once the informer sees it.
			p, err := jobframework.WithUID(p, string(m.GetUID()))
			if err != nil {
				return err
			}
			if err := s.patch(ctx, k, m.GetNamespace(), m.GetName(), p, "status"); err != nil {
				return fmt.Errorf("unlock templates: %w", err)
			}
			return errLookAgain
		}
	}
	patch, err := jobframework.MergePatch(job.Object(), admitted.Object(), string(m.GetUID()), m.GetResourceVersion())
	if err != nil {
		return err
	}
	if _, err := s.fencedStart(ctx, rec, r, func() error {
		if err := s.patch(ctx, k, m.GetNamespace(), m.GetName(), patch); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		return nil
	}); err != nil {
		if errors.Is(err, fence.ErrCorrupt) {
			// Fails closed: it does not start until the fence is repaired.
			s.recorder.Eventf(job.Object(), corev1.EventTypeWarning, "FenceUnreadable",
				"not started: its fence in %s cannot be read; delete the key %s there to repair it", fence.Bucket, workloads.Key(rec.Workload))
		}
		return err
	}
	s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "Admitted", "admitted by ClusterQueue %s: %s", r.ClusterQueue, describe(r))
	return s.announceStart(ctx, rec, r)
}

// markHeld writes the admission a held object holds into HeldAnnotation
// ("" removes it).
func (s *Service) markHeld(ctx context.Context, k *kindRunner, job jobframework.Job, admission string) error {
	m := job.Meta()
	if m.GetAnnotations()[jobframework.HeldAnnotation] == admission {
		return nil
	}
	var value any
	if admission != "" {
		value = admission
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": string(m.GetUID()), "annotations": map[string]any{jobframework.HeldAnnotation: value}}})
	if err != nil {
		return err
	}
	return s.patch(ctx, k, m.GetNamespace(), m.GetName(), patch)
}

// startRemote announces the start of a workload a multicluster check
// dispatched to a worker cluster. Nothing here changes: the object stays
// suspended (the worker runs the job), and its end comes with the status
// the dispatcher mirrors from the worker. The fences hold as for a local
// start, so a preemption waits for the announcement.
func (s *Service) startRemote(ctx context.Context, job jobframework.Job, rec *events.WorkloadSubmittedV1, r ledger.Reservation) (err error) {
	rk := workloads.Key(rec.Workload)
	if st := s.fenceOf(rk); st.Admission == r.Admission() && st.Phase == fence.Started {
		// Its pods are the worker's, which admitted it: for
		// waitForPodsReady here it is ready once it runs there.
		return s.reportReady(ctx, rk, true, r)
	}
	ctx, span := s.startSpan(ctx, rec, r)
	defer func() { endSpan(span, err) }()
	before, err := s.fencedStart(ctx, rec, r, func() error { return nil })
	if err != nil {
		return err
	}
	if !before {
		s.recorder.Eventf(job.Object(), corev1.EventTypeNormal, "Dispatched", "admitted by ClusterQueue %s: runs in worker cluster %s", r.ClusterQueue, r.DispatchedTo)
	}
	if err := s.announceStart(ctx, rec, r); err != nil {
		return err
	}
	return s.reportReady(ctx, rk, true, r)
}

// assignmentOf is the assignment a reservation makes, with what its
// admission checks add to each pod set.
func assignmentOf(r ledger.Reservation) (jobframework.Assignment, error) {
	updates, err := jobframework.MergeUpdates(r.PodSetUpdates)
	if err != nil {
		return jobframework.Assignment{}, err
	}
	a := jobframework.Assignment{ClusterQueue: r.ClusterQueue}
	for _, ps := range r.PodSets {
		a.PodSets = append(a.PodSets, jobframework.PodSetAssignment{Name: ps.Name, Count: ps.Count, Flavors: ps.Flavors, Update: updates[ps.Name]})
	}
	return a, nil
}

// fencedStart runs apply, the API writes of a start, under the fences
// start describes: the admission must be announced, and the fence must let
// it start; a failed write releases the fence. It reports whether the
// admission had started before (a start retried or extended).
func (s *Service) fencedStart(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation, apply func() error) (startedBefore bool, err error) {
	if err := s.announced(ctx, rec.Workload, r); err != nil {
		return false, err
	}
	rk := workloads.Key(rec.Workload)
	admission := r.Admission()
	st, err := fence.BeginStart(ctx, s.fenceKV, rk, admission)
	if err != nil {
		if errors.Is(err, fence.ErrStopping) {
			// Its preemption (or drain) was decided meanwhile: the next
			// look sees the fence and stops it once that is announced.
			return false, errLookAgain
		}
		return false, err
	}
	if err := apply(); err != nil {
		if aerr := fence.AbortStart(ctx, s.fenceKV, rk, admission); aerr != nil {
			s.log.Warn().Err(aerr).Str("workload", rk).Msg("start not released; stops wait until it is retried")
		}
		return false, err
	}
	return st.Phase == fence.Started, nil
}

// announceStart publishes started and then lets stops of the admission
// proceed.
func (s *Service) announceStart(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation) error {
	ev := events.WorkloadStartedV1{Workload: rec.Workload, ClusterQueue: r.ClusterQueue, Admission: r.Admission()}
	if err := s.publishStarted(ctx, ev, events.ID(ev.Type(), rec.Workload.UID, r.Admission())); err != nil {
		return err
	}
	first, err := fence.EndStartFirst(ctx, s.fenceKV, workloads.Key(rec.Workload), r.Admission())
	if first {
		// The workload's first start ends its admission latency: the root
		// span, from its job's creation to now, which its start span (in
		// ctx, if any) must not outlast.
		trace.SpanFromContext(ctx).End()
		s.tracer(rec.Workload.Kind).Root(rec.Workload, trace.WithTimestamp(rec.CreationTime), trace.WithAttributes(
			tracing.AttrLocalQueue.String(rec.LocalQueue), tracing.AttrClusterQueue.String(r.ClusterQueue),
			tracing.AttrPriority.Int64(int64(rec.Priority)), tracing.AttrAdmission.String(r.Admission()))).End()
	}
	return err
}

// publishStarted announces a start unless the admission's stop or the
// job's end was announced first. The fence keeps a stop from being
// decided while a start is in flight, but a start whose claim was given up
// by another replica (one that took the shard over and failed its own
// write) can still be in flight after the stop: its announcement expects
// the last event about the workload, so it is refused if anything came
// since, and a stop that came first wins. The job is then stopped, as
// the stop says.
func (s *Service) publishStarted(ctx context.Context, ev events.WorkloadStartedV1, id string) error {
	ep, expecting := s.pub.(workloads.ExpectingPublisher)
	if !expecting || s.events == nil {
		return s.pub.Publish(ctx, ev, id)
	}
	stopped := false
	_, err := ep.PublishExpecting(ctx, ev, id, events.WorkloadFilter(ev.Workload), func(ctx context.Context) (uint64, bool, error) {
		last, err := workloads.Last(ctx, s.events, ev.Workload)
		switch {
		case err != nil:
			return 0, false, err
		case last.ID == id:
			return 0, false, nil // announced before (a retried start)
		case last.Stopped(ev.Admission) || last.Ended(ev.Workload.UID):
			s.log.Info().Str("workload", workloads.EngineKey(ev.Workload)).Str("event_type", last.Type).
				Msg("start not announced: its stop or its end came first")
			stopped = true
			return 0, false, nil
		}
		return last.Seq, true, nil
	})
	if err == nil && stopped {
		return errLookAgain
	}
	return err
}

// tracer is the tracer of a kind's workloads.
func (s *Service) tracer(kind string) *tracing.Tracer {
	if k := s.kinds[kind]; k != nil {
		return k.tracer
	}
	return nil
}

// startSpan starts the start span of an admission.
func (s *Service) startSpan(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation) (context.Context, trace.Span) {
	return s.tracer(rec.Workload.Kind).Start(ctx, rec.Workload, tracing.SpanStart, trace.WithAttributes(
		tracing.AttrClusterQueue.String(r.ClusterQueue), tracing.AttrAdmission.String(r.Admission()), tracing.Flavors(r.PodSets)))
}

// endSpan ends a span, marking it failed by err.
func endSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, errLookAgain) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// confirmStart finishes a start that was applied but not announced (the
// service stopped between the two): stops of that admission wait for it.
func (s *Service) confirmStart(ctx context.Context, rec *events.WorkloadSubmittedV1, r ledger.Reservation) error {
	rk := workloads.Key(rec.Workload)
	if st := s.fenceOf(rk); st.Admission == r.Admission() && st.Phase != "" && st.Phase != fence.Starting {
		// An admission's fence never moves back to starting: seen past
		// it, even late, there is nothing to confirm (every running
		// object's change would otherwise read its fence).
		return nil
	}
	st, err := fence.Get(ctx, s.fenceKV, rk)
	if err != nil {
		return err
	}
	if st.Admission != r.Admission() || st.Phase != fence.Starting {
		return nil
	}
	return s.announceStart(ctx, rec, r)
}

// reportReady writes into the fence of a started job whether its pods are
// all ready, where admission's waitForPodsReady reads it. A kind that
// cannot tell counts as ready once started. Not ready is what a fence
// without readiness means, so only a change after the first ready is
// written as not ready (the pods must recover).
func (s *Service) reportReady(ctx context.Context, rk string, ready bool, r ledger.Reservation) error {
	if !s.cfg.ReportPodsReady {
		return nil
	}
	st := s.fenceOf(rk)
	if st.Admission == r.Admission() && st.Phase == fence.Started && (st.Ready != nil && st.Ready.Ready) == ready {
		return nil // nothing new, as far as this replica has seen
	}
	return fence.SetReady(ctx, s.fenceKV, rk, r.Admission(), ready, time.Now())
}

// podsReady says whether a started object's pods are all ready: what its
// status says, or yes for a kind that cannot tell.
func podsReady(job jobframework.Job) bool {
	if pr, ok := job.(jobframework.PodsReadier); ok {
		return pr.PodsReady()
	}
	return true
}

var (
	// errNotAnnounced: the admission's event is not in the stream yet.
	errNotAnnounced = errors.New("admission not announced yet")
	// errLookAgain: a first write is done; the next waits for the
	// informer to see it.
	errLookAgain = errors.New("look again shortly")
	// errStopNotAnnounced: a stop is fenced but its preempted or evicted
	// event is not stored yet.
	errStopNotAnnounced = errors.New("stop not announced yet")
)

// announceWait is how long an object whose admission is not announced yet
// waits before it is looked at again; about one admission cycle.
const announceWait = 20 * time.Millisecond

// announced checks that the admitted event of the reservation is the last
// one stored for the workload.
func (s *Service) announced(ctx context.Context, w events.WorkloadRef, r ledger.Reservation) error {
	ok, err := workloads.Announced(ctx, s.events, w, r.Admission())
	if err != nil {
		return err
	}
	if !ok {
		return errNotAnnounced
	}
	return nil
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

// stop suspends an object and restores its templates, then announces it.
// admission names the admission it is stopped from when the caller knows
// it (a preemption or eviction names it); otherwise it is the one this
// service sees in the ledger, if any.
//
// The writes are: mark the admission stopped; suspend, when the templates
// must change and the object runs (templates of a running object cannot
// change); unlock the templates, for a kind that needs it; restore. An
// object whose templates Sluice never changed is stopped in one write
// after the mark. Every step is idempotent: a failed stop is retried from
// the start.
func (s *Service) stop(ctx context.Context, k *kindRunner, job jobframework.Job, ref events.WorkloadRef, cq, reason, message, admission string) error {
	r, held := s.reservation(ref)
	if admission == "" && held {
		admission = r.Admission()
	}
	m := job.Meta()
	ns, name, uid := m.GetNamespace(), m.GetName(), string(m.GetUID())
	if cq == "" {
		cq = r.ClusterQueue
	}
	if d, ok := job.(jobframework.Deleter); ok && d.StopsByDeletion() {
		if err := s.delete(ctx, k, ns, name, uid); err != nil {
			return err
		}
		s.recorder.Event(job.Object(), corev1.EventTypeNormal, reason, message+" (deleted: it cannot be held back once admitted)")
		return s.announceStop(ctx, ref, cq, reason, admission)
	}
	if admission != "" {
		mark, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid": uid, "annotations": map[string]string{jobframework.StoppedAnnotation: admission}}})
		if err != nil {
			return err
		}
		if err := s.patch(ctx, k, ns, name, mark); err != nil {
			return fmt.Errorf("mark stopped: %w", err)
		}
	}
	for n := 0; ; n++ {
		if n > 3 {
			return fmt.Errorf("stop: not done after %d writes", n)
		}
		step, err := jobframework.NextStopStep(k.ad, job)
		if err != nil {
			return err
		}
		if err := s.patch(ctx, k, ns, name, step.Patch, step.Subresource()...); err != nil {
			return fmt.Errorf("stop (%s): %w", step.Name, err)
		}
		if step.Last {
			break
		}
		// The next step must see this one: re-read.
		if job, err = s.fetch(ctx, k, ns, name); err != nil {
			return err
		}
		if job == nil || string(job.Meta().GetUID()) != uid {
			return nil // gone: its deletion releases the quota
		}
	}
	s.recorder.Event(job.Object(), corev1.EventTypeNormal, reason, message)
	return s.announceStop(ctx, ref, cq, reason, admission)
}

// announceStop publishes stopped, unless the workload ended meanwhile
// (its object finished while being stopped): its finished event released
// the quota, and a stop after the end would contradict it.
func (s *Service) announceStop(ctx context.Context, ref events.WorkloadRef, cq, reason, admission string) error {
	st, err := fence.Get(ctx, s.fenceKV, workloads.Key(ref))
	if err != nil {
		return err
	}
	if st.Phase == fence.Finished && st.UID == ref.UID {
		return nil
	}
	ev := events.WorkloadStoppedV1{Workload: ref, ClusterQueue: cq, Reason: reason, Admission: admission}
	ctx, span := s.tracer(ref.Kind).Start(ctx, ref, tracing.SpanStop, trace.WithAttributes(
		tracing.AttrClusterQueue.String(cq), tracing.AttrReason.String(reason), tracing.AttrAdmission.String(admission)))
	err = s.pub.Publish(ctx, ev, events.ID(ev.Type(), ref.UID, admission))
	endSpan(span, err)
	return err
}

// fencedStop reports whether the admission a workload holds is being
// stopped (preempted, drained: its fence moved to stopping). Then, unless
// this replica announced that stop already, it reads the stop's cause and
// has stop stop the object and announce it, which releases the
// reservation.
func (s *Service) fencedStop(ctx context.Context, rk string, rec *events.WorkloadSubmittedV1, stop func(cq, reason, message, admission string) error) (bool, error) {
	r, held := s.reservation(rec.Workload)
	st := s.fenceOf(rk)
	if st.Phase != fence.Stopping || !held || r.Admission() != st.Admission || r.UID != rec.Workload.UID {
		return false, nil
	}
	s.mu.Lock()
	announced := s.stopsAnnounced[rk] == st.Admission
	s.mu.Unlock()
	if announced {
		return true, nil // the release is on its way
	}
	cq, reason, message, err := s.stopCause(ctx, rec.Workload, st.Admission)
	if err != nil {
		return true, err
	}
	if err := stop(cq, reason, message, st.Admission); err != nil {
		return true, err
	}
	s.mu.Lock()
	s.stopsAnnounced[rk] = st.Admission
	s.mu.Unlock()
	return true, nil
}

// stopCause reads the announcement of the stop of an admission (its
// preempted or evicted event) for the ClusterQueue and the reason to
// report. The fence moves to stopping just before the announcement is
// published: until it is stored the stop waits, so that the workload's
// stopped event never comes before it.
func (s *Service) stopCause(ctx context.Context, w events.WorkloadRef, admission string) (cq, reason, message string, err error) {
	for _, typ := range []string{events.TypeWorkloadPreemptedV1, events.TypeWorkloadEvictedV1} {
		gctx, cancel := bus.Bounded(ctx)
		msg, err := s.events.GetLastMsgForSubject(gctx, events.WorkloadSubject(typ, w))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return "", "", "", fmt.Errorf("read the stop of %s: %w", w, err)
		}
		env, err := events.DecodeParts(msg.Subject, msg.Header, msg.Data)
		if err != nil {
			return "", "", "", fmt.Errorf("read the stop of %s: %w", w, err)
		}
		switch typ {
		case events.TypeWorkloadPreemptedV1:
			var e events.WorkloadPreemptedV1
			if env.As(&e) == nil && e.Admission == admission && e.Workload.UID == w.UID {
				return e.ClusterQueue, "Preempted", fmt.Sprintf("preempted (%s) by %s/%s", e.Reason, e.Preemptor.Namespace, e.Preemptor.Name), nil
			}
		case events.TypeWorkloadEvictedV1:
			var e events.WorkloadEvictedV1
			if env.As(&e) == nil && e.Admission == admission && e.Workload.UID == w.UID {
				msg := "evicted: " + e.Reason
				if e.Message != "" {
					msg += ": " + e.Message
				}
				return e.ClusterQueue, "Evicted", msg, nil
			}
		}
	}
	return "", "", "", errStopNotAnnounced
}

// handlePending reports on the object a changed pending reason, or the
// reservation of its quota while it waits for its admission checks
// (Kueue's QuotaReserved).
func (s *Service) handlePending(_ context.Context, k *kindRunner, env events.Envelope) error {
	var (
		w              events.WorkloadRef
		reason, detail string
		kind           = corev1.EventTypeNormal
	)
	switch env.Type {
	case events.TypeWorkloadReservedV1:
		var e events.WorkloadReservedV1
		if err := env.As(&e); err != nil {
			return bus.Poison(err)
		}
		w, reason = e.Workload, "QuotaReserved"
		detail = fmt.Sprintf("quota reserved in ClusterQueue %s; waiting for admission checks %s", e.ClusterQueue, strings.Join(e.Checks, ", "))
	default:
		var e events.WorkloadPendingV1
		if err := env.As(&e); err != nil {
			return bus.Poison(err)
		}
		w, reason, detail = e.Workload, "Pending", e.Reason
		if e.Invalid {
			// Never admitted as written: the tenant has to change it.
			kind, reason = corev1.EventTypeWarning, "InvalidWorkload"
		}
	}
	if strings.HasPrefix(w.UID, jobframework.GroupUIDPrefix) {
		// A group's news is told on each of its members.
		members, err := s.members(k, w.String())
		if err != nil {
			return err
		}
		for _, m := range members {
			s.recorder.Event(m.Object(), kind, reason, detail)
		}
		return nil
	}
	ref := &corev1.ObjectReference{Kind: k.kind.GVK.Kind, APIVersion: k.kind.GVK.GroupVersion().String(),
		Namespace: w.Namespace, Name: w.Name, UID: types.UID(jobframework.ObjectUID(w.UID))}
	s.recorder.Event(ref, kind, reason, detail)
	return nil
}

// decode decodes an object of the kind and stamps its kind on it, so
// Kubernetes Events can name it without a scheme.
func (k *kindRunner) decode(obj runtime.Object) (jobframework.Job, error) {
	j, err := k.ad.Decode(obj)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", k.kind.Resource, err)
	}
	j.Object().GetObjectKind().SetGroupVersionKind(k.kind.GVK)
	return j, nil
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

// workloadOptions are how this service builds workloads from objects.
func (s *Service) workloadOptions() []jobframework.WorkloadOption {
	if s.cfg.Requests == nil {
		return nil
	}
	return []jobframework.WorkloadOption{jobframework.WithRequests(s.cfg.Requests)}
}

// priorities resolves priority classes from the configuration snapshot.
func (s *Service) priorities() jobframework.StaticPriorityResolver {
	return jobframework.StaticPriorityResolver{WorkloadPriorityClasses: s.snap.WorkloadPriorityClasses, PriorityClasses: s.snap.PriorityClasses,
		DefaultPriorityClass: s.snap.DefaultPriorityClass}
}

// PendingConsumer is the durable consumer of a kind's pending reasons and
// reservations, which the integration writes into its objects' status.
func PendingConsumer(kind string) bus.ConsumerSpec {
	return bus.ConsumerSpec{
		Stream:  bus.StreamEvents,
		Durable: kind + "-pending",
		FilterSubjects: []string{events.SubjectFilter("workload", "pending", kind, "*"),
			events.SubjectFilter("workload", "reserved", kind, "*")},
	}
}
