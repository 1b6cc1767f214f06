package events

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error that makes a message unusable for any
// consumer wraps ErrInvalidEvent, so a consumer can tell a poison message
// (retrying it never helps) from a transient failure with IsPoison.
var (
	// ErrInvalidEvent marks an event or message that is malformed: missing
	// or invalid CloudEvents attributes, an unknown type, or a payload that
	// is not valid JSON for its type.
	ErrInvalidEvent = errors.New("invalid event")
	// ErrUnknownType is wrapped when the CloudEvents type is not registered.
	ErrUnknownType = errors.New("unknown event type")
	// ErrInvalidSubject is wrapped when a NATS subject built from an event
	// has an empty token or a character outside [A-Za-z0-9_-].
	ErrInvalidSubject = errors.New("invalid subject")
	// ErrTypeMismatch is wrapped by Envelope.As when the target Go type does
	// not belong to the envelope's CloudEvents type.
	ErrTypeMismatch = errors.New("event type mismatch")
)

// Reason names why a message was refused. It is short, stable and safe to
// put in a header (the dead-letter queue carries it).
type Reason string

// Reasons carried by DecodeError.
const (
	// ReasonMissingAttribute: a required ce-* header is absent or empty.
	ReasonMissingAttribute Reason = "missing-attribute"
	// ReasonInvalidAttribute: a ce-* header is present but malformed.
	ReasonInvalidAttribute Reason = "invalid-attribute"
	// ReasonUnsupportedContent: the content mode or media type is not
	// binary-mode JSON.
	ReasonUnsupportedContent Reason = "unsupported-content"
	// ReasonUnknownType: ce-type is not a registered event type.
	ReasonUnknownType Reason = "unknown-type"
	// ReasonBadData: the payload is not JSON, or not JSON of the type's shape.
	ReasonBadData Reason = "bad-data"
	// ReasonInvalidData: the payload decodes but breaks the type's rules
	// (for example a workload without a name).
	ReasonInvalidData Reason = "invalid-data"
	// ReasonTypeMismatch: Envelope.As was given a value of another type.
	ReasonTypeMismatch Reason = "type-mismatch"
	// ReasonSubjectMismatch: the payload is about another workload (or
	// object) than the NATS subject, or the ce-subject, the message came
	// on: a consumer that filters by subject would act on the wrong one.
	ReasonSubjectMismatch Reason = "subject-mismatch"
)

// DecodeError says why a NATS message or its payload is not a usable event.
// It always matches ErrInvalidEvent with errors.Is.
type DecodeError struct {
	// Reason classifies the failure.
	Reason Reason
	// Field is the header or attribute concerned, if any (e.g. "ce-id").
	Field string
	// Err is the underlying cause, if any.
	Err error
}

// Error implements error.
func (e *DecodeError) Error() string {
	msg := "events: " + string(e.Reason)
	if e.Field != "" {
		msg += " " + e.Field
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrInvalidEvent and the cause, so errors.Is matches both.
func (e *DecodeError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidEvent}
	}
	return []error{ErrInvalidEvent, e.Err}
}

// IsPoison reports whether err means the message can never be handled,
// however often it is redelivered.
func IsPoison(err error) bool { return errors.Is(err, ErrInvalidEvent) }

// ReasonOf returns the Reason of the first DecodeError in err's chain, or ""
// when there is none.
func ReasonOf(err error) Reason {
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Reason
	}
	return ""
}

func decodeErr(reason Reason, field string, format string, args ...any) *DecodeError {
	var cause error
	if format != "" {
		cause = fmt.Errorf(format, args...)
	}
	return &DecodeError{Reason: reason, Field: field, Err: cause}
}

// invalidf wraps a validation failure of an event's fields.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidEvent}, args...)...)
}
