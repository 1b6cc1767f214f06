// Package baseline replays Kueue's scheduler performance workloads against
// a live cluster running Sluice, as real batch/v1 Jobs. It reads Kueue's
// generator files as they are (test/performance/scheduler/configs/*/
// generator.yaml in the Kueue repository; the built-in profiles baseline,
// large-scale and tas are in loadtest/profiles): every ClusterQueue of
// every queue set with its nominal quota, borrowing limit and preemption
// policies, namespaceSelector {} and one LocalQueue each, and every
// workload set's Jobs at its pacing, its counts times Options.Scale. The
// baseline profile (the same as loadtest/kueuebaseline's simulator
// scenario) is 5 cohorts × 6 ClusterQueues of 20 CPU (borrowing limit 100,
// reclaimWithinCohort Any, withinClusterQueue LowerPriority), each with 350
// small Jobs (1 CPU, 200ms, priority 50, one every 100ms), 100 medium (5
// CPU, 500ms, priority 100, every 500ms) and 50 large (20 CPU, 1s, priority
// 200, every 1.2s).
//
// No pods run: every Job has spec.managedBy "sluice.dev/loadtest", so the
// built-in Job controller leaves it alone, and Run itself plays the Job
// controller: a Job's runtime starts when Sluice unsuspends it, starts over
// if Sluice suspends it again (preemption), and when it is over Run marks the
// Job succeeded with one status write.
//
// Meanwhile invariant.Watch checks from the Jobs that no quota is ever
// exceeded, and afterwards Sluice's event stream is read, if a NATS URL is
// given, to count events and audit each workload's order of events.
package baseline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/invariant"
)

// ManagedBy is the spec.managedBy of every Job of the run.
const ManagedBy = "sluice.dev/loadtest"

// RunLabel marks the Jobs of a run; its value is Options.Prefix.
const RunLabel = "loadtest.sluice.dev/baseline"

// Options configure Run. Zero values take the defaults.
type Options struct {
	// Profile is the workload: a built-in profile's name (baseline,
	// large-scale, tas) or a Kueue generator file's path (default
	// baseline).
	Profile string
	// Scale is the fraction of the per-queue counts (1 = 15,000 Jobs of
	// the baseline; 0.3 = 4,500). The pacing stays the profile's.
	Scale float64
	// Namespace of the Jobs and LocalQueues (default "baseline"); created
	// if missing.
	Namespace string
	// Prefix of the ClusterQueue, LocalQueue, ResourceFlavor, cohort and
	// WorkloadPriorityClass names (default "bl").
	Prefix string
	// Timeout bounds setup, the replay and the wait for the Jobs (default
	// 15 min); Jobs not finished by then are reported, not an error.
	// Reading the event stream may take up to 2 min more, the cleanup up
	// to 5.
	Timeout time.Duration
	// NATSURL, if set, is Sluice's NATS server: what the services ask of
	// it is counted during the run (NATS), its event stream read after.
	NATSURL string
	// Creators is the number of concurrent creators (default 64);
	// Completers the number of concurrent status writers (default 256),
	// the simulated Job controller. With 32, under Sluice's load at
	// 15,000 Jobs of the large-scale profile, a Job was completed 39 s
	// after its runtime on average (4 s in the floor): the quota was held
	// that much longer, and the preemptions and the walls measured the
	// writers, not the queueing.
	Creators, Completers int
	// Keep keeps the Jobs at the end instead of deleting them.
	Keep bool
	// Unqueued measures the floor: the same Jobs at the same pacing,
	// without a queue, each unsuspended by its creator right after its
	// create, so that they cost the API server what queued ones do (a
	// create, an unsuspend and a completion) with nothing deciding. No
	// Sluice object is set up, nothing probed, no quota checked: it runs
	// on a bare cluster.
	Unqueued bool
	// Log receives progress lines (default: none).
	Log io.Writer
	// Watch, if set, lists and watches the run's Jobs instead of the
	// client Run is given (Clients puts it on a connection of its own).
	Watch kubernetes.Interface
	// Ready, if set, is called once the queues are set up, Sluice admits
	// from every LocalQueue and the quota check watches, right before the
	// first Job is created.
	Ready func()
}

func (o *Options) defaults() error {
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.Profile == "" {
		o.Profile = "baseline"
	}
	if o.Namespace == "" {
		o.Namespace = "baseline"
	}
	if o.Prefix == "" {
		o.Prefix = "bl"
	}
	if o.Timeout == 0 {
		o.Timeout = 15 * time.Minute
	}
	if o.Creators == 0 {
		o.Creators = 64
	}
	if o.Completers == 0 {
		o.Completers = 256
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	switch {
	case o.Scale < 0 || o.Scale > 10:
		return fmt.Errorf("scale %g: must be in (0, 10]", o.Scale)
	case o.Timeout < 0 || o.Creators < 0 || o.Completers < 0:
		return errors.New("timeout, creators and completers must not be negative")
	case len(o.Prefix) > 30:
		return fmt.Errorf("prefix %q: at most 30 characters", o.Prefix)
	}
	return nil
}

// Result is what a run measured.
type Result struct {
	Options Options
	// Profile is the run's workload.
	Profile *Profile
	// Classes are the run's workload classes.
	Classes []Class
	// Jobs is the number of Jobs of the plan, Created how many were
	// created, Finished how many completed (or failed) before the timeout.
	Jobs, Created, Finished int
	// Wall is from the first create to the last Job finishing (or to the
	// timeout); CreateSpan from the first create to the last.
	Wall, CreateSpan time.Duration
	// CreateLate is how late the create requests went out against the
	// baseline's pacing (the creators or the API server falling behind).
	CreateLate Stats
	// CapacityBound is the shortest possible makespan (CapacityBound).
	CapacityBound time.Duration
	// TimeToAdmission per class: from just before a Job's create request
	// to its first unsuspension seen by the watch.
	TimeToAdmission map[string]Stats
	// Usage per ClusterQueue class, as Kueue's performance checker
	// measures it: the CPU-time its queues' Jobs ran, over the queues'
	// nominal CPU times the wall time, in percent.
	Usage map[string]float64
	// Admissions counts unsuspensions, Preemptions the times a running Job
	// was suspended again (per class too), PreemptedJobs the Jobs that were.
	Admissions, Preemptions, PreemptedJobs int
	PreemptionsByClass                     map[string]int
	// CompletionLag: from the end of a Job's runtime to its status write
	// being accepted.
	CompletionLag Stats
	// Status writes: accepted, conflicts (re-read and retried), stale
	// (the Job was suspended or re-admitted before the write).
	StatusWrites, StatusConflicts, StatusStale int
	// Quota is invariant.Watch's report; QuotaErr says why it is missing.
	Quota    *invariant.Report
	QuotaErr string
	Events   EventsReport
	// Unfinished are Jobs not finished at the end (the first 20), Errors
	// other problems (create or status write failures, the first 20 each).
	Unfinished, Errors []string
	// Failed counts Jobs that finished with Failed=True (not by this run),
	// Gone those deleted before finishing.
	Failed, Gone int
	// Writes are the API server's write requests from the first create
	// to the end (everyone's: the generator's, Sluice's, the
	// controllers'); WritesErr says why they are missing.
	Writes    APIWrites
	WritesErr string
	// NATS is what the services asked of NATS over the same span (with
	// NATSURL set); NATSErr says why it is missing.
	NATS    NATSRequests
	NATSErr string
}

// Run sets up the queues, replays the workload and reports. It returns an
// error only if the run could not take place (setup failed, Sluice admitted
// nothing); what went wrong during the run is in Result.Failures.
func Run(parent context.Context, kube kubernetes.Interface, dyn dynamic.Interface, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	p, err := LoadProfile(o.Profile)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(parent, o.Timeout)
	defer cancel()
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.Log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	n := names{prefix: o.Prefix, namespace: o.Namespace, p: p}
	plan := p.Plan(o.Scale)
	res := &Result{Options: o, Profile: p, Classes: p.Classes, Jobs: len(plan), CapacityBound: p.CapacityBound(plan),
		TimeToAdmission: map[string]Stats{}, PreemptionsByClass: map[string]int{}, Usage: map[string]float64{}}
	logf("%s: %d Jobs in %d ClusterQueues (scale %g), capacity bound %s", p.Name, len(plan), len(p.Queues), o.Scale, res.CapacityBound.Round(time.Millisecond))

	if o.Unqueued {
		if err := createNamespace(ctx, kube, o.Namespace); err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
	} else if err := setup(ctx, kube, dyn, n, o); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	selector := RunLabel + "=" + o.Prefix
	if err := deleteJobs(ctx, kube, o.Namespace, selector, true); err != nil {
		return nil, fmt.Errorf("delete the Jobs of an earlier run: %w", err)
	}
	logf("queues set up")

	// The quota check sees every Job change from before the first create.
	qctx, qcancel := context.WithCancel(ctx)
	defer qcancel()
	qready := make(chan struct{})
	type qresult struct {
		rep *invariant.Report
		err error
	}
	qdone := make(chan qresult, 1)
	go func() {
		if o.Unqueued {
			// Nothing to check: no report, and no error either.
			close(qready)
			<-qctx.Done()
			qdone <- qresult{}
			return
		}
		rep, err := invariant.Watch(qctx, kube, dyn, invariant.WithReady(func() { close(qready) }),
			invariant.WithViolationHook(func(v invariant.Violation) { logf("QUOTA VIOLATION: %s", v) }))
		qdone <- qresult{rep, err}
	}()
	select {
	case <-qready:
	case r := <-qdone:
		return nil, fmt.Errorf("quota check: %v", r.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("quota check did not start: %w", ctx.Err())
	}

	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	watch := o.Watch
	if watch == nil {
		watch = kube
	}
	tr := newTracker(kube, watch, o.Namespace, selector, logf)
	if err := tr.start(tctx, o.Completers); err != nil {
		return nil, err
	}
	if o.Unqueued {
		logf("unqueued: no Sluice object set up, no probe, no quota check")
	} else if err := probe(ctx, kube, tr, n, o, logf); err != nil {
		if !o.Keep {
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = deleteJobs(cctx, kube, o.Namespace, selector, false)
			ccancel()
		}
		return nil, err
	}
	if o.Ready != nil {
		o.Ready()
	}

	// Create the Jobs at the baseline's pacing.
	writesBefore, writesErr := scrapeWrites(ctx, kube)
	var natsCount *natsCounter
	if o.NATSURL != "" && !o.Unqueued {
		var err error
		if natsCount, err = countNATS(o.NATSURL); err != nil {
			res.NATSErr = err.Error()
		}
	}
	begin := time.Now()
	logf("creating %d Jobs", len(plan))
	stopProgress := progress(tr, begin, len(plan), logf)
	late, lastCreate := create(ctx, kube, tr, n, o, plan, begin)
	res.CreateSpan = lastCreate.Sub(begin)
	res.CreateLate = StatsOf(late)
	logf("all creates sent after %s", res.CreateSpan.Round(time.Millisecond))
	waitErr := tr.waitDone(ctx)
	stopProgress()
	end := time.Now()
	if waitErr != nil {
		logf("%v", waitErr)
	}
	if writesErr == nil {
		var after apiCounters
		if after, writesErr = scrapeWrites(ctx, kube); writesErr == nil {
			res.Writes = writesBetween(writesBefore, after)
		}
	}
	if writesErr != nil {
		res.WritesErr = writesErr.Error()
	}
	if natsCount != nil {
		res.NATS = natsCount.stop()
	}

	// Let the quota check see the last changes, then stop it.
	time.Sleep(time.Second)
	qcancel()
	if r := <-qdone; r.err != nil {
		res.QuotaErr = r.err.Error()
	} else {
		res.Quota = r.rep
	}
	tcancel()
	collect(res, tr, begin, end)

	if o.NATSURL != "" && !o.Unqueued && parent.Err() == nil {
		logf("reading the event stream at %s", o.NATSURL)
		jobs := map[string]runJob{}
		tr.mu.Lock()
		for _, st := range tr.jobs {
			if st.uid != "" {
				jobs[st.uid] = runJob{name: st.name, probe: st.class < 0}
			}
		}
		tr.mu.Unlock()
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		ev, err := readEvents(ectx, o.NATSURL, jobs, 15*time.Second)
		ecancel()
		res.Events = ev
		if err != nil {
			res.Events.Err = err.Error()
		}
	} else if o.NATSURL != "" {
		res.Events.Err = "not read: interrupted"
	}

	if !o.Keep {
		// Several times the API server's own request timeout (1 min): a
		// deletion too large for it ends with the server's answer that it
		// goes on deleting (or a reset stream), and is asked again for
		// what is left (deleteJobs).
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		if err := deleteJobs(cctx, kube, o.Namespace, selector, false); err != nil {
			res.Errors = append(res.Errors, "cleanup: "+err.Error())
		}
		if p.Topology != nil {
			if err := kube.CoreV1().Nodes().DeleteCollection(cctx, metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: p.Flavor.NodeLabel + "=" + o.Prefix}); err != nil {
				res.Errors = append(res.Errors, "cleanup: nodes: "+err.Error())
			}
		}
		ccancel()
	}
	return res, nil
}

// collect fills the Result from the tracker.
func collect(res *Result, tr *tracker, begin, end time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tta := map[string][]time.Duration{}
	ran := map[string]float64{} // milli-CPU-seconds run per queue class
	var lags []time.Duration
	var last time.Time
	for _, st := range tr.jobs {
		if st.class < 0 {
			continue
		}
		if st.createErr != nil {
			if len(res.Errors) < 20 {
				res.Errors = append(res.Errors, fmt.Sprintf("create %s: %v", st.name, st.createErr))
			}
			continue
		}
		res.Created++
		cl := res.Classes[st.class].Name
		ran[res.Profile.Queues[st.queue].Class] += float64(res.Classes[st.class].MilliCPU()) * st.ran.Seconds()
		if !st.admitted.IsZero() {
			tta[cl] = append(tta[cl], st.admitted.Sub(st.created))
		}
		res.Admissions += st.unsuspend
		res.Preemptions += st.suspends
		res.PreemptionsByClass[cl] += st.suspends
		if st.suspends > 0 {
			res.PreemptedJobs++
		}
		switch {
		case st.done && st.gone:
			res.Gone++
		case st.done:
			res.Finished++
			if st.failed {
				res.Failed++
			}
			if st.finished.After(last) {
				last = st.finished
			}
			if st.lag > 0 {
				lags = append(lags, st.lag)
			}
		default:
			res.Unfinished = append(res.Unfinished, st.name)
		}
	}
	sort.Strings(res.Unfinished)
	if len(res.Unfinished) > 20 {
		res.Unfinished = append(res.Unfinished[:20], fmt.Sprintf("… and %d more", len(res.Unfinished)-20))
	}
	for cl, ds := range tta {
		res.TimeToAdmission[cl] = StatsOf(ds)
	}
	res.CompletionLag = StatsOf(lags)
	if res.Finished < res.Created || last.IsZero() {
		last = end
	}
	res.Wall = last.Sub(begin)
	nominal := map[string]float64{}
	for _, q := range res.Profile.Queues {
		nominal[q.Class] += float64(q.NominalMilli)
	}
	for class, cpu := range ran {
		if nominal[class] > 0 && res.Wall > 0 {
			res.Usage[class] = 100 * cpu / (nominal[class] * res.Wall.Seconds())
		}
	}
	res.StatusWrites, res.StatusConflicts, res.StatusStale = tr.writes, tr.conflicts, tr.stale
	res.Errors = append(res.Errors, tr.writeErrs...)
}

// progress logs a line every 5 seconds until stopped.
func progress(tr *tracker, begin time.Time, total int, logf func(string, ...any)) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			tr.mu.Lock()
			var created, admitted, running, done, preempt int
			for _, st := range tr.jobs {
				if st.class < 0 {
					continue
				}
				if st.createOK {
					created++
				}
				if !st.admitted.IsZero() {
					admitted++
				}
				if st.running {
					running++
				}
				if st.done {
					done++
				}
				preempt += st.suspends
			}
			tr.mu.Unlock()
			logf("t=%5.1fs created %d/%d admitted %d running %d finished %d preemptions %d",
				time.Since(begin).Seconds(), created, total, admitted, running, done, preempt)
		}
	}()
	return func() { close(stop); wg.Wait() }
}

// create sends the plan's creates at their times through a pool of
// creators. It returns how late each create went out and when the last
// did.
func create(ctx context.Context, kube kubernetes.Interface, tr *tracker, n names, o Options, plan []Item, begin time.Time) ([]time.Duration, time.Time) {
	type work struct {
		it Item
		at time.Time
	}
	ch := make(chan work, o.Creators)
	var mu sync.Mutex
	late := make([]time.Duration, 0, len(plan))
	var last time.Time
	var wg sync.WaitGroup
	for range o.Creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range ch {
				name := n.job(w.it)
				cl := n.class(w.it.Class)
				now := time.Now()
				tr.register(&jobState{name: name, class: w.it.Class, queue: w.it.Queue, runtime: cl.Runtime, created: now})
				queue := n.queue(w.it.Queue)
				if o.Unqueued {
					queue = ""
				}
				err := createJob(ctx, kube, o.Namespace, n.jobObject(name, queue, w.it.Class, cl.MilliCPU()))
				if err == nil && o.Unqueued {
					err = unsuspend(ctx, kube, o.Namespace, name)
				}
				tr.createDone(name, err)
				mu.Lock()
				late = append(late, now.Sub(w.at))
				if now.After(last) {
					last = now
				}
				mu.Unlock()
			}
		}()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for _, it := range plan {
		at := begin.Add(it.At)
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break loop
			}
		}
		select {
		case ch <- work{it, at}:
		case <-ctx.Done():
			break loop
		}
	}
	close(ch)
	wg.Wait()
	return late, last
}

// createRetry bounds how long a create is retried while the API server
// cannot reach Sluice's webhook (its integration restarting).
const createRetry = 30 * time.Second

// createJob creates a Job, retrying while the admission webhook is
// unreachable or the API server is busy; a Job that turns out to exist was
// created by an earlier try.
func createJob(ctx context.Context, kube kubernetes.Interface, ns string, j *batchv1.Job) error {
	deadline := time.Now().Add(createRetry)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		_, err := kube.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{})
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			return nil
		case !(apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err)):
			return err
		case time.Now().After(deadline):
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// unsuspend starts a Job of an unqueued run, as an admission would.
func unsuspend(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	_, err := kube.BatchV1().Jobs(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"suspend":false}}`), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("unsuspend: %w", err)
	}
	return nil
}

// createNamespace creates ns unless it exists.
func createNamespace(ctx context.Context, kube kubernetes.Interface, ns string) error {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	return nil
}

// jobObject is one Job of the run: its class's pods asking for milliCPU in
// all, suspended
// (Sluice's webhook would suspend it anyway), labelled with its LocalQueue
// and priority class, and managed by this run instead of the Job
// controller.
func (n names) jobObject(name, queue string, class int, milliCPU int64) *batchv1.Job {
	cl := n.class(class)
	pods := cl.pods()
	perPod := resource.NewMilliQuantity(milliCPU/int64(pods), resource.DecimalSI)
	labels := map[string]string{v1beta1.PriorityClassLabel: n.priorityClass(class), RunLabel: n.prefix}
	if queue != "" {
		labels[v1beta1.QueueNameLabel] = queue
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			ManagedBy:    ptr.To(ManagedBy),
			Suspend:      ptr.To(true),
			Parallelism:  ptr.To(pods),
			Completions:  ptr.To(pods),
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: maps.Clone(cl.Annotations)},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: *perPod}}}},
				},
			},
		},
	}
}

var gv = v1beta1.GroupVersion

// setup creates or updates (server-side apply) the flavor, the priority
// classes, the ClusterQueues, the namespace and the LocalQueues.
func setup(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, n names, o Options) error {
	p := n.p
	if err := createNamespace(ctx, kube, o.Namespace); err != nil {
		return err
	}
	apply := func(resource, ns string, obj map[string]any) error {
		obj["apiVersion"] = gv.String()
		u := &unstructured.Unstructured{Object: obj}
		ri := dyn.Resource(gv.WithResource(resource))
		var err error
		if ns != "" {
			_, err = ri.Namespace(ns).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "sluice-baseline", Force: true})
		} else {
			_, err = ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "sluice-baseline", Force: true})
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", resource, u.GetName(), err)
		}
		return nil
	}
	flavor := map[string]any{"kind": "ResourceFlavor", "metadata": map[string]any{"name": n.flavor()}}
	if p.Topology != nil {
		levels := make([]any, len(p.Topology.Levels))
		for i, l := range p.Topology.Levels {
			levels[i] = map[string]any{"nodeLabel": l.NodeLabel}
		}
		if err := apply("topologies", "", map[string]any{"kind": "Topology", "metadata": map[string]any{"name": n.prefix},
			"spec": map[string]any{"levels": levels}}); err != nil {
			return err
		}
		flavor["spec"] = map[string]any{"nodeLabels": map[string]any{p.Flavor.NodeLabel: n.prefix}, "topologyName": n.prefix}
		if err := createNodes(ctx, kube, p, n.prefix); err != nil {
			return err
		}
	}
	if err := apply("resourceflavors", "", flavor); err != nil {
		return err
	}
	for k, cl := range n.p.Classes {
		if err := apply("workloadpriorityclasses", "", map[string]any{"kind": "WorkloadPriorityClass",
			"metadata": map[string]any{"name": n.priorityClass(k)}, "value": int64(cl.Priority),
			"description": "Kueue baseline " + cl.Name + " Jobs"}); err != nil {
			return err
		}
	}
	// A thousand queues are set up side by side.
	sem := make(chan struct{}, 16)
	errs := make([]error, len(p.Queues))
	var wg sync.WaitGroup
	for q, queue := range p.Queues {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cq := n.queue(q)
			cpu := map[string]any{"name": "cpu", "nominalQuota": resource.NewMilliQuantity(queue.NominalMilli, resource.DecimalSI).String()}
			if queue.BorrowingMilli >= 0 {
				cpu["borrowingLimit"] = resource.NewMilliQuantity(queue.BorrowingMilli, resource.DecimalSI).String()
			}
			preemption := map[string]any{}
			if queue.ReclaimWithinCohort != "" {
				preemption["reclaimWithinCohort"] = queue.ReclaimWithinCohort
			}
			if queue.WithinCQueue != "" {
				preemption["withinClusterQueue"] = queue.WithinCQueue
			}
			if err := apply("clusterqueues", "", map[string]any{"kind": "ClusterQueue", "metadata": map[string]any{"name": cq},
				"spec": map[string]any{
					"cohort":            n.cohort(queue.Cohort),
					"namespaceSelector": map[string]any{},
					"preemption":        preemption,
					"resourceGroups": []any{map[string]any{
						"coveredResources": []any{"cpu"},
						"flavors":          []any{map[string]any{"name": n.flavor(), "resources": []any{cpu}}},
					}},
				}}); err != nil {
				errs[q] = err
				return
			}
			errs[q] = apply("localqueues", o.Namespace, map[string]any{"kind": "LocalQueue",
				"metadata": map[string]any{"name": cq, "namespace": o.Namespace}, "spec": map[string]any{"clusterQueue": cq}})
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// probe waits until Sluice admits from every LocalQueue with every priority
// class: one small Job per queue (the classes in turn), completed as soon as
// it is unsuspended. A probe not admitted within 15 s (the configuration
// was not mirrored yet when it was submitted) is replaced by a new one.
func probe(ctx context.Context, kube kubernetes.Interface, tr *tracker, n names, o Options, logf func(string, ...any)) error {
	start := time.Now()
	deadline := time.Now().Add(min(2*time.Minute, o.Timeout/2))
	type pq struct{ q, k int }
	var unproven []pq
	for q := range n.p.Queues {
		unproven = append(unproven, pq{q, q % len(n.p.Classes)})
	}
	for round := 0; len(unproven) > 0; round++ {
		if time.Now().After(deadline) {
			return fmt.Errorf("Sluice did not admit probe Jobs from %d of %d LocalQueues within %s: is it running, with its webhook, against this cluster?",
				len(unproven), len(n.p.Queues), time.Since(start).Round(time.Second))
		}
		var batch []string
		for _, p := range unproven {
			queue := n.p.Queues[p.q]
			name := fmt.Sprintf("probe-c%d-q%d-%d", queue.Cohort, queue.Index, round)
			tr.register(&jobState{name: name, class: -1, queue: p.q, created: time.Now()})
			// One CPU, whatever the class asks, so probes fit anywhere.
			job := n.jobObject(name, n.queue(p.q), p.k, 1000)
			if _, err := kube.BatchV1().Jobs(o.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
				tr.createFailed(name, err)
				return fmt.Errorf("create probe Job: %w", err)
			}
			batch = append(batch, name)
		}
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		_ = tr.waitDone(wctx, batch...)
		wcancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var left []pq
		tr.mu.Lock()
		for i, name := range batch {
			if st := tr.jobs[name]; !st.done {
				left = append(left, unproven[i])
			}
		}
		tr.mu.Unlock()
		if len(left) > 0 {
			logf("%d probe Jobs not admitted yet; replacing them", len(left))
			policy := metav1.DeletePropagationBackground
			tr.mu.Lock()
			var stale []string
			for _, name := range batch {
				if !tr.jobs[name].done {
					stale = append(stale, name)
				}
			}
			tr.mu.Unlock()
			for _, name := range stale {
				_ = kube.BatchV1().Jobs(o.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy})
			}
		}
		unproven = left
	}
	logf("Sluice admits from every LocalQueue (probes took %s)", time.Since(start).Round(time.Millisecond))
	return nil
}

// deleteJobs deletes the Jobs of the run (background propagation) and, if
// wait, waits until they are gone.
func deleteJobs(ctx context.Context, kube kubernetes.Interface, ns, selector string, wait bool) error {
	policy := metav1.DeletePropagationBackground
	for {
		err := kube.BatchV1().Jobs(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &policy}, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			break
		}
		// Deleting 100,000 Jobs takes the API server longer than its
		// request timeout: it answers so, or resets the HTTP/2 stream,
		// and goes on deleting. Asking again deletes what is left.
		var status apierrors.APIStatus
		if !apierrors.IsTimeout(err) && !apierrors.IsServerTimeout(err) && errors.As(err, &status) {
			return err
		}
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %w)", ctx.Err(), err)
		}
	}
	for wait {
		l, err := kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1})
		if err != nil {
			return err
		}
		if len(l.Items) == 0 {
			return nil
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Failures are the run's problems as sentences: quota violations, order
// violations, Jobs not finished, errors. None means the run passed.
func (r *Result) Failures() []string {
	var out []string
	if r.Created < r.Jobs {
		out = append(out, fmt.Sprintf("only %d of %d Jobs were created", r.Created, r.Jobs))
	}
	if left := r.Created - r.Finished - r.Gone; left > 0 {
		out = append(out, fmt.Sprintf("%d of %d Jobs did not finish: %s", left, r.Created, strings.Join(r.Unfinished, ", ")))
	}
	if r.Gone > 0 {
		out = append(out, fmt.Sprintf("%d Jobs were deleted before they finished", r.Gone))
	}
	if r.Failed > 0 {
		out = append(out, fmt.Sprintf("%d Jobs failed (Failed=True written by someone else)", r.Failed))
	}
	if r.QuotaErr != "" {
		out = append(out, "the quota check did not run: "+r.QuotaErr)
	}
	if q := r.Quota; q != nil && len(q.Violations)+q.Dropped > 0 {
		s := fmt.Sprintf("quota exceeded: %d violations", len(q.Violations)+q.Dropped)
		for i, v := range q.Violations {
			if i == 5 {
				s += fmt.Sprintf("; … (%d more)", len(q.Violations)+q.Dropped-5)
				break
			}
			s += "; " + v.String()
		}
		out = append(out, s)
	}
	e := r.Events
	if r.Options.NATSURL != "" && !r.Options.Unqueued {
		if e.Err != "" {
			out = append(out, "event stream: "+e.Err)
		}
		if e.IDCollisions > 0 {
			out = append(out, fmt.Sprintf("event stream: %d messages reuse the Nats-Msg-Id of a different event", e.IDCollisions))
		}
		if len(e.Order) > 0 {
			s := fmt.Sprintf("event order: %d violations", len(e.Order))
			for i, v := range e.Order {
				if i == 5 {
					s += fmt.Sprintf("; … (%d more)", len(e.Order)-5)
					break
				}
				s += "; " + v.String()
			}
			out = append(out, s)
		}
		if e.Read && e.NoFinished > 0 {
			out = append(out, fmt.Sprintf("event stream: %d Jobs have no workload.finished event", e.NoFinished))
		}
		if e.Undecodable > 0 {
			out = append(out, fmt.Sprintf("event stream: %d messages are not valid Sluice events", e.Undecodable))
		}
	}
	for _, s := range r.Errors {
		out = append(out, s)
	}
	return out
}

// createNodes creates the topology's nodes (kwok's, which keeps them
// Ready), one per combination of its levels' values as Kueue's generator
// names them (level name and index), each labelled with the flavor's node
// label set to the run's prefix and with the last level's capacity (Kueue's
// defaults: 96 CPUs, 256 GiB); ones that exist are left as they are.
func createNodes(ctx context.Context, kube kubernetes.Interface, p *Profile, prefix string) error {
	levels := p.Topology.Levels
	capacity := levels[len(levels)-1].Capacity
	cpu, mem := cmp.Or(capacity.CPU, "96"), cmp.Or(capacity.Memory, "256Gi")
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
		corev1.ResourcePods: resource.MustParse("110")}
	total := 1
	for _, l := range levels {
		total *= l.Count
	}
	nodes := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range nodes {
				labels := map[string]string{"type": "kwok", p.Flavor.NodeLabel: prefix}
				name := prefix
				rest := i
				for l := len(levels) - 1; l >= 0; l-- {
					idx := rest % levels[l].Count
					rest /= levels[l].Count
					labels[levels[l].NodeLabel] = fmt.Sprintf("%s-%d", levels[l].Name, idx)
				}
				for _, l := range levels {
					name += "-" + labels[l.NodeLabel]
				}
				if labels[corev1.LabelHostname] != "" {
					labels[corev1.LabelHostname] = name
				}
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}, Labels: labels},
					Status:     corev1.NodeStatus{Capacity: res, Allocatable: res},
				}
				if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					select {
					case errs <- fmt.Errorf("node %s: %w", name, err):
					default: // the first errors are enough
					}
				}
			}
		})
	}
	go func() {
		defer close(nodes)
		for i := range total {
			select {
			case nodes <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	return <-errs
}
