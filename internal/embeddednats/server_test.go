package embeddednats_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/embeddednats"
	"github.com/sluice-dev/sluice/internal/natstest"
)

func TestStartConnectPublish(t *testing.T) {
	url, shutdown := natstest.Start(t)
	if url == "" {
		t.Fatal("no client URL")
	}
	_, js := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.x", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	shutdown()
	shutdown() // idempotent
	if _, err := nats.Connect(url, nats.MaxReconnects(0), nats.Timeout(500*time.Millisecond)); err == nil {
		t.Error("server still accepts connections after shutdown")
	}
}

func TestInProcessAndRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	s, err := embeddednats.Start(embeddednats.Options{StoreDir: dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.ClientURL() != "" {
		t.Errorf("DontListen server has URL %q", s.ClientURL())
	}
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	s.Shutdown()

	s2, err := embeddednats.Start(embeddednats.Options{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown()
	nc2, err := s2.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	kv2, err := js2.KeyValue(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv2.Get(ctx, "k")
	if err != nil || string(e.Value()) != "v1" {
		t.Fatalf("after restart: %v %v", e, err)
	}
}

func TestTempStoreRemoved(t *testing.T) {
	s, err := embeddednats.Start(embeddednats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := s.StoreDir()
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temporary store %s not removed: %v", dir, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []embeddednats.Options{{Port: -1}, {Port: 70000}, {MaxStore: -1}, {ReadyTimeout: -time.Second},
		{LeafPort: 7422, LeafAdvertise: "no-port"}, {LeafAdvertise: "127.0.0.1:7422"}} {
		if _, err := embeddednats.Start(o); !errors.Is(err, embeddednats.ErrInvalidOptions) {
			t.Errorf("Start(%+v) = %v", o, err)
		}
	}
}
