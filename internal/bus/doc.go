// Package bus is Sluice's plumbing over NATS JetStream: Setup creates the
// streams and KV buckets every service relies on, Publisher publishes events
// with their deterministic ids and waits for JetStream to store them, and Run
// drives a durable pull consumer with the ack contract of docs/events.md:
//
//   - the handler returned nil → ack, after the effect is durable;
//   - a malformed message or a handler error wrapping ErrPoison → a copy on
//     sluice.dlq.<consumer> (stream SLUICE_DLQ) with the reason in headers,
//     then Term, so one bad message never blocks the stream;
//   - any other error → NakWithDelay with exponential backoff, and after
//     MaxDeliver attempts → dead letter.
//
// IsRevisionConflict recognises a lost compare-and-set on a KV bucket
// (Update with a stale revision), the basis of the no-over-admission
// guarantee.
package bus
