package invariant

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Report is what Watch saw.
type Report struct {
	// Events counts the Job events of the watch (not the Jobs of a list).
	Events int
	// Violations are the first ones found, in commit order; Dropped counts
	// those past the cap (WithMaxViolations).
	Violations []Violation
	Dropped    int
	// Max is Checker.Max at the end.
	Max map[string]map[string]resource.Quantity
	// Relists counts the times the watch could not be resumed and the Jobs
	// were listed again; Gaps says between which resourceVersions the
	// commit order was not seen, so a violation in between may be missed.
	Relists int
	Gaps    []Gap
}

// Gap is a stretch of commit order the checker did not see event by event:
// it knows the state at From and at To, not what happened in between.
type Gap struct {
	From, To string
	Cause    string
}

// Option configures Watch.
type Option func(*options)

type options struct {
	ready       func()
	onViolation func(Violation)
	keep        int
	retry       time.Duration
}

// WithReady is called once, when the Jobs are listed and the watch is open:
// every Job change from then on will be seen.
func WithReady(f func()) Option { return func(o *options) { o.ready = f } }

// WithViolationHook is called with each violation as it is found, for a
// caller that reports while the run goes on.
func WithViolationHook(f func(Violation)) Option { return func(o *options) { o.onViolation = f } }

// WithMaxViolations caps how many violations the Report keeps (default
// 1000); a broken limit is reported after every event in its tree, so an
// uncapped run could grow without bound.
func WithMaxViolations(n int) Option { return func(o *options) { o.keep = n } }

// withRetry sets the pause between failed attempts to list or watch again.
func withRetry(d time.Duration) Option { return func(o *options) { o.retry = d } }

var (
	clusterQueuesGVR = schema.GroupVersionResource{Group: v1beta1.GroupVersion.Group, Version: v1beta1.GroupVersion.Version, Resource: "clusterqueues"}
	cohortsGVR       = schema.GroupVersionResource{Group: v1beta1.GroupVersion.Group, Version: v1beta1.GroupVersion.Version, Resource: "cohorts"}
)

// Watch reads the queue configuration once, lists the labelled Jobs and
// watches them from the list's resourceVersion, feeding every event to a
// Checker until ctx ends. One watch delivers the changes in commit order.
// When the watch closes it is resumed from the last resourceVersion seen,
// which loses nothing; only when that is no longer possible (the version
// expired) are the Jobs listed again, and the gap is noted in the Report.
//
// Changes to the queue configuration during the run are not followed.
//
// Watch returns an error only if it cannot start; after WithReady it runs
// until ctx ends and returns the Report.
func Watch(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, opts ...Option) (*Report, error) {
	o := options{keep: 1000, retry: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := readConfig(ctx, dyn)
	if err != nil {
		return nil, err
	}
	chk, err := New(cfg)
	if err != nil {
		return nil, fmt.Errorf("queue configuration: %w", err)
	}
	w := &watcher{chk: chk, kube: kube, opts: o, rep: &Report{}}
	if err := w.list(ctx); err != nil {
		return nil, err
	}
	wi, err := w.open(ctx)
	if err != nil {
		return nil, err
	}
	if o.ready != nil {
		o.ready()
	}
	for {
		cause := w.consume(ctx, wi)
		wi.Stop()
		if ctx.Err() != nil {
			break
		}
		wi = w.reopen(ctx, cause)
		if wi == nil {
			break
		}
	}
	w.rep.Max = chk.Max()
	return w.rep, nil
}

type watcher struct {
	chk  *Checker
	kube kubernetes.Interface
	opts options
	rep  *Report
	// rv is the last resourceVersion seen: the point of commit order the
	// Checker's state is at.
	rv string
}

// errExpired marks a watch that cannot be resumed from w.rv.
var errExpired = errors.New("resourceVersion expired")

func jobSelector() metav1.ListOptions {
	// A Job that loses the label leaves the selection with a DELETED
	// event, which unbooks it, as an unlabelled Job counts for nothing.
	return metav1.ListOptions{LabelSelector: v1beta1.QueueNameLabel}
}

func (w *watcher) list(ctx context.Context) error {
	l, err := w.kube.BatchV1().Jobs(metav1.NamespaceAll).List(ctx, jobSelector())
	if err != nil {
		return fmt.Errorf("list Jobs: %w", err)
	}
	w.rv = l.ResourceVersion
	w.keep(w.chk.resync(l.Items, l.ResourceVersion))
	return nil
}

func (w *watcher) open(ctx context.Context) (watch.Interface, error) {
	lo := jobSelector()
	lo.ResourceVersion = w.rv
	lo.AllowWatchBookmarks = true
	wi, err := w.kube.BatchV1().Jobs(metav1.NamespaceAll).Watch(ctx, lo)
	if err != nil {
		if expired(err) {
			return nil, fmt.Errorf("watch Jobs from resourceVersion %s: %w: %v", w.rv, errExpired, err)
		}
		return nil, fmt.Errorf("watch Jobs from resourceVersion %s: %w", w.rv, err)
	}
	return wi, nil
}

// consume feeds events to the Checker until the watch ends, and says why it
// ended: errExpired when it cannot be resumed.
func (w *watcher) consume(ctx context.Context, wi watch.Interface) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return errors.New("the watch closed")
			}
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				j, ok := ev.Object.(*batchv1.Job)
				if !ok {
					continue
				}
				w.rep.Events++
				w.rv = j.ResourceVersion
				w.keep(w.chk.Observe(j, ev.Type == watch.Deleted))
			case watch.Bookmark:
				if j, ok := ev.Object.(*batchv1.Job); ok && j.ResourceVersion != "" {
					w.rv = j.ResourceVersion
				}
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if expired(err) {
					return fmt.Errorf("%w: %v", errExpired, err)
				}
				return fmt.Errorf("watch error: %w", err)
			}
		}
	}
}

// reopen resumes the watch, listing again when it has to, until it succeeds
// or ctx ends (nil).
func (w *watcher) reopen(ctx context.Context, cause error) watch.Interface {
	for {
		if !errors.Is(cause, errExpired) {
			wi, err := w.open(ctx)
			if err == nil {
				return wi
			}
			cause = err
		}
		if errors.Is(cause, errExpired) {
			from := w.rv
			if err := w.list(ctx); err != nil {
				cause = err
			} else {
				w.rep.Relists++
				w.rep.Gaps = append(w.rep.Gaps, Gap{From: from, To: w.rv, Cause: cause.Error()})
				wi, err := w.open(ctx)
				if err == nil {
					return wi
				}
				cause = err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.opts.retry):
		}
	}
}

func expired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

func (w *watcher) keep(vs []Violation) {
	for _, v := range vs {
		if w.opts.onViolation != nil {
			w.opts.onViolation(v)
		}
		if len(w.rep.Violations) < w.opts.keep {
			w.rep.Violations = append(w.rep.Violations, v)
		} else {
			w.rep.Dropped++
		}
	}
}

func readConfig(ctx context.Context, dyn dynamic.Interface) (Config, error) {
	var cfg Config
	cqs, err := dyn.Resource(clusterQueuesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return cfg, fmt.Errorf("list ClusterQueues: %w", err)
	}
	for _, u := range cqs.Items {
		var cq v1beta1.ClusterQueue
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cq); err != nil {
			return cfg, fmt.Errorf("ClusterQueue/%s: %w", u.GetName(), err)
		}
		cfg.ClusterQueues = append(cfg.ClusterQueues, cq)
	}
	cohorts, err := dyn.Resource(cohortsGVR).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		// Without the Cohort CRD every cohort is implicit.
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("list Cohorts: %w", err)
	}
	for _, u := range cohorts.Items {
		var co v1beta1.Cohort
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &co); err != nil {
			return cfg, fmt.Errorf("Cohort/%s: %w", u.GetName(), err)
		}
		cfg.Cohorts = append(cfg.Cohorts, co)
	}
	return cfg, nil
}
