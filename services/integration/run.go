package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	"github.com/sluice-dev/sluice/internal/queueconfig"
	"github.com/sluice-dev/sluice/internal/shard"
	"github.com/sluice-dev/sluice/internal/supervise"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/workloads"
	"github.com/sluice-dev/sluice/internal/workloop"
)

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
	// ReportPodsReady writes into each started workload's fence whether
	// its pods are all ready, for admission's waitForPodsReady.
	ReportPodsReady bool
	// Requests turns one pod's effective requests into those its workload
	// is queued with (Kueue's resources block); nil keeps them.
	Requests func(corev1.ResourceList) corev1.ResourceList
	// Devices, when it has deviceClassMappings, counts the devices pods
	// claim (Dynamic Resource Allocation) as those resources.
	Devices *queueconfig.Resources
	// ManageJobsWithoutQueueName: objects created without a queue label
	// in ManagedNamespaces are held until they get one. Either way, such
	// an object in a managed namespace with a LocalQueue named "default"
	// is put in it (the webhook's Unqueued).
	ManageJobsWithoutQueueName bool
	// ManagedNamespaces selects those namespaces; nil: none (no
	// defaulting, no holding).
	ManagedNamespaces *metav1.LabelSelector
	// QueuedKinds are every kind Sluice queues: an object one of them
	// controls is never defaulted or held itself.
	QueuedKinds []schema.GroupKind
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
	pub    events.Publisher
	log    zerolog.Logger
	kinds  map[string]*kindRunner
	// devices counts pods' device claims (Config.Devices), from Run on.
	devices jobframework.DeviceCounter
	// parents are the parent kinds (Kind.QueuedBy) the service runs: only
	// their webhook, since the pod integration queues their Pods.
	parents map[string]jobframework.Adapter
	// reconfigured tells requeueOnConfig that the configuration changed.
	reconfigured chan struct{}

	// wlKV is the workloads bucket as this replica writes it (each write
	// forgets the key's cached record); wlRead is the bucket itself, for
	// reads (bus.Value).
	wlKV    jetstream.KeyValue
	wlRead  jetstream.KeyValue
	records *recordCache
	fenceKV jetstream.KeyValue
	// fenceMoves is the fence bucket for this replica's moves of fences:
	// each starts from the state this replica last wrote (fence.Remember).
	fenceMoves fence.KV
	shardKV    jetstream.KeyValue
	events     jetstream.Stream
	recorder   record.EventRecorder

	mu     sync.Mutex
	config *configstore.Store
	// snap is config's snapshot as of the last configLocked; configDirty
	// says config changed since.
	snap        configstore.Snapshot
	configDirty bool
	// mcQueues are the LocalQueues ("namespace/name", sorted) whose jobs
	// are dispatched to worker clusters, as of snap.
	mcQueues []string
	// defaultQueues are the namespaces (sorted) with a LocalQueue named
	// jobframework.DefaultLocalQueue, as of snap.
	defaultQueues []string
	// wh is the webhook, once started; whQueues and whDefaults the
	// multi-cluster queues and the namespaces with a default LocalQueue
	// its configurations were last registered with.
	wh         *jobframework.Webhook
	whQueues   []string
	whDefaults []string
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
	// ungating is the topology ungater's queue, once it runs: an object
	// whose reservation changes is looked at again there (its pods may
	// move to other domains).
	ungating atomic.Pointer[workqueue.TypedRateLimitingInterface[string]]
	// elastic is the elastic ungater's queue, once it runs: an object
	// whose reservation changes size is looked at again there.
	elastic atomic.Pointer[workqueue.TypedRateLimitingInterface[string]]
}

// Option tunes a Service.
type Option func(*options)

type options struct {
	log     zerolog.Logger
	tracing *tracing.Factory
	metrics *QueueMetrics
}

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithTracing makes each kind's tracer (service.name sluice-<kind>); nil,
// the default, records no spans.
func WithTracing(tf *tracing.Factory) Option { return func(o *options) { o.tracing = tf } }

// WithQueueMetrics receives the kinds' work queue metrics; without it they
// are kept, not exported.
func WithQueueMetrics(m *QueueMetrics) Option { return func(o *options) { o.metrics = m } }

// New returns an integration of the adapters' kinds. Each kind must be
// served by the API server (see RunWhenServed).
func New(cfg Config, adapters []jobframework.Adapter, kube kubernetes.Interface, dyn dynamic.Interface, js jetstream.JetStream, pub events.Publisher,
	opts ...Option) (*Service, error) {
	o := options{log: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(adapters) == 0 {
		return nil, errors.New("integration: no kinds to run")
	}
	if cfg.Replica == "" {
		cfg.Replica = nuid.Next()
	}
	if o.metrics == nil {
		o.metrics = NewQueueMetrics() // kept, not exported
	}
	s := &Service{
		synced:         health.NewGate("objects, configuration, ledger or fences not loaded yet"),
		cfg:            cfg,
		kube:           kube,
		dyn:            dyn,
		js:             js,
		pub:            pub,
		log:            o.log.With().Str("replica", cfg.Replica).Logger(),
		kinds:          map[string]*kindRunner{},
		parents:        map[string]jobframework.Adapter{},
		config:         configstore.New(),
		held:           map[string]ledger.Reservation{},
		legacyKeys:     map[string][]string{},
		ownKey:         map[string]bool{},
		fences:         map[string]fence.State{},
		stopsAnnounced: map[string]string{},
		unverified:     map[string]bool{},
		records:        newRecordCache(),
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
		if _, dup := s.parents[k.Name]; dup {
			return nil, fmt.Errorf("integration: kind %q given twice", k.Name)
		}
		if k.IsParent() {
			if _, ok := ad.(jobframework.Parent); !ok {
				return nil, fmt.Errorf("integration: kind %s is a parent kind but its adapter is not a jobframework.Parent", k.Name)
			}
			s.parents[k.Name] = ad
			continue
		}
		tr, err := o.tracing.For(context.Background(), strings.ToLower(k.Name))
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
				workqueue.TypedRateLimitingQueueConfig[string]{Name: k.Name, MetricsProvider: o.metrics}),
		}
	}
	return s, nil
}

// Kinds returns the names of the kinds the service runs, sorted.
func (s *Service) Kinds() []string {
	out := make([]string, 0, len(s.kinds)+len(s.parents))
	for n := range s.kinds {
		out = append(out, n)
	}
	for n := range s.parents {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Ready reports whether the service has loaded what it decides on.
func (s *Service) Ready() error { return s.synced.Check() }

// Run reconciles objects until ctx ends, then finishes in-flight work.
func (s *Service) Run(ctx context.Context) error {
	if len(s.kinds) == 0 {
		return s.runParentsOnly(ctx)
	}
	cfgKV, ledKV, err := s.open(ctx)
	if err != nil {
		return err
	}
	s.devices = deviceCounter(ctx, s.kube, s.cfg.Devices)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	s.recorder = broadcaster.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: "sluice-integration", Host: s.cfg.Replica})

	// The informers run under runCtx; the watches, the webhook and the
	// consumers are units of sup, stopped in reverse order once the work
	// queues are drained.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	sup := supervise.New(ctx, supervise.WithLogger(s.log))
	defer sup.Stop()
	spawn := sup.Go

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
		wh, err := s.webhook(ctx)
		if err != nil {
			return err
		}
		spawn("webhook", wh.Run)
	}

	// Decide nothing before the objects, the configuration and the ledger
	// are all known: an object must never run without its reservation,
	// and must never be stopped for lack of one that is only not seen yet.
	if err := s.waitSynced(ctx, sup, map[string]<-chan struct{}{
		"configuration": cfgSynced, "ledger": ledSynced, "fences": fenceSynced,
	}); err != nil || ctx.Err() != nil {
		return err
	}
	s.synced.Open()
	if err := s.ensureWebhookConditions(ctx); err != nil {
		s.log.Warn().Err(err).Msg("webhook configurations not updated for the multi-cluster queues and default LocalQueues")
	}

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
		if k.kind.Name == "pod" {
			continue // a Pod gets its domain when admitted: it has no gate to lift
		}
		spawn(k.kind.Name+" topology ungater", func(ctx context.Context) error { return s.runUngater(ctx, k) })
		if k.kind.Elastic {
			spawn(k.kind.Name+" elastic ungater", func(ctx context.Context) error { return s.runElasticUngater(ctx, k) })
		}
	}
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

	select {
	case <-ctx.Done():
	case <-sup.Failed():
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
	if err := sup.Stop(); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	return nil
}

// open opens the buckets and the stream the service uses, and each kind's
// shard owner; it returns the configuration and ledger buckets, which only
// their watches read.
func (s *Service) open(ctx context.Context) (cfgKV, ledKV jetstream.KeyValue, err error) {
	kvs, stream, err := bus.OpenBuckets(ctx, s.js, true, workloads.Bucket, fence.Bucket, bus.BucketShards, configstore.Bucket, ledger.Bucket)
	if err != nil {
		return nil, nil, fmt.Errorf("integration: %w", err)
	}
	s.wlRead, s.fenceKV, s.shardKV, s.events = kvs[0], kvs[1], kvs[2], stream
	s.wlKV = recordKV{KeyValue: kvs[0], cache: s.records}
	s.fenceMoves = fence.Remember(s.fenceKV)
	for _, k := range s.kinds {
		if k.owner, err = shard.New(s.shardKV, k.kind.Name, s.cfg.Replica, shard.WithLogger(s.log)); err != nil {
			return nil, nil, fmt.Errorf("integration: %w", err)
		}
	}
	return kvs[3], kvs[4], nil
}

// webhook starts listening for the kinds' admission reviews and, unless
// the configuration is made outside (the chart), registers it.
func (s *Service) webhook(ctx context.Context) (*jobframework.Webhook, error) {
	var ads []jobframework.Adapter
	for _, name := range s.Kinds() {
		if k, ok := s.kinds[name]; ok {
			ads = append(ads, k.ad)
		} else {
			ads = append(ads, s.parents[name])
		}
	}
	opts := []jobframework.WebhookOption{jobframework.WithAddress(s.cfg.WebhookAddress), jobframework.WithLogger(s.log),
		jobframework.WithMultiClusterQueues(s.dispatchesToWorkers)}
	if s.cfg.ManagedNamespaces != nil {
		opts = append(opts, jobframework.WithUnqueued(jobframework.Unqueued{
			DefaultQueue: s.hasDefaultQueue, Hold: s.cfg.ManageJobsWithoutQueueName, Owners: s.cfg.QueuedKinds}))
	}
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
		return nil, err
	}
	if _, err := wh.Listen(); err != nil {
		return nil, err
	}
	s.wh = wh
	if !s.cfg.ExternalWebhookConfiguration {
		for _, ad := range ads {
			url, err := wh.URL(s.cfg.WebhookHost, ad.Kind())
			if err != nil {
				return nil, err
			}
			if err := jobframework.EnsureWebhookConfiguration(ctx, s.kube, ad.Kind(), url, wh.CABundle(), s.cfg.KueueLabels, s.unqueuedEntry(nil)...); err != nil {
				return nil, err
			}
		}
	}
	return wh, nil
}

// runParentsOnly serves the webhook of parent kinds, which is all their
// integration does: it reads nothing from the bus.
func (s *Service) runParentsOnly(ctx context.Context) error {
	if s.cfg.WebhookAddress == "" {
		return fmt.Errorf("integration: %s: a parent kind's integration is its webhook, and no webhook address is set", strings.Join(s.Kinds(), ", "))
	}
	sup := supervise.New(ctx, supervise.WithLogger(s.log))
	defer sup.Stop()
	if s.cfg.ManagedNamespaces != nil && s.js != nil {
		// An object without a queue label goes to its namespace's
		// LocalQueue default: the configuration says which namespaces
		// have one.
		kv, err := bus.OpenKV(ctx, s.js, configstore.Bucket)
		if err != nil {
			return fmt.Errorf("integration: %w", err)
		}
		synced := make(chan struct{})
		sup.Go("configuration watch", func(ctx context.Context) error { return s.watchConfig(ctx, kv, synced) })
		select {
		case <-synced:
		case <-ctx.Done():
			return nil
		}
	}
	wh, err := s.webhook(ctx)
	if err != nil {
		return err
	}
	sup.Go("webhook", wh.Run)
	s.synced.Open()
	if err := s.ensureWebhookConditions(ctx); err != nil {
		s.log.Warn().Err(err).Msg("webhook configurations not updated for the default LocalQueues")
	}
	sup.Go("requeue on configuration changes", s.requeueOnConfig)
	<-ctx.Done()
	if err := sup.Stop(); err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	return nil
}

// waitSynced waits for the buckets' initial values and every kind's
// informer, naming in readiness and in a periodic log line what is still
// missing, so a replica that stays unready says why.
func (s *Service) waitSynced(ctx context.Context, sup *supervise.Group, buckets map[string]<-chan struct{}) error {
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
		if k == nil {
			continue // a parent kind: nothing to load
		}
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
		case <-sup.Failed():
			return fmt.Errorf("integration: %w", sup.Err())
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

// next reconciles one key of the kind; false once its queue shut down.
func (s *Service) next(ctx context.Context, k *kindRunner) bool {
	return workloop.Next(k.queue, func(key string) error {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err := s.sync(wctx, k, key)
		if errors.Is(err, errNotAnnounced) || errors.Is(err, errLookAgain) {
			// The admission is stored but not yet announced (it will be
			// within a cycle), or a first write waits to be seen.
			return workloop.After(announceWait, err)
		}
		return err
	}, func(key string, err error) {
		if errors.Is(err, errStopNotAnnounced) {
			// Announced right after the fence moved, normally; if the
			// stopper died in between, its retry may take a while.
			return
		}
		s.log.Warn().Err(err).Str("workload", k.kind.Name+"/"+key).Msg("not reconciled; retrying")
	})
}

// configSettle is how long requeueOnConfig waits after looking at every
// object, so that a burst of configuration changes (every queue rewritten
// at a start, a chart upgrade) costs a few passes over the objects, not
// one per change.
const configSettle = 250 * time.Millisecond

// maxRecordBytes bounds a workload record: it travels as one NATS
// message, which the server caps at 1 MiB by default; the rest is left
// for headers. A job whose record is larger is refused, never retried.
const maxRecordBytes = 1<<20 - 32<<10

// Reasons of the deleted event of a workload whose object lives on: its
// queue label was removed (it left its queue), or changed (it moved to
// another; a new workload queues there).
const (
	ReasonQueueNameRemoved = "QueueNameRemoved"
	ReasonQueueNameChanged = "QueueNameChanged"
	// ReasonPodSetsChanged stops an object that is not elastic and runs
	// more pods than its reservation holds (its count was raised while it
	// ran, past the webhook).
	ReasonPodSetsChanged = "PodSetsChanged"
)

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

// workloadOptions are how this service builds workloads from objects.
func (s *Service) workloadOptions() []jobframework.WorkloadOption {
	var opts []jobframework.WorkloadOption
	if s.cfg.Requests != nil {
		opts = append(opts, jobframework.WithRequests(s.cfg.Requests))
	}
	if s.cfg.KueueLabels {
		opts = append(opts, jobframework.WithKueueAnnotations())
	}
	if s.cfg.Devices.CountsDevices() && s.devices != nil {
		opts = append(opts, jobframework.WithDevices(s.devices))
	}
	return opts
}

// priorities resolves priority classes from the configuration snapshot.
// s.mu must be held.
func (s *Service) priorities() jobframework.StaticPriorityResolver {
	snap := s.configLocked()
	return jobframework.StaticPriorityResolver{WorkloadPriorityClasses: snap.WorkloadPriorityClasses, PriorityClasses: snap.PriorityClasses,
		DefaultPriorityClass: snap.DefaultPriorityClass}
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
