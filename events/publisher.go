package events

import "context"

// Publisher publishes an event under its deterministic id: a second
// publish of the same id is a duplicate the stream drops. Every service
// publishes through one (internal/bus.JetStreamPublisher over JetStream).
type Publisher interface {
	Publish(ctx context.Context, ev Event, id string) error
}
