package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/embeddednats"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/natstest"
	"github.com/sluice-dev/sluice/internal/workloads"
	"github.com/sluice-dev/sluice/services/admission"
)

// ---------------------------------------------------------------------------
// Environment: one embedded JetStream server that can be restarted on the
// same store and port, and a log sink for the services.

type env struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	srv      *embeddednats.Server
	storeDir string
	port     int

	logs  *logSink
	svcs  []*service
	conns []*nats.Conn
}

func newEnv(t *testing.T, timeout time.Duration) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	srv := natstest.StartServer(t, embeddednats.Options{})
	e := &env{t: t, ctx: ctx, srv: srv, storeDir: srv.StoreDir(), port: srv.NATSServer().Addr().(*net.TCPAddr).Port, logs: &logSink{}}
	_, js := e.connect("setup")
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatalf("bus.Setup: %v", err)
	}
	t.Cleanup(func() {
		// Services stop before the server (cleanups run last-in first-out,
		// and this one was registered after the server's).
		for _, s := range e.svcs {
			s.stop()
		}
		cancel()
		e.mu.Lock()
		for _, nc := range e.conns {
			nc.Close()
		}
		e.mu.Unlock()
		if t.Failed() {
			e.logs.dump(t, 120)
		}
	})
	return e
}

func (e *env) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", e.port) }

// connect opens a client that reconnects forever, quickly; the
// environment closes it after the services stopped. reconnected, if given,
// is signalled after every reconnect.
func (e *env) connect(name string, reconnected ...chan<- struct{}) (*nats.Conn, jetstream.JetStream) {
	e.t.Helper()
	opts := []nats.Option{
		nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectJitter(0, 0), nats.RetryOnFailedConnect(true),
		// Asynchronous errors (a consumer gone with the old server, a
		// write to a closed socket) go to the service log, not stderr.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			fmt.Fprintf(e.logs, `{"level":"warn","client":%q,"subject":%q,"message":%q}`+"\n", name, subj, err.Error())
		}),
	}
	if len(reconnected) > 0 {
		ch := reconnected[0]
		opts = append(opts, nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case ch <- struct{}{}:
			default:
			}
		}))
	}
	nc, err := nats.Connect(e.url(), opts...)
	if err != nil {
		e.t.Fatalf("connect %s: %v", name, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatalf("jetstream %s: %v", name, err)
	}
	e.mu.Lock()
	e.conns = append(e.conns, nc)
	e.mu.Unlock()
	return nc, js
}

// restartNATS shuts the server down and starts it again on the same store
// directory and port after down.
func (e *env) restartNATS(down time.Duration) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.srv.Shutdown()
	time.Sleep(down) // the outage itself, not a wait for a condition
	e.srv = natstest.StartServer(e.t, embeddednats.Options{StoreDir: e.storeDir, Port: e.port})
}

// logSink keeps the services' log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (l *logSink) logger(service string) zerolog.Logger {
	return zerolog.New(l).Level(zerolog.WarnLevel).With().Timestamp().Str("service", service).Logger()
}

func (l *logSink) dump(t *testing.T, last int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := max(0, len(l.lines)-last)
	t.Logf("last %d of %d service log lines (warn and above):\n%s", len(l.lines)-from, len(l.lines), strings.Join(l.lines[from:], "\n"))
}

// ---------------------------------------------------------------------------
// Services: each incarnation has its own connection, like a process.

type service struct {
	env     *env
	name    string
	nc      *nats.Conn
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
	stopped bool
	once    sync.Once
}

// start runs the service mk builds until stop, on its own connection.
func (e *env) start(name string, mk func(js jetstream.JetStream, log zerolog.Logger) (func(context.Context) error, error)) *service {
	e.t.Helper()
	nc, js := e.connect(name)
	run, err := mk(js, e.logs.logger(name))
	if err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	// Like a process's, the service's context has no deadline (a deadline
	// would also replace nats.go's default request timeout); the
	// environment stops every service at the end.
	ctx, cancel := context.WithCancel(context.WithoutCancel(e.ctx))
	s := &service{env: e, name: name, nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = run(ctx)
	}()
	e.svcs = append(e.svcs, s)
	return s
}

// stop cancels the service and waits for Run to return. A service whose
// Run returned before it was asked to stop is reported.
func (s *service) stop() {
	s.once.Do(func() {
		select {
		case <-s.done:
			s.env.t.Errorf("%s: Run returned on its own before it was stopped: %v", s.name, s.err)
		default:
		}
		s.cancel()
		select {
		case <-s.done:
			if s.err != nil {
				s.env.t.Errorf("%s: Run: %v", s.name, s.err)
			}
		case <-time.After(30 * time.Second):
			s.env.t.Errorf("%s: Run did not return within 30s of cancellation", s.name)
		}
		s.nc.Close()
		s.stopped = true
	})
}

// exitedEarly reports services whose Run returned while they should run.
func (e *env) exitedEarly() []string {
	var out []string
	for _, s := range e.svcs {
		if s.stopped {
			continue
		}
		select {
		case <-s.done:
			out = append(out, fmt.Sprintf("%s: %v", s.name, s.err))
		default:
		}
	}
	return out
}

// countingPublisher counts the admitted events one admission replica
// published.
type countingPublisher struct {
	inner    events.Publisher
	mu       sync.Mutex
	admitted int
	// announced: the engine keys of the workloads whose admission was
	// published.
	announced map[string]bool
}

func (p *countingPublisher) Publish(ctx context.Context, ev events.Event, id string) error {
	err := p.inner.Publish(ctx, ev, id)
	if a, ok := ev.(events.WorkloadAdmittedV1); ok && err == nil {
		p.mu.Lock()
		p.admitted++
		if p.announced == nil {
			p.announced = map[string]bool{}
		}
		p.announced[workloads.EngineKey(a.Workload)] = true
		p.mu.Unlock()
	}
	return err
}

// has reports whether the workload's admission was published.
func (p *countingPublisher) has(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.announced[key]
}

func (p *countingPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.admitted
}

// startAdmission runs an admission replica with a 5ms cycle.
func (e *env) startAdmission(name string) (*service, *countingPublisher) {
	pub := &countingPublisher{}
	s := e.start(name, func(js jetstream.JetStream, log zerolog.Logger) (func(context.Context) error, error) {
		pub.inner = bus.NewPublisher(js, events.Source("admission"), bus.WithPublisherLogger(log))
		a, err := admission.New(admission.Config{Interval: 5 * time.Millisecond}, js, pub, admission.WithLogger(log))
		if err != nil {
			return nil, err
		}
		return a.Run, nil
	})
	return s, pub
}

// ---------------------------------------------------------------------------
// Configuration: one cohort "pool" of two ClusterQueues, two flavors, two
// resources. Borrowing limits are set on some flavor-resources and left
// open on others; there are no lending limits, so the cohort's capacity is
// the sum of its queues' nominal quotas.

const cohort = "pool"

var resources = []string{"cpu", "memory"}

type flavorQuota struct {
	flavor    string
	nominal   map[string]string
	borrowing map[string]string // absent: no limit
}

type queueSpec struct {
	name       string
	namespace  string
	localQueue string
	flavors    []flavorQuota
}

var pool = []queueSpec{
	{name: "cq-a", namespace: "team-a", localQueue: "qa", flavors: []flavorQuota{
		{flavor: "on-demand", nominal: map[string]string{"cpu": "4", "memory": "8Gi"}, borrowing: map[string]string{"cpu": "2"}},
		{flavor: "spot", nominal: map[string]string{"cpu": "2", "memory": "4Gi"}},
	}},
	{name: "cq-b", namespace: "team-b", localQueue: "qb", flavors: []flavorQuota{
		{flavor: "on-demand", nominal: map[string]string{"cpu": "2", "memory": "4Gi"}},
		{flavor: "spot", nominal: map[string]string{"cpu": "4", "memory": "8Gi"}, borrowing: map[string]string{"cpu": "1", "memory": "2Gi"}},
	}},
}

func canonical(res, q string) int64 { return engine.Canonical(res, resource.MustParse(q)) }

// configure writes the flavors, ClusterQueues and LocalQueues into
// sluice-config as the watcher would.
func (e *env) configure(preemption *v1beta1.ClusterQueuePreemption) {
	e.t.Helper()
	_, js := e.connect("configure")
	kv, err := bus.OpenKV(e.ctx, js, configstore.Bucket)
	if err != nil {
		e.t.Fatal(err)
	}
	put := func(key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := kv.Put(e.ctx, key, b); err != nil {
			e.t.Fatalf("put %s: %v", key, err)
		}
	}
	for _, f := range []string{"on-demand", "spot"} {
		put(configstore.Key(configstore.KindResourceFlavor, "", f), v1beta1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: f}})
	}
	for _, q := range pool {
		g := v1beta1.ResourceGroup{}
		for _, r := range resources {
			g.CoveredResources = append(g.CoveredResources, corev1.ResourceName(r))
		}
		for _, f := range q.flavors {
			fq := v1beta1.FlavorQuotas{Name: f.flavor}
			for _, r := range resources {
				rq := v1beta1.ResourceQuota{Name: corev1.ResourceName(r), NominalQuota: resource.MustParse(f.nominal[r])}
				if b, ok := f.borrowing[r]; ok {
					l := resource.MustParse(b)
					rq.BorrowingLimit = &l
				}
				fq.Resources = append(fq.Resources, rq)
			}
			g.Flavors = append(g.Flavors, fq)
		}
		put(configstore.Key(configstore.KindClusterQueue, "", q.name), v1beta1.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: q.name},
			Spec: v1beta1.ClusterQueueSpec{
				Cohort:            cohort,
				NamespaceSelector: &metav1.LabelSelector{},
				ResourceGroups:    []v1beta1.ResourceGroup{g},
				Preemption:        preemption,
			},
		})
		put(configstore.Key(configstore.KindLocalQueue, q.namespace, q.localQueue), v1beta1.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Namespace: q.namespace, Name: q.localQueue},
			Spec:       v1beta1.LocalQueueSpec{ClusterQueue: q.name},
		})
	}
}

// fr is a flavor-resource.
type fr struct{ flavor, resource string }

func (f fr) String() string { return f.flavor + "/" + f.resource }

// limits are what the configuration allows, in canonical units.
type limits struct {
	nominal   map[string]map[fr]int64
	borrowing map[string]map[fr]int64 // absent: no limit
	cohort    map[fr]int64
}

func poolLimits() limits {
	l := limits{nominal: map[string]map[fr]int64{}, borrowing: map[string]map[fr]int64{}, cohort: map[fr]int64{}}
	for _, q := range pool {
		l.nominal[q.name], l.borrowing[q.name] = map[fr]int64{}, map[fr]int64{}
		for _, f := range q.flavors {
			for _, r := range resources {
				k := fr{f.flavor, r}
				l.nominal[q.name][k] = canonical(r, f.nominal[r])
				l.cohort[k] += l.nominal[q.name][k]
				if b, ok := f.borrowing[r]; ok {
					l.borrowing[q.name][k] = canonical(r, b)
				}
			}
		}
	}
	return l
}

// ---------------------------------------------------------------------------
// Workloads: generated from a seeded source; every one fits the pool alone.

type workloadSet struct {
	mu   sync.Mutex
	recs map[string]events.WorkloadSubmittedV1 // by engine key
	keys []string                              // in generation order
}

var base = time.Date(2025, 6, 7, 8, 0, 0, 0, time.UTC)

func generate(rng *rand.Rand, n int, priorities bool) *workloadSet {
	ws := &workloadSet{recs: map[string]events.WorkloadSubmittedV1{}}
	cpus := []string{"500m", "1", "2"}
	mems := []string{"512Mi", "1Gi", "2Gi"}
	for i := range n {
		q := pool[rng.IntN(len(pool))]
		name := fmt.Sprintf("w%03d", i)
		rec := events.WorkloadSubmittedV1{
			Workload:     events.WorkloadRef{Kind: "job", Namespace: q.namespace, Name: name, UID: "uid-" + name},
			LocalQueue:   q.localQueue,
			CreationTime: base.Add(time.Duration(i) * time.Millisecond),
			PodSets: []events.PodSetV1{{Name: "main", Count: int32(1 + rng.IntN(2)),
				Requests: map[string]string{"cpu": cpus[rng.IntN(len(cpus))], "memory": mems[rng.IntN(len(mems))]}}},
		}
		if priorities {
			rec.Priority = int32(rng.IntN(3)) * 100
		}
		k := workloads.EngineKey(rec.Workload)
		ws.recs[k] = rec
		ws.keys = append(ws.keys, k)
	}
	return ws
}

func (ws *workloadSet) get(k string) (events.WorkloadSubmittedV1, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	r, ok := ws.recs[k]
	return r, ok
}

// submit writes every record into sluice-workloads through js, pausing up
// to maxPause between records; it retries through outages. progress is
// called after each record with the number written.
func (e *env) submit(js jetstream.JetStream, ws *workloadSet, rng *rand.Rand, maxPause time.Duration, progress func(int)) error {
	var kv jetstream.KeyValue
	err := retry(e.ctx, func(ctx context.Context) (err error) { kv, err = bus.OpenKV(ctx, js, workloads.Bucket); return err })
	if err != nil {
		return err
	}
	for i, k := range ws.keys {
		rec, _ := ws.get(k)
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := retry(e.ctx, func(ctx context.Context) error {
			_, err := kv.Put(ctx, workloads.Key(rec.Workload), b)
			return err
		}); err != nil {
			return fmt.Errorf("submit %s: %w", k, err)
		}
		if progress != nil {
			progress(i + 1)
		}
		if maxPause > 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(maxPause)))) // arrival pacing
		}
	}
	return nil
}

// retry runs f until it succeeds or ctx ends, pausing briefly between
// attempts (JetStream may be restarting). Each attempt gets 2 seconds: a
// request whose reply was lost in an outage must not wait for ctx's end.
func retry(ctx context.Context, f func(ctx context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ---------------------------------------------------------------------------
// Following the ledger: a KV watcher that resumes from the last revision
// seen, right after its connection reconnects, so that it misses nothing
// the bucket's history still holds.

type ledgerUpdate struct {
	rev     uint64
	key     string
	deleted bool
	value   []byte
}

func (e *env) followLedger(name string, fn func(ledgerUpdate)) {
	reconnected := make(chan struct{}, 1)
	_, js := e.connect(name, reconnected)
	go func() {
		var last uint64
		for e.ctx.Err() == nil {
			kv, err := bus.OpenKV(e.ctx, js, ledger.Bucket)
			var w jetstream.KeyWatcher
			if err == nil {
				opts := []jetstream.WatchOpt{jetstream.IncludeHistory()}
				if last > 0 {
					opts = append(opts, jetstream.ResumeFromRevision(last+1))
				}
				w, err = kv.WatchAll(e.ctx, opts...)
			}
			if err != nil {
				select {
				case <-e.ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
				continue
			}
		loop:
			for {
				select {
				case <-e.ctx.Done():
					break loop
				case <-reconnected:
					break loop
				case u, ok := <-w.Updates():
					if !ok {
						break loop
					}
					if u == nil || u.Revision() <= last {
						continue
					}
					last = u.Revision()
					fn(ledgerUpdate{rev: u.Revision(), key: u.Key(), deleted: u.Operation() != jetstream.KeyValuePut, value: u.Value()})
				}
			}
			_ = w.Stop()
		}
	}()
}

// ---------------------------------------------------------------------------
// The invariant checker: sees every ledger revision and checks it against
// the configuration and the workload records.

const ledgerKey = "tree.cohort." + cohort

type checker struct {
	lim limits
	ws  *workloadSet

	mu         sync.Mutex
	last       uint64
	revisions  int
	gaps       int
	held       map[string]ledger.Reservation
	finished   map[string]uint64 // ledger revision a finisher saw the job's last reservation at
	reserved   map[string]int    // times each workload newly got a reservation
	violations []string
	dropped    int
	peak       map[string]map[fr]int64
}

func newChecker(ws *workloadSet) *checker {
	return &checker{lim: poolLimits(), ws: ws, held: map[string]ledger.Reservation{}, finished: map[string]uint64{},
		reserved: map[string]int{}, peak: map[string]map[fr]int64{}}
}

func (c *checker) violate(format string, args ...any) {
	if len(c.violations) >= 25 {
		c.dropped++
		return
	}
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// markFinished records that a workload's job finished while holding the
// reservation the ledger had at revision rev: no later revision may give
// it a new one.
func (c *checker) markFinished(k string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.finished[k]; !ok {
		c.finished[k] = rev
	}
}

func (c *checker) observe(u ledgerUpdate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revisions++
	// The bucket's revisions are consecutive: a jump means revisions were
	// not seen (or a released reservation's earlier revisions were
	// purged before they were read).
	gap := c.last != 0 && u.rev != c.last+1
	if gap {
		c.gaps++
	}
	c.last = u.rev
	ch, err := ledger.ParseEntry(u.key, !u.deleted, u.value, u.rev)
	if err != nil {
		c.violate("revision %d: %v", u.rev, err)
		return
	}
	if ch.Tree != "" {
		if ch.Tree != ledgerKey || len(ch.Legacy) > 0 {
			c.violate("revision %d: unexpected tree key %q (one cohort tree, key %q) or reservations in it", u.rev, u.key, ledgerKey)
		}
		return
	}
	k := ch.Workload
	prev, had := c.held[k]
	if ch.Reservation == nil {
		delete(c.held, k)
		return
	}
	r := *ch.Reservation
	switch {
	case !had:
		c.reserved[k]++
		if at, ok := c.finished[k]; ok && u.rev > at {
			c.violate("revision %d: %s reserved again after its job finished holding the reservation of revision %d (%s)", u.rev, k, at, describe(r))
		}
	case !prev.AdmittedAt.Equal(r.AdmittedAt) || !equalPodSets(prev.PodSets, r.PodSets):
		c.violate("revision %d: %s admitted again while it held a reservation: %s at %s, then %s at %s",
			u.rev, k, describe(prev), prev.AdmittedAt.Format(time.RFC3339Nano), describe(r), r.AdmittedAt.Format(time.RFC3339Nano))
	}
	c.held[k] = r
	// Within a batch, reservations only come: the ledger after each of
	// its messages holds at most what it holds after the batch.
	c.checkLimits(u.rev, c.held)
}

// checkLimits sums the reserved requests per ClusterQueue and for the
// cohort and compares them with the configuration.
func (c *checker) checkLimits(rev uint64, rs map[string]ledger.Reservation) {
	usage := map[string]map[fr]int64{}
	for k, r := range rs {
		rec, ok := c.ws.get(k)
		if !ok {
			c.violate("revision %d: reservation for unknown workload %s", rev, k)
			continue
		}
		nominal, ok := c.lim.nominal[r.ClusterQueue]
		if !ok {
			c.violate("revision %d: %s reserved in unknown ClusterQueue %q", rev, k, r.ClusterQueue)
			continue
		}
		if r.ClusterQueue != queueOf(rec) {
			c.violate("revision %d: %s reserved in %s, but its LocalQueue points at %s", rev, k, r.ClusterQueue, queueOf(rec))
		}
		if usage[r.ClusterQueue] == nil {
			usage[r.ClusterQueue] = map[fr]int64{}
		}
		for _, psa := range r.PodSets {
			var ps *events.PodSetV1
			for i := range rec.PodSets {
				if rec.PodSets[i].Name == psa.Name {
					ps = &rec.PodSets[i]
				}
			}
			if ps == nil || psa.Count <= 0 || psa.Count > ps.Count {
				c.violate("revision %d: %s: pod set assignment %+v does not match the record %+v", rev, k, psa, rec.PodSets)
				continue
			}
			for res, q := range ps.Requests {
				f := fr{psa.Flavors[res], res}
				if _, ok := nominal[f]; !ok {
					c.violate("revision %d: %s: %s assigned flavor %q, which %s does not have", rev, k, res, f.flavor, r.ClusterQueue)
					continue
				}
				usage[r.ClusterQueue][f] += canonical(res, q) * int64(psa.Count)
			}
		}
	}
	total := map[fr]int64{}
	for cq, u := range usage {
		if c.peak[cq] == nil {
			c.peak[cq] = map[fr]int64{}
		}
		for f, v := range u {
			total[f] += v
			c.peak[cq][f] = max(c.peak[cq][f], v)
			if b, ok := c.lim.borrowing[cq][f]; ok && v > c.lim.nominal[cq][f]+b {
				c.violate("revision %d: %s uses %s %s, more than nominal %s + borrowingLimit %s; reservations: %s",
					rev, cq, engine.Format(f.resource, v), f, engine.Format(f.resource, c.lim.nominal[cq][f]), engine.Format(f.resource, b), c.list(rs))
			}
		}
	}
	for f, v := range total {
		if v > c.lim.cohort[f] {
			c.violate("revision %d: cohort %s uses %s %s, more than its queues' nominal quota %s; reservations: %s",
				rev, cohort, engine.Format(f.resource, v), f, engine.Format(f.resource, c.lim.cohort[f]), c.list(rs))
		}
	}
}

// list renders reservations with their requests, for violation reports.
func (c *checker) list(rs map[string]ledger.Reservation) string {
	keys := make([]string, 0, len(rs))
	for k := range rs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		rec, _ := c.ws.get(k)
		req := ""
		if len(rec.PodSets) > 0 {
			req = fmt.Sprintf(" (requests cpu=%s memory=%s per pod)", rec.PodSets[0].Requests["cpu"], rec.PodSets[0].Requests["memory"])
		}
		parts = append(parts, k+": "+describe(rs[k])+req)
	}
	return strings.Join(parts, "; ")
}

func (c *checker) report(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var peaks []string
	for _, q := range pool {
		var fs []string
		for f, v := range c.peak[q.name] {
			fs = append(fs, fmt.Sprintf("%s=%s", f, engine.Format(f.resource, v)))
		}
		sort.Strings(fs)
		peaks = append(peaks, q.name+" "+strings.Join(fs, " "))
	}
	t.Logf("checker: %d ledger revisions seen, %d gaps; peak usage: %s", c.revisions, c.gaps, strings.Join(peaks, "; "))
	for _, v := range c.violations {
		t.Errorf("invariant violated: %s", v)
	}
	if c.dropped > 0 {
		t.Errorf("… and %d more violations", c.dropped)
	}
}

// seen is the last ledger revision the checker observed.
func (c *checker) seen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// admissions counts the reservations newly made so far.
func (c *checker) admissions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.reserved {
		n += v
	}
	return n
}

// gapCount is how many times the checker found revisions it did not see.
func (c *checker) gapCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gaps
}

func (c *checker) times(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reserved[k]
}

func queueOf(rec events.WorkloadSubmittedV1) string {
	for _, q := range pool {
		if q.namespace == rec.Workload.Namespace && q.localQueue == rec.LocalQueue {
			return q.name
		}
	}
	return ""
}

func describe(r ledger.Reservation) string {
	var parts []string
	for _, ps := range r.PodSets {
		var fl []string
		for res, f := range ps.Flavors {
			fl = append(fl, res+"="+f)
		}
		sort.Strings(fl)
		parts = append(parts, fmt.Sprintf("%s %s×%d on %s", r.ClusterQueue, ps.Name, ps.Count, strings.Join(fl, ",")))
	}
	return strings.Join(parts, "; ")
}

func equalPodSets(a, b []engine.PodSetAssignment) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// ---------------------------------------------------------------------------
// Reading back.

// readLedger returns the ledger's reservations and revisions.
func (e *env) readLedger(js jetstream.JetStream) (ledger.Snapshot, error) {
	kv, err := bus.OpenKV(e.ctx, js, ledger.Bucket)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	return ledger.Read(e.ctx, kv)
}

// readEvents reads every stored event matching filters, in stream order.
func (e *env) readEvents(js jetstream.JetStream, filters ...string) ([]events.Envelope, error) {
	cons, err := js.OrderedConsumer(e.ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	if err != nil {
		return nil, err
	}
	var out []events.Envelope
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		var pending uint64
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			pending = md.NumPending
			env, err := events.DecodeParts(m.Subject(), m.Headers(), m.Data())
			if err != nil {
				return nil, fmt.Errorf("event %d on %s: %w", md.Sequence.Stream, m.Subject(), err)
			}
			out = append(out, env)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if n == 0 || pending == 0 {
			return out, nil
		}
	}
}

// eventually polls cond until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
