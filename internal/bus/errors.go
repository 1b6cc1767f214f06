package bus

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
)

// Sentinel errors.
var (
	// ErrPoison marks a handler failure that no redelivery can fix: the
	// runner moves the message to the dead-letter subject and terminates it.
	// Wrap it (fmt.Errorf("...: %w", bus.ErrPoison) or Poison(err)). Errors
	// wrapping events.ErrInvalidEvent (from Envelope.As, for example) are
	// treated the same way.
	ErrPoison = errors.New("poison message")
	// ErrInvalidConfig is wrapped by Config.Validate.
	ErrInvalidConfig = errors.New("bus: invalid config")
	// ErrInvalidSpec is wrapped by ConsumerSpec.Validate.
	ErrInvalidSpec = errors.New("bus: invalid consumer spec")
	// ErrHandlerPanic is wrapped when a handler panics; the message is
	// retried like any transient failure.
	ErrHandlerPanic = errors.New("bus: handler panicked")
	// ErrNotSetUp: a stream, bucket or durable consumer is missing or not
	// as this version of Sluice needs it; `sluice setup` makes it so.
	ErrNotSetUp = errors.New("bus: not set up")
	// ErrNotAKey: a bucket's stream held a message outside its keys.
	ErrNotAKey = errors.New("bus: not a key of the bucket")
)

// Poison marks err as poison (see ErrPoison).
func Poison(err error) error {
	if err == nil {
		return ErrPoison
	}
	return fmt.Errorf("%w: %w", ErrPoison, err)
}

// IsPoison reports whether err means the message must go to the dead-letter
// subject rather than be retried.
func IsPoison(err error) bool { return errors.Is(err, ErrPoison) || events.IsPoison(err) }

// IsRevisionConflict reports whether a KeyValue Update (compare-and-set) or a
// Create lost a race: the key's revision was not the expected one. Single
// replica buckets report error code 10071 (jetstream.ErrKeyExists),
// replicated ones 10164; nats.go maps both to ErrKeyRevisionMismatch for
// Update.
func IsRevisionConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}
