package baseline

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// jobState is what the tracker knows of one Job of the run.
type jobState struct {
	name    string
	class   int // index into the profile's classes, -1 for a probe
	queue   int // index into the profile's queues
	runtime time.Duration

	created   time.Time // just before the create request
	createOK  bool      // the create request succeeded
	createErr error
	uid       string

	obj       *batchv1.Job // latest seen, for the status write
	admitted  time.Time    // first unsuspend seen
	running   bool         // unsuspended, not finished
	epoch     int          // counts unsuspends
	runStart  time.Time    // of the current run
	timer     *time.Timer
	unsuspend int
	suspends  int // suspended again while running: preempted (or evicted)
	done      bool
	gone      bool // deleted before it finished
	finished  time.Time
	failed    bool          // finished with Failed=True, not by us
	lag       time.Duration // completion write accepted − (runStart + runtime)
	// ran is how long it ran (unsuspended) in all, up to now or its
	// current run.
	ran time.Duration
}

// tracker follows the run's Jobs through one watch and completes each one
// its class's runtime after it was unsuspended, by writing its status.
type tracker struct {
	kube     kubernetes.Interface // writes
	watch    kubernetes.Interface // lists and watches
	ns       string
	selector string
	log      func(format string, args ...any)

	mu      sync.Mutex
	jobs    map[string]*jobState
	pending int           // registered, not done
	changed chan struct{} // closed and replaced whenever a Job finishes

	completions chan completion
	stop        <-chan struct{} // the run's context is done
	// counters of the status writes
	writes, conflicts, stale int
	writeErrs                []string
	relists                  int
}

type completion struct {
	name  string
	epoch int
}

// newTracker returns a tracker writing with kube and listing and watching
// with watch.
func newTracker(kube, watch kubernetes.Interface, ns, selector string, log func(string, ...any)) *tracker {
	return &tracker{kube: kube, watch: watch, ns: ns, selector: selector, log: log, jobs: map[string]*jobState{},
		changed: make(chan struct{}), completions: make(chan completion, 1024)}
}

// register adds a Job before it is created, so that no event about it can
// come first.
func (t *tracker) register(st *jobState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.jobs[st.name] = st
	t.pending++
}

// createDone records the outcome of a create request; a failed one takes
// back the registration.
func (t *tracker) createDone(name string, err error) {
	if err != nil {
		t.createFailed(name, err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.jobs[name]; st != nil {
		st.createOK = true
	}
}

// createFailed takes back a registration whose create failed.
func (t *tracker) createFailed(name string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.jobs[name]; st != nil && !st.done {
		st.createErr = err
		st.done = true
		t.pending--
		t.notify()
	}
}

func (t *tracker) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// waitDone waits until no registered Job is left unfinished.
func (t *tracker) waitDone(ctx context.Context, names ...string) error {
	for {
		t.mu.Lock()
		left := t.pending
		if len(names) > 0 {
			left = 0
			for _, n := range names {
				if st := t.jobs[n]; st != nil && !st.done {
					left++
				}
			}
		}
		ch := t.changed
		t.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d Jobs not finished: %w", left, ctx.Err())
		}
	}
}

// start lists the Jobs and starts the watch and the completers; it returns
// once the watch is open.
func (t *tracker) start(ctx context.Context, completers int) error {
	t.stop = ctx.Done()
	rv, err := t.list(ctx)
	if err != nil {
		return err
	}
	w, err := t.open(ctx, rv)
	if err != nil {
		return err
	}
	go t.watchLoop(ctx, w, rv)
	for range completers {
		go t.completer(ctx)
	}
	return nil
}

func (t *tracker) list(ctx context.Context) (string, error) {
	l, err := t.watch.BatchV1().Jobs(t.ns).List(ctx, metav1.ListOptions{LabelSelector: t.selector})
	if err != nil {
		return "", fmt.Errorf("list Jobs: %w", err)
	}
	for i := range l.Items {
		t.observe(&l.Items[i], false)
	}
	return l.ResourceVersion, nil
}

func (t *tracker) open(ctx context.Context, rv string) (watch.Interface, error) {
	return t.watch.BatchV1().Jobs(t.ns).Watch(ctx, metav1.ListOptions{LabelSelector: t.selector, ResourceVersion: rv, AllowWatchBookmarks: true})
}

// watchLoop feeds every event to observe, resuming the watch from the last
// resourceVersion when it closes and listing again when that has expired.
func (t *tracker) watchLoop(ctx context.Context, w watch.Interface, rv string) {
	for {
		expired := false
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				j, ok := ev.Object.(*batchv1.Job)
				if !ok {
					continue
				}
				rv = j.ResourceVersion
				t.observe(j, ev.Type == watch.Deleted)
			case watch.Bookmark:
				if j, ok := ev.Object.(*batchv1.Job); ok {
					rv = j.ResourceVersion
				}
			case watch.Error:
				if st, ok := ev.Object.(*metav1.Status); ok && st.Code == 410 {
					expired = true
				}
			}
		}
		w.Stop()
		for {
			if ctx.Err() != nil {
				return
			}
			var err error
			if expired {
				t.mu.Lock()
				t.relists++
				t.mu.Unlock()
				if rv, err = t.list(ctx); err != nil {
					t.log("tracker: %v", err)
					time.Sleep(time.Second)
					continue
				}
			}
			if w, err = t.open(ctx, rv); err != nil {
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					expired = true
					continue
				}
				t.log("tracker: watch Jobs: %v", err)
				time.Sleep(time.Second)
				continue
			}
			break
		}
	}
}

func isSuspended(j *batchv1.Job) bool { return j.Spec.Suspend != nil && *j.Spec.Suspend }

// finishedCond says whether a Job has a true Complete or Failed condition.
func finishedCond(j *batchv1.Job) (finished, failed bool) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, false
		case batchv1.JobFailed:
			return true, true
		}
	}
	return false, false
}

// observe applies one state of a Job.
func (t *tracker) observe(j *batchv1.Job, deleted bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.jobs[j.Name]
	if st == nil || st.done {
		return
	}
	if st.uid == "" {
		st.uid = string(j.UID)
	} else if st.uid != string(j.UID) {
		return // an older Job of the same name
	}
	st.obj = j
	finished, failed := finishedCond(j)
	switch {
	case deleted || finished:
		st.done, st.gone, st.failed, st.finished = true, deleted && !finished, failed, now
		if st.running {
			st.ran += now.Sub(st.runStart)
		}
		st.running = false
		if st.timer != nil {
			st.timer.Stop()
		}
		t.pending--
		t.notify()
	case !isSuspended(j) && !st.running:
		st.running = true
		st.epoch++
		st.unsuspend++
		st.runStart = now
		if st.admitted.IsZero() {
			st.admitted = now
		}
		c := completion{name: st.name, epoch: st.epoch}
		st.timer = time.AfterFunc(st.runtime, func() {
			select {
			case t.completions <- c:
			case <-t.stop:
			}
		})
	case isSuspended(j) && st.running:
		st.running = false
		st.ran += now.Sub(st.runStart)
		st.suspends++
		if st.timer != nil {
			st.timer.Stop()
		}
	}
}

// completer writes the status of Jobs whose runtime is over.
func (t *tracker) completer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-t.completions:
			t.complete(ctx, c)
		}
	}
}

// current returns a copy of the Job's latest state if run epoch is still
// the current one.
func (t *tracker) current(c completion) (*batchv1.Job, *jobState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.jobs[c.name]
	if st == nil || st.done || !st.running || st.epoch != c.epoch || st.obj == nil {
		return nil, nil
	}
	return st.obj.DeepCopy(), st
}

// complete marks a Job succeeded the way a Job controller would, in one
// status write the API server accepts for a Job with an external
// spec.managedBy: startTime (kept if set, else the unsuspension), and both
// conditions SuccessCriteriaMet and Complete, completionTime and
// succeeded=1. It writes with the resourceVersion it read, so a Job that
// Sluice suspended (preempted) in between is not completed: the write
// conflicts, the fresh copy is suspended, and the watch has cancelled this
// run.
func (t *tracker) complete(ctx context.Context, c completion) {
	j, st := t.current(c)
	if j == nil {
		t.count(func() { t.stale++ })
		return
	}
	for attempt := 0; ; attempt++ {
		if isSuspended(j) {
			t.count(func() { t.stale++ })
			return
		}
		if f, _ := finishedCond(j); f {
			return
		}
		now := metav1.Now()
		if j.Status.StartTime == nil {
			t.mu.Lock()
			start := metav1.NewTime(st.runStart)
			t.mu.Unlock()
			j.Status.StartTime = &start
		}
		j.Status.CompletionTime = &now
		j.Status.Succeeded = 1
		j.Status.Active = 0
		j.Status.Ready = nil
		j.Status.Conditions = append(j.Status.Conditions,
			batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached",
				Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now},
			batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached",
				Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now})
		_, err := t.kube.BatchV1().Jobs(t.ns).UpdateStatus(ctx, j, metav1.UpdateOptions{FieldManager: "sluice-baseline"})
		if err == nil {
			done := time.Now()
			t.mu.Lock()
			t.writes++
			st.lag = done.Sub(st.runStart.Add(st.runtime))
			t.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		if apierrors.IsConflict(err) && attempt < 20 {
			t.count(func() { t.conflicts++ })
			fresh, gerr := t.kube.BatchV1().Jobs(t.ns).Get(ctx, c.name, metav1.GetOptions{})
			if gerr != nil {
				err = gerr
			} else {
				if cur, _ := t.current(c); cur == nil {
					t.count(func() { t.stale++ })
					return
				}
				j = fresh
				continue
			}
		}
		if apierrors.IsNotFound(err) {
			return
		}
		t.count(func() {
			if len(t.writeErrs) < 20 {
				t.writeErrs = append(t.writeErrs, fmt.Sprintf("complete %s: %v", c.name, err))
			}
		})
		// Try again a little later unless the run moved on.
		time.AfterFunc(500*time.Millisecond, func() {
			select {
			case t.completions <- c:
			case <-ctx.Done():
			}
		})
		return
	}
}

func (t *tracker) count(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f()
}
