package quota

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/natstest"
)

// TestLocalQueuesReadAgainOnlyAfterAChange: the LocalQueues' ClusterQueues
// are read from the configuration bucket again only when it changed.
func TestLocalQueuesReadAgainOnlyAfterAChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenKV(ctx, js, configstore.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	put := func(ns, name, cq string) {
		t.Helper()
		lq := v1beta1.LocalQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1beta1.LocalQueueSpec{ClusterQueue: cq}}
		b, err := json.Marshal(lq)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, configstore.Key(configstore.KindLocalQueue, ns, name), b); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(Config{Reconcile: time.Second}, js, bus.NewPublisher(js, events.Source("quota")))
	if err != nil {
		t.Fatal(err)
	}
	put("team-a", "main", "cq-a")
	first := s.lqToCQ(ctx)
	if diff := cmp.Diff(map[string]string{"team-a/main": "cq-a"}, first); diff != "" {
		t.Errorf("first read (-want +got):\n%s", diff)
	}
	if again := s.lqToCQ(ctx); reflect.ValueOf(again).Pointer() != reflect.ValueOf(first).Pointer() {
		t.Error("read again though the bucket did not change")
	}
	put("team-b", "main", "cq-b")
	put("team-a", "main", "cq-c")
	if diff := cmp.Diff(map[string]string{"team-a/main": "cq-c", "team-b/main": "cq-b"}, s.lqToCQ(ctx)); diff != "" {
		t.Errorf("after the bucket changed (-want +got):\n%s", diff)
	}
}
