package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluice-dev/sluice/events"
)

// Publisher publishes an event under its deterministic id (see events.ID)
// and returns once JetStream has stored it. Publishing the same id again
// within the de-duplication window succeeds without storing a second copy.
type Publisher interface {
	Publish(ctx context.Context, ev events.Event, id string) error
}

// JetStreamPublisher is the Publisher over a JetStream context.
type JetStreamPublisher struct {
	js     jetstream.JetStream
	source string
	stream string
	log    *zerolog.Logger
}

var _ Publisher = (*JetStreamPublisher)(nil)

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

// NewPublisher returns a publisher whose events carry ce-source source, e.g.
// events.Source("admission").
func NewPublisher(js jetstream.JetStream, source string, opts ...PublisherOption) *JetStreamPublisher {
	p := &JetStreamPublisher{js: js, source: source, stream: StreamEvents}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Publish implements Publisher.
func (p *JetStreamPublisher) Publish(ctx context.Context, ev events.Event, id string) error {
	_, err := p.PublishAck(ctx, ev, id)
	return err
}

// PublishAck publishes like Publish and returns JetStream's acknowledgement;
// its Duplicate field is true when the id had been stored already.
func (p *JetStreamPublisher) PublishAck(ctx context.Context, ev events.Event, id string) (*jetstream.PubAck, error) {
	msg, err := events.NewMessage(ctx, p.source, ev, id)
	if err != nil {
		return nil, fmt.Errorf("bus: publish: %w", err)
	}
	var opts []jetstream.PublishOpt
	if p.stream != "" {
		opts = append(opts, jetstream.WithExpectStream(p.stream))
	}
	ack, err := p.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return nil, fmt.Errorf("bus: publish %s %s: %w", ev.Type(), msg.Subject, err)
	}
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
	return ack, nil
}
