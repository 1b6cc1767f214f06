package provisioning

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	autoscaling "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/workloop"
)

// Resources the controller reads and writes.
var (
	RequestGVR = autoscaling.SchemeGroupVersion.WithResource("provisioningrequests")
	ConfigGVR  = v1beta1.GroupVersion.WithResource("provisioningrequestconfigs")
	flavorGVR  = v1beta1.GroupVersion.WithResource("resourceflavors")
)

// ConfigKind is the kind an AdmissionCheck's parameters must name.
const ConfigKind = "ProvisioningRequestConfig"

// Errors.
var (
	// ErrNoConfig: the check's ProvisioningRequestConfig is not there
	// (yet); the reservation is offered again with backoff.
	ErrNoConfig = errors.New("provisioning: no ProvisioningRequestConfig for the check")
	// ErrPodSets: the workload's pod sets cannot be read from its objects;
	// the check is Rejected with the reason.
	ErrPodSets = errors.New("cannot read the workload's pod sets")
	// ErrUnknownKind: the workload's kind is not one this controller reads.
	ErrUnknownKind = errors.New("provisioning: unknown job kind")
)

// Service runs the provisioning admission check controller.
type Service struct {
	kube     kubernetes.Interface
	dyn      dynamic.Interface
	js       jetstream.JetStream
	log      zerolog.Logger
	adapters map[string]jobframework.Adapter
	resync   time.Duration
	poll     time.Duration
	pub      checks.Publisher

	ctrl      *checks.Controller
	requests  cache.SharedIndexInformer
	configs   cache.SharedIndexInformer
	flavors   cache.SharedIndexInformer
	queue     workqueue.TypedRateLimitingInterface[string]
	state     atomic.Value // string: what Ready reports
	answeredM sync.Mutex
	answered  map[string]string // request key -> admission and state last answered
}

// Option tunes the Service.
type Option func(*Service)

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(s *Service) { s.log = l } }

// WithPublisher sets the publisher of answers (see checks.WithPublisher).
func WithPublisher(p checks.Publisher) Option { return func(s *Service) { s.pub = p } }

// WithPoll sets how often the API server is asked whether it serves
// ProvisioningRequests, until it does.
func WithPoll(d time.Duration) Option { return func(s *Service) { s.poll = d } }

// New returns the controller; adapters are the job kinds whose workloads
// it can provision for.
func New(kube kubernetes.Interface, dyn dynamic.Interface, js jetstream.JetStream, adapters []jobframework.Adapter, opts ...Option) (*Service, error) {
	if kube == nil || dyn == nil || js == nil || len(adapters) == 0 {
		return nil, fmt.Errorf("%w: Kubernetes clients, JetStream and job kinds are all required", checks.ErrConfig)
	}
	s := &Service{kube: kube, dyn: dyn, js: js, log: zerolog.Nop(), resync: 10 * time.Minute, poll: 10 * time.Second,
		adapters: map[string]jobframework.Adapter{}, answered: map[string]string{}}
	for _, ad := range adapters {
		s.adapters[ad.Kind().Name] = ad
	}
	for _, o := range opts {
		o(s)
	}
	s.state.Store("")
	copts := []checks.Option{checks.WithLogger(s.log), checks.WithActivity(s.activity)}
	if s.pub != nil {
		copts = append(copts, checks.WithPublisher(s.pub))
	}
	ctrl, err := checks.New(v1beta1.ProvisioningRequestController, js, dyn, checks.DeciderFunc(s.decide), copts...)
	if err != nil {
		return nil, err
	}
	s.ctrl = ctrl
	return s, nil
}

// Ready reports nil while the controller decides checks, and while it
// waits for ProvisioningRequests to be served (a cluster without the
// autoscaler's CRD has nothing for it to do).
func (s *Service) Ready() error {
	if st := s.state.Load().(string); st != "" {
		return errors.New(st)
	}
	return nil
}

// Run waits until ProvisioningRequests are served, then decides checks
// until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := s.waitServed(ctx); err != nil {
		return err
	}
	s.state.Store("loading ProvisioningRequests, their configs and ResourceFlavors")
	factory := dynamicinformer.NewDynamicSharedInformerFactory(s.dyn, s.resync)
	ours := dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.dyn, s.resync, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.LabelSelector = WorkloadUIDLabel
	})
	s.requests = ours.ForResource(RequestGVR).Informer()
	if err := s.requests.AddIndexers(cache.Indexers{byWorkload: func(o any) ([]string, error) {
		m, err := meta.Accessor(o)
		if err != nil {
			return nil, nil
		}
		return []string{m.GetLabels()[WorkloadUIDLabel]}, nil
	}}); err != nil {
		return err
	}
	s.configs = factory.ForResource(ConfigGVR).Informer()
	s.flavors = factory.ForResource(flavorGVR).Informer()
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "provisioning"})
	defer s.queue.ShutDown()
	enqueue := func(o any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			s.queue.Add(k)
		}
	}
	if _, err := s.requests.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }}); err != nil {
		return err
	}
	configChanged := func(any) {
		s.ctrl.Recheck(ctx)
		for _, k := range s.requests.GetStore().ListKeys() {
			s.queue.Add(k)
		}
	}
	if _, err := s.configs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: configChanged,
		UpdateFunc: func(_, o any) { configChanged(o) }, DeleteFunc: configChanged}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	ours.Start(ctx.Done())
	defer factory.Shutdown()
	defer ours.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), s.requests.HasSynced, s.configs.HasSynced, s.flavors.HasSynced) {
		return ctx.Err()
	}
	s.state.Store("")
	var wg sync.WaitGroup
	defer wg.Wait()
	for range 2 {
		wg.Go(func() {
			for s.next(ctx) {
			}
		})
	}
	s.log.Info().Msg("provisioning admission check controller running")
	wg.Go(func() {
		// Capacity a workload that ended no longer needs is given back
		// (deleting the request lets the autoscaler scale down).
		err := bus.Run(ctx, s.js, EndedConsumer(), s.ended, bus.WithLogger(s.log))
		if err != nil && ctx.Err() == nil {
			s.log.Error().Err(err).Msg("ended workloads' requests not deleted")
		}
	})
	err := s.ctrl.Run(ctx)
	s.queue.ShutDown()
	return err
}

// EndedDurable is the consumer of ended workloads, whose requests are
// deleted.
var EndedDurable = checks.Durable(v1beta1.ProvisioningRequestController) + "-ended"

// ended deletes the requests of a workload that finished or was deleted.
func (s *Service) ended(ctx context.Context, env events.Envelope) error {
	var e struct {
		Workload events.WorkloadRef `json:"workload"`
	}
	if err := env.As(&e); err != nil {
		return fmt.Errorf("%w: %v", bus.ErrPoison, err)
	}
	for _, pr := range s.requestsOf(e.Workload.UID, "") {
		s.remove(ctx, pr)
		s.log.Info().Str("workload", e.Workload.String()).Str("request", pr.Name).Msg("ProvisioningRequest of an ended workload deleted")
	}
	return nil
}

// waitServed asks the API server every poll whether it serves
// ProvisioningRequests.
func (s *Service) waitServed(ctx context.Context) error {
	kind := jobframework.Kind{Name: "provisioningrequest", GVK: autoscaling.SchemeGroupVersion.WithKind("ProvisioningRequest"), Resource: RequestGVR.Resource}
	told := false
	for {
		ok, err := jobframework.Served(s.kube.Discovery(), kind)
		switch {
		case err != nil:
			s.log.Warn().Err(err).Msg("cannot tell whether ProvisioningRequests are served; asking again")
		case ok:
			return nil
		case !told:
			told = true
			s.log.Warn().Str("resource", RequestGVR.String()).Msg("ProvisioningRequests are not served (the cluster autoscaler's CRD is not installed): waiting for them")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

// activity: a check is active when its parameters name a
// ProvisioningRequestConfig that exists.
func (s *Service) activity(ac *v1beta1.AdmissionCheck) checks.Activity {
	p := ac.Spec.Parameters
	if p == nil || p.APIGroup != v1beta1.GroupVersion.Group || p.Kind != ConfigKind {
		return checks.Activity{Reason: "BadParametersRef", Message: "parameters must name a " + ConfigKind + " of " + v1beta1.GroupVersion.Group}
	}
	if _, err := s.config(p); err != nil {
		return checks.Activity{Reason: "ConfigNotFound", Message: err.Error()}
	}
	return checks.Activity{Active: true, Reason: "Active", Message: "the ProvisioningRequestConfig " + p.Name + " is in place"}
}

// config returns the ProvisioningRequestConfig parameters name.
func (s *Service) config(p *v1beta1.AdmissionCheckParametersReference) (*v1beta1.ProvisioningRequestConfig, error) {
	if p == nil || p.Kind != ConfigKind || p.APIGroup != v1beta1.GroupVersion.Group {
		return nil, fmt.Errorf("%w: the parameters name no %s", ErrNoConfig, ConfigKind)
	}
	o, ok, err := s.configs.GetStore().GetByKey(p.Name)
	if err != nil || !ok {
		return nil, fmt.Errorf("%w: %s %q not found", ErrNoConfig, ConfigKind, p.Name)
	}
	var cfg v1beta1.ProvisioningRequestConfig
	if err := fromUnstructured(o, &cfg); err != nil {
		return nil, fmt.Errorf("%s %q: %w", ConfigKind, p.Name, err)
	}
	return &cfg, nil
}

func fromUnstructured(o any, into any) error {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected object %T", o)
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

// flavorMap is the ResourceFlavors by name.
func (s *Service) flavorMap() map[string]*v1beta1.ResourceFlavor {
	out := map[string]*v1beta1.ResourceFlavor{}
	for _, o := range s.flavors.GetStore().List() {
		var rf v1beta1.ResourceFlavor
		if err := fromUnstructured(o, &rf); err == nil {
			out[rf.Name] = &rf
		}
	}
	return out
}

// decide answers a reservation that waits for a provisioning check: at
// once when no request is needed or one that serves it has an answer;
// otherwise it makes (or adopts) the request, whose conditions answer later.
func (s *Service) decide(ctx context.Context, r checks.Request) (checks.Answer, error) {
	ac, ok := s.ctrl.Check(r.Check)
	if !ok {
		return checks.Answer{}, nil
	}
	cfg, err := s.config(ac.Spec.Parameters)
	if err != nil {
		return checks.Answer{}, err
	}
	log := s.log.With().Str("workload", r.Workload.String()).Str("check", r.Check).Logger()
	owners, sets, err := s.podSetsOf(ctx, r)
	switch {
	case errors.Is(err, ErrUnknownKind):
		log.Warn().Err(err).Msg("cannot provision for this kind: the check stays Pending")
		return checks.Answer{}, nil
	case err == nil && len(owners) == 0:
		log.Info().Msg("the workload's objects are gone: nothing provisioned")
		return checks.Answer{}, nil
	}
	if errors.Is(err, ErrPodSets) {
		log.Warn().Err(err).Msg("cannot read the workload's pod sets")
		return checks.Answer{State: events.CheckRejected, Message: err.Error()}, nil
	}
	if err != nil {
		return checks.Answer{}, err // the API server: offered again
	}
	sets = managed(sets, cfg.Spec.ManagedResources)
	if len(sets) == 0 {
		return checks.Answer{State: events.CheckReady, Message: NotNeeded}, nil
	}
	mine := s.requestsOf(r.Workload.UID, r.Check)
	var latest *autoscaling.ProvisioningRequest
	if len(mine) > 0 {
		latest = mine[len(mine)-1]
	}
	next := int32(1)
	switch {
	case latest == nil:
	case !matchesConfig(latest, cfg.Spec):
		next = attemptOf(latest) + 1
	case latest.Annotations[AdmissionAnnotation] == r.Admission:
		// Offered again (a redelivery): the request serves it already.
		return answerOf(latest, cfg.Spec, false), nil
	case failed(latest):
		next = attemptOf(latest) + 1
	default:
		// Made for an earlier reservation and still good: this one
		// takes it over.
		if err := s.adopt(ctx, latest, r.Admission); err != nil {
			return checks.Answer{}, err
		}
		log.Info().Str("request", latest.Name).Msg("ProvisioningRequest taken over by a new reservation")
		return answerOf(latest, cfg.Spec, false), nil
	}
	name, err := s.create(ctx, r, owners, cfg, merge(sets, cfg.Spec.PodSetMergePolicy), next)
	if err != nil {
		return checks.Answer{}, err
	}
	log.Info().Str("request", name).Int32("attempt", next).Msg("ProvisioningRequest created")
	for _, old := range mine {
		if old.Name != name {
			s.remove(ctx, old)
		}
	}
	return checks.Answer{}, nil
}

// podSetsOf returns the objects a workload is made of (one, or a pod
// group's members) and its pod sets as they would run under the
// reservation; no objects when they are gone. An error that is not
// ErrUnknownKind and names no API failure means the pod sets cannot be
// read.
func (s *Service) podSetsOf(ctx context.Context, r checks.Request) ([]*unstructured.Unstructured, []podSet, error) {
	ad, obj, err := s.object(ctx, r.Workload)
	if err != nil {
		return nil, nil, err
	}
	if obj != nil {
		sets, err := podSetsOfJob(ad, obj, r.PodSets, s.flavorMap())
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrPodSets, err)
		}
		return []*unstructured.Unstructured{obj}, sets, nil
	}
	g, ok := ad.(jobframework.Grouper)
	if !ok {
		return nil, nil, nil
	}
	// A pod group: its workload is named after the group, its pod sets
	// are its members' roles.
	list, err := s.dyn.Resource(ad.Kind().GVR()).Namespace(r.Workload.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{g.GroupLabel(): r.Workload.Name}.String()})
	if err != nil {
		return nil, nil, fmt.Errorf("list the members of group %s: %w", r.Workload, err)
	}
	var owners []*unstructured.Unstructured
	var members []jobframework.Job
	for i := range list.Items {
		u := &list.Items[i]
		if u.GetDeletionTimestamp() != nil {
			continue
		}
		m, err := ad.Decode(u)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrPodSets, err)
		}
		owners, members = append(owners, u), append(members, m)
	}
	if len(members) == 0 {
		return nil, nil, nil
	}
	roles, err := jobframework.GroupTemplates(ad, members)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrPodSets, err)
	}
	var sets []podSet
	for _, psa := range r.PodSets {
		ps, ok := roles[psa.Name]
		if !ok {
			return nil, nil, fmt.Errorf("%w: no member of group %s is in pod set %s", ErrPodSets, r.Workload, psa.Name)
		}
		sets = append(sets, templateOf(ps, psa.Name, psa.Count))
	}
	return owners, sets, nil
}

// object reads the workload's object, with its kind's adapter; nil when
// it is gone or another object took its name (or the workload is a pod
// group, named after no object).
func (s *Service) object(ctx context.Context, w events.WorkloadRef) (jobframework.Adapter, *unstructured.Unstructured, error) {
	ad, ok := s.adapters[w.Kind]
	if !ok {
		return nil, nil, fmt.Errorf("%w: kind %q is not integrated here", ErrUnknownKind, w.Kind)
	}
	obj, err := s.dyn.Resource(ad.Kind().GVR()).Namespace(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ad, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s %s: %w", w.Kind, w, err)
	}
	if string(obj.GetUID()) != jobframework.ObjectUID(w.UID) {
		return ad, nil, nil
	}
	return ad, obj, nil
}

// byWorkload indexes the requests by their workload's UID: every ended
// workload is looked up, most of them with none.
const byWorkload = "workload"

// requestsOf lists the requests made for a workload's check (every
// check: ""), by attempt.
func (s *Service) requestsOf(uid, check string) []*autoscaling.ProvisioningRequest {
	var out []*autoscaling.ProvisioningRequest
	objs, _ := s.requests.GetIndexer().ByIndex(byWorkload, uid)
	for _, o := range objs {
		var pr autoscaling.ProvisioningRequest
		if err := fromUnstructured(o, &pr); err != nil {
			continue
		}
		if (check == "" || pr.Annotations[CheckAnnotation] == check) && attemptOf(&pr) > 0 {
			out = append(out, &pr)
		}
	}
	slices.SortFunc(out, func(a, b *autoscaling.ProvisioningRequest) int { return int(attemptOf(a)) - int(attemptOf(b)) })
	return out
}

// create makes attempt n's pod templates, then its request, all owned by
// the workload's object so that deleting it deletes them.
func (s *Service) create(ctx context.Context, r checks.Request, owners []*unstructured.Unstructured, cfg *v1beta1.ProvisioningRequestConfig, sets []podSet, n int32) (string, error) {
	name := RequestName(r.Workload, r.Check, n)
	// Deleted once every owner is: the job, or all of a group's members.
	var refs []metav1.OwnerReference
	for _, o := range owners {
		refs = append(refs, metav1.OwnerReference{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Name: o.GetName(), UID: o.GetUID()})
	}
	lbl := map[string]string{WorkloadUIDLabel: r.Workload.UID}
	wl, err := json.Marshal(r.Workload)
	if err != nil {
		return "", err
	}
	pr := &autoscaling.ProvisioningRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: autoscaling.SchemeGroupVersion.String(), Kind: "ProvisioningRequest"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Workload.Namespace, Labels: lbl, OwnerReferences: refs,
			Annotations: map[string]string{WorkloadAnnotation: string(wl), CheckAnnotation: r.Check, AttemptAnnotation: strconv.Itoa(int(n)),
				AdmissionAnnotation: r.Admission, PodSetsAnnotation: names(sets)}},
		Spec: autoscaling.ProvisioningRequestSpec{ProvisioningClassName: cfg.Spec.ProvisioningClassName,
			Parameters: parameters(cfg.Spec, owners[0].GetAnnotations())},
	}
	for _, ps := range sets {
		tn := TemplateName(name, ps.names[0])
		pt := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: tn, Namespace: r.Workload.Namespace, Labels: lbl,
			OwnerReferences: refs}, Template: ps.template}
		if _, err := s.kube.CoreV1().PodTemplates(pt.Namespace).Create(ctx, pt, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create PodTemplate %s/%s: %w", pt.Namespace, tn, err)
		}
		pr.Spec.PodSets = append(pr.Spec.PodSets, autoscaling.PodSet{PodTemplateRef: autoscaling.Reference{Name: tn}, Count: ps.count})
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pr)
	if err != nil {
		return "", err
	}
	if _, err := s.dyn.Resource(RequestGVR).Namespace(pr.Namespace).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create ProvisioningRequest %s/%s: %w", pr.Namespace, name, err)
	}
	return name, nil
}

// adopt makes a request serve another reservation.
func (s *Service) adopt(ctx context.Context, pr *autoscaling.ProvisioningRequest, admission string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": pr.UID, "annotations": map[string]string{AdmissionAnnotation: admission}}})
	if err != nil {
		return err
	}
	if _, err := s.dyn.Resource(RequestGVR).Namespace(pr.Namespace).Patch(ctx, pr.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("take over ProvisioningRequest %s/%s: %w", pr.Namespace, pr.Name, err)
	}
	return nil
}

// remove deletes an earlier attempt and its pod templates.
func (s *Service) remove(ctx context.Context, pr *autoscaling.ProvisioningRequest) {
	for _, ps := range pr.Spec.PodSets {
		if err := s.kube.CoreV1().PodTemplates(pr.Namespace).Delete(ctx, ps.PodTemplateRef.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			s.log.Warn().Err(err).Str("template", ps.PodTemplateRef.Name).Msg("earlier attempt's PodTemplate not deleted")
		}
	}
	if err := s.dyn.Resource(RequestGVR).Namespace(pr.Namespace).Delete(ctx, pr.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		s.log.Warn().Err(err).Str("request", pr.Name).Msg("earlier attempt's ProvisioningRequest not deleted")
	}
}

// next syncs one request from the queue; false once the queue shuts down.
func (s *Service) next(ctx context.Context) bool {
	return workloop.Next(s.queue, func(key string) error { return s.sync(ctx, key) }, func(key string, err error) {
		s.log.Warn().Err(err).Str("request", key).Msg("ProvisioningRequest not answered yet; trying again")
	})
}

// sync answers the check a request serves from its conditions, once per
// change of answer.
func (s *Service) sync(ctx context.Context, key string) error {
	o, ok, err := s.requests.GetStore().GetByKey(key)
	if err != nil || !ok {
		s.answeredM.Lock()
		delete(s.answered, key)
		s.answeredM.Unlock()
		return err
	}
	var pr autoscaling.ProvisioningRequest
	if err := fromUnstructured(o, &pr); err != nil {
		return nil // not ours to understand; nothing to retry
	}
	var w events.WorkloadRef
	if err := json.Unmarshal([]byte(pr.Annotations[WorkloadAnnotation]), &w); err != nil {
		s.log.Warn().Str("request", key).Msg("ProvisioningRequest without a readable " + WorkloadAnnotation + " annotation: ignored")
		return nil
	}
	check, admission := pr.Annotations[CheckAnnotation], pr.Annotations[AdmissionAnnotation]
	ac, ok := s.ctrl.Check(check)
	if !ok {
		return nil
	}
	cfg, err := s.config(ac.Spec.Parameters)
	if err != nil {
		return nil // inactive: the check answers nothing
	}
	started := false
	if meta.IsStatusConditionTrue(pr.Status.Conditions, autoscaling.BookingExpired) {
		// An expired booking matters only to a job that has not started.
		_, obj, err := s.object(ctx, w)
		if err != nil {
			return err
		}
		if obj != nil {
			_, started, _ = jobframework.AdmissionOf(obj.GetAnnotations())
		}
	}
	a := answerOf(&pr, cfg.Spec, started)
	if a.State == "" {
		return nil
	}
	seen := admission + "/" + a.State + "/" + a.Message
	s.answeredM.Lock()
	same := s.answered[key] == seen
	s.answeredM.Unlock()
	if same {
		return nil
	}
	if err := s.ctrl.Answer(ctx, checks.Request{Check: check, Workload: w, Admission: admission}, a); err != nil {
		return err
	}
	s.answeredM.Lock()
	s.answered[key] = seen
	s.answeredM.Unlock()
	return nil
}

// EndedConsumer is the durable consumer of the events that end a
// workload, whose requests are then deleted.
func EndedConsumer() bus.ConsumerSpec {
	return bus.ConsumerSpec{Stream: bus.StreamEvents, Durable: EndedDurable,
		FilterSubjects: []string{events.SubjectFilter("workload", "finished", "*", "*"), events.SubjectFilter("workload", "deleted", "*", "*")}}
}
