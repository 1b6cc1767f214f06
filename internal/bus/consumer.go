package bus

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
)

// Handler handles one event. Return nil only once the event's effect is
// durable: the runner acks then. Return an error wrapping ErrPoison (or
// events.ErrInvalidEvent) for an event that can never be handled; any other
// error is retried with backoff. ctx carries the event's trace context and
// a zerolog logger with event_type, workload and trace_id fields; it is not
// cancelled when Run's context is, until the drain timeout has passed.
type Handler func(ctx context.Context, env events.Envelope) error

// MessageHandler handles one message of a stream whose messages are not
// events (the multicluster stream's offers and reports), with the same
// contract as Handler: nil acks, an error that IsPoison parks the message,
// any other error retries it with backoff.
type MessageHandler func(ctx context.Context, m jetstream.Msg) error

// Defaults of ConsumerSpec and of Run's options.
const (
	DefaultMaxDeliver = 10
	// RetryForever as a MaxDeliver: a message whose handling fails for a
	// reason other than poison is retried, with backoff, until it
	// succeeds. For effects nothing else would redo: a quota release, a
	// check request, a preemption.
	RetryForever      = -1
	DefaultBackoffMin = time.Second
	DefaultBackoffMax = time.Minute
	// DefaultAckWait is short because the runner keeps every message it
	// holds alive (see keepAlive): it only bounds how long a delivery lost
	// on the way, e.g. while the server restarts, waits to be redelivered.
	DefaultAckWait      = 10 * time.Second
	DefaultBatch        = 10
	DefaultFetchWait    = 2 * time.Second
	DefaultDrainTimeout = 10 * time.Second
	// dlqPublishTimeout bounds one dead-letter publish.
	dlqPublishTimeout = 5 * time.Second
	// maxHeaderError bounds the error text put in a dead-letter header.
	maxHeaderError = 1024
)

// Headers of a dead letter, beside the original message's headers (minus
// its Nats-* ones) and data.
const (
	// HeaderDLQReason: events.Reason of a malformed message ("missing-attribute",
	// "unknown-type", "bad-data", …), "poison" for a handler's ErrPoison, or
	// "max-deliver" when MaxDeliver attempts failed.
	HeaderDLQReason     = "Sluice-Dlq-Reason"
	HeaderDLQError      = "Sluice-Dlq-Error"
	HeaderDLQSubject    = "Sluice-Dlq-Subject"
	HeaderDLQStream     = "Sluice-Dlq-Stream"
	HeaderDLQSequence   = "Sluice-Dlq-Sequence"
	HeaderDLQConsumer   = "Sluice-Dlq-Consumer"
	HeaderDLQDeliveries = "Sluice-Dlq-Deliveries"
	HeaderDLQTime       = "Sluice-Dlq-Time"
)

// Dead-letter reasons that are not an events.Reason.
const (
	DLQReasonPoison     = "poison"
	DLQReasonMaxDeliver = "max-deliver"
)

// ConsumerSpec describes a durable pull consumer.
type ConsumerSpec struct {
	// Stream to consume; default SLUICE.
	Stream string
	// Durable is the consumer's name (required), also naming its
	// dead-letter subject sluice.dlq.<Durable>.
	Durable string
	// FilterSubjects selects the events (required), see events.SubjectFilter.
	FilterSubjects []string
	// MaxDeliver is how many failed attempts send a message to the
	// dead-letter subject; 0 means DefaultMaxDeliver, negative never (the
	// message is retried forever). The server itself never drops a message:
	// the runner counts, so nothing is lost if it dies on the last attempt.
	MaxDeliver int
	// BackoffMin and BackoffMax bound the redelivery delay after a handler
	// error: BackoffMin·2^(attempt-1), at most BackoffMax. Defaults 1s, 1m.
	BackoffMin, BackoffMax time.Duration
	// AckWait is how long the server waits for an ack before redelivering;
	// default 10s. The runner extends it for every message it holds, from
	// the fetch on, so it only delays messages lost in delivery.
	AckWait time.Duration
}

func (s ConsumerSpec) withDefaults() ConsumerSpec {
	if s.Stream == "" {
		s.Stream = StreamEvents
	}
	if s.MaxDeliver == 0 {
		s.MaxDeliver = DefaultMaxDeliver
	}
	if s.BackoffMin == 0 {
		s.BackoffMin = DefaultBackoffMin
	}
	if s.BackoffMax == 0 {
		s.BackoffMax = DefaultBackoffMax
	}
	if s.AckWait == 0 {
		s.AckWait = DefaultAckWait
	}
	return s
}

// Validate checks the spec (zero fields count as their defaults).
func (s ConsumerSpec) Validate() error {
	if s.Durable == "" || strings.ContainsAny(s.Durable, ".*> \t\r\n") {
		return fmt.Errorf("%w: durable %q: required, without '.', '*', '>' or whitespace", ErrInvalidSpec, s.Durable)
	}
	if len(s.FilterSubjects) == 0 {
		return fmt.Errorf("%w: %s: at least one filter subject is required", ErrInvalidSpec, s.Durable)
	}
	for _, f := range s.FilterSubjects {
		if f == "" || strings.ContainsAny(f, " \t\r\n") {
			return fmt.Errorf("%w: %s: filter subject %q", ErrInvalidSpec, s.Durable, f)
		}
	}
	if s.BackoffMin < 0 || s.BackoffMax < 0 || s.AckWait < 0 {
		return fmt.Errorf("%w: %s: negative duration", ErrInvalidSpec, s.Durable)
	}
	d := s.withDefaults()
	if d.BackoffMin > d.BackoffMax {
		return fmt.Errorf("%w: %s: backoff min %s exceeds max %s", ErrInvalidSpec, s.Durable, d.BackoffMin, d.BackoffMax)
	}
	return nil
}

// ConsumerConfig is the JetStream configuration Run gives the consumer.
func (s ConsumerSpec) ConsumerConfig() jetstream.ConsumerConfig {
	s = s.withDefaults()
	return jetstream.ConsumerConfig{
		Durable:        s.Durable,
		FilterSubjects: s.FilterSubjects,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        s.AckWait,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxDeliver:     -1,
	}
}

// Backoff is the redelivery delay after the attempt-th failed delivery.
func (s ConsumerSpec) Backoff(attempt uint64) time.Duration {
	s = s.withDefaults()
	d := s.BackoffMin
	for i := uint64(1); i < attempt && d < s.BackoffMax; i++ {
		d *= 2
	}
	return min(d, s.BackoffMax)
}

// RunOption tunes Run.
type RunOption func(*runOptions)

type runOptions struct {
	log          *zerolog.Logger
	concurrency  int
	batch        int
	fetchWait    time.Duration
	drainTimeout time.Duration
	ackSync      bool
	started      func()
	// fetched is told after each fetch whether it worked (WithFetched).
	fetched func(ok bool)
	// terminatePoison: a poison message is terminated with its reason,
	// not copied to the dead letters (WithTerminatePoison).
	terminatePoison bool
	// partition, when set, routes each message to the handler its key
	// hashes to (WithPartitions).
	partition func(subject string) string
}

// WithFetched tells f after each fetch whether it worked (an empty fetch
// did): whether the consumer is being read, for a readiness check.
func WithFetched(f func(ok bool)) RunOption { return func(o *runOptions) { o.fetched = f } }

// WithTerminatePoison terminates a poison message with its reason instead
// of copying it to the dead letters: for a user that may not publish
// there (a worker cluster's leaf node on the manager's NATS).
func WithTerminatePoison() RunOption { return func(o *runOptions) { o.terminatePoison = true } }

// WithLogger sets the logger (default: zerolog.Ctx of Run's context).
func WithLogger(l zerolog.Logger) RunOption { return func(o *runOptions) { o.log = &l } }

// WithConcurrency runs n handlers at once (default 1: in stream order).
// With n > 1 events are handled out of order.
func WithConcurrency(n int) RunOption { return func(o *runOptions) { o.concurrency = n } }

// WithPartitions runs n handlers at once, each taking in stream order the
// messages whose key hashes to it: messages of one key (key reads it from
// the subject, e.g. the workload an event is about) keep their order,
// those of different keys are handled side by side.
func WithPartitions(n int, key func(subject string) string) RunOption {
	return func(o *runOptions) { o.concurrency, o.partition = n, key }
}

// WithBatch sets how many messages one pull asks for (default 10). Pulled
// messages wait for a free handler while their AckWait runs, so lower it
// for slow handlers.
func WithBatch(n int) RunOption { return func(o *runOptions) { o.batch = n } }

// WithFetchWait bounds one pull (default 2s); it is also how long shutdown
// may wait for the pull in flight.
func WithFetchWait(d time.Duration) RunOption { return func(o *runOptions) { o.fetchWait = d } }

// WithDrainTimeout bounds how long handlers in flight may run after Run's
// context is cancelled (default 10s); then their context is cancelled too.
func WithDrainTimeout(d time.Duration) RunOption { return func(o *runOptions) { o.drainTimeout = d } }

// WithStarted calls f once the consumer exists and pulling begins (a
// readiness gate).
func WithStarted(f func()) RunOption { return func(o *runOptions) { o.started = f } }

// WithAckSync makes every ack wait for the server's confirmation.
func WithAckSync() RunOption { return func(o *runOptions) { o.ackSync = true } }

// Run consumes spec's durable pull consumer (created or updated, so it is
// safe to call from every replica) and passes each event to h:
//
//   - h returns nil: the message is acked.
//   - the message does not decode (events.DecodeError), or h returns an error
//     that IsPoison: the message is published to sluice.dlq.<Durable> with
//     headers naming the reason, the original subject, stream sequence and
//     consumer, then terminated; the stream keeps flowing.
//   - any other error: the message is nak'ed with an exponential delay
//     (spec.Backoff), and after MaxDeliver failed attempts dead-lettered.
//
// When ctx is cancelled Run stops pulling, returns unstarted messages to the
// server, lets handlers in flight finish (up to the drain timeout) and
// returns nil. It returns an error if the consumer cannot be set up or the
// connection closes.
func Run(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec, h Handler, opts ...RunOption) error {
	if h == nil {
		return fmt.Errorf("%w: %s: nil handler", ErrInvalidSpec, spec.Durable)
	}
	return run(ctx, js, spec, h, nil, opts)
}

// RunMessages is Run for a stream of plain messages: h gets each message
// as it is, undecoded; the rest (the consumer, the keep-alives, the
// backoff, poison, the drain) is Run's.
func RunMessages(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec, h MessageHandler, opts ...RunOption) error {
	if h == nil {
		return fmt.Errorf("%w: %s: nil handler", ErrInvalidSpec, spec.Durable)
	}
	return run(ctx, js, spec, nil, h, opts)
}

func run(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec, h Handler, raw MessageHandler, opts []RunOption) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	spec = spec.withDefaults()
	o := runOptions{concurrency: 1, batch: DefaultBatch, fetchWait: DefaultFetchWait, drainTimeout: DefaultDrainTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.concurrency < 1 || o.batch < 1 || o.fetchWait <= 0 || o.drainTimeout < 0 {
		return fmt.Errorf("%w: %s: concurrency, batch and fetch wait must be positive", ErrInvalidSpec, spec.Durable)
	}
	log := o.log
	if log == nil {
		log = zerolog.Ctx(ctx)
	}
	r := &runner{
		js:   js,
		spec: spec,
		h:    h,
		raw:  raw,
		opts: o,
		log:  log.With().Str("consumer", spec.Durable).Str("stream", spec.Stream).Logger(),
	}
	return r.run(ctx)
}

type runner struct {
	js   jetstream.JetStream
	spec ConsumerSpec
	h    Handler
	raw  MessageHandler
	opts runOptions
	log  zerolog.Logger
	// base is the handlers' context: not cancelled with Run's, only when
	// the drain timeout after it has passed.
	base     context.Context
	stopping func() bool
}

func (r *runner) consumer(ctx context.Context) (jetstream.Consumer, error) {
	return EnsureConsumer(ctx, r.js, r.spec.Stream, r.spec.ConsumerConfig())
}

func (r *runner) run(ctx context.Context) error {
	cons, err := r.consumer(ctx)
	if err != nil {
		return err
	}
	if r.opts.started != nil {
		r.opts.started()
	}
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	r.base = base
	r.stopping = func() bool { return ctx.Err() != nil }
	stopDrain := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.opts.drainTimeout, cancelBase)
		context.AfterFunc(base, func() { t.Stop() })
	})
	defer stopDrain()

	// work holds fetched messages until a worker takes them; a fetch asks
	// for no more than work has room for (slots), so every message the
	// runner has received sits in work or with a worker, kept alive, and
	// none waits unseen in the client's buffer while its AckWait runs.
	work := make(chan held, r.opts.batch)
	slots := make(chan struct{}, r.opts.batch)
	for range r.opts.batch {
		slots <- struct{}{}
	}
	take := func(yield func(held) bool) {
		for m := range work {
			slots <- struct{}{}
			if r.stopping() {
				// Not started: hand it back for another replica now.
				m.stop()
				_ = m.Nak()
				continue
			}
			if !yield(m) {
				return
			}
		}
	}
	var wg sync.WaitGroup
	if key := r.opts.partition; key != nil {
		parts := make([]chan held, r.opts.concurrency)
		for i := range parts {
			parts[i] = make(chan held, r.opts.batch)
			wg.Go(func() {
				for m := range parts[i] {
					r.process(m)
				}
			})
		}
		wg.Go(func() {
			for m := range take {
				h := fnv.New32a()
				_, _ = h.Write([]byte(key(m.Subject())))
				parts[h.Sum32()%uint32(len(parts))] <- m
			}
			for _, p := range parts {
				close(p)
			}
		})
	} else {
		for range r.opts.concurrency {
			wg.Go(func() {
				for m := range take {
					r.process(m)
				}
			})
		}
	}
	r.log.Info().Strs("filter_subjects", r.spec.FilterSubjects).Msg("consumer running")

	runErr := r.pull(ctx, cons, work, slots)
	close(work)

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.opts.drainTimeout + time.Second):
		r.log.Warn().Dur("drain_timeout", r.opts.drainTimeout).Msg("handlers still running after drain timeout; their messages will be redelivered")
	}
	r.log.Info().Err(runErr).Msg("consumer stopped")
	return runErr
}

// pull fetches until ctx ends, handing messages to the workers. A fetch
// starts when work has room for a whole batch, so handing over never
// blocks it.
func (r *runner) pull(ctx context.Context, cons jetstream.Consumer, work chan<- held, slots chan struct{}) error {
	failures := uint64(0)
	for ctx.Err() == nil {
		// The next fetch waits until the workers took every message of
		// the last one, as a fetch handing its messages over one by one
		// would: a fetch per freed slot would cost a request per message.
		n := 0
		for n < r.opts.batch {
			select {
			case <-slots:
				n++
			case <-ctx.Done():
				return nil
			}
		}
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(r.opts.fetchWait))
		if err == nil {
			for m := range batch.Messages() {
				if ctx.Err() != nil || n == 0 {
					_ = m.Nak()
					continue
				}
				// Kept alive from here on: a message waiting for a free
				// handler is not redelivered meanwhile.
				work <- held{Msg: m, stop: r.keepAlive(m)}
				n--
			}
			err = batch.Error()
		}
		for range n { // slots not used by this fetch
			slots <- struct{}{}
		}
		ok := err == nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages)
		if r.opts.fetched != nil {
			r.opts.fetched(ok)
		}
		switch {
		case ok:
			failures = 0
			continue
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("bus: consumer %s: %w", r.spec.Durable, err)
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDeleted):
			r.log.Warn().Err(err).Msg("consumer gone; recreating")
			if c, cerr := r.consumer(ctx); cerr == nil {
				cons = c
			} else {
				err = cerr
			}
		}
		if ctx.Err() != nil {
			break
		}
		failures++
		wait := r.spec.Backoff(failures)
		r.log.Warn().Err(err).Dur("retry_in", wait).Msg("fetch failed")
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// held is a fetched message and the stop of its keep-alive.
type held struct {
	jetstream.Msg
	stop func()
}

// process handles one message and settles it.
func (r *runner) process(h held) {
	m := h.Msg
	defer h.stop()
	md, err := m.Metadata()
	if err != nil {
		r.log.Error().Err(err).Str("subject", m.Subject()).Msg("message without JetStream metadata")
		_ = m.Nak()
		return
	}
	if r.raw != nil {
		log := r.log.With().Str("subject", m.Subject()).Uint64("stream_seq", md.Sequence.Stream).Uint64("delivery", md.NumDelivered).Logger()
		began := time.Now()
		err = r.callRaw(log.WithContext(r.base), m)
		h.stop()
		r.settle(m, md, err, began, log)
		return
	}
	env, derr := events.DecodeParts(m.Subject(), m.Headers(), m.Data())
	if derr == nil {
		// A payload about another workload than its subject (forged, or
		// published by hand) would be acted on as if it were the
		// subject's: it goes to the dead letters instead.
		derr = env.CheckRouting()
	}
	log := r.log.With().
		Str("event_type", env.Type).
		Str("workload", env.Subject).
		Str("trace_id", env.TraceID()).
		Str("subject", m.Subject()).
		Uint64("stream_seq", md.Sequence.Stream).
		Uint64("delivery", md.NumDelivered).
		Logger()
	if derr != nil {
		r.deadLetter(m, md, string(events.ReasonOf(derr)), derr, log)
		return
	}

	ctx := log.WithContext(env.Context(r.base))
	began := time.Now()
	err = r.call(ctx, env)
	h.stop()
	r.settle(m, md, err, began, log)
}

// settle maps a handler's result to the message: ack, park, nak (with
// backoff), and records the handling's duration and outcome.
func (r *runner) settle(m jetstream.Msg, md *jetstream.MsgMetadata, err error, began time.Time, log zerolog.Logger) {
	outcome := "retry"
	defer func() { handleDuration.WithLabelValues(r.spec.Durable, outcome).Observe(time.Since(began).Seconds()) }()

	switch {
	case err == nil:
		outcome = "ack"
		r.ack(m, log)
	case IsPoison(err) && r.opts.terminatePoison:
		outcome = "terminated"
		log.Error().Err(err).Msg("message parked: it cannot be handled")
		_ = m.TermWithReason(headerSafe(err.Error()))
	case IsPoison(err):
		outcome = "dead_letter"
		reason := string(events.ReasonOf(err))
		if reason == "" || errors.Is(err, ErrPoison) {
			reason = DLQReasonPoison
		}
		r.deadLetter(m, md, reason, err, log)
	case r.stopping() && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		log.Info().Err(err).Msg("handler cancelled by shutdown; returning message")
		_ = m.Nak()
	case r.spec.MaxDeliver > 0 && md.NumDelivered >= uint64(r.spec.MaxDeliver):
		outcome = "dead_letter"
		r.deadLetter(m, md, DLQReasonMaxDeliver, err, log)
	default:
		delay := r.spec.Backoff(md.NumDelivered)
		log.Warn().Err(err).Dur("retry_in", delay).Msg("handler failed; will retry")
		if nerr := m.NakWithDelay(delay); nerr != nil {
			log.Error().Err(nerr).Msg("nak failed; the server redelivers after AckWait")
		}
	}
}

// callRaw runs the message handler, turning a panic into an error.
func (r *runner) callRaw(ctx context.Context, m jetstream.Msg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, p)
		}
	}()
	return r.raw(ctx, m)
}

// call runs the handler, turning a panic into an error.
func (r *runner) call(ctx context.Context, env events.Envelope) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, p)
		}
	}()
	return r.h(ctx, env)
}

// keepAlive tells the server the message is in progress every AckWait/2
// until stop is called, so slow handlers are not redelivered meanwhile. It
// costs a timer, not a goroutine, per message.
func (r *runner) keepAlive(m jetstream.Msg) (stop func()) {
	every := r.spec.AckWait / 2
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		_ = m.InProgress()
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(every)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

func (r *runner) ack(m jetstream.Msg, log zerolog.Logger) {
	var err error
	if r.opts.ackSync {
		ctx, cancel := context.WithTimeout(r.base, dlqPublishTimeout)
		err = m.DoubleAck(ctx)
		cancel()
	} else {
		err = m.Ack()
	}
	if err != nil {
		log.Warn().Err(err).Msg("ack failed; the message will be redelivered")
		return
	}
	log.Debug().Msg("handled")
}

// deadLetter copies m to sluice.dlq.<durable> and terminates it. If the
// copy cannot be stored the message is nak'ed instead, so it is not lost.
func (r *runner) deadLetter(m jetstream.Msg, md *jetstream.MsgMetadata, reason string, cause error, log zerolog.Logger) {
	if reason == "" {
		reason = DLQReasonPoison
	}
	dl := nats.NewMsg(events.DLQSubject(r.spec.Durable))
	dl.Data = m.Data()
	for k, vs := range m.Headers() {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			continue
		}
		dl.Header[k] = append([]string(nil), vs...)
	}
	seq := strconv.FormatUint(md.Sequence.Stream, 10)
	dl.Header.Set(HeaderDLQReason, reason)
	dl.Header.Set(HeaderDLQError, headerSafe(cause.Error()))
	dl.Header.Set(HeaderDLQSubject, m.Subject())
	dl.Header.Set(HeaderDLQStream, md.Stream)
	dl.Header.Set(HeaderDLQSequence, seq)
	dl.Header.Set(HeaderDLQConsumer, r.spec.Durable)
	dl.Header.Set(HeaderDLQDeliveries, strconv.FormatUint(md.NumDelivered, 10))
	dl.Header.Set(HeaderDLQTime, time.Now().UTC().Format(time.RFC3339Nano))
	// One dead letter per stream message and consumer, even if this runs
	// again after a crash between the publish and the Term.
	dl.Header.Set(jetstream.MsgIDHeader, "dlq-"+md.Stream+"-"+r.spec.Durable+"-"+seq)

	ctx, cancel := context.WithTimeout(r.base, dlqPublishTimeout)
	defer cancel()
	if _, err := r.js.PublishMsg(ctx, dl, jetstream.WithExpectStream(StreamDLQ)); err != nil {
		delay := r.spec.Backoff(md.NumDelivered)
		log.Error().Err(err).AnErr("cause", cause).Str("reason", reason).Dur("retry_in", delay).Msg("dead-letter publish failed; will retry")
		_ = m.NakWithDelay(delay)
		return
	}
	log.Warn().Err(cause).Str("reason", reason).Str("dlq_subject", dl.Subject).Msg("dead-lettered")
	deadLettered.WithLabelValues(r.spec.Durable, reason).Inc()
	if err := m.TermWithReason(reason); err != nil {
		log.Error().Err(err).Msg("term failed; the message may be redelivered and dead-lettered again (de-duplicated)")
	}
}

// headerSafe makes s one printable-ASCII header value of bounded length.
func headerSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7E {
			b[i] = ' '
		}
	}
	if len(b) > maxHeaderError {
		b = append(b[:maxHeaderError-3], "..."...)
	}
	return strings.TrimSpace(string(b))
}

// EnsureConsumer returns the durable consumer cfg names on stream, as cfg
// describes it. A consumer already so is used as it is (its creation is no
// business of a service's: `sluice setup` makes every durable consumer,
// and a service's NATS user may not create one, see Page); one missing or
// different is created or updated, which only a user allowed to (setup, or
// any user of a server without authorization) can do.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := js.Consumer(ctx, stream, cfg.Durable)
	if err == nil && sameConsumer(c.CachedInfo().Config, cfg) {
		return c, nil
	}
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("bus: consumer %s on %s: %w", cfg.Durable, stream, err)
	}
	c, err = js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("bus: consumer %s on %s is missing or not as this version of Sluice needs it, and could not be made (%w): %w; `sluice setup` makes it",
			cfg.Durable, stream, err, ErrNotSetUp)
	}
	return c, nil
}

// sameConsumer: have is what the server holds for want, as far as Sluice
// sets it.
func sameConsumer(have, want jetstream.ConsumerConfig) bool {
	filters := func(c jetstream.ConsumerConfig) []string {
		out := slices.Clone(c.FilterSubjects)
		if c.FilterSubject != "" {
			out = append(out, c.FilterSubject)
		}
		slices.Sort(out)
		return out
	}
	maxDeliver := func(n int) int {
		if n <= 0 {
			return -1
		}
		return n
	}
	return slices.Equal(filters(have), filters(want)) && have.AckPolicy == want.AckPolicy &&
		(want.AckWait == 0 || have.AckWait == want.AckWait) && maxDeliver(have.MaxDeliver) == maxDeliver(want.MaxDeliver) &&
		(want.MaxAckPending == 0 || have.MaxAckPending == want.MaxAckPending) && have.DeliverPolicy == want.DeliverPolicy
}

// SetupConsumers creates or updates the durable consumers specs describe.
func SetupConsumers(ctx context.Context, js jetstream.JetStream, specs ...ConsumerSpec) error {
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			return err
		}
		s = s.withDefaults()
		if _, err := EnsureConsumer(ctx, js, s.Stream, s.ConsumerConfig()); err != nil {
			return err
		}
	}
	return nil
}
