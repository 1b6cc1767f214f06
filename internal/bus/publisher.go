package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// JetStreamPublisher is the events.Publisher over a JetStream context.
type JetStreamPublisher struct {
	js     jetstream.JetStream
	source string
	stream string
	log    *zerolog.Logger
	tracer WorkloadTracer
}

// WorkloadTracer puts a context into a workload's trace (a
// *tracing.Tracer or a *tracing.Factory).
type WorkloadTracer interface {
	Workload(ctx context.Context, ref events.WorkloadRef) context.Context
}

// An acknowledgement lost with a stream leader that died is not waited
// for longer than ackWait; the next attempt, with the same message id,
// reaches the new leader and is stored once. At most ackAttempts are made.
const (
	ackWait     = 2 * time.Second
	ackAttempts = 4
)

var _ events.Publisher = (*JetStreamPublisher)(nil)

// PublisherOption tunes a JetStreamPublisher.
type PublisherOption func(*JetStreamPublisher)

// WithPublisherLogger sets the logger (default: the one in the context, see
// zerolog.Ctx).
func WithPublisherLogger(l zerolog.Logger) PublisherOption {
	return func(p *JetStreamPublisher) { p.log = &l }
}

// WithExpectStream sets the stream the publish must land in (default
// SLUICE); "" disables the check.
func WithExpectStream(stream string) PublisherOption {
	return func(p *JetStreamPublisher) { p.stream = stream }
}

// WithTracer sets the tracer whose sampling decides the sampled flag of
// the workload traces events carry (default: none, every trace sampled).
func WithTracer(t WorkloadTracer) PublisherOption {
	return func(p *JetStreamPublisher) { p.tracer = t }
}

// NewPublisher returns a publisher whose events carry ce-source source, e.g.
// events.Source("admission").
func NewPublisher(js jetstream.JetStream, source string, opts ...PublisherOption) *JetStreamPublisher {
	p := &JetStreamPublisher{js: js, source: source, stream: StreamEvents}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Publish implements events.Publisher.
func (p *JetStreamPublisher) Publish(ctx context.Context, ev events.Event, id string) error {
	_, err := p.PublishAck(ctx, ev, id)
	return err
}

// PublishAck publishes like Publish and returns JetStream's acknowledgement;
// its Duplicate field is true when the id had been stored already.
func (p *JetStreamPublisher) PublishAck(ctx context.Context, ev events.Event, id string) (*jetstream.PubAck, error) {
	msg, err := p.message(ctx, ev, id)
	if err != nil {
		return nil, err
	}
	var opts []jetstream.PublishOpt
	if p.stream != "" {
		opts = append(opts, jetstream.WithExpectStream(p.stream))
	}
	began := time.Now()
	ack, err := p.publishAttempts(ctx, msg, opts)
	observePublish(ev.Type(), began, err)
	if err != nil {
		return nil, fmt.Errorf("bus: publish %s %s: %w", ev.Type(), msg.Subject, err)
	}
	p.logPublished(ctx, ev, id, msg, ack)
	return ack, nil
}

// message builds the message of an event. An event about a workload
// carries the workload's trace: the span of that trace in ctx, or else
// the workload's root.
func (p *JetStreamPublisher) message(ctx context.Context, ev events.Event, id string) (*nats.Msg, error) {
	if ref, ok := events.WorkloadOf(ev); ok && ref.UID != "" {
		if p.tracer != nil {
			ctx = p.tracer.Workload(ctx, ref)
		} else {
			ctx = (*tracing.Tracer)(nil).Workload(ctx, ref)
		}
	}
	msg, err := events.NewMessage(ctx, p.source, ev, id)
	if err != nil {
		return nil, fmt.Errorf("bus: publish: %w", err)
	}
	return msg, nil
}

func (p *JetStreamPublisher) logPublished(ctx context.Context, ev events.Event, id string, msg *nats.Msg, ack *jetstream.PubAck) {
	log := p.log
	if log == nil {
		log = zerolog.Ctx(ctx)
	}
	log.Debug().
		Str("event_type", ev.Type()).
		Str("workload", ev.CESubject()).
		Str("trace_id", events.TraceID(msg.Header.Get(events.HeaderTraceParent))).
		Str("id", id).
		Uint64("stream_seq", ack.Sequence).
		Bool("duplicate", ack.Duplicate).
		Msg("published")
}

// publishAttempts publishes msg, again while no acknowledgement comes
// within ackWait and ctx allows. Any other error ends it at once.
func (p *JetStreamPublisher) publishAttempts(ctx context.Context, msg *nats.Msg, opts []jetstream.PublishOpt) (*jetstream.PubAck, error) {
	var err error
	for n := 0; n < ackAttempts; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil, errors.Join(err, ctx.Err())
			case <-time.After(time.Duration(n) * 50 * time.Millisecond):
			}
		}
		actx, cancel := context.WithTimeout(ctx, ackWait)
		var ack *jetstream.PubAck
		ack, err = p.js.PublishMsg(actx, msg, opts...)
		cancel()
		if err == nil {
			return ack, nil
		}
		if ctx.Err() != nil || !noAcknowledgement(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("no acknowledgement in %d attempts of %s: %w", ackAttempts, ackWait, err)
}

// noAcknowledgement: the publish may be retried with the same id.
func noAcknowledgement(err error) bool {
	return unanswered(err) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// unanswered: a request's time ran out before any answer came.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// Outgoing is one event of a PublishAll: its context carries the span the
// event's traceparent names.
type Outgoing struct {
	Ctx   context.Context
	Event events.Event
	ID    string
	// ExpectLast, when set, is a subject filter whose last message must
	// still be at stream sequence ExpectSeq (0: none) for the event to be
	// stored; otherwise its error is ErrLastChanged.
	ExpectLast string
	ExpectSeq  uint64
	// Stored is set by PublishAll once the event is stored: the stream
	// sequence JetStream acknowledged (that of the first copy when the id
	// was stored before). A publisher that expects the last event about a
	// subject next time can expect this one without reading the stream.
	Stored uint64
}

// ErrLastChanged: an event was not stored because something was stored
// on its Outgoing.ExpectLast subjects since the sequence it expected.
var ErrLastChanged = errors.New("a message was stored on the expected subjects since")

// window is how many events PublishAll leaves unacknowledged at most.
const window = 256

// PublishAll publishes events without waiting for each acknowledgement
// before sending the next: at most window are in flight. It returns once
// every event is stored or has failed, with one error (or nil) per event,
// in order; an event whose acknowledgement did not come is published
// again with its id, so it is stored once. Events sent together are
// stored in the order given, unless one of them had to be sent again.
// Each stored event's sequence is written to its out[i].Stored.
func (p *JetStreamPublisher) PublishAll(ctx context.Context, out []Outgoing) []error {
	errs := make([]error, len(out))
	type flight struct {
		i     int
		msg   *nats.Msg
		fut   jetstream.PubAckFuture
		began time.Time
	}
	var base []jetstream.PublishOpt
	if p.stream != "" {
		base = append(base, jetstream.WithExpectStream(p.stream))
	}
	optsOf := func(o Outgoing) []jetstream.PublishOpt {
		if o.ExpectLast == "" {
			return base
		}
		return append(slices.Clip(base), jetstream.WithExpectLastSequenceForSubject(o.ExpectSeq, o.ExpectLast))
	}
	var inflight []flight
	settle := func(f flight) {
		var ack *jetstream.PubAck
		var err error
		timer := time.NewTimer(ackWait)
		select {
		case ack = <-f.fut.Ok():
		case err = <-f.fut.Err():
		case <-timer.C:
			err = context.DeadlineExceeded
		case <-ctx.Done():
			err = ctx.Err()
		}
		timer.Stop()
		o := out[f.i]
		if err != nil && ctx.Err() == nil && noAcknowledgement(err) {
			ack, err = p.publishAttempts(ctx, f.msg, optsOf(o))
		}
		observePublish(o.Event.Type(), f.began, err)
		if err != nil {
			errs[f.i] = fmt.Errorf("bus: publish %s %s: %w", o.Event.Type(), f.msg.Subject, lastChanged(err))
			return
		}
		out[f.i].Stored = ack.Sequence
		p.logPublished(o.Ctx, o.Event, o.ID, f.msg, ack)
	}
	for i, o := range out {
		msg, err := p.message(o.Ctx, o.Event, o.ID)
		if err != nil {
			errs[i] = err
			continue
		}
		if len(inflight) == window {
			settle(inflight[0])
			inflight = inflight[1:]
		}
		began := time.Now()
		fut, err := p.js.PublishMsgAsync(msg, optsOf(o)...)
		if err != nil {
			// Not sent: send it the patient way.
			ack, err := p.publishAttempts(ctx, msg, optsOf(o))
			observePublish(o.Event.Type(), began, err)
			if err != nil {
				errs[i] = fmt.Errorf("bus: publish %s %s: %w", o.Event.Type(), msg.Subject, lastChanged(err))
				continue
			}
			out[i].Stored = ack.Sequence
			p.logPublished(o.Ctx, o.Event, o.ID, msg, ack)
			continue
		}
		inflight = append(inflight, flight{i: i, msg: msg, fut: fut, began: began})
	}
	for _, f := range inflight {
		settle(f)
	}
	return errs
}

// expectAttempts bounds how often PublishExpecting looks again.
const expectAttempts = 5

// PublishExpecting publishes ev only while the last message on the subject
// filter is still the one look saw. look returns that message's sequence
// (0: none) and whether to publish at all; when something was stored on
// filter between the look and the publish, it looks again, up to
// expectAttempts times, and then returns ErrLastChanged. It reports
// whether ev was published (or already stored under its id).
func (p *JetStreamPublisher) PublishExpecting(ctx context.Context, ev events.Event, id, filter string, look func(context.Context) (seq uint64, publish bool, err error)) (bool, error) {
	for attempt := 1; ; attempt++ {
		seq, publish, err := look(ctx)
		if err != nil || !publish {
			return false, err
		}
		err = p.PublishAll(ctx, []Outgoing{{Ctx: ctx, Event: ev, ID: id, ExpectLast: filter, ExpectSeq: seq}})[0]
		if !errors.Is(err, ErrLastChanged) || attempt == expectAttempts {
			return err == nil, err
		}
	}
}

// lastChanged marks JetStream's refusal of an expected last sequence as
// ErrLastChanged.
func lastChanged(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: %w", ErrLastChanged, err)
	}
	return err
}
