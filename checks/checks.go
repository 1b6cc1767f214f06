package checks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
)

// Request is one check to decide: an AdmissionCheck of the controller, for
// one reservation of one workload.
type Request struct {
	// Check is the AdmissionCheck's name, Parameters its parameters.
	Check      string
	Parameters *v1beta1.AdmissionCheckParametersReference
	Workload   events.WorkloadRef
	// Admission names the reservation; an answer names it too.
	Admission    string
	ClusterQueue string
	PodSets      []events.PodSetAssignmentV1
}

// Answer is a check's decision.
type Answer struct {
	// State is events.CheckReady, CheckRetry or CheckRejected; CheckPending
	// (or empty) publishes nothing: the Decider answers later, through
	// Controller.Answer.
	State   string
	Message string
	// RequeueAfter (Retry only): the workload is reserved again no sooner
	// than this, rounded up to a second.
	RequeueAfter time.Duration
	// PodSetUpdates (Ready only): what the check adds to the pods.
	PodSetUpdates []events.PodSetUpdateV1
	// Cluster (Ready only): the worker cluster the workload was
	// dispatched to, where it runs instead of here.
	Cluster string
}

// Decider decides checks. An error is transient: the reservation is
// offered again with backoff.
type Decider interface {
	Decide(ctx context.Context, r Request) (Answer, error)
}

// DeciderFunc adapts a function to Decider.
type DeciderFunc func(ctx context.Context, r Request) (Answer, error)

// Decide implements Decider.
func (f DeciderFunc) Decide(ctx context.Context, r Request) (Answer, error) { return f(ctx, r) }

// Publisher publishes an answer (an event) under its deterministic id.
type Publisher = events.Publisher

// GVR is the AdmissionCheck resource.
var GVR = v1beta1.GroupVersion.WithResource("admissionchecks")

// Errors.
var (
	// ErrConfig: the controller cannot be built as asked.
	ErrConfig = errors.New("checks: invalid controller")
	// ErrNotSynced: the AdmissionChecks are not loaded yet; a reservation
	// is offered again shortly.
	ErrNotSynced = errors.New("checks: AdmissionChecks not loaded yet")
)

// Controller runs one admission check controller.
type Controller struct {
	name    string
	js      jetstream.JetStream
	pub     Publisher
	dyn     dynamic.Interface
	decider Decider
	log     zerolog.Logger
	resync  time.Duration

	activity func(*v1beta1.AdmissionCheck) Activity

	mu     sync.Mutex
	checks map[string]*v1beta1.AdmissionCheck // of this controller, by name
	synced bool
	inf    cache.SharedIndexInformer
}

// Activity is whether a check is active (its Active condition), and why.
type Activity struct {
	Active          bool
	Reason, Message string
}

// Option tunes a Controller.
type Option func(*Controller)

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(c *Controller) { c.log = l } }

// WithPublisher replaces the publisher of answers (by default one on js,
// with the controller name as the events' source).
func WithPublisher(p Publisher) Option { return func(c *Controller) { c.pub = p } }

// WithActivity decides whether each check of the controller is active
// (say, its parameters name an object that exists). By default every one
// is. Recheck applies it again.
func WithActivity(f func(*v1beta1.AdmissionCheck) Activity) Option {
	return func(c *Controller) { c.activity = f }
}

// New returns the controller of the AdmissionChecks whose controllerName
// is name.
func New(name string, js jetstream.JetStream, dyn dynamic.Interface, d Decider, opts ...Option) (*Controller, error) {
	if name == "" || js == nil || dyn == nil || d == nil {
		return nil, fmt.Errorf("%w: a controller name, JetStream, a Kubernetes client and a decider are all required", ErrConfig)
	}
	c := &Controller{name: name, js: js, dyn: dyn, decider: d, log: zerolog.Nop(), resync: 10 * time.Minute, checks: map[string]*v1beta1.AdmissionCheck{}}
	for _, o := range opts {
		o(c)
	}
	if c.pub == nil {
		c.pub = bus.NewPublisher(js, events.Source(name), bus.WithPublisherLogger(c.log))
	}
	if c.activity == nil {
		c.activity = func(*v1beta1.AdmissionCheck) Activity {
			return Activity{Active: true, Reason: "Active", Message: "the controller " + name + " runs"}
		}
	}
	return c, nil
}

// Durable is the name of a controller's consumer of reservations: "check-"
// and the controller name, with what a consumer name cannot hold turned
// into "-".
func Durable(controllerName string) string {
	return "check-" + strings.Map(func(r rune) rune {
		switch r {
		case '.', '/', '\\', '*', '>', ' ', '\t':
			return '-'
		}
		return r
	}, controllerName)
}

// Run marks the controller's AdmissionChecks Active and decides
// reservations until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, c.resync)
	inf := factory.ForResource(GVR).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.seen(ctx, o) },
		UpdateFunc: func(_, o any) { c.seen(ctx, o) },
		DeleteFunc: func(o any) { c.gone(o) },
	}); err != nil {
		return fmt.Errorf("checks: watch AdmissionChecks: %w", err)
	}
	c.mu.Lock()
	c.inf = inf
	c.mu.Unlock()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	c.mu.Lock()
	c.synced = true
	c.mu.Unlock()
	c.log.Info().Str("controller", c.name).Msg("admission check controller running")
	return bus.Run(ctx, c.js, Consumer(c.name), c.handle, bus.WithLogger(c.log), bus.WithPartitions(4, events.SubjectWorkload))
}

// seen records an AdmissionCheck of this controller and marks it Active.
func (c *Controller) seen(ctx context.Context, o any) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	var ac v1beta1.AdmissionCheck
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ac); err != nil {
		c.log.Warn().Err(err).Str("check", u.GetName()).Msg("AdmissionCheck not understood")
		return
	}
	if ac.Spec.ControllerName != c.name {
		c.gone(o)
		return
	}
	c.mu.Lock()
	c.checks[ac.Name] = &ac
	c.mu.Unlock()
	act := c.activity(&ac)
	want := metav1.Condition{Type: v1beta1.AdmissionCheckActive, Status: metav1.ConditionFalse,
		Reason: act.Reason, Message: act.Message, ObservedGeneration: ac.Generation}
	if act.Active {
		want.Status = metav1.ConditionTrue
	}
	if want.Reason == "" {
		want.Reason = "Active"
		if !act.Active {
			want.Reason = "Inactive"
		}
	}
	if cur := meta.FindStatusCondition(ac.Status.Conditions, v1beta1.AdmissionCheckActive); cur != nil &&
		cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message && cur.ObservedGeneration == want.ObservedGeneration {
		return
	}
	meta.SetStatusCondition(&ac.Status.Conditions, want)
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ac)
	if err != nil {
		c.log.Warn().Err(err).Str("check", ac.Name).Msg("AdmissionCheck not marked Active")
		return
	}
	if _, err := c.dyn.Resource(GVR).UpdateStatus(ctx, &unstructured.Unstructured{Object: obj}, metav1.UpdateOptions{}); err != nil {
		// A conflict brings the newer object here again.
		c.log.Warn().Err(err).Str("check", ac.Name).Msg("AdmissionCheck not marked Active yet")
		return
	}
	c.log.Info().Str("check", ac.Name).Bool("active", act.Active).Str("reason", want.Reason).Msg("AdmissionCheck status written")
}

// Recheck decides again whether each AdmissionCheck of the controller is
// active, as when what WithActivity looks at changed.
func (c *Controller) Recheck(ctx context.Context) {
	c.mu.Lock()
	inf := c.inf
	c.mu.Unlock()
	if inf == nil {
		return
	}
	for _, o := range inf.GetStore().List() {
		c.seen(ctx, o)
	}
}

// Check returns the controller's AdmissionCheck named name, if known.
func (c *Controller) Check(name string) (*v1beta1.AdmissionCheck, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ac, ok := c.checks[name]
	return ac, ok
}

func (c *Controller) gone(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if m, err := meta.Accessor(o); err == nil {
		c.mu.Lock()
		delete(c.checks, m.GetName())
		c.mu.Unlock()
	}
}

// handle decides the checks of this controller that a reservation waits
// for.
func (c *Controller) handle(ctx context.Context, env events.Envelope) error {
	var ev events.WorkloadReservedV1
	if err := env.As(&ev); err != nil {
		return fmt.Errorf("%w: %v", bus.ErrPoison, err)
	}
	c.mu.Lock()
	synced := c.synced
	var mine []*v1beta1.AdmissionCheck
	for _, name := range ev.Checks {
		if ac := c.checks[name]; ac != nil {
			mine = append(mine, ac)
		}
	}
	c.mu.Unlock()
	if !synced {
		return ErrNotSynced
	}
	for _, ac := range mine {
		r := Request{Check: ac.Name, Parameters: ac.Spec.Parameters, Workload: ev.Workload, Admission: ev.Admission,
			ClusterQueue: ev.ClusterQueue, PodSets: ev.PodSets}
		a, err := c.decider.Decide(ctx, r)
		if err != nil {
			return fmt.Errorf("checks: decide %s for %s: %w", ac.Name, ev.Workload, err)
		}
		if err := c.Answer(ctx, r, a); err != nil {
			return err
		}
	}
	return nil
}

// Answer publishes a decision about a request; a Pending (or empty) one is
// not published.
func (c *Controller) Answer(ctx context.Context, r Request, a Answer) error {
	switch a.State {
	case "", events.CheckPending:
		return nil
	case events.CheckReady, events.CheckRetry, events.CheckRejected:
	default:
		return fmt.Errorf("%w: answer of %s for %s: state %q is not Ready, Retry or Rejected", bus.ErrPoison, r.Check, r.Workload, a.State)
	}
	ev := events.CheckUpdatedV1{Workload: r.Workload, Admission: r.Admission, Check: r.Check, Controller: c.name, State: a.State, Message: a.Message, PodSetUpdates: a.PodSetUpdates, Cluster: a.Cluster}
	if a.State == events.CheckRetry && a.RequeueAfter > 0 {
		secs := int32((a.RequeueAfter + time.Second - 1) / time.Second)
		ev.RequeueAfterSeconds = &secs
	}
	parts := []any{r.Admission, r.Check, a.State}
	if a.Cluster != "" {
		parts = append(parts, a.Cluster)
	}
	if err := c.pub.Publish(ctx, ev, events.ID(ev.Type(), r.Workload.UID, parts...)); err != nil {
		return fmt.Errorf("checks: answer %s for %s: %w", r.Check, r.Workload, err)
	}
	c.log.Info().Str("workload", r.Workload.String()).Str("check", r.Check).Str("state", a.State).Msg("admission check answered")
	return nil
}

// Consumer is the durable consumer of reservations of the check
// controller named controller. A check request is never given up on: its
// reservation holds quota until the check answers.
func Consumer(controller string) bus.ConsumerSpec {
	return bus.ConsumerSpec{Stream: bus.StreamEvents, Durable: Durable(controller),
		FilterSubjects: []string{events.SubjectFilter("workload", "reserved", "*", "*")}, MaxDeliver: bus.RetryForever}
}
