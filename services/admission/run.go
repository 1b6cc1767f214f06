package admission

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/catalog"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/lqusage"
	"github.com/sluice-dev/sluice/internal/nodecap"
	"github.com/sluice-dev/sluice/internal/shard"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/internal/workloads"
)

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
	// AdmissionFairSharing, when set, orders the workloads of the
	// ClusterQueues whose admissionScope asks for it by their
	// LocalQueues' recent usage.
	AdmissionFairSharing *engine.AdmissionFairSharing
	// QueriesPerSecond bounds the reads of the pending API and the web
	// view that enter the admission loop, where the engine lives, so
	// that a flood of them cannot starve admission cycles; one past it is
	// answered "busy" (HTTP 429). 0 takes DefaultQueriesPerSecond.
	QueriesPerSecond int
	// Replica names this replica among the admission replicas, which
	// share the cohort trees (trees.go); a replica restarted under the
	// same name takes its trees back at once. Empty: a random name.
	Replica string
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
	if c.Replica != "" && strings.Trim(c.Replica, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		return fmt.Errorf("admission: replica %q: use letters, digits, '-' and '_' only", c.Replica)
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
	// out holds the events decided and not yet published.
	out outbox
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
	// wlCatalog is the workloads as the stream tells them, for the
	// visibility API and the web view (workloads.go).
	wlCatalog   workloadCatalog
	catalogOpts []catalog.Option

	configDirty bool
	dirty       bool
	// nodes is the capacity of the nodes of topology-aware flavors, by
	// node name; nodesDirty: it changed since the engine last had it.
	nodes      map[string]engine.Node
	nodesDirty bool

	// owner holds this replica's tree leases; treeIndex numbers the trees
	// for them (trees.go). leaseTicks tells the loop a lease round ended,
	// leaseKick the lease round to run now.
	owner     *shard.Owner
	treeIndex map[string]int
	// cqBorn is each ClusterQueue's creation time, as of the last
	// configuration: the trees' lease numbers follow their age.
	cqBorn                map[string]time.Time
	leaseTicks, leaseKick chan struct{}

	tracer *tracing.Tracer
	// queued is what each waiting workload's queued span will show (only
	// while tracing); cycles counts the engine's cycles, for the spans.
	queued map[string]*queuedTrace
	cycles int64

	// usageKV is the bucket of LocalQueue usage; usageDue what is still to
	// be written to it, lastUsageSave when it was last written
	// (lqusage.go).
	usageKV       jetstream.KeyValue
	usageDue      map[string]engine.LocalQueueUsage
	lastUsageSave time.Time
}

// Option tunes a Service.
type Option func(*Service)

// WithClock injects the clock that stamps admissions.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.clock = now } }

// WithCatalog tunes the workload catalog (how long finished workloads
// stay listed, how many changes watches may resume from).
func WithCatalog(opts ...catalog.Option) Option {
	return func(s *Service) { s.catalogOpts = append(s.catalogOpts, opts...) }
}

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(s *Service) { s.log = l } }

// New returns an admission replica.
func New(cfg Config, js jetstream.JetStream, pub events.Publisher, opts ...Option) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		synced:     health.NewGate("configuration, workloads and ledger not loaded yet"),
		cfg:        cfg,
		js:         js,
		log:        zerolog.Nop(),
		clock:      time.Now,
		config:     configstore.New(),
		wls:        map[string]*events.WorkloadSubmittedV1{},
		told:       map[string]told{},
		queued:     map[string]*queuedTrace{},
		res:        map[string]ledger.Held{},
		uncertain:  map[string]string{},
		passing:    map[string]string{},
		trees:      map[string]uint64{},
		fences:     map[string]fence.State{},
		unapplied:  map[string]bool{},
		queries:    make(chan func()),
		leaseTicks: make(chan struct{}, 1),
		leaseKick:  make(chan struct{}, 1),
		wantView:   make(chan struct{}, 1),
		metrics:    newMetrics(),
		stopped:    make(chan struct{}),
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
	if s.cfg.Replica == "" {
		s.cfg.Replica = nuid.Next()
	}
	s.queryLimit = rate.NewLimiter(rate.Limit(s.cfg.QueriesPerSecond), s.cfg.QueriesPerSecond)
	s.out = outbox{pub: pub, log: s.log, recordExists: s.recordExists}
	s.eng = engine.New(engine.Config{FairSharing: cfg.FairSharing, WaitForPodsReady: cfg.WaitForPodsReady, FairStrategies: cfg.FairStrategies,
		AdmissionFairSharing: cfg.AdmissionFairSharing},
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
	kvs, stream, err := bus.OpenBuckets(ctx, s.js, true, configstore.Bucket, workloads.Bucket, ledger.Bucket, fence.Bucket, nodecap.Bucket, bus.BucketShards,
		lqusage.Bucket)
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	cfgKV, wlKV, ledKV, fenceKV, nodesKV := kvs[0], kvs[1], kvs[2], kvs[3], kvs[4]
	s.usageKV = kvs[6]
	// Trees are decided only under their leases: none until the first
	// round of them.
	if s.owner, err = shard.New(kvs[5], leaseGroup, s.cfg.Replica, shard.WithShards(1), shard.WithLogger(s.log)); err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	s.eng.SetOwner(func(string) bool { return false })
	leaseCtx, stopLeases := context.WithCancel(ctx)
	leasesDone := make(chan struct{})
	go func() {
		defer close(leasesDone)
		s.runLeases(leaseCtx, s.owner, bus.ShardTTL/5)
	}()
	defer func() {
		// After the loop: nothing is decided any more, so the trees are
		// given back for the other replicas to take at once.
		stopLeases()
		<-leasesDone
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		s.owner.Release(relCtx)
		cancel()
	}()
	s.wlKV, s.fenceKV, s.stream, s.ledKV = wlKV, fenceKV, stream, ledKV
	s.out.stream, s.out.fenceKV = stream, fenceKV
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
	feedErr := make(chan error, 6)
	cfgF := s.feed(feedCtx, cfgKV, feedErr)
	nodesF := s.feed(feedCtx, nodesKV, feedErr)
	wlF := s.feed(feedCtx, wlKV, feedErr)
	ledF := s.feed(feedCtx, ledKV, feedErr)
	fenceF := s.feed(feedCtx, fenceKV, feedErr)
	usageF := s.feed(feedCtx, s.usageKV, feedErr)
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
	allSynced := func() bool {
		return synced["config"] && synced["workloads"] && synced["ledger"] && synced["fences"] && synced["nodes"] && synced["usage"]
	}
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
		case e := <-nodesF.entries:
			if e == nil {
				synced["nodes"] = true
				continue
			}
			s.applyNode(e)
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
		case e := <-usageF.entries:
			if e == nil {
				synced["usage"] = true
				continue
			}
			s.applyUsage(e)
		case q := <-s.queries:
			q()
		case <-s.leaseTicks:
			if s.synced.IsOpen() {
				s.applyLeases()
			}
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
				s.renumberTrees(ctx)
				s.announceLedger(ctx)
			}
			s.bookPassed(ctx)
			if queued, unsent := s.out.Waiting(); queued+unsent > 0 {
				if err := s.out.Retry(ctx); err != nil {
					_, unsent = s.out.Waiting()
					s.log.Warn().Err(err).Int("unsent", unsent).Msg("events still not published")
				}
			}
			if now := s.clock(); now.Sub(s.lastFlush) >= time.Second {
				s.lastFlush = now
				s.tellHeldPending(ctx, now)
			}
			s.applyFences()
			s.saveUsage(ctx, s.clock())
			if next, due := s.eng.NextSample(); due && !s.clock().Before(next) {
				s.dirty = true // a LocalQueue's usage is due for a sample
			}
			if next, due := s.eng.NextTimer(s.lastCycle); due && !s.clock().Before(next) {
				s.dirty = true // a pods-ready timeout or a backoff ended
			}
			if !(s.dirty || s.configDirty || s.nodesDirty) {
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
