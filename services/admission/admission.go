package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/queueconfig"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/visibility"
	"github.com/sluice-dev/sluice/internal/webview"
	"github.com/sluice-dev/sluice/internal/workloads"
)

// Publisher publishes an event under its deterministic id.
type Publisher interface {
	Publish(ctx context.Context, ev events.Event, id string) error
}

// Config is the admission service's configuration.
type Config struct {
	// Interval between admission cycles while something changed.
	Interval time.Duration
	// FairSharing turns on dominant-resource-share ordering and
	// preemption in every cohort tree.
	FairSharing bool
	// PendingInterval is the least time between two pending events about
	// one workload; a reason of a new kind within it is held back and
	// announced, if it still holds, when the interval is over. 0 takes
	// DefaultPendingInterval.
	PendingInterval time.Duration
	// FairStrategies are fair sharing's preemption strategies (empty:
	// Kueue's default, both).
	FairStrategies engine.FairStrategies
	// WaitForPodsReady, when set, times out admissions whose pods are not
	// ready (Kueue's waitForPodsReady); readiness comes from the fences,
	// where the job integrations write it.
	WaitForPodsReady *engine.WaitForPodsReady
	// QueriesPerSecond bounds the reads of the pending API and the web
	// view that enter the admission loop, where the engine lives, so
	// that a flood of them cannot starve admission cycles; one past it is
	// answered "busy" (HTTP 429). 0 takes DefaultQueriesPerSecond.
	QueriesPerSecond int
}

// DefaultPendingInterval is Config.PendingInterval's default.
const DefaultPendingInterval = 30 * time.Second

// DefaultQueriesPerSecond is Config.QueriesPerSecond's default.
const DefaultQueriesPerSecond = 100

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Interval <= 0 {
		return fmt.Errorf("admission: interval %s: must be positive", c.Interval)
	}
	if c.PendingInterval < 0 {
		return fmt.Errorf("admission: pending interval %s: must not be negative", c.PendingInterval)
	}
	if c.QueriesPerSecond < 0 {
		return fmt.Errorf("admission: queries per second %d: must not be negative", c.QueriesPerSecond)
	}
	return nil
}

// Service is one admission replica.
type Service struct {
	// checkControllers maps each AdmissionCheck to its controllerName,
	// for the answers' consumer (another goroutine than the loop's).
	checkControllers atomic.Pointer[map[string]string]
	// synced opens once all three mirrors delivered their initial state
	// and the engine was built from them (Ready); before that, updates
	// are only recorded.
	synced *health.Gate
	cfg    Config
	js     jetstream.JetStream
	pub    Publisher
	log    zerolog.Logger
	clock  func() time.Time

	eng    *engine.Engine
	config *configstore.Store
	// wls are the known workloads by engine key; their pod sets'
	// requests are shared through shapes.
	wls    map[string]*events.WorkloadSubmittedV1
	shapes shapes
	// told is what was last announced of each waiting workload's reason.
	told map[string]told
	// lastFlush is when held-back reasons were last looked at.
	lastFlush time.Time
	// res is the ledger's reservations by workload, with their revisions;
	// trees is the revision of each tree key.
	res     map[string]ledger.Held
	trees   map[string]uint64
	writer  *ledger.Writer
	wlKV    jetstream.KeyValue
	fenceKV fence.KV
	// outbox holds the events decided and not yet flushed.
	outbox []outgoing
	// passing holds the admissions (by workload) whose admission checks
	// all passed and are not recorded in the ledger yet.
	passing map[string]string
	// ledKV is the ledger bucket.
	ledKV jetstream.KeyValue
	// uncertain holds the admissions (by workload) whose booking got no
	// answer: stored or not, the ledger watch tells, and one that shows
	// up is announced then.
	uncertain map[string]string
	// stream is the event stream, read to find admissions whose
	// announcement a crash swallowed.
	stream jetstream.Stream

	// fences are the last fence states seen, by engine key; unapplied
	// lists those whose readiness or requeue state the engine has not
	// taken yet.
	fences    map[string]fence.State
	unapplied map[string]bool
	// lastCycle is when the engine last ran: a timer due since then makes
	// the next tick run it again.
	lastCycle time.Time

	metrics *metrics
	// queries are reads of the engine run by the service's own loop, for
	// tests' probes (export_test.go).
	queries chan func()
	// queryLimit bounds the queries answered (QueriesPerSecond).
	queryLimit *rate.Limiter
	// view is what the visibility API, the web view and the metrics read:
	// taken in the loop at most once per Interval, while queries ask for
	// one (wantView), and answered outside it, so that no flood of queries
	// takes the loop's time from admission.
	view     atomic.Pointer[view]
	wantView chan struct{}
	// viewMu guards nextView, which closes once the next view is taken.
	viewMu   sync.Mutex
	nextView chan struct{}
	// viewDue and lastView are the loop's: a view was asked for, and when
	// the last was taken.
	viewDue  bool
	lastView time.Time
	viewCost time.Duration
	// views counts the views taken.
	views atomic.Int64
	// stopped closes when Run returns.
	stopped chan struct{}

	configDirty bool
	dirty       bool
	// unsent holds announcements whose publish failed, retried each tick.
	unsent []outgoing

	tracer *tracing.Tracer
	// queued is what each waiting workload's queued span will show (only
	// while tracing); cycles counts the engine's cycles, for the spans.
	queued map[string]*queuedTrace
	cycles int64
}

// Option tunes a Service.
type Option func(*Service)

// WithClock injects the clock that stamps admissions.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.clock = now } }

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(s *Service) { s.log = l } }

// New returns an admission replica.
func New(cfg Config, js jetstream.JetStream, pub Publisher, opts ...Option) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		synced:    health.NewGate("configuration, workloads and ledger not loaded yet"),
		cfg:       cfg,
		js:        js,
		pub:       pub,
		log:       zerolog.Nop(),
		clock:     time.Now,
		config:    configstore.New(),
		wls:       map[string]*events.WorkloadSubmittedV1{},
		told:      map[string]told{},
		queued:    map[string]*queuedTrace{},
		res:       map[string]ledger.Held{},
		uncertain: map[string]string{},
		passing:   map[string]string{},
		trees:     map[string]uint64{},
		fences:    map[string]fence.State{},
		unapplied: map[string]bool{},
		queries:   make(chan func()),
		wantView:  make(chan struct{}, 1),
		metrics:   newMetrics(),
		stopped:   make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.cfg.PendingInterval == 0 {
		s.cfg.PendingInterval = DefaultPendingInterval
	}
	if s.cfg.QueriesPerSecond == 0 {
		s.cfg.QueriesPerSecond = DefaultQueriesPerSecond
	}
	s.queryLimit = rate.NewLimiter(rate.Limit(s.cfg.QueriesPerSecond), s.cfg.QueriesPerSecond)
	s.eng = engine.New(engine.Config{FairSharing: cfg.FairSharing, WaitForPodsReady: cfg.WaitForPodsReady, FairStrategies: cfg.FairStrategies},
		engine.WithDeferredEviction(), engine.WithQuietPending())
	return s, nil
}

// Ready reports whether the service has loaded its state and admits.
func (s *Service) Ready() error { return s.synced.Check() }

// Run mirrors the buckets and admits until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	defer close(s.stopped)
	err := s.run(ctx)
	if ctx.Err() != nil {
		// Stopped, even while still opening the buckets: not a failure.
		return nil
	}
	return err
}

func (s *Service) run(ctx context.Context) error {
	cfgKV, err := bus.OpenKV(ctx, s.js, configstore.Bucket)
	if err != nil {
		return fmt.Errorf("admission: open %s: %w", configstore.Bucket, err)
	}
	wlKV, err := bus.OpenKV(ctx, s.js, workloads.Bucket)
	if err != nil {
		return fmt.Errorf("admission: open %s: %w", workloads.Bucket, err)
	}
	ledKV, err := bus.OpenKV(ctx, s.js, ledger.Bucket)
	if err != nil {
		return fmt.Errorf("admission: open %s: %w", ledger.Bucket, err)
	}
	fenceKV, err := bus.OpenKV(ctx, s.js, fence.Bucket)
	if err != nil {
		return fmt.Errorf("admission: open %s: %w", fence.Bucket, err)
	}
	stream, err := s.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return fmt.Errorf("admission: open stream %s: %w", bus.StreamEvents, err)
	}
	s.wlKV, s.fenceKV, s.stream, s.ledKV = wlKV, fenceKV, stream, ledKV
	s.writer = ledger.NewWriter(s.js)
	// Reservations an older Sluice kept in one value per tree move to
	// their own keys before anything is decided.
	if moved, err := s.writer.Migrate(ctx, ledKV); err != nil {
		return fmt.Errorf("admission: migrate the ledger: %w", err)
	} else if moved > 0 {
		s.log.Info().Int("reservations", moved).Msg("ledger migrated to one key per reservation")
	}
	// The mirrors: each bucket's entries reach this loop in order through
	// a feed (bus.WatchKV, which also recovers a stalled initial pass and
	// watches again after a reconnect). Fences say whether admitted pods
	// are ready (waitForPodsReady), and keep a workload's backoff and
	// deactivation (after a PodsReadyTimeout, or an admission check's
	// Retry or Rejected) for a replica that starts later.
	feedCtx, stopFeeds := context.WithCancel(ctx)
	defer stopFeeds()
	feedErr := make(chan error, 4)
	cfgF := s.feed(feedCtx, cfgKV, feedErr)
	wlF := s.feed(feedCtx, wlKV, feedErr)
	ledF := s.feed(feedCtx, ledKV, feedErr)
	fenceF := s.feed(feedCtx, fenceKV, feedErr)
	// Admission checks' answers are written into the reservations they
	// are about; the ledger watch brings them to the engine.
	checksDone := make(chan error, 1)
	go func() {
		checksDone <- bus.Run(feedCtx, s.js, ChecksConsumer(),
			func(ctx context.Context, env events.Envelope) error { return s.handleCheck(ctx, env) },
			bus.WithLogger(s.log), bus.WithPartitions(checkPartitions, events.SubjectWorkload))
	}()
	defer func() {
		// Stop consuming and watching, and let what is in flight finish.
		stopFeeds()
		if err := <-checksDone; err != nil && ctx.Err() == nil {
			s.log.Error().Err(err).Msg("admission check answers no longer consumed")
		}
	}()

	// Admit nothing before the mirrors hold their initial state.
	synced := map[string]bool{}
	allSynced := func() bool { return synced["config"] && synced["workloads"] && synced["ledger"] && synced["fences"] }
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-feedErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("admission: %w", err)
		case e := <-cfgF.entries:
			if e == nil {
				synced["config"] = true
				continue
			}
			s.applyConfig(e)
		case e := <-wlF.entries:
			if e == nil {
				synced["workloads"] = true
				continue
			}
			s.applyWorkload(e)
		case e := <-ledF.entries:
			if e == nil {
				synced["ledger"] = true
				continue
			}
			s.applyLedger(ctx, e)
		case e := <-fenceF.entries:
			if e == nil {
				synced["fences"] = true
				continue
			}
			s.applyFence(e)
		case q := <-s.queries:
			q()
		case <-s.wantView:
			s.viewDue = true
			s.takeView()
		case <-tick.C:
			if !allSynced() {
				continue
			}
			s.takeView()
			if !s.synced.IsOpen() {
				s.build()
				s.announceLedger(ctx)
			}
			s.recordPassed(ctx)
			if len(s.unsent) > 0 || len(s.outbox) > 0 {
				if err := s.retry(ctx); err != nil {
					s.log.Warn().Err(err).Int("unsent", len(s.unsent)).Msg("events still not published")
				}
			}
			if now := s.clock(); now.Sub(s.lastFlush) >= time.Second {
				s.lastFlush = now
				s.flushPending(ctx, now)
			}
			s.applyFences()
			if next, due := s.eng.NextTimer(s.lastCycle); due && !s.clock().Before(next) {
				s.dirty = true // a pods-ready timeout or a backoff ended
			}
			if !(s.dirty || s.configDirty) {
				continue
			}
			if err := s.cycle(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.log.Error().Err(err).Msg("admission cycle")
			}
		}
	}
}

// ErrNotReady: the service has not loaded its state yet, or stopped.
var ErrNotReady = errors.New("admission: not serving (state not loaded yet, or stopped)")

// read runs f in the service's loop, where the engine lives, once the
// engine is built, and waits for it.
func (s *Service) read(ctx context.Context, f func()) error {
	if !s.synced.IsOpen() {
		return ErrNotReady
	}
	done := make(chan struct{})
	select {
	case s.queries <- func() { f(); close(done) }:
	case <-s.stopped:
		return ErrNotReady
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// viewShare: views are at least this many times their cost apart.
const viewShare = 5

// view is the engine's state as queries see it.
type view struct {
	pending *engine.PendingView
	stats   []engine.QueueStats
}

// takeView takes a view for the queries waiting for one, unless the last
// was taken too recently (a tick takes it then): however many queries
// come, views are at least an Interval apart, and five times as long as
// the last took, so the loop spends at most a sixth of its time on them
// (a view of 100,000 waiting workloads takes about 20 ms).
func (s *Service) takeView() {
	if !s.viewDue || !s.synced.IsOpen() || time.Since(s.lastView) < max(s.cfg.Interval, viewShare*s.viewCost) {
		return
	}
	start := time.Now()
	s.view.Store(&view{pending: s.eng.PendingView(), stats: s.eng.Stats(s.clock())})
	s.viewDue, s.lastView, s.viewCost = false, time.Now(), time.Since(start)
	s.views.Add(1)
	s.viewMu.Lock()
	ch := s.nextView
	s.nextView = nil
	s.viewMu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// currentView waits for a view taken after the query came, so that an
// answer is as fresh as one read in the loop, shared with every query
// that came meanwhile.
func (s *Service) currentView(ctx context.Context) (*view, error) {
	if !s.synced.IsOpen() {
		return nil, ErrNotReady
	}
	if !s.queryLimit.Allow() {
		return nil, fmt.Errorf("admission: more than %d queries a second: %w", s.cfg.QueriesPerSecond, visibility.ErrBusy)
	}
	s.viewMu.Lock()
	if s.nextView == nil {
		s.nextView = make(chan struct{})
	}
	ch := s.nextView
	s.viewMu.Unlock()
	select {
	case s.wantView <- struct{}{}:
	default: // asked already
	}
	select {
	case <-ch:
		return s.view.Load(), nil
	case <-s.stopped:
		return nil, ErrNotReady
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PendingInClusterQueue implements visibility.Source.
func (s *Service) PendingInClusterQueue(ctx context.Context, name string, offset, limit int) (engine.PendingPage, bool, error) {
	v, err := s.currentView(ctx)
	if err != nil {
		return engine.PendingPage{}, false, err
	}
	page, ok := v.pending.InClusterQueue(name, offset, limit)
	return page, ok, nil
}

// PendingInLocalQueue implements visibility.Source.
func (s *Service) PendingInLocalQueue(ctx context.Context, namespace, name string, offset, limit int) (engine.PendingPage, bool, error) {
	v, err := s.currentView(ctx)
	if err != nil {
		return engine.PendingPage{}, false, err
	}
	page, ok := v.pending.InLocalQueue(namespace, name, offset, limit)
	return page, ok, nil
}

// Now is the service's clock, for the visibility API's waiting times.
func (s *Service) Now() time.Time { return s.clock() }

// VisibilityRoutes adds the visibility API (package visibility) to mux.
func (s *Service) VisibilityRoutes(mux *http.ServeMux) {
	visibility.Register(mux, s, s.clock)
}

// WebViewRoutes adds the web view and its live feed (package webview) to
// mux.
func (s *Service) WebViewRoutes(mux *http.ServeMux, opts ...webview.Option) {
	webview.Register(mux, s, webview.NATSFeed{NC: s.js.Conn()}, opts...)
}

// Queues implements webview.Source.
func (s *Service) Queues(ctx context.Context) ([]engine.QueueStats, error) {
	v, err := s.currentView(ctx)
	if err != nil {
		return nil, err
	}
	return v.stats, nil
}

func (s *Service) applyConfig(e jetstream.KeyValueEntry) {
	if e.Operation() == jetstream.KeyValuePut {
		s.config.Apply(e.Key(), e.Value())
	} else {
		s.config.Apply(e.Key(), nil)
	}
	s.configDirty = true
}

// reconfigure rebuilds the engine's configuration from the mirror.
func (s *Service) reconfigure() {
	snap, errs := s.config.Snapshot()
	for _, err := range errs {
		s.log.Warn().Err(err).Msg("ignoring configuration object")
	}
	snap.Objects.FairSharing = s.cfg.FairSharing
	snap.Objects.WaitForPodsReady = s.cfg.WaitForPodsReady
	snap.Objects.FairStrategies = s.cfg.FairStrategies
	cfg, err := queueconfig.ToEngine(snap.Objects)
	if err != nil {
		s.log.Error().Err(err).Msg("configuration not applied")
		return
	}
	s.eng.SetConfig(cfg)
	controllers := make(map[string]string, len(cfg.AdmissionChecks))
	for _, ac := range cfg.AdmissionChecks {
		controllers[ac.Name] = ac.Controller
	}
	s.checkControllers.Store(&controllers)
	s.configDirty = false
	s.dirty = true
	// A configuration change may have dropped admissions whose queue it
	// no longer has; the ledger still holds them.
	s.bookLedger()
}

func (s *Service) applyWorkload(e jetstream.KeyValueEntry) {
	s.dirty = true
	key := workloads.EngineKeyFromKV(e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.wls, key)
		delete(s.told, key)
		delete(s.queued, key)
		if _, held := s.res[key]; held || !s.synced.IsOpen() {
			// Its quota stays booked until the ledger lets go of it.
			return
		}
		_ = s.eng.Remove(key)
		return
	}
	var w events.WorkloadSubmittedV1
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		s.log.Error().Err(err).Str("workload", e.Key()).Msg("ignoring malformed workload record")
		return
	}
	key = workloads.EngineKey(w.Workload)
	for i, ps := range w.PodSets {
		if sh, err := s.shapes.of(ps.Requests); err == nil {
			w.PodSets[i].Requests = sh.text
		}
	}
	if old, known := s.wls[key]; known {
		// Only the priority of a record changes after submission (its
		// priority class label was changed); its pod sets never do.
		if old.Workload.UID != w.Workload.UID || (old.Priority == w.Priority && old.PriorityClass == w.PriorityClass) {
			return
		}
		upd := *old
		upd.Priority, upd.PriorityClass = w.Priority, w.PriorityClass
		s.wls[key] = &upd
		if s.synced.IsOpen() && s.eng.Known(key) {
			if err := s.eng.SetPriority(key, w.Priority); err != nil {
				s.log.Error().Err(err).Str("workload", key).Msg("cannot change priority")
			}
		}
		return
	}
	s.wls[key] = &w
	if s.synced.IsOpen() {
		s.submit(key)
	}
}

// kvFeed carries a bucket's entries to the service's loop, in order; a
// nil entry says the bucket's initial entries are all in.
type kvFeed struct {
	entries chan jetstream.KeyValueEntry
}

// feed starts following a bucket; an error ending the watch goes to errc.
func (s *Service) feed(ctx context.Context, kv jetstream.KeyValue, errc chan<- error) *kvFeed {
	f := &kvFeed{entries: make(chan jetstream.KeyValueEntry, 256)}
	send := func(e jetstream.KeyValueEntry) {
		select {
		case f.entries <- e:
		case <-ctx.Done():
		}
	}
	synced := make(chan struct{})
	go func() {
		// WatchKV marks the initial entries in only after handing every
		// one of them to send: the nil goes after them.
		go func() {
			select {
			case <-synced:
				send(nil)
			case <-ctx.Done():
			}
		}()
		err := bus.WatchKV(ctx, kv, synced, func(e jetstream.KeyValueEntry, _ bool) { send(e) },
			bus.WithWatchLogger(s.log))
		if err != nil {
			errc <- fmt.Errorf("watch %s: %w", kv.Bucket(), err)
		}
	}()
	return f
}

// applyFence records a fence's readiness and requeue state, for the
// engine to take at the next tick.
func (s *Service) applyFence(e jetstream.KeyValueEntry) {
	key := workloads.EngineKeyFromKV(e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.fences, key)
		delete(s.unapplied, key)
		return
	}
	var st fence.State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		s.log.Warn().Err(err).Str("workload", key).Msg("ignoring unreadable fence")
		return
	}
	s.fences[key] = st
	s.unapplied[key] = true
}

// applyFences gives the engine what changed in the fences: whether the
// pods of a held admission are ready, and, for a workload this replica
// learns about, how often it was requeued. A fence of an admission the
// engine has not booked yet waits for it.
func (s *Service) applyFences() {
	if !s.synced.IsOpen() {
		return
	}
	for key := range s.unapplied {
		if !s.eng.Known(key) {
			// Applied when the record arrives (submit lists it again).
			// Kept here, the fences of every finished workload would be
			// looked at again each cycle.
			delete(s.unapplied, key)
			continue
		}
		st := s.fences[key]
		if rq, cur := st.Requeue, s.eng.Requeues(key); rq != nil &&
			(rq.Count > cur.Count || rq.At.After(cur.At) || (rq.Deactivated != "" && cur.Deactivated == "") || rq.Executed > cur.Executed) {
			_ = s.eng.SetRequeues(key, engine.RequeueState{Count: rq.Count, At: rq.At, Deactivated: rq.Deactivated, Why: rq.Why, Executed: rq.Executed})
			s.dirty = true
		}
		if st.Ready != nil {
			if !s.eng.IsAdmitted(key) || s.heldAdmission(key) != st.Admission {
				continue // its admission is not booked here yet
			}
			if err := s.eng.SetPodsReady(key, st.Ready.Ready, st.Ready.At); err != nil {
				s.log.Error().Err(err).Str("workload", key).Msg("cannot record pods readiness")
			}
			s.dirty = true
		}
		delete(s.unapplied, key)
	}
}

// submit queues a known record, admitted if the ledger holds it.
func (s *Service) submit(key string) {
	if s.eng.Known(key) {
		return
	}
	w := s.wls[key]
	ew, err := s.toEngine(w)
	if err != nil {
		s.log.Error().Err(err).Str("workload", key).Msg("ignoring workload")
		return
	}
	if h, ok := s.res[key]; ok {
		a := admissionOf(h.Reservation)
		ew.Admission = &a
	}
	if err := s.eng.Submit(ew); err != nil {
		s.log.Error().Err(err).Str("workload", key).Msg("workload not queued")
	}
	s.fenceToApply(key)
}

// fenceToApply lists the fence of a workload the engine just learned
// about for the next tick's applyFences.
func (s *Service) fenceToApply(key string) {
	if _, ok := s.fences[key]; ok {
		s.unapplied[key] = true
	}
}

// build makes the engine from the mirrors once all three are complete,
// so that no reservation is booked against a configuration or a record
// that has not arrived yet.
func (s *Service) build() {
	s.synced.Open()
	s.reconfigure()
	keys := make([]string, 0, len(s.wls))
	for k := range s.wls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.submit(k)
	}
	s.bookLedger()
}

// bookLedger makes sure every reservation in the ledger holds quota in the
// engine, including those of workloads whose record is gone or not seen
// yet: the ledger, not the engine's view, says what is used. It walks the
// whole ledger, in workload order so that rebuilding is deterministic;
// a single change is booked by book.
func (s *Service) bookLedger() {
	wks := make([]string, 0, len(s.res))
	for wk := range s.res {
		wks = append(wks, wk)
	}
	sort.Strings(wks)
	for _, wk := range wks {
		s.book(wk, s.res[wk].Reservation)
	}
}

// admissionOf is a reservation as the engine books it.
func admissionOf(r ledger.Reservation) engine.Admission {
	return engine.Admission{ClusterQueue: r.ClusterQueue, PodSets: r.PodSets, At: r.AdmittedAt, Checks: r.Checks, AwaitingChecks: r.AwaitingChecks,
		PastExecution: r.PastExecution}
}

// book makes one reservation hold quota in the engine. For one it holds
// already, it takes the admission checks' answers recorded since.
func (s *Service) book(wk string, r ledger.Reservation) {
	if s.eng.IsAdmitted(wk) {
		if s.heldAdmission(wk) == r.Admission() {
			for _, c := range r.Checks {
				if err := s.eng.SetCheck(wk, c); err != nil {
					s.log.Error().Err(err).Str("workload", wk).Msg("admission check answer not understood")
				}
			}
		}
		return
	}
	var err error
	if s.eng.Known(wk) {
		err = s.eng.Book(wk, admissionOf(r))
	} else {
		var ew engine.Workload
		if ew, err = fromReservation(wk, r); err == nil {
			err = s.eng.Submit(ew)
		}
		if err == nil {
			s.fenceToApply(wk)
		}
	}
	if err != nil {
		s.log.Error().Err(err).Str("workload", wk).Str("queue", r.ClusterQueue).Msg("cannot book a reservation from the ledger")
	}
}

// fromReservation rebuilds an admitted workload from its reservation
// alone, for a workload whose record is not known.
func fromReservation(key string, r ledger.Reservation) (engine.Workload, error) {
	kind, ns, name, ok := workloads.SplitEngineKey(key)
	if !ok {
		return engine.Workload{}, fmt.Errorf("reservation key %q is not kind/namespace/name", key)
	}
	a := admissionOf(r)
	w := engine.Workload{Kind: kind, Namespace: ns, Name: name, Queue: r.LocalQueue, Priority: r.Priority, Submitted: r.Submitted, Admission: &a,
		MaxExecution: r.MaxExecution}
	for _, ps := range r.PodSets {
		eps := engine.PodSet{Name: ps.Name, Count: ps.Count, Requests: map[string]int64{}}
		for res, v := range r.Requests[ps.Name] {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return w, fmt.Errorf("reservation of %s: request %s=%q: %w", key, res, v, err)
			}
			eps.Requests[res] = engine.Canonical(res, q)
		}
		w.PodSets = append(w.PodSets, eps)
	}
	return w, nil
}

// toEngine converts a submitted workload, resolving its priority class.
func (s *Service) toEngine(w *events.WorkloadSubmittedV1) (engine.Workload, error) {
	ew := engine.Workload{
		Kind:      w.Workload.Kind,
		Namespace: w.Workload.Namespace,
		Name:      w.Workload.Name,
		Queue:     w.LocalQueue,
		Priority:  w.Priority,
		Submitted: w.CreationTime,
		// Kueue's maximumExecutionTimeSeconds.
		MaxExecution: time.Duration(w.MaximumExecutionTimeSeconds) * time.Second,
	}
	for _, ps := range w.PodSets {
		sh, err := s.shapes.of(ps.Requests)
		if err != nil {
			return ew, fmt.Errorf("pod set %s: %w", ps.Name, err)
		}
		ew.PodSets = append(ew.PodSets, engine.PodSet{Name: ps.Name, Count: ps.Count, MinCount: ps.MinCount, Requests: sh.canon,
			NodeSelector: ps.NodeSelector, Tolerations: ps.Tolerations})
	}
	return ew, nil
}

// applyLedger brings the engine in line with one ledger key's new
// content: a reservation made by another replica is booked, a released one
// is let go. Only that workload is touched.
func (s *Service) applyLedger(ctx context.Context, e jetstream.KeyValueEntry) {
	c, err := ledger.Parse(e)
	if errors.Is(err, ledger.ErrCorrupt) && c.Workload != "" {
		s.blockUnreadable(c, err)
		return
	}
	if err != nil {
		s.log.Error().Err(err).Str("key", e.Key()).Msg("ledger entry not understood; ignoring it")
		return
	}
	if c.Workload != "" && s.eng.Unblock(unreadableBlock(c.Workload)) {
		s.dirty = true
	}
	if c.Tree != "" {
		s.trees[c.Tree] = max(s.trees[c.Tree], c.Revision)
		if len(c.Legacy) > 0 {
			s.log.Error().Str("key", c.Tree).Int("reservations", len(c.Legacy)).
				Msg("ledger entry written by an older Sluice; restart admission to move its reservations to their own keys")
		}
		return
	}
	prev, had := s.res[c.Workload]
	if had && c.Revision <= prev.Revision {
		return // our own write, already applied
	}
	if c.Reservation != nil {
		s.res[c.Workload] = ledger.Held{Reservation: *c.Reservation, Revision: c.Revision}
		s.dirty = true
		if s.synced.IsOpen() {
			s.book(c.Workload, *c.Reservation)
		}
		if a, ok := s.uncertain[c.Workload]; ok {
			delete(s.uncertain, c.Workload)
			if kind, ns, name, ok := workloads.SplitEngineKey(c.Workload); ok && a == c.Reservation.Admission() && c.Reservation.UID != "" {
				// This replica's booking whose answer was lost: it is
				// stored, so it is announced (once: the id is the
				// admission's).
				ref := events.WorkloadRef{Kind: kind, Namespace: ns, Name: name, UID: c.Reservation.UID}
				s.log.Info().Str("workload", c.Workload).Msg("announcing a booking whose answer was lost")
				an := announcementOf(ref, *c.Reservation)
				s.send(ctx, outgoing{ev: an.ev, id: an.id, ended: c.Workload})
			}
		}
		return
	}
	if !had {
		return
	}
	delete(s.res, c.Workload)
	s.dirty = true
	if !s.synced.IsOpen() {
		return
	}
	wk := c.Workload
	if w, known := s.wls[wk]; known && prev.Reservation.UID != "" && w.Workload.UID != prev.Reservation.UID {
		// The reservation of an earlier workload of the same job, which
		// left its queue or moved to another and came back: the engine
		// held that one until now; the record's queues afresh.
		_ = s.eng.Remove(wk)
		s.submit(wk)
		return
	}
	if _, known := s.wls[wk]; known && !s.recordGone(ctx, wk) {
		// Stopped (preempted, drained, or suspended from outside): back
		// to its queue. Its run until now counts toward a maximum
		// execution time, unless the engine's decision counted it.
		_ = s.eng.Stop(wk, s.clock())
		return
	}
	// Finished or deleted. The integration deletes the record before it
	// reports the end, so asking the bucket settles a race between the
	// two watches.
	delete(s.wls, wk)
	delete(s.told, wk)
	delete(s.queued, wk)
	_ = s.eng.Remove(wk)
}

// blockUnreadable fails closed on a reservation whose value cannot be
// read: it holds quota of an unknown size, so nothing is admitted into its
// cohort tree (every tree, when not even its ClusterQueue can be read)
// until the key is repaired or deleted. A reservation booked before keeps
// its quota.
func (s *Service) blockUnreadable(c ledger.Change, err error) {
	cq := c.CorruptQueue
	if prev, had := s.res[c.Workload]; had {
		cq = prev.ClusterQueue
	}
	where := "ClusterQueue " + cq + "'s cohort"
	if cq == "" {
		where = "any ClusterQueue"
	}
	reason := fmt.Sprintf("the reservation of %s in %s cannot be read: nothing is admitted into %s until it is repaired or deleted",
		c.Workload, ledger.Bucket, where)
	s.eng.Block(unreadableBlock(c.Workload), cq, reason)
	s.dirty = true
	bus.ReportUnreadable("ledger")
	s.log.Error().Err(err).Str("workload", c.Workload).Str("queue", cq).Msg("reservation not readable; admission blocked")
}

// unreadableBlock names the engine block of a workload's unreadable
// reservation.
func unreadableBlock(workload string) string { return "ledger/" + workload }

// recordExists asks the workload bucket directly; on an error it assumes
// the record exists, which at worst queues a finished workload until its
// deletion arrives.
func (s *Service) recordExists(ctx context.Context, key string) bool {
	exists, _ := s.record(ctx, key)
	return exists
}

// recordGone: the bucket says the record is gone (not only unreachable).
func (s *Service) recordGone(ctx context.Context, key string) bool {
	exists, known := s.record(ctx, key)
	return known && !exists
}

// record asks the workload bucket directly whether the record this
// replica mirrors is still there; known is false when the bucket did not
// answer (e.g. while a NATS server that led it is replaced), and exists is
// then true. A record of another workload UID under the same key (the job
// left its queue and came back) means the mirrored one is gone: its
// deletion and the new record may not have reached the mirror yet.
func (s *Service) record(ctx context.Context, key string) (exists, known bool) {
	if s.wlKV == nil {
		return true, true
	}
	ctx, cancel := bus.Bounded(ctx)
	defer cancel()
	e, err := s.wlKV.Get(ctx, workloads.KVKeyFromEngine(key))
	switch {
	case err == nil:
		var stored struct {
			Workload struct {
				UID string `json:"uid"`
			} `json:"workload"`
		}
		mirrored, ok := s.wls[key]
		if ok && json.Unmarshal(e.Value(), &stored) == nil && stored.Workload.UID != mirrored.Workload.UID {
			return false, true
		}
		return true, true
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, true
	default:
		return true, false
	}
}

// cycle runs the engine once and makes its decisions durable.
func (s *Service) cycle(ctx context.Context) error {
	if s.configDirty {
		s.reconfigure()
	}
	s.dirty = false
	now := s.clock()
	s.lastCycle = now
	s.cycles++
	began := time.Now()
	defer func() { s.metrics.cycleDuration.Observe(time.Since(began).Seconds()) }()
	decisions := s.eng.Cycle(now)
	if len(decisions) == 0 {
		return nil
	}
	for i, d := range decisions {
		if h, ok := s.res[d.Key]; ok && d.Kind == engine.KindAdmitted {
			// It holds its reservation already: its admission checks all
			// passed. That is recorded in the reservation (unless another
			// replica did), then announced (recordPassed).
			s.passing[d.Key] = h.Admission()
			decisions[i].Kind = ""
		}
	}
	// Reserve first: group admissions by tree and book each group in one
	// batch checked against the tree's revision.
	byKey := map[string][]engine.Decision{}
	// Whether each admitted workload's record is still there, asked for
	// all of them at once.
	type answer struct{ exists, known bool }
	answers := make([]answer, len(decisions))
	sem := make(chan struct{}, recordChecks)
	var wg sync.WaitGroup
	for i, d := range decisions {
		if !books(d) {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			answers[i].exists, answers[i].known = s.record(ctx, d.Key)
		})
	}
	wg.Wait()
	for i, d := range decisions {
		if !books(d) {
			continue
		}
		exists, known := answers[i].exists, answers[i].known
		if !known {
			// The bucket does not answer: the job may have ended. Reserve
			// nothing for it until the bucket says it is there.
			_ = s.eng.Evict(d.Key)
			decisions[i].Kind = ""
			s.dirty = true
			continue
		}
		if !exists {
			// The workload ended while this replica's view of the records
			// lagged behind its view of the ledger (a replica just
			// started, or the two watches deliver out of step): never
			// reserve for a job that is gone.
			delete(s.wls, d.Key)
			delete(s.told, d.Key)
			delete(s.queued, d.Key)
			_ = s.eng.Remove(d.Key)
			decisions[i].Kind = ""
			continue
		}
		tree := s.eng.TreeOf(d.ClusterQueue)
		byKey[tree] = append(byKey[tree], d)
	}
	lost := map[string]bool{}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Trees are booked side by side: their keys and revisions are
	// disjoint, and each batch is a round trip to the stream's leader,
	// which a cycle admitting in every cohort would otherwise wait for
	// one after another.
	type booking struct {
		res    map[string]ledger.Reservation
		booked ledger.Booked
		err    error
	}
	bookings := make([]booking, len(keys))
	for i, tree := range keys {
		res := make(map[string]ledger.Reservation, len(byKey[tree]))
		for _, d := range byKey[tree] {
			res[d.Key] = s.reservation(d, now)
		}
		bookings[i].res = res
		rev := s.trees[ledger.TreeKey(tree)]
		wg.Go(func() { bookings[i].booked, bookings[i].err = s.writer.Reserve(ctx, tree, rev, res) })
	}
	wg.Wait()
	for i, tree := range keys {
		k := ledger.TreeKey(tree)
		res, booked, err := bookings[i].res, bookings[i].booked, bookings[i].err
		if booked.Tree > s.trees[k] {
			s.trees[k] = booked.Tree
		}
		for wk, rev := range booked.Reservations {
			s.res[wk] = ledger.Held{Reservation: res[wk], Revision: rev}
			delete(s.uncertain, wk)
		}
		if err != nil && !errors.Is(err, ledger.ErrConflict) {
			// No answer, or a refusal after the server may have stored
			// the batch: whatever of it shows up in the ledger is
			// announced when it does.
			for _, d := range byKey[tree] {
				if _, ok := booked.Reservations[d.Key]; !ok {
					s.uncertain[d.Key] = res[d.Key].Admission()
				}
			}
		}
		if err != nil {
			// Another replica moved first, or the write failed: undo what
			// was not booked and decide again once the watcher shows the
			// ledger as it is.
			for _, d := range byKey[tree] {
				if _, ok := booked.Reservations[d.Key]; !ok {
					lost[d.Key] = true
					_ = s.eng.Evict(d.Key)
				}
			}
			s.dirty = true
			if errors.Is(err, ledger.ErrConflict) {
				s.metrics.conflicts.Inc()
			} else {
				s.log.Error().Err(err).Str("key", k).Msg("reservation not written")
			}
		}
	}
	s.recordPassed(ctx)
	return s.publish(ctx, decisions, lost)
}

// books: the decision reserves quota (admitted, or reserved until its
// admission checks pass).
func books(d engine.Decision) bool {
	return d.Kind == engine.KindAdmitted || d.Kind == engine.KindReserved
}

// recordPassed writes into their reservations that the admission checks
// of the workloads in s.passing all passed, then queues the announcement
// of their admission: the integration starts a job only once both are
// stored. What fails is tried again at the next tick.
func (s *Service) recordPassed(ctx context.Context) {
	if len(s.passing) == 0 || s.ledKV == nil {
		return
	}
	for _, wk := range slices.Sorted(maps.Keys(s.passing)) {
		admission := s.passing[wk]
		checks, awaiting := s.eng.Checks(wk)
		if awaiting || s.heldAdmission(wk) != admission {
			delete(s.passing, wk) // evicted or released meanwhile
			continue
		}
		h, _, err := s.writer.Update(ctx, s.ledKV, wk, func(r *ledger.Reservation) bool {
			if r.Admission() != admission || !r.AwaitingChecks {
				return false
			}
			r.Checks, r.AwaitingChecks = checks, false
			return true
		})
		if err != nil {
			s.log.Warn().Err(err).Str("workload", wk).Msg("admission checks passed, not recorded yet")
			continue
		}
		delete(s.passing, wk)
		if h.Admission() != admission || h.AwaitingChecks {
			continue // released, or another admission since
		}
		if h.Revision > s.res[wk].Revision {
			s.res[wk] = h
		}
		ref, known := s.refOf(wk)
		if !known {
			continue
		}
		s.metrics.admitted.WithLabelValues(h.ClusterQueue).Inc()
		s.send(ctx, outgoing{ev: admittedOf(ref, h.Reservation), id: workloads.AdmittedID(ref, admission), ended: wk})
	}
}

// reservation is what the ledger records of an admission: enough to
// account for it without the workload's record.
func (s *Service) reservation(d engine.Decision, now time.Time) ledger.Reservation {
	r := ledger.Reservation{ClusterQueue: d.ClusterQueue, PodSets: d.PodSets, AdmittedAt: now.UTC(), Requests: map[string]map[string]string{}}
	if d.Kind == engine.KindReserved {
		r.Checks, r.AwaitingChecks = d.Checks, true
	}
	if w := s.wls[d.Key]; w != nil {
		r.LocalQueue, r.Priority, r.Submitted, r.UID = w.LocalQueue, w.Priority, w.CreationTime, w.Workload.UID
		for _, ps := range w.PodSets {
			r.Requests[ps.Name] = ps.Requests
		}
		if w.MaximumExecutionTimeSeconds > 0 {
			r.MaxExecution = time.Duration(w.MaximumExecutionTimeSeconds) * time.Second
			r.PastExecution = s.eng.Requeues(d.Key).Executed
		}
	}
	return r
}

// outgoing is an event to publish. One that stops an admission names the
// admission's fence, which must be moved to stopping first.
type outgoing struct {
	ev        events.Event
	id        string
	fenceKey  string
	admission string
	// ended is the engine key of a workload whose admission is not
	// announced once its record is gone: its job ended while it was being
	// admitted (the end came after the decision), and quota
	// reconciliation releases the reservation.
	ended string
	// admitted is the announcement of the admission a stop ends, published
	// first if it is not on the stream yet: the replica that reserved the
	// admission may be slow to announce it, or stopped before it did.
	admitted *announcement
	// requeue is stored with the stop of a PodsReadyTimeout eviction.
	requeue *fence.Requeue
	// trace is the context whose span the event's traceparent names.
	trace context.Context
}

// stop: the event ends an admission, and is fenced or preceded by the
// admission's announcement; such events go one at a time.
func (o outgoing) stop() bool { return o.fenceKey != "" || o.admitted != nil }

// send queues an event for the next flush. What fails to publish is kept
// for the next tick: decisions are made once, so their announcements must
// not be dropped.
func (s *Service) send(ctx context.Context, o outgoing) {
	o.trace = ctx
	s.outbox = append(s.outbox, o)
}

// allPublisher publishes many events with their acknowledgements in
// flight together (bus.JetStreamPublisher).
type allPublisher interface {
	PublishAll(ctx context.Context, out []bus.Outgoing) []error
}

// recordChecks is how many record reads flush keeps in flight.
const recordChecks = 16

// flush publishes the queued events; each is stored before flush returns
// (or kept in unsent). Stops go first, one at a time, each after its
// fence. The others are pipelined: the reads that check their jobs did
// not end meanwhile run together, then the events are published with
// their acknowledgements in flight together, in the order queued.
func (s *Service) flush(ctx context.Context) error {
	queued := s.outbox
	s.outbox = nil
	var errs []error
	var plain []outgoing
	for _, o := range queued {
		if !o.stop() {
			plain = append(plain, o)
			continue
		}
		if err := s.publishOne(ctx, o); err != nil {
			s.unsent = append(s.unsent, o)
			errs = append(errs, err)
		}
	}
	// Which jobs ended since their admission was decided, and for the
	// others the last event about them: the announcement is stored only
	// if nothing came since, so it never follows the job's end.
	gone := make([]bool, len(plain))
	last := make([]uint64, len(plain))
	lookErr := make([]error, len(plain))
	sem := make(chan struct{}, recordChecks)
	var wg sync.WaitGroup
	for i, o := range plain {
		if o.ended == "" {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			gone[i], last[i], lookErr[i] = s.ended(ctx, o)
		})
	}
	wg.Wait()
	send := make([]outgoing, 0, len(plain))
	var expect []uint64
	for i, o := range plain {
		if lookErr[i] != nil {
			s.unsent = append(s.unsent, o)
			errs = append(errs, lookErr[i])
			continue
		}
		if gone[i] {
			s.log.Info().Str("workload", o.ended).Msg("admission not announced: the job ended meanwhile")
			continue
		}
		send = append(send, o)
		expect = append(expect, last[i])
	}
	ap, ok := s.pub.(allPublisher)
	if !ok {
		// One at a time, each looking again right before it is sent.
		for _, o := range send {
			if err := s.publishOne(ctx, o); err != nil {
				s.unsent = append(s.unsent, o)
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	out := make([]bus.Outgoing, len(send))
	for i, o := range send {
		out[i] = bus.Outgoing{Ctx: o.trace, Event: o.ev, ID: o.id}
		if ref, ok := events.WorkloadOf(o.ev); ok && o.ended != "" && s.stream != nil {
			out[i].ExpectLast, out[i].ExpectSeq = events.WorkloadFilter(ref), expect[i]
		}
	}
	for i, err := range ap.PublishAll(ctx, out) {
		if errors.Is(err, bus.ErrLastChanged) {
			// Something about the workload came between the look and the
			// publish: look again, one at a time.
			err = s.publishOne(ctx, send[i])
		}
		if err != nil {
			s.unsent = append(s.unsent, send[i])
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ended reports whether the job of an admission's announcement ended: its
// last event is its end, or its record is gone. It also returns that last
// event's sequence, for the announcement to expect.
func (s *Service) ended(ctx context.Context, o outgoing) (bool, uint64, error) {
	ref, ok := events.WorkloadOf(o.ev)
	if !ok || s.stream == nil {
		return !s.recordExists(ctx, o.ended), 0, nil
	}
	seq, ended, err := workloads.LastEvent(ctx, s.stream, ref)
	if err != nil || ended {
		return ended, seq, err
	}
	// The integration deletes the record before it announces the end.
	return !s.recordExists(ctx, o.ended), seq, nil
}

func (s *Service) publishOne(ctx context.Context, o outgoing) error {
	if o.trace != nil {
		ctx = o.trace
	}
	if o.ended != "" {
		return s.announceUnlessEnded(ctx, o)
	}
	if o.fenceKey != "" && s.fenceKV != nil {
		var opts []fence.StopOption
		if o.requeue != nil {
			opts = append(opts, fence.WithRequeue(*o.requeue))
		}
		if o.admitted != nil {
			opts = append(opts, fence.OfJob(o.admitted.ref.UID))
		}
		err := fence.Stop(ctx, s.fenceKV, o.fenceKey, o.admission, o.id, opts...)
		if errors.Is(err, fence.ErrFinished) || errors.Is(err, fence.ErrStopTaken) || errors.Is(err, fence.ErrSuperseded) {
			// Its job ended, or a preemption stops it already, or it was
			// admitted again since: nothing of this admission to evict.
			return nil
		}
		if err != nil {
			return err
		}
	}
	// Neither the stop nor the admission it follows is announced after
	// the job's end, which may have come since the fence.
	if a := o.admitted; a != nil && s.stream != nil {
		done, err := workloads.Reserved(ctx, s.stream, a.ref, a.admission)
		if err != nil {
			return err
		}
		if !done {
			if err := workloads.AnnounceUnlessEnded(ctx, s.pub, s.stream, a.ev, a.id, a.ref); err != nil {
				return err
			}
		}
	}
	ref, about := events.WorkloadOf(o.ev)
	if !o.stop() || !about {
		return s.pub.Publish(ctx, o.ev, o.id)
	}
	return workloads.AnnounceUnlessEnded(ctx, s.pub, s.stream, o.ev, o.id, ref)
}

// announcement is how a reservation is announced: admitted, or reserved
// while it waits for admission checks.
type announcement struct {
	ev        events.Event
	id        string
	ref       events.WorkloadRef
	admission string
}

// announcementOf is the announcement of a reservation.
func announcementOf(ref events.WorkloadRef, r ledger.Reservation) announcement {
	a := announcement{ref: ref, admission: r.Admission()}
	if r.AwaitingChecks {
		a.ev, a.id = reservedOf(ref, r), workloads.ReservedID(ref, a.admission)
	} else {
		a.ev, a.id = admittedOf(ref, r), workloads.AdmittedID(ref, a.admission)
	}
	return a
}

// reservedOf is the announcement of a reservation waiting for checks.
func reservedOf(ref events.WorkloadRef, r ledger.Reservation) events.WorkloadReservedV1 {
	ev := events.WorkloadReservedV1{Workload: ref, ClusterQueue: r.ClusterQueue, PodSets: assignments(r.PodSets), Admission: r.Admission()}
	for _, c := range r.Checks {
		ev.Checks = append(ev.Checks, c.Name)
	}
	return ev
}

// announceUnlessEnded publishes an admission's announcement unless its job
// ended; with the stream known, it expects the last event it looked at,
// and looks again when something came since.
func (s *Service) announceUnlessEnded(ctx context.Context, o outgoing) error {
	ref, _ := events.WorkloadOf(o.ev)
	ep, expecting := s.pub.(workloads.ExpectingPublisher)
	if !expecting || s.stream == nil {
		gone, _, err := s.ended(ctx, o)
		if err != nil || gone {
			return err
		}
		return s.pub.Publish(ctx, o.ev, o.id)
	}
	_, err := ep.PublishExpecting(ctx, o.ev, o.id, events.WorkloadFilter(ref), func(ctx context.Context) (uint64, bool, error) {
		gone, seq, err := s.ended(ctx, o)
		if gone {
			s.log.Info().Str("workload", o.ended).Msg("admission not announced: the job ended meanwhile")
		}
		return seq, !gone, err
	})
	return err
}

// retry publishes what failed before, in order, keeping what fails again.
func (s *Service) retry(ctx context.Context) error {
	s.outbox = append(s.unsent, s.outbox...)
	s.unsent = nil
	return s.flush(ctx)
}

// heldAdmission names the admission a workload holds (its reservation's
// admission time).
func (s *Service) heldAdmission(key string) string {
	return s.res[key].Admission()
}

// announceLedger publishes the admitted event of every reservation whose
// announcement is not the last one stored for its workload: a replica that
// stopped between writing a reservation and announcing it leaves the
// admission unannounced, and an integration starts a job only once its
// admission is announced.
func (s *Service) announceLedger(ctx context.Context) {
	if s.stream == nil {
		return
	}
	for _, wk := range slices.Sorted(maps.Keys(s.res)) {
		s.announce(ctx, wk, s.res[wk].Reservation)
	}
	if err := s.flush(ctx); err != nil {
		s.log.Warn().Err(err).Msg("admissions a restart left unannounced not announced yet")
	}
}

// announce publishes the admitted event of one reservation unless it is
// the last announcement stored for its workload.
func (s *Service) announce(ctx context.Context, wk string, r ledger.Reservation) {
	kind, ns, name, ok := workloads.SplitEngineKey(wk)
	if !ok || r.UID == "" {
		return
	}
	ref := events.WorkloadRef{Kind: kind, Namespace: ns, Name: name, UID: r.UID}
	an := announcementOf(ref, r)
	check := workloads.Announced
	if r.AwaitingChecks {
		check = workloads.Reserved
	}
	done, err := check(ctx, s.stream, ref, r.Admission())
	if err != nil {
		s.log.Warn().Err(err).Str("workload", wk).Msg("cannot check the announcement of a reservation")
		return
	}
	if done {
		return
	}
	s.log.Info().Str("workload", wk).Str("queue", r.ClusterQueue).Msg("announcing an admission a restart left unannounced")
	s.send(ctx, outgoing{ev: an.ev, id: an.id, ended: wk})
}

// admittedOf is the announcement of a reservation.
func admittedOf(ref events.WorkloadRef, r ledger.Reservation) events.WorkloadAdmittedV1 {
	return events.WorkloadAdmittedV1{Workload: ref, ClusterQueue: r.ClusterQueue, PodSets: assignments(r.PodSets), Admission: r.Admission()}
}

// publish announces the cycle's decisions. Admissions whose reservation
// was lost are not announced. Admissions, evictions and preemption
// requests go first and pending reasons last: an integration starts a job
// only once its admission is announced, and a cycle may also have
// thousands of pending reasons to tell.
func (s *Service) publish(ctx context.Context, ds []engine.Decision, lost map[string]bool) error {
	admitted := 0
	defer func() { s.metrics.cycleAdmitted.Observe(float64(admitted)) }()
	preemptions := map[string]*events.PreemptionRequestedV1{}
	var order []string
	for _, d := range ds {
		w := s.wls[d.Key]
		ref, known := s.refOf(d.Key)
		if !known {
			continue
		}
		switch d.Kind {
		case engine.KindReserved:
			if lost[d.Key] || w == nil {
				continue
			}
			delete(s.told, d.Key)
			r := s.res[d.Key].Reservation
			s.send(ctx, outgoing{ev: reservedOf(ref, r), id: workloads.ReservedID(ref, r.Admission()), ended: d.Key})
		case engine.KindAdmitted:
			if lost[d.Key] || w == nil {
				continue
			}
			delete(s.told, d.Key) // a reason after this admission is news
			r := s.res[d.Key].Reservation
			admitted++
			s.metrics.admitted.WithLabelValues(d.ClusterQueue).Inc()
			s.metrics.waitTime.WithLabelValues(d.ClusterQueue).Observe(max(0, r.AdmittedAt.Sub(w.CreationTime).Seconds()))
			ev := admittedOf(ref, r)
			actx, span := s.traceAdmission(ctx, w, d, r.Admission(), r.AdmittedAt)
			s.send(actx, outgoing{ev: ev, id: workloads.AdmittedID(ref, r.Admission()), ended: d.Key})
			span.End()
		case engine.KindEvicted:
			// Like a preemption, a drain is fenced: once announced, the
			// admission never starts.
			r := s.res[d.Key].Reservation
			admission := r.Admission()
			s.metrics.evicted.WithLabelValues(d.ClusterQueue, d.Reason).Inc()
			ev := events.WorkloadEvictedV1{Workload: ref, ClusterQueue: d.ClusterQueue, Reason: d.Reason, Message: d.Message, Admission: admission}
			first := announcementOf(ref, r)
			o := outgoing{ev: ev, id: events.ID(ev.Type(), ref.UID, admission),
				fenceKey: workloads.Key(ref), admission: admission, admitted: &first}
			switch d.Reason {
			case engine.ReasonPodsReadyTimeout, engine.ReasonRequeuingLimitExceeded, engine.ReasonAdmissionCheck, engine.ReasonDeactivated,
				engine.ReasonMaxExecTimeExceeded:
				// The fence keeps the count and the backoff for a
				// replica that starts after this one.
				rs := s.eng.Requeues(d.Key)
				o.requeue = &fence.Requeue{Count: rs.Count, At: rs.At.UTC(), Deactivated: rs.Deactivated, Why: rs.Why, Executed: rs.Executed}
			}
			ectx, span := s.traceEviction(ctx, ref, d, admission)
			s.send(ectx, o)
			span.End()
		case engine.KindPreempted:
			p := preemptions[d.Preemptor]
			if p == nil {
				pw := s.wls[d.Preemptor]
				if pw == nil {
					continue
				}
				p = &events.PreemptionRequestedV1{Preemptor: pw.Workload, ClusterQueue: s.eng.ClusterQueueOf(d.Preemptor)}
				preemptions[d.Preemptor] = p
				order = append(order, d.Preemptor)
			}
			admission := s.heldAdmission(d.Key)
			s.metrics.preempted.WithLabelValues(p.ClusterQueue, d.Reason).Inc()
			p.Victims = append(p.Victims, events.VictimV1{Workload: ref, ClusterQueue: d.ClusterQueue, Reason: d.Reason, Admission: admission})
		}
	}
	for _, k := range order {
		p := preemptions[k]
		pctx, span := s.tracePreemption(ctx, p, s.clock())
		s.send(pctx, outgoing{ev: *p, id: preemptionID(*p)})
		span.End()
	}
	now := s.clock()
	var tells []pendingTell
	for _, d := range ds {
		w := s.wls[d.Key]
		if w == nil || d.Kind != engine.KindPending {
			continue
		}
		// Only a reason of another kind is news: a place in line or a
		// number that moved is not worth an event (and a Kubernetes Event
		// on the job) for every waiting workload at every admission; and
		// news comes at most once per interval.
		class := engine.ReasonClass(d.Reason)
		s.noteWaiting(d.Key, class, d.Reason, now)
		t, ok := s.told[d.Key]
		kept, news := engine.Retold(t.class, class)
		switch {
		case ok && !news:
			t.class, t.held = kept, false
			s.told[d.Key] = t
			continue
		case ok && s.clock().Sub(t.at) < s.cfg.PendingInterval:
			t.held = true
			s.told[d.Key] = t
			continue
		}
		tells = append(tells, pendingTell{ref: w.Workload, key: d.Key, cq: d.ClusterQueue, reason: d.Reason})
	}
	s.tellPending(ctx, tells)
	return s.flush(ctx)
}

// refOf names the workload a decision is about: from its record or, for
// one admitted by another replica whose record this replica has not seen
// yet, from its reservation. An eviction or a preemption of such a
// workload, or its admission once its checks passed, must be announced
// all the same: nothing decides it again (seen in a test: a ClusterQueue
// drained between another replica's booking and its record's arrival,
// and the admission it held never stopped).
func (s *Service) refOf(key string) (events.WorkloadRef, bool) {
	if w := s.wls[key]; w != nil {
		return w.Workload, true
	}
	h, held := s.res[key]
	kind, ns, name, ok := workloads.SplitEngineKey(key)
	if !held || !ok || h.UID == "" {
		return events.WorkloadRef{}, false
	}
	return events.WorkloadRef{Kind: kind, Namespace: ns, Name: name, UID: h.UID}, true
}

// preemptionID is the id of a preemption request. It names each victim's
// admission and reason, not only the victim: a preemptor that asks again
// for the same workloads once they were admitted again makes a new
// request, which the stream must not take for a re-send of the first and
// drop (seen at 100,000 Jobs: three such requests).
func preemptionID(p events.PreemptionRequestedV1) string {
	victims := make([]string, 0, 3*len(p.Victims))
	for _, v := range p.Victims {
		victims = append(victims, v.Workload.UID, v.Admission, v.Reason)
	}
	return events.ID(p.Type(), p.Preemptor.UID, victims)
}

// told is what was last announced of a waiting workload's reason.
type told struct {
	class string
	at    time.Time
	// held: a reason of another class came within the interval and was
	// held back.
	held bool
}

// tellPending announces waiting workloads' pending reasons. Each id names
// the reason and the time, so that a reason that comes back later is a new
// event, not a re-send.
//
// When the last event stored about a workload already tells a reason of
// the same kind, it only notes that as told. That is how a restarted
// replica, which starts knowing nothing it told, and replicas running side
// by side, each with its own record of what it told, do not announce every
// waiting workload again (seen with two replicas restarted 17 times each
// under 15,000 Jobs: 21 pending events per Job instead of about one).
// The stream is read for all of them together, pendingReads at a time, so
// a cycle with many new waiting workloads does not wait for each read in
// turn before its admissions and preemptions are published.
func (s *Service) tellPending(ctx context.Context, tells []pendingTell) {
	stored := make([]struct {
		reason string
		ok     bool
	}, len(tells))
	if s.stream != nil && len(tells) > 0 {
		var wg sync.WaitGroup
		slots := make(chan struct{}, pendingReads)
		for i, t := range tells {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				stored[i].reason, stored[i].ok = s.storedPending(ctx, t.ref)
			})
		}
		wg.Wait()
	}
	now := s.clock()
	for i, t := range tells {
		class := engine.ReasonClass(t.reason)
		if st := stored[i]; st.ok {
			if kept, news := engine.Retold(engine.ReasonClass(st.reason), class); !news {
				s.told[t.key] = told{class: kept, at: now}
				continue
			}
		}
		s.told[t.key] = told{class: class, at: now}
		ev := events.WorkloadPendingV1{Workload: t.ref, ClusterQueue: t.cq, Reason: t.reason, Invalid: engine.Invalid(t.reason)}
		s.send(ctx, outgoing{ev: ev, id: events.ID(ev.Type(), t.ref.UID, t.reason, now.UnixNano())})
	}
}

// pendingTell is a pending reason to announce.
type pendingTell struct {
	ref             events.WorkloadRef
	key, cq, reason string
}

// pendingReads bounds the reads of the stream tellPending makes at once.
const pendingReads = 16

// storedPending returns the reason of the last event stored about the
// workload, if that event is a pending one. Without the stream, or when it
// cannot be read, it says none, and the reason is announced: a repeated
// pending event costs less than a missing one.
func (s *Service) storedPending(ctx context.Context, ref events.WorkloadRef) (string, bool) {
	if s.stream == nil {
		return "", false
	}
	last, err := workloads.Last(ctx, s.stream, ref)
	if err != nil {
		s.log.Debug().Err(err).Str("workload", workloads.EngineKey(ref)).Msg("last event not read: pending reason announced")
		return "", false
	}
	return last.PendingFor(ref.UID)
}

// flushPending announces the reasons held back whose interval is over, if
// their workload still waits for a reason of that new kind.
func (s *Service) flushPending(ctx context.Context, now time.Time) {
	var due []string
	for key, t := range s.told {
		if t.held && now.Sub(t.at) >= s.cfg.PendingInterval {
			due = append(due, key)
		}
	}
	sort.Strings(due)
	var tells []pendingTell
	for _, key := range due {
		t := s.told[key]
		t.held = false
		s.told[key] = t
		w := s.wls[key]
		reason := s.eng.PendingReason(key)
		if w == nil || reason == "" || s.eng.IsAdmitted(key) || !engine.News(t.class, engine.ReasonClass(reason)) {
			continue
		}
		tells = append(tells, pendingTell{ref: w.Workload, key: key, cq: s.eng.ClusterQueueOf(key), reason: reason})
	}
	s.tellPending(ctx, tells)
	if err := s.flush(ctx); err != nil {
		s.log.Warn().Err(err).Msg("pending reasons not announced")
	}
}

func assignments(ps []engine.PodSetAssignment) []events.PodSetAssignmentV1 {
	out := make([]events.PodSetAssignmentV1, len(ps))
	for i, p := range ps {
		out[i] = events.PodSetAssignmentV1{Name: p.Name, Count: p.Count, Flavors: p.Flavors}
	}
	return out
}

// checksConsumer is the durable consumer of admission checks' answers,
// shared by the admission replicas; checkPartitions answers are recorded
// at once, those about one workload in order.
const (
	checksConsumer  = "admission-checks"
	checkPartitions = 4
)

// setPodSetUpdates records what check adds to the pods (none: forgets it).
func setPodSetUpdates(r *ledger.Reservation, check string, updates []events.PodSetUpdateV1) {
	if len(updates) == 0 {
		delete(r.PodSetUpdates, check)
		if len(r.PodSetUpdates) == 0 {
			r.PodSetUpdates = nil
		}
		return
	}
	if r.PodSetUpdates == nil {
		r.PodSetUpdates = map[string][]events.PodSetUpdateV1{}
	}
	r.PodSetUpdates[check] = updates
}

// handleCheck records an admission check's answer in the reservation it
// is about. An answer about a reservation that is gone, or another one,
// or a check the reservation does not run, changes nothing.
func (s *Service) handleCheck(ctx context.Context, env events.Envelope) error {
	var e events.CheckUpdatedV1
	if err := env.As(&e); err != nil {
		return fmt.Errorf("%w: %v", bus.ErrPoison, err)
	}
	wk := workloads.EngineKey(e.Workload)
	// Only the check's own controller answers it: the answer's subject
	// names its controller, and each controller's NATS user may publish
	// only under its own name.
	m := s.checkControllers.Load()
	if m == nil {
		return errors.New("the configuration is not loaded yet") // retried
	}
	want, known := (*m)[e.Check]
	if !known {
		s.log.Warn().Str("workload", wk).Str("check", e.Check).Msg("an answer for an AdmissionCheck not known (yet); ignored")
		return nil
	}
	if e.Controller != want {
		return fmt.Errorf("%w: answer for check %s from controller %q, but its controller is %q", bus.ErrPoison, e.Check, e.Controller, want)
	}
	st := engine.CheckStatus{Name: e.Check, State: engine.CheckState(e.State), Message: e.Message}
	if e.RequeueAfterSeconds != nil {
		st.RequeueAfter = time.Duration(*e.RequeueAfterSeconds) * time.Second
	}
	log := s.log.With().Str("workload", wk).Str("check", e.Check).Str("state", e.State).Logger()
	var updates []events.PodSetUpdateV1
	var cluster string
	if e.State == events.CheckReady {
		updates, cluster = e.PodSetUpdates, e.Cluster
	}
	_, wrote, err := s.writer.Update(ctx, s.ledKV, wk, func(r *ledger.Reservation) bool {
		if r.Admission() != e.Admission || (r.UID != "" && r.UID != e.Workload.UID) {
			return false
		}
		for i := range r.Checks {
			if r.Checks[i].Name != st.Name {
				continue
			}
			to, by := r.DispatchedTo, r.DispatchedBy
			if cluster != "" {
				to, by = cluster, st.Name
			} else if by == st.Name {
				to, by = "", ""
			}
			if r.Checks[i] == st && reflect.DeepEqual(r.PodSetUpdates[st.Name], updates) && to == r.DispatchedTo {
				return false
			}
			r.Checks[i] = st
			setPodSetUpdates(r, st.Name, updates)
			r.DispatchedTo, r.DispatchedBy = to, by
			return true
		}
		return false
	})
	if err != nil {
		return err // transient: redelivered with backoff
	}
	if wrote {
		log.Info().Msg("admission check answered")
	} else {
		log.Debug().Msg("admission check answer about no reservation held now")
	}
	return nil
}

// ChecksConsumer is the durable consumer of admission checks' answers. An
// answer is never given up on: its reservation waits for it.
func ChecksConsumer() bus.ConsumerSpec {
	return bus.ConsumerSpec{Stream: bus.StreamEvents, Durable: checksConsumer,
		FilterSubjects: []string{events.SubjectFilter("check", "updated", "", "")}, MaxDeliver: bus.RetryForever}
}
