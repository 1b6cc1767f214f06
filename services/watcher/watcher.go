// Package watcher mirrors Sluice's queue configuration (ResourceFlavor,
// ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, AdmissionCheck,
// Topology) and Kubernetes PriorityClasses and namespace labels into the
// sluice-config KV bucket, so every other service reads configuration from
// JetStream and never needs the API server. Once a Topology exists, it also
// mirrors the capacity of the nodes in a topology into sluice-nodes. It also writes ClusterQueue and LocalQueue status back,
// on a timer rather than per workload.
package watcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/workloop"
)

// KV is the part of the configuration bucket the watcher writes.
type KV interface {
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
	ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error)
}

// mirrored lists what the watcher copies, with the kind used in keys.
var mirrored = []struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}{
	{v1beta1.GroupVersion.WithResource("resourceflavors"), configstore.KindResourceFlavor, false},
	{v1beta1.GroupVersion.WithResource("clusterqueues"), configstore.KindClusterQueue, false},
	{v1beta1.GroupVersion.WithResource("cohorts"), configstore.KindCohort, false},
	{v1beta1.GroupVersion.WithResource("localqueues"), configstore.KindLocalQueue, true},
	{v1beta1.GroupVersion.WithResource("workloadpriorityclasses"), configstore.KindWorkloadPriorityClass, false},
	{v1beta1.GroupVersion.WithResource("admissionchecks"), configstore.KindAdmissionCheck, false},
	{v1beta1.GroupVersion.WithResource("topologies"), configstore.KindTopology, false},
	{schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1", Resource: "priorityclasses"}, configstore.KindPriorityClass, false},
	{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, configstore.KindNamespace, false},
}

// Config is the watcher's configuration.
type Config struct {
	// Resync re-lists everything this often, repairing any drift.
	Resync time.Duration
}

// Service is the watcher.
type Service struct {
	// synced opens once the informers have synced (Ready).
	synced *health.Gate
	cfg    Config
	dyn    dynamic.Interface
	kv     KV
	pub    events.Publisher
	log    zerolog.Logger
	queue  workqueue.TypedRateLimitingInterface[item]
	// indexers by KV kind, for reading the current object of a key.
	stores map[string]cache.Store
	status *statusWriter
	// written remembers the last value put per key (one worker writes).
	written map[string]writtenValue
	// configGen counts the changes mirrored, so that queue status rebuilds
	// its view of the configuration only after one.
	configGen atomic.Uint64
	// nodes mirrors node capacity for topology-aware flavors (WithNodes).
	nodes *nodeMirror
}

// item is one object to bring in line: its kind and cache key.
type item struct {
	kind string
	key  string // namespace/name or name
}

// Option tunes the watcher.
type Option func(*Service)

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(s *Service) { s.log = l } }

// WithStatus makes the watcher write ClusterQueue and LocalQueue status,
// as a usage.Tracker following the ledger, workload and fence buckets
// counts it, with each queue's Active condition, every interval (only what
// changed), patching through client (a REST client of the cluster: any
// group's, paths are absolute).
func WithStatus(js jetstream.JetStream, interval time.Duration, client rest.Interface) Option {
	return func(s *Service) { s.status = &statusWriter{js: js, interval: interval, client: client} }
}

// New returns a watcher.
func New(cfg Config, dyn dynamic.Interface, kv KV, pub events.Publisher, opts ...Option) (*Service, error) {
	if cfg.Resync <= 0 {
		return nil, fmt.Errorf("watcher: resync %s: must be positive", cfg.Resync)
	}
	s := &Service{
		synced:  health.NewGate("queue objects not listed yet"),
		cfg:     cfg,
		dyn:     dyn,
		kv:      kv,
		pub:     pub,
		log:     zerolog.Nop(),
		stores:  map[string]cache.Store{},
		written: map[string]writtenValue{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[item](),
			workqueue.TypedRateLimitingQueueConfig[item]{Name: "watcher"}),
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Ready reports whether the queue objects are listed and mirrored.
func (s *Service) Ready() error { return s.synced.Check() }

// Run mirrors until ctx ends, then drains the queue and returns.
func (s *Service) Run(ctx context.Context) error {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(s.dyn, s.cfg.Resync)
	var synced []cache.InformerSynced
	for _, m := range mirrored {
		inf := factory.ForResource(m.gvr).Informer()
		if err := inf.SetTransform(slimConfigObject); err != nil {
			return fmt.Errorf("watcher: watch %s: %w", m.gvr.Resource, err)
		}
		kind := m.kind
		enqueue := func(obj any) {
			if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				s.queue.Add(item{kind: kind, key: k})
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
			DeleteFunc: enqueue,
		}); err != nil {
			return fmt.Errorf("watcher: watch %s: %w", m.gvr.Resource, err)
		}
		s.stores[kind] = inf.GetStore()
		synced = append(synced, inf.HasSynced)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended
	}
	s.synced.Open()
	if err := s.prune(ctx); err != nil {
		s.log.Error().Err(err).Msg("pruning stale configuration")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s.next(ctx) {
		}
	}()
	if s.status != nil {
		go s.status.run(ctx, s)
	}
	nodesDone := make(chan struct{})
	go func() {
		defer close(nodesDone)
		if s.nodes != nil {
			s.nodes.log, s.nodes.resync, s.nodes.topologies = s.log, s.cfg.Resync, s.topologyLevels
			s.nodes.run(ctx)
		}
	}()
	<-ctx.Done()
	s.queue.ShutDownWithDrain()
	<-done
	<-nodesDone
	factory.Shutdown()
	return nil
}

func (s *Service) next(ctx context.Context) bool {
	return workloop.Next(s.queue, func(it item) error {
		// Writes use their own short context so a shutdown finishes them.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return s.sync(wctx, it)
	}, func(it item, err error) {
		s.log.Error().Err(err).Str("key", it.key).Str("kind", it.kind).Msg("mirroring failed; retrying")
	})
}

// sync writes the object's current state, or its absence, to the bucket.
func (s *Service) sync(ctx context.Context, it item) error {
	ns, name, err := cache.SplitMetaNamespaceKey(it.key)
	if err != nil {
		return fmt.Errorf("bad key %q: %w", it.key, err)
	}
	key := configstore.Key(it.kind, ns, name)
	obj, exists, err := s.stores[it.kind].GetByKey(it.key)
	if err != nil {
		return err
	}
	ev := events.ConfigChangedV1{Kind: it.kind, Namespace: ns, Name: name}
	if !exists {
		// A deletion's id names the revision of the value it removes:
		// an object made anew and deleted again is another deletion,
		// which the stream must not drop as a re-send of the first.
		ended, err := s.lastRevision(ctx, key)
		if err != nil {
			return err
		}
		if err := s.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		// Remembered until announced: a retried deletion keeps its id.
		s.written[key] = writtenValue{rev: ended, deleted: true}
		s.configGen.Add(1)
		ev.Deleted = true
		if err := s.pub.Publish(ctx, ev, events.ID(ev.Type(), key, ev.Revision, ev.Deleted, ended)); err != nil {
			return err
		}
		delete(s.written, key)
		return nil
	}
	b, err := encode(it.kind, obj)
	if err != nil {
		return err
	}
	if prev, ok := s.written[key]; ok && !prev.deleted && bytes.Equal(prev.b, b) {
		return nil // nothing that matters changed
	}
	rev, err := s.kv.Put(ctx, key, b)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	ev.Revision = rev
	s.written[key] = writtenValue{b: b, rev: rev}
	s.configGen.Add(1)
	return s.pub.Publish(ctx, ev, events.ID(ev.Type(), key, ev.Revision, ev.Deleted))
}

// writtenValue is what the watcher last wrote for a key: the value and its
// revision, or (deleted) a deletion not announced yet and the revision of
// the value it removed.
type writtenValue struct {
	b       []byte
	rev     uint64
	deleted bool
}

// lastRevision is the revision of the value a deletion of key removes: as
// written by this watcher, or else as the bucket holds it (0 when it holds
// none: the key was deleted before).
func (s *Service) lastRevision(ctx context.Context, key string) (uint64, error) {
	if w, ok := s.written[key]; ok {
		return w.rev, nil
	}
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	return e.Revision(), nil
}

// encode keeps what consumers need: for namespaces only the labels, for
// everything else the object without bookkeeping fields.
// slimConfigObject keeps of a mirrored object what the watcher reads:
// everything but its managed fields and, of its status, only the
// conditions (an admission check's Active, a queue's own Active for its
// transition time). The ClusterQueues' and LocalQueues' usage, which the
// status writer rewrites every few seconds, would otherwise be kept
// decoded for every queue (about 9 KB each).
func slimConfigObject(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a deletion's tombstone
	}
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	if st, ok := u.Object["status"].(map[string]any); ok {
		if conds, ok := st["conditions"]; ok {
			u.Object["status"] = map[string]any{"conditions": conds}
		} else {
			delete(u.Object, "status")
		}
	}
	return u, nil
}

func encode(kind string, obj any) ([]byte, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	u = u.DeepCopy()
	// An admission check's Active condition decides whether its queues
	// admit: it is kept, without its timestamps.
	active := ""
	if kind == configstore.KindAdmissionCheck {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == v1beta1.AdmissionCheckActive {
				active, _ = m["status"].(string)
			}
		}
	}
	// Only what decides admission is mirrored: status and bookkeeping
	// would turn every status write into a configuration change.
	for _, f := range [][]string{{"metadata", "managedFields"}, {"metadata", "resourceVersion"}, {"metadata", "generation"}, {"status"}} {
		unstructured.RemoveNestedField(u.Object, f...)
	}
	if active != "" {
		u.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": v1beta1.AdmissionCheckActive, "status": active}}}
	}
	if kind == configstore.KindNamespace {
		m, err := meta.Accessor(u)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"metadata": map[string]any{"name": m.GetName(), "labels": m.GetLabels()}})
	}
	return json.Marshal(u.Object)
}

// prune deletes keys of objects that vanished while nobody watched.
func (s *Service) prune(ctx context.Context) error {
	l, err := s.kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var stale []string
	for k := range l.Keys() {
		kind, rest, _ := strings.Cut(k, ".")
		st, ok := s.stores[kind]
		if !ok {
			continue
		}
		ck := rest
		if kind == configstore.KindLocalQueue {
			ns, name, _ := strings.Cut(rest, ".")
			ck = ns + "/" + name
		}
		if _, exists, _ := st.GetByKey(ck); !exists {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		kind, rest, _ := strings.Cut(k, ".")
		if kind == configstore.KindLocalQueue {
			ns, name, _ := strings.Cut(rest, ".")
			rest = ns + "/" + name
		}
		s.queue.Add(item{kind: kind, key: rest})
	}
	return nil
}
