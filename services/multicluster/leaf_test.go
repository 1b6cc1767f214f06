package multicluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/embeddednats"
	"github.com/sluice-dev/sluice/services/multicluster"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// leafPair starts a manager's server that accepts workers w1 and w2 as
// leaf nodes, and w1's server joined to it. It returns the manager's
// JetStream and w1's view of it, through its leaf node.
func leafPair(t *testing.T) (manager jetstream.JetStream, w1 jetstream.JetStream) {
	t.Helper()
	port := freePort(t)
	var users []embeddednats.LeafUser
	for _, w := range []string{"w1", "w2"} {
		pub, sub := multicluster.WorkerPermissions(w, "hub")
		users = append(users, embeddednats.LeafUser{Name: w, Password: "secret-" + w, Publish: pub, Subscribe: sub})
	}
	hub, err := embeddednats.Start(embeddednats.Options{JetStreamDomain: "hub", LeafPort: port, LeafUsers: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Shutdown)
	worker, err := embeddednats.Start(embeddednats.Options{JetStreamDomain: "w1", LeafRemotes: []string{fmt.Sprintf("nats-leaf://w1:secret-w1@127.0.0.1:%d", port)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(worker.Shutdown)
	deadline := time.Now().Add(10 * time.Second)
	for worker.LeafConnections() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker's leaf node did not connect")
		}
		time.Sleep(50 * time.Millisecond)
	}
	hnc, err := hub.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hnc.Close)
	manager, err = jetstream.New(hnc)
	if err != nil {
		t.Fatal(err)
	}
	wnc, err := nats.Connect(worker.ClientURL(), nats.CustomInboxPrefix(multicluster.InboxPrefix("w1")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	w1, err = jetstream.NewWithDomain(wnc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if err := multicluster.SetupStream(context.Background(), manager, 1); err != nil {
		t.Fatal(err)
	}
	return manager, w1
}

// A worker reaches its own offers and reports through its leaf node, and
// nothing of another worker's, nor the stream itself; it may not make
// consumers, not even its own (the manager's setup does).
func TestWorkerLeafPermissions(t *testing.T) {
	manager, w1 := leafPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := events.WorkloadRef{Kind: "job", Namespace: "ns", Name: "a", UID: "u-1"}
	for _, w := range []string{"w1", "w2"} {
		raw, _ := json.Marshal(multicluster.Message{Type: multicluster.Offer, Workload: ref, Admission: "adm", Object: json.RawMessage(`{"kind":"Job"}`)})
		if _, err := manager.Publish(ctx, multicluster.ToWorker(w, ref.UID), raw); err != nil {
			t.Fatal(err)
		}
	}
	// The manager's setup makes w1's consumer; w1 reads its offer.
	if _, err := bus.EnsureConsumer(ctx, manager, multicluster.Stream, multicluster.WorkerConsumer("w1")); err != nil {
		t.Fatal(err)
	}
	cons, err := bus.EnsureConsumer(ctx, w1, multicluster.Stream, multicluster.WorkerConsumer("w1"))
	if err != nil {
		t.Fatalf("w1's consumer: %v", err)
	}
	batch, err := cons.Fetch(5, jetstream.FetchMaxWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, m.Subject())
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if want := multicluster.ToWorker("w1", ref.UID); len(got) != 1 || got[0] != want {
		t.Fatalf("w1 read %v, want [%s]", got, want)
	}
	// w1 reports.
	if _, err := w1.Publish(ctx, multicluster.FromWorker("w1", ref.UID), []byte(`{}`)); err != nil {
		t.Fatalf("w1's report: %v", err)
	}
	// Nothing of w2's, nor the stream's management. A refused request is
	// never answered: each gets a short wait of its own.
	refused := func(what string, try func(context.Context) error) {
		t.Helper()
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := try(short); err == nil {
			t.Errorf("w1 %s", what)
		} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) &&
			!errors.Is(err, jetstream.ErrNoStreamResponse) {
			t.Errorf("w1 %s: refused with %v, want no answer", what, err)
		}
	}
	refused("reported as w2", func(c context.Context) error {
		_, err := w1.Publish(c, multicluster.FromWorker("w2", ref.UID), []byte(`{}`))
		return err
	})
	refused("made a consumer of w2's offers", func(c context.Context) error {
		_, err := w1.CreateOrUpdateConsumer(c, multicluster.Stream, jetstream.ConsumerConfig{Durable: multicluster.WorkerDurable("w2"),
			FilterSubject: multicluster.WorkerFilter("w2")})
		return err
	})
	refused("pointed its consumer at w2's offers", func(c context.Context) error {
		_, err := w1.CreateOrUpdateConsumer(c, multicluster.Stream, jetstream.ConsumerConfig{Durable: multicluster.WorkerDurable("w1"),
			FilterSubject: multicluster.WorkerFilter("w2")})
		return err
	})
	refused("had its offers delivered to a subject of its choosing", func(c context.Context) error {
		_, err := w1.CreateOrUpdateConsumer(c, multicluster.Stream, jetstream.ConsumerConfig{Durable: multicluster.WorkerDurable("w1"),
			FilterSubject: multicluster.WorkerFilter("w1"), DeliverSubject: bus.WatchSubject("sluice-fence") + ".ns.a"})
		return err
	})
	refused("made its consumer with filters outside the request's subject", func(c context.Context) error {
		_, err := w1.CreateOrUpdateConsumer(c, multicluster.Stream, jetstream.ConsumerConfig{Durable: multicluster.WorkerDurable("w1"),
			FilterSubjects: []string{multicluster.WorkerFilter("w1"), multicluster.WorkerFilter("w2")}})
		return err
	})
	refused("deleted the stream", func(c context.Context) error { return w1.DeleteStream(c, multicluster.Stream) })
	st, err := manager.Stream(ctx, multicluster.Stream)
	if err != nil {
		t.Fatalf("the stream: %v", err)
	}
	if _, err := st.GetLastMsgForSubject(ctx, multicluster.FromWorker("w2", ref.UID)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a report stored as w2's: %v", err)
	}
	if _, err := st.GetLastMsgForSubject(ctx, multicluster.FromWorker("w1", ref.UID)); err != nil {
		t.Errorf("w1's report not stored: %v", err)
	}
}
