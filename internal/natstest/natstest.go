package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/embeddednats"
)

// Start starts a server and returns its client URL and a shutdown function.
// Shutdown is idempotent and also runs at the end of the test.
func Start(t testing.TB) (url string, shutdown func()) {
	t.Helper()
	s := StartServer(t, embeddednats.Options{})
	return s.ClientURL(), s.Shutdown
}

// StartServer starts a server with opts; an empty StoreDir becomes
// t.TempDir(), so a test can restart a server on the same store by passing
// the first one's StoreDir (and Port) again.
func StartServer(t testing.TB, opts embeddednats.Options) *embeddednats.Server {
	t.Helper()
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	s, err := embeddednats.Start(opts)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Connect connects to url and returns the connection and its JetStream
// context; the connection is closed at the end of the test.
func Connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// JetStream starts a server and returns a JetStream context connected to it.
func JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	url, _ := Start(t)
	_, js := Connect(t, url)
	return js
}
