// Package events declares every event Sluice publishes, once, and maps them
// to and from NATS messages.
//
// Each event is a Go struct with a version suffix (WorkloadAdmittedV1, …)
// implementing Event: Type returns its CloudEvents type
// dev.sluice.<entity>.v1.<transition>, NATSSubject the subject it is
// published on (sluice.<entity>.v1.<transition>.<kind>.<namespace>.<name>,
// see SubjectFilter and EncodeToken), CESubject the CloudEvents subject
// ("namespace/name") and Validate checks its fields. All lists every type;
// each has a JSON Schema in the repository's schemas/ directory at
// schemas/<type>.json, and a test keeps the two in agreement. A payload may
// gain optional fields; a breaking change is a new V2 type beside the old one.
//
// On the wire an event is a CloudEvent 1.0 in binary content mode (the NATS
// protocol binding): the JSON payload is the message data and the
// attributes are ce-* headers, plus the W3C traceparent header and
// Nats-Msg-Id = ce-id for JetStream de-duplication. NewMessage renders an
// event; Decode (or DecodeParts) reads one into an Envelope, whose As and
// Event methods give the typed payload. Every decoding failure is a
// *DecodeError wrapping ErrInvalidEvent: such a message is poison and will
// never decode, however often it is redelivered (IsPoison).
//
// IDs are deterministic (ID): the same logical event always gets the same
// id, so duplicates are dropped by JetStream and recognised by consumers.
//
// The Type* string constants also name records of `sluice simulate`, which
// uses the same type names for its output.
package events
