package baseline

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestClientsWatchApart: the generator's writes and its watch go over two
// connections, and both ask for protobuf.
func TestClientsWatchApart(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]bool{}
	var accepts []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		accepts = append(accepts, r.Header.Get("Accept"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"JobList","apiVersion":"batch/v1","metadata":{"resourceVersion":"1"},"items":[]}`))
	}))
	srv.StartTLS()
	defer srv.Close()
	c, err := Clients(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, err := c.Kube.BatchV1().Jobs("ns").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Watch.BatchV1().Jobs("ns").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 2 {
		t.Errorf("%d connections for two clients' four requests, want 2: %v", len(conns), conns)
	}
	for i, a := range accepts {
		if !strings.HasPrefix(a, "application/vnd.kubernetes.protobuf") {
			t.Errorf("request %d asked for %q, want protobuf first", i, a)
		}
	}
}
