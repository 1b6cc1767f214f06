package watcher

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/natstest"
)

// An object deleted, made anew and deleted again is announced as two
// deletions, each stored; a deletion retried after its announcement
// failed keeps its id, and so does one a restarted watcher makes from
// what the bucket holds.
func TestDeletionsAreEachTheirOwnEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, configstore.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	pub := &failingPublisher{pub: bus.NewPublisher(js, events.Source("watcher"))}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	newService := func() *Service {
		return &Service{kv: kv, pub: pub, stores: map[string]cache.Store{configstore.KindResourceFlavor: store}, written: map[string]writtenValue{}}
	}
	s := newService()
	it := item{kind: configstore.KindResourceFlavor, key: "spot"}
	flavor := func(label string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("kueue.x-k8s.io/v1beta1")
		u.SetKind("ResourceFlavor")
		u.SetName("spot")
		u.SetLabels(map[string]string{"made": label})
		return u
	}
	create := func(label string) {
		t.Helper()
		if err := store.Add(flavor(label)); err != nil {
			t.Fatal(err)
		}
		if err := s.sync(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(label string) {
		t.Helper()
		if err := store.Delete(flavor(label)); err != nil {
			t.Fatal(err)
		}
	}

	create("first")
	remove("first")
	pub.fail = true
	if err := s.sync(ctx, it); err == nil {
		t.Fatal("a deletion whose announcement failed reported no error")
	}
	pub.fail = false
	if err := s.sync(ctx, it); err != nil {
		t.Fatal(err)
	}
	create("second")
	remove("second")
	// A restarted watcher knows only what the bucket holds.
	s = newService()
	if err := s.sync(ctx, it); err != nil {
		t.Fatal(err)
	}

	var got []string
	ids := map[string]bool{}
	for seq := uint64(1); ; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			break
		}
		env, err := events.DecodeParts(msg.Subject, msg.Header, msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		var ev events.ConfigChangedV1
		if err := env.As(&ev); err != nil {
			t.Fatal(err)
		}
		ids[env.ID] = true
		if ev.Deleted {
			got = append(got, "deleted")
		} else {
			got = append(got, "changed")
		}
	}
	if diff := cmp.Diff([]string{"changed", "deleted", "changed", "deleted"}, got); diff != "" {
		t.Errorf("events stored (-want +got):\n%s", diff)
	}
	if len(ids) != len(got) {
		t.Errorf("%d ids for %d events", len(ids), len(got))
	}
	if pub.ids[0] == "" || len(pub.ids) != 5 || pub.ids[1] != pub.ids[2] {
		t.Errorf("ids published %v: want the failed deletion's id again on its retry", pub.ids)
	}
}

// failingPublisher refuses every publish while fail is set; it records
// the id of each publish tried.
type failingPublisher struct {
	pub  events.Publisher
	fail bool
	ids  []string
}

func (p *failingPublisher) Publish(ctx context.Context, ev events.Event, id string) error {
	p.ids = append(p.ids, id)
	if p.fail {
		return jetstream.ErrNoStreamResponse
	}
	return p.pub.Publish(ctx, ev, id)
}
