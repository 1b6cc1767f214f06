package kinds_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/services/integration/kinds"
)

// TestWatchClientsHaveTheirOwnConnection: requests of the writing clients
// share one connection, the watch clients' go over another.
func TestWatchClientsHaveTheirOwnConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"JobList","apiVersion":"batch/v1","metadata":{"resourceVersion":"1"},"items":[]}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	kc := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}

	_, kube, dyn, err := kinds.Clients(kc, []string{"job"})
	if err != nil {
		t.Fatal(err)
	}
	watchKube, watchDyn, err := kinds.WatchClients(kc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	jobs := schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	list := func(name string, f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	list("writing typed client", func() error { _, err := kube.BatchV1().Jobs("ns").List(ctx, metav1.ListOptions{}); return err })
	list("writing dynamic client", func() error { _, err := dyn.Resource(jobs).Namespace("ns").List(ctx, metav1.ListOptions{}); return err })
	if got := conns.Load(); got != 1 {
		t.Fatalf("the writing clients opened %d connections, want 1 shared", got)
	}
	list("watch typed client", func() error { _, err := watchKube.BatchV1().Jobs("ns").List(ctx, metav1.ListOptions{}); return err })
	if got := conns.Load(); got != 2 {
		t.Fatalf("after the watch client's request: %d connections, want 2 (its own)", got)
	}
	list("watch typed client again", func() error { _, err := watchKube.BatchV1().Jobs("ns").List(ctx, metav1.ListOptions{}); return err })
	if got := conns.Load(); got != 2 {
		t.Errorf("the watch client's second request opened a connection: %d, want it to keep its own", got)
	}
	list("watch dynamic client", func() error {
		_, err := watchDyn.Resource(jobs).Namespace("ns").List(ctx, metav1.ListOptions{})
		return err
	})
	if got := conns.Load(); got < 3 {
		t.Errorf("the dynamic watch client shared a connection: %d connections", got)
	}
}
