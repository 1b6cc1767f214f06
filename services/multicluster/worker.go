package multicluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/workloop"
)

// Worker is the agent beside a worker cluster's Sluice: it creates the
// copies the manager offers, deletes those it withdraws, and reports
// each copy's state and status.
type Worker struct {
	name      string
	dyn       dynamic.Interface
	hub       jetstream.JetStream
	adapters  map[string]jobframework.Adapter
	log       zerolog.Logger
	heartbeat time.Duration
	// domain is the manager's JetStream domain ("" for the same server).
	domain string

	informers map[string]cache.SharedIndexInformer // by kind
	queue     workqueue.TypedRateLimitingInterface[copyKey]
	sentMu    sync.Mutex
	sent      map[string][]byte // manager UID -> last report sent
	connected atomic.Bool
	synced    atomic.Bool
	// reached is when a heartbeat last reached the manager's JetStream
	// (or the agent started): the self-fence counts from it.
	reached time.Time
	now     func() time.Time
	// allowed says which namespaces copies may be created in (nil: all).
	allowed func(namespace string) bool
}

type copyKey struct{ kind, namespace, name string }

// WorkerOption tunes a Worker.
type WorkerOption func(*Worker)

// WithWorkerLogger sets the logger.
func WithWorkerLogger(l zerolog.Logger) WorkerOption { return func(w *Worker) { w.log = l } }

// WithNamespaces limits the copies the worker creates to these
// namespaces (none given: every namespace).
func WithNamespaces(namespaces ...string) WorkerOption {
	return func(w *Worker) {
		if len(namespaces) == 0 {
			return
		}
		set := map[string]bool{}
		for _, n := range namespaces {
			set[n] = true
		}
		w.allowed = func(ns string) bool { return set[ns] }
	}
}

// WithManagerDomain names the manager's JetStream domain, which stores
// the worker's reports; an acknowledgement from another domain is an
// error.
func WithManagerDomain(d string) WorkerOption { return func(w *Worker) { w.domain = d } }

// WithHeartbeat sets how often the worker tells the manager it is there.
func WithHeartbeat(d time.Duration) WorkerOption { return func(w *Worker) { w.heartbeat = d } }

// NewWorker returns the agent of the worker named name (its leaf node
// user in the manager's NATS). hub is the manager's JetStream, reached
// through the leaf node (jetstream.NewWithDomain); dyn is the worker
// cluster's API.
func NewWorker(name string, dyn dynamic.Interface, hub jetstream.JetStream, adapters []jobframework.Adapter, opts ...WorkerOption) (*Worker, error) {
	if name == "" || dyn == nil || hub == nil || len(adapters) == 0 {
		return nil, fmt.Errorf("%w: a worker name, a Kubernetes client, the manager's JetStream and job kinds are all required", ErrConfig)
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, fmt.Errorf("%w: worker name %q: %s", ErrConfig, name, strings.Join(errs, "; "))
	}
	w := &Worker{name: name, dyn: dyn, hub: hub, adapters: map[string]jobframework.Adapter{}, log: zerolog.Nop(),
		heartbeat: 5 * time.Second, informers: map[string]cache.SharedIndexInformer{}, sent: map[string][]byte{}, now: time.Now}
	for _, ad := range adapters {
		w.adapters[ad.Kind().Name] = ad
	}
	for _, o := range opts {
		o(w)
	}
	return w, nil
}

// Ready reports nil while the worker reaches the manager.
func (w *Worker) Ready() error {
	if !w.synced.Load() {
		return errors.New("loading the copies in this cluster")
	}
	if !w.connected.Load() {
		return errors.New("the manager's JetStream is not reachable")
	}
	return nil
}

// Run works until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	w.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[copyKey](),
		workqueue.TypedRateLimitingQueueConfig[copyKey]{Name: "multicluster-worker"})
	defer w.queue.ShutDown()
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(w.dyn, 10*time.Minute, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = OriginLabel })
	var synced []cache.InformerSynced
	for name, ad := range w.adapters {
		if _, err := w.dyn.Resource(ad.Kind().GVR()).List(ctx, metav1.ListOptions{Limit: 1}); apierrors.IsNotFound(err) {
			// Not served here (its CRD is not installed): its offers are
			// answered Gone.
			w.log.Info().Str("kind", name).Msg("kind not served in this cluster: its offers are refused")
			delete(w.adapters, name)
			continue
		}
		inf := factory.ForResource(ad.Kind().GVR()).Informer()
		if err := inf.AddIndexers(cache.Indexers{originIndex: byOrigin}); err != nil {
			return err
		}
		enqueue := func(o any) {
			if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
				ns, n, _ := cache.SplitMetaNamespaceKey(k)
				w.queue.Add(copyKey{kind: name, namespace: ns, name: n})
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
			DeleteFunc: func(o any) { w.deleted(ctx, o) }}); err != nil {
			return err
		}
		w.informers[name] = inf
		synced = append(synced, inf.HasSynced)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	w.synced.Store(true)
	w.log.Info().Str("worker", w.name).Msg("multicluster worker running")
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for w.next(ctx) {
		}
	})
	wg.Go(func() { w.beat(ctx) })
	err := consume(ctx, w.hub, WorkerDurable(w.name), WorkerFilter(w.name), w.handle, w.log, nil)
	w.queue.ShutDown()
	return err
}

// beat tells the manager the worker is there and, while it cannot,
// fences the copies the manager will soon give up.
func (w *Worker) beat(ctx context.Context) {
	t := time.NewTicker(w.heartbeat)
	defer t.Stop()
	w.reached = w.now()
	for {
		pctx, cancel := context.WithTimeout(ctx, w.heartbeat)
		err := w.publish(pctx, Heartbeat(w.name), []byte(time.Now().UTC().Format(time.RFC3339Nano)))
		cancel()
		if err == nil {
			w.reached = w.now()
		} else {
			w.fence(ctx, w.now().Sub(w.reached))
		}
		if was := w.connected.Swap(err == nil); was != (err == nil) {
			if err != nil {
				w.log.Warn().Err(err).Msg("the manager is not reachable")
			} else {
				// Back: what was reported while away may not have reached
				// the manager (or the manager's store was lost): report
				// every copy again.
				w.log.Info().Msg("the manager is reachable")
				w.sentMu.Lock()
				clear(w.sent)
				w.sentMu.Unlock()
				w.requeueAll()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fence removes the copies that have not finished and whose manager has
// not been reached for long enough that it gives this worker up and
// dispatches them elsewhere: a copy goes a margin (two heartbeats, at most
// half the timeout) before its workerLostTimeout, so that it is gone
// before another worker can start the job. Once the manager is reached
// again, their deletion is reported (Gone).
func (w *Worker) fence(ctx context.Context, silence time.Duration) {
	for kind, inf := range w.informers {
		for _, o := range inf.GetStore().List() {
			u, ok := o.(*unstructured.Unstructured)
			if !ok || u.GetDeletionTimestamp() != nil {
				continue
			}
			lost, err := time.ParseDuration(u.GetAnnotations()[LostAfterAnnotation])
			if err != nil || silence < fenceAfter(lost, w.heartbeat) {
				continue
			}
			if r, err := w.reportOf(kind, u); err == nil && r.State == Finished {
				continue // its end is reported when the manager is back
			}
			res := w.dyn.Resource(w.adapters[kind].Kind().GVR()).Namespace(u.GetNamespace())
			if err := w.remove(ctx, res, u); err != nil {
				w.log.Warn().Err(err).Str("workload", u.GetNamespace()+"/"+u.GetName()).Msg("self-fence: copy not removed yet")
				continue
			}
			w.log.Warn().Str("workload", u.GetNamespace()+"/"+u.GetName()).Dur("silence", silence).Dur("worker_lost_timeout", lost).
				Msg("self-fence: the manager is out of reach and gives this worker up soon; copy removed")
		}
	}
}

// fenceAfter is how long a worker out of reach keeps a copy whose
// manager gives it up after lost.
func fenceAfter(lost, heartbeat time.Duration) time.Duration {
	return max(lost-2*heartbeat, lost/2)
}

// ErrRefusedCopy: an offer whose object this worker does not create (it
// is not suspended or not queued, or in a namespace the worker does not
// serve); the manager is told the copy is gone.
var ErrRefusedCopy = errors.New("copy refused")

// copyOf is the object a worker creates for an Offer or Run: the object
// sent, of the offered kind, name and namespace, marked as the manager's
// copy. Whatever holds a credential that may send to this worker can only
// have it create what its own Sluice then queues: an object of a kind it
// integrates, suspended, naming a LocalQueue, in a namespace allowed
// (allowed nil: every one); anything else is refused.
func copyOf(msg Message, ad jobframework.Adapter, allowed func(namespace string) bool) (*unstructured.Unstructured, error) {
	k := ad.Kind()
	if allowed != nil && !allowed(msg.Workload.Namespace) {
		return nil, fmt.Errorf("%w: namespace %s is not one this worker serves", ErrRefusedCopy, msg.Workload.Namespace)
	}
	obj := &unstructured.Unstructured{}
	if err := json.Unmarshal(msg.Object, &obj.Object); err != nil || obj.Object == nil {
		return nil, fmt.Errorf("%w: object of %s: not a JSON object: %v", ErrBadMessage, msg.Workload, err)
	}
	named := obj.GetName() == msg.Workload.Name
	if g, ok := ad.(jobframework.Grouper); ok && isGroup(msg.Workload) {
		// A member of the group the workload is.
		named = obj.GetName() != "" && obj.GetLabels()[g.GroupLabel()] == msg.Workload.Name
	}
	if obj.GetAPIVersion() != k.GVK.GroupVersion().String() || obj.GetKind() != k.GVK.Kind ||
		obj.GetNamespace() != msg.Workload.Namespace || !named {
		return nil, fmt.Errorf("%w: object of %s is a %s %s named %s/%s", ErrBadMessage, msg.Workload, obj.GetAPIVersion(), obj.GetKind(),
			obj.GetNamespace(), obj.GetName())
	}
	if obj.GetLabels()[v1beta1.QueueNameLabel] == "" {
		return nil, fmt.Errorf("%w: %s has no %s label: Sluice here would not queue it", ErrRefusedCopy, msg.Workload, v1beta1.QueueNameLabel)
	}
	job, err := ad.Decode(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: object of %s: %v", ErrRefusedCopy, msg.Workload, err)
	}
	if !job.IsSuspended() {
		return nil, fmt.Errorf("%w: %s is not suspended: it would run before Sluice here admits it", ErrRefusedCopy, msg.Workload)
	}
	labels := obj.GetLabels()
	labels[OriginLabel] = msg.Workload.UID
	obj.SetLabels(labels)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AdmissionAnnotation] = msg.Admission
	ann[ManagerAnnotation] = msg.Workload.Namespace + "/" + msg.Workload.Name
	if msg.LostAfter != "" {
		ann[LostAfterAnnotation] = msg.LostAfter
	}
	if msg.Type == Offer {
		// Admitted here, it waits for the manager to pick this worker.
		ann[jobframework.HoldAnnotation] = ""
	}
	obj.SetAnnotations(ann)
	return obj, nil
}

// handle acts on one message from the manager.
func (w *Worker) handle(ctx context.Context, m jetstream.Msg) error {
	var msg Message
	if err := json.Unmarshal(m.Data(), &msg); err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if err := msg.Validate(); err != nil {
		return err
	}
	ad, ok := w.adapters[msg.Workload.Kind]
	if !ok {
		return w.gone(ctx, msg, fmt.Sprintf("kind %q is not integrated or not served in worker cluster %s", msg.Workload.Kind, w.name))
	}
	log := w.log.With().Str("workload", msg.Workload.String()).Str("admission", msg.Admission).Logger()
	if isGroup(msg.Workload) {
		return w.handleGroup(ctx, msg, ad, log)
	}
	var obj *unstructured.Unstructured
	if msg.Type != Withdraw {
		var err error
		obj, err = copyOf(msg, ad, w.allowed)
		if errors.Is(err, ErrRefusedCopy) {
			log.Warn().Err(err).Msg("copy refused")
			return w.gone(ctx, msg, fmt.Sprintf("worker cluster %s: %v", w.name, err))
		}
		if err != nil {
			return err
		}
	}
	res := w.dyn.Resource(ad.Kind().GVR()).Namespace(msg.Workload.Namespace)
	cur, err := res.Get(ctx, msg.Workload.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read %s: %w", msg.Workload, err)
	}
	if apierrors.IsNotFound(err) {
		cur = nil
	}
	ours := cur != nil && cur.GetLabels()[OriginLabel] == msg.Workload.UID
	switch {
	case msg.Type == Withdraw:
		if ours {
			if err := w.remove(ctx, res, cur); err != nil {
				return err
			}
			log.Info().Str("reason", msg.Reason).Msg("copy withdrawn")
		}
		return nil
	case ours && cur.GetAnnotations()[AdmissionAnnotation] == msg.Admission:
		if _, held := cur.GetAnnotations()[jobframework.HoldAnnotation]; held && msg.Type == Run {
			// Picked: the worker's Sluice starts it once the hold is gone.
			patch := []byte(`{"metadata":{"uid":"` + string(cur.GetUID()) + `","annotations":{"` + jobframework.HoldAnnotation + `":null}}}`)
			if _, err := res.Patch(ctx, cur.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("release %s: %w", msg.Workload, err) // looked at again
			}
			log.Info().Msg("copy released to run")
		}
		w.queue.Add(copyKey{kind: ad.Kind().Name, namespace: cur.GetNamespace(), name: cur.GetName()})
		return nil
	case ours:
		// A copy of an earlier offer (the manager reserved the workload
		// again): it goes, and the new one is made once it is gone.
		if err := w.remove(ctx, res, cur); err != nil {
			return err
		}
		return fmt.Errorf("copy of %s for an earlier offer being deleted", msg.Workload)
	case cur != nil:
		return w.gone(ctx, msg, fmt.Sprintf("a %s named %s/%s that is not its copy exists in worker cluster %s", ad.Kind().Name, cur.GetNamespace(), cur.GetName(), w.name))
	}
	if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", msg.Workload, err) // look again
		}
		if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			return w.gone(ctx, msg, fmt.Sprintf("worker cluster %s refused the copy: %v", w.name, err))
		}
		return fmt.Errorf("create %s: %w", msg.Workload, err)
	}
	log.Info().Msg("copy created")
	return nil
}

// handleGroup acts on a message about a pod group: its members' copies
// are created, released and withdrawn together.
func (w *Worker) handleGroup(ctx context.Context, msg Message, ad jobframework.Adapter, log zerolog.Logger) error {
	res := w.dyn.Resource(ad.Kind().GVR()).Namespace(msg.Workload.Namespace)
	l, err := res.List(ctx, metav1.ListOptions{LabelSelector: OriginLabel + "=" + msg.Workload.UID})
	if err != nil {
		return fmt.Errorf("list the copies of %s: %w", msg.Workload, err)
	}
	have := map[string]*unstructured.Unstructured{}
	var earlier []*unstructured.Unstructured
	for i := range l.Items {
		c := &l.Items[i]
		if msg.Type != Withdraw && c.GetAnnotations()[AdmissionAnnotation] == msg.Admission {
			have[c.GetName()] = c
		} else {
			earlier = append(earlier, c)
		}
	}
	for _, c := range earlier {
		if err := w.remove(ctx, res, c); err != nil {
			return err
		}
	}
	if msg.Type == Withdraw {
		if len(earlier) > 0 {
			log.Info().Str("reason", msg.Reason).Int("members", len(earlier)).Msg("copies withdrawn")
		}
		return nil
	}
	if len(earlier) > 0 {
		// Copies of an earlier offer go first; the new ones are made once
		// they are gone.
		return fmt.Errorf("copies of %s for an earlier offer being deleted", msg.Workload)
	}
	created := 0
	var first string
	for _, raw := range msg.Members {
		one := msg
		one.Object, one.Members = raw, nil
		obj, err := copyOf(one, ad, w.allowed)
		if errors.Is(err, ErrRefusedCopy) {
			log.Warn().Err(err).Msg("copy refused")
			return w.gone(ctx, msg, fmt.Sprintf("worker cluster %s: %v", w.name, err))
		}
		if err != nil {
			return err
		}
		if first == "" {
			first = obj.GetName()
		}
		if cur, ok := have[obj.GetName()]; ok {
			if holds(cur) && msg.Type == Run {
				patch := []byte(`{"metadata":{"uid":"` + string(cur.GetUID()) + `","annotations":{"` + jobframework.HoldAnnotation + `":null}}}`)
				if _, err := res.Patch(ctx, cur.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					return fmt.Errorf("release %s of %s: %w", cur.GetName(), msg.Workload, err)
				}
			}
			continue
		}
		if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return w.gone(ctx, msg, fmt.Sprintf("a %s named %s/%s that is not a copy of the group's exists in worker cluster %s", ad.Kind().Name, obj.GetNamespace(), obj.GetName(), w.name))
			}
			if apierrors.IsInvalid(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
				return w.gone(ctx, msg, fmt.Sprintf("worker cluster %s refused the copy of %s: %v", w.name, obj.GetName(), err))
			}
			return fmt.Errorf("create %s of %s: %w", obj.GetName(), msg.Workload, err)
		}
		created++
	}
	if created > 0 {
		log.Info().Int("members", created).Msg("copies created")
	}
	if first != "" {
		w.queue.Add(copyKey{kind: ad.Kind().Name, namespace: msg.Workload.Namespace, name: first})
	}
	return nil
}

// gone reports the workload of msg gone from this worker, saying why.
func (w *Worker) gone(ctx context.Context, msg Message, why string) error {
	return w.report(ctx, Report{Workload: msg.Workload, Admission: msg.Admission, State: Gone, Message: why})
}

func (w *Worker) remove(ctx context.Context, res dynamic.ResourceInterface, cur *unstructured.Unstructured) error {
	uid := cur.GetUID()
	policy := metav1.DeletePropagationBackground
	err := res.Delete(ctx, cur.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &policy})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete %s/%s: %w", cur.GetNamespace(), cur.GetName(), err)
	}
	return nil
}

// next reports on one copy that changed.
func (w *Worker) next(ctx context.Context) bool {
	return workloop.Next(w.queue, func(k copyKey) error { return w.sync(ctx, k) }, func(k copyKey, err error) {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Str("workload", k.namespace+"/"+k.name).Msg("report not sent yet")
		}
	})
}

func (w *Worker) sync(ctx context.Context, k copyKey) error {
	inf := w.informers[k.kind]
	o, ok, err := inf.GetStore().GetByKey(k.namespace + "/" + k.name)
	if err != nil || !ok {
		return err
	}
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	r, err := w.reportOf(k.kind, u)
	if err != nil {
		w.log.Warn().Err(err).Str("workload", k.namespace+"/"+k.name).Msg("copy not understood")
		return nil
	}
	if _, ran := u.GetAnnotations()[RanAnnotation]; r.State == Admitted && !ran && !holds(u) {
		// Running: marked, so that a stop in this cluster is told from a
		// copy released but not started yet.
		patch := []byte(`{"metadata":{"uid":"` + string(u.GetUID()) + `","annotations":{"` + RanAnnotation + `":"true"}}}`)
		res := w.dyn.Resource(w.adapters[k.kind].Kind().GVR()).Namespace(u.GetNamespace())
		if _, err := res.Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("mark %s/%s as run: %w", u.GetNamespace(), u.GetName(), err)
		}
	}
	if isGroup(r.Workload) {
		if r, err = w.groupReport(k.kind, r); err != nil {
			w.log.Warn().Err(err).Str("workload", r.Workload.String()).Msg("group copies not understood")
			return nil
		}
	}
	return w.report(ctx, r)
}

// originIndex indexes the copies by the UID of the manager's workload.
const originIndex = "origin"

func byOrigin(o any) ([]string, error) {
	m, err := apimeta.Accessor(o)
	if err != nil {
		return nil, nil
	}
	if uid := m.GetLabels()[OriginLabel]; uid != "" {
		return []string{uid}, nil
	}
	return nil, nil
}

// groupReport is the report on a pod group from its member copies here,
// one member's report given: finished when every member is, admitted when
// every member is admitted (or finished), stopped when one was stopped,
// queued otherwise; each member's status by name.
func (w *Worker) groupReport(kind string, one Report) (Report, error) {
	objs, err := w.informers[kind].GetIndexer().ByIndex(originIndex, one.Workload.UID)
	if err != nil {
		return one, err
	}
	r := Report{Workload: one.Workload, Admission: one.Admission, Members: map[string]json.RawMessage{}}
	if g, ok := w.adapters[kind].(jobframework.Grouper); ok {
		r.Workload.Name = ""
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok && r.Workload.Name == "" {
				r.Workload.Name = u.GetLabels()[g.GroupLabel()]
			}
		}
	}
	n, finished, admitted := 0, 0, 0
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetAnnotations()[AdmissionAnnotation] != one.Admission {
			continue
		}
		n++
		m, err := w.reportOf(kind, u)
		if err != nil {
			return one, err
		}
		switch m.State {
		case Finished:
			finished++
		case Admitted:
			admitted++
		case Stopped:
			r.State, r.Message = Stopped, m.Message
		}
		if m.Status != nil {
			r.Members[u.GetName()] = m.Status
		}
	}
	switch {
	case r.State == Stopped:
	case n > 0 && finished == n:
		r.State, r.Message = Finished, fmt.Sprintf("all %d members finished", n)
	case n > 0 && finished+admitted == n:
		r.State = Admitted
	default:
		r.State = Queued
	}
	return r, nil
}

// reportOf is what a copy's object says: its state and status.
func (w *Worker) reportOf(kind string, u *unstructured.Unstructured) (Report, error) {
	job, err := w.adapters[kind].Decode(u)
	if err != nil {
		return Report{}, err
	}
	r := Report{Workload: w.workloadOf(kind, u), Admission: u.GetAnnotations()[AdmissionAnnotation], State: Queued}
	holding := holds(u)
	_, ran := u.GetAnnotations()[RanAnnotation]
	switch done, _, msg := job.Finished(); {
	case done:
		r.State, r.Message = Finished, msg
	case holding && u.GetAnnotations()[jobframework.HeldAnnotation] != "":
		r.State = Admitted // reserved here, held for the manager's pick
	case !holding && !job.IsSuspended():
		r.State = Admitted
	case !holding && ran:
		r.State, r.Message = Stopped, "its copy was suspended in worker cluster "+w.name+" after it ran (preempted or evicted there)"
	}
	if st, ok := u.Object["status"]; ok {
		raw, err := json.Marshal(st)
		if err != nil {
			return Report{}, err
		}
		r.Status = raw
	}
	return r, nil
}

// workloadOf is the manager's workload a copy is of: the object's own
// name, or a pod group member's group.
func (w *Worker) workloadOf(kind string, u *unstructured.Unstructured) events.WorkloadRef {
	ref := events.WorkloadRef{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetLabels()[OriginLabel]}
	if g, ok := w.adapters[kind].(jobframework.Grouper); ok && isGroup(ref) {
		ref.Name = u.GetLabels()[g.GroupLabel()]
	}
	return ref
}

// holds reports whether a copy is held for the manager's pick.
func holds(u *unstructured.Unstructured) bool {
	_, ok := u.GetAnnotations()[jobframework.HoldAnnotation]
	return ok
}

// deleted reports a copy deleted in this cluster.
func (w *Worker) deleted(ctx context.Context, o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	for kind, ad := range w.adapters {
		if ad.Kind().GVK.Kind != u.GetKind() {
			continue
		}
		r, err := w.reportOf(kind, u)
		if err != nil || r.State != Finished {
			// Gone before it finished. One that finished is reported
			// Finished, final status and all, even when its deletion (a
			// TTL, a withdrawal) comes before the update was reported:
			// the report replaces the last on its subject.
			r = Report{Workload: w.workloadOf(kind, u), Admission: u.GetAnnotations()[AdmissionAnnotation], State: Gone,
				Message: "the copy of " + u.GetName() + " was deleted in worker cluster " + w.name}
		}
		w.sentMu.Lock()
		delete(w.sent, r.Workload.UID)
		w.sentMu.Unlock()
		for attempt := 1; ctx.Err() == nil; attempt++ {
			err := w.report(ctx, r)
			if err == nil {
				break
			}
			w.log.Warn().Err(err).Str("workload", r.Workload.String()).Msg("deletion not reported yet")
			if !sleep(ctx, backoff(attempt)) {
				break
			}
		}
	}
}

// report sends a report unless it says what the last one did.
func (w *Worker) report(ctx context.Context, r Report) error {
	if err := r.Validate(); err != nil {
		return nil // a copy someone else labelled: nothing to say about it
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	w.sentMu.Lock()
	same := bytes.Equal(w.sent[r.Workload.UID], raw)
	w.sentMu.Unlock()
	if same {
		return nil
	}
	if err := w.publish(ctx, FromWorker(w.name, r.Workload.UID), raw); err != nil {
		return fmt.Errorf("report %s of %s: %w", r.State, r.Workload, err)
	}
	w.sentMu.Lock()
	w.sent[r.Workload.UID] = raw
	w.sentMu.Unlock()
	return nil
}

// errWrongStream: a report was stored by a stream in this cluster's own
// JetStream, not the manager's.
var errWrongStream = errors.New("stored outside the manager's JetStream")

// publish sends to the manager's stream and checks that the manager's
// stream stored it: a stream of the same subjects in this cluster's own
// JetStream (made by a `sluice setup` here) would otherwise acknowledge
// what never left the cluster.
func (w *Worker) publish(ctx context.Context, subject string, data []byte) error {
	ack, err := w.hub.Publish(ctx, subject, data)
	if err != nil {
		return err
	}
	if w.domain != "" && ack.Domain != w.domain {
		return fmt.Errorf("%w: domain %q, want %q (delete stream %s in this cluster's NATS)", errWrongStream, ack.Domain, w.domain, Stream)
	}
	return nil
}

// requeueAll reports every copy again.
func (w *Worker) requeueAll() {
	for kind, inf := range w.informers {
		for _, k := range inf.GetStore().ListKeys() {
			ns, n, _ := cache.SplitMetaNamespaceKey(k)
			w.queue.Add(copyKey{kind: kind, namespace: ns, name: n})
		}
	}
}
