// Package natstest starts an embedded NATS server with JetStream for tests:
// a file store in t.TempDir(), a random port on 127.0.0.1, and shutdown
// registered with t.Cleanup. It wraps internal/embeddednats, which
// `sluice dev` uses outside tests.
package natstest
