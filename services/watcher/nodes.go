package watcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/nodecap"
	"github.com/sluice-dev/sluice/internal/workloop"
)

// nodeMirror writes the capacity of the nodes in a topology (and what the
// pods outside topology-aware workloads use of it) to the sluice-nodes
// bucket. It watches nodes and pods only once a Topology exists: a
// cluster without topology-aware flavors pays nothing for it.
type nodeMirror struct {
	client kubernetes.Interface
	kv     KV
	log    zerolog.Logger
	resync time.Duration
	// topologies lists the level labels of every Topology.
	topologies func() [][]string
	queue      workqueue.TypedRateLimitingInterface[string]
	nodes      cache.Indexer
	pods       cache.Indexer
	written    map[string][]byte
}

// coalesce is how long a node's changes gather before one write: a job's
// pods starting on a node change its usage many times in a moment.
const coalesce = 500 * time.Millisecond

const byNode = "node"

// WithNodes makes the watcher mirror node capacity into kv (the
// sluice-nodes bucket) for topology-aware scheduling.
func WithNodes(client kubernetes.Interface, kv KV) Option {
	return func(s *Service) {
		s.nodes = &nodeMirror{client: client, kv: kv, written: map[string][]byte{},
			queue: workqueue.NewTypedRateLimitingQueueWithConfig(
				workqueue.DefaultTypedControllerRateLimiter[string](),
				workqueue.TypedRateLimitingQueueConfig[string]{Name: "watcher-nodes"})}
	}
}

// topologyLevels reads the level labels of every mirrored Topology.
func (s *Service) topologyLevels() [][]string {
	st, ok := s.stores[configstore.KindTopology]
	if !ok {
		return nil
	}
	var out [][]string
	for _, obj := range st.List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		levels, _, _ := unstructured.NestedSlice(u.Object, "spec", "levels")
		var ls []string
		for _, l := range levels {
			if m, ok := l.(map[string]any); ok {
				if label, ok := m["nodeLabel"].(string); ok {
					ls = append(ls, label)
				}
			}
		}
		out = append(out, ls)
	}
	return out
}

// run waits for the first Topology, then mirrors until ctx ends.
func (m *nodeMirror) run(ctx context.Context) {
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for len(m.topologies()) == 0 {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
	m.log.Info().Msg("a Topology exists: mirroring node capacity")
	factory := informers.NewSharedInformerFactory(m.client, m.resync)
	nodeInf := factory.Core().V1().Nodes().Informer()
	podInf := factory.Core().V1().Pods().Informer()
	// A pod is kept with only what its node's usage needs.
	if err := podInf.SetTransform(slimPod); err != nil {
		m.log.Error().Err(err).Msg("pod informer")
		return
	}
	if err := podInf.AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		m.log.Error().Err(err).Msg("pod informer")
		return
	}
	enqueueNode := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			m.queue.AddAfter(k, coalesce)
		}
	}
	enqueuePod := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			m.queue.AddAfter(p.Spec.NodeName, coalesce)
		}
	}
	_, err1 := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueueNode, UpdateFunc: func(_, o any) { enqueueNode(o) }, DeleteFunc: enqueueNode})
	_, err2 := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueuePod,
		UpdateFunc: func(o, n any) { enqueuePod(o); enqueuePod(n) }, DeleteFunc: enqueuePod})
	if err := errors.Join(err1, err2); err != nil {
		m.log.Error().Err(err).Msg("node and pod informers")
		return
	}
	m.nodes, m.pods = nodeInf.GetIndexer(), podInf.GetIndexer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodeInf.HasSynced, podInf.HasSynced) {
		return
	}
	m.prune(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for workloop.Next(m.queue, func(name string) error {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			return m.sync(wctx, name)
		}, func(name string, err error) {
			m.log.Error().Err(err).Str("node", name).Msg("mirroring node capacity failed; retrying")
		}) {
		}
	}()
	<-ctx.Done()
	m.queue.ShutDownWithDrain()
	<-done
	factory.Shutdown()
}

// sync writes one node's capacity, or deletes its key when the node is
// gone or in no topology.
func (m *nodeMirror) sync(ctx context.Context, name string) error {
	key := nodecap.Key(name)
	obj, exists, err := m.nodes.GetByKey(name)
	if err != nil {
		return err
	}
	var node *corev1.Node
	if exists {
		node, _ = obj.(*corev1.Node)
	}
	if node == nil || !nodecap.InTopology(node.Labels, m.topologies()) {
		if _, had := m.written[key]; !had {
			return nil
		}
		if err := m.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		delete(m.written, key)
		return nil
	}
	objs, err := m.pods.ByIndex(byNode, name)
	if err != nil {
		return err
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	b, err := nodecap.Encode(nodecap.Capacity(node, pods))
	if err != nil {
		return err
	}
	if prev, ok := m.written[key]; ok && bytes.Equal(prev, b) {
		return nil
	}
	if _, err := m.kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	m.written[key] = b
	return nil
}

// prune queues every node in the bucket and every node watched, so keys
// of nodes that went while nobody watched are deleted and the rest
// written afresh.
func (m *nodeMirror) prune(ctx context.Context) {
	for _, k := range m.nodes.ListKeys() {
		m.queue.Add(k)
	}
	l, err := m.kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return
	}
	if err != nil {
		m.log.Warn().Err(err).Msg("listing mirrored nodes")
		return
	}
	for k := range l.Keys() {
		if name, ok := nodecap.NodeOf(k); ok {
			m.written[k] = nil // deleted by sync if the node is gone
			m.queue.Add(name)
		}
	}
}

// slimPod keeps of a pod what its node's usage is computed from.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{}
	slim.Name, slim.Namespace, slim.UID, slim.ResourceVersion = p.Name, p.Namespace, p.UID, p.ResourceVersion
	slim.Labels = p.Labels
	slim.Spec.NodeName = p.Spec.NodeName
	slim.Spec.Overhead = p.Spec.Overhead
	slim.Spec.Resources = p.Spec.Resources
	slim.Spec.Containers = slimContainers(p.Spec.Containers)
	slim.Spec.InitContainers = slimContainers(p.Spec.InitContainers)
	slim.Status.Phase = p.Status.Phase
	return slim, nil
}

func slimContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		out[i].Resources = cs[i].Resources
		out[i].RestartPolicy = cs[i].RestartPolicy
	}
	return out
}
