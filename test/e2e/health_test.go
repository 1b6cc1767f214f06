package e2e

import (
	"net/http"
	"testing"
)

// TestHealthEndpoints: `sluice dev` is alive and ready (every service
// synced, NATS connected) once the suite runs, and says it plainly.
func TestHealthEndpoints(t *testing.T) {
	for _, path := range []string{"/healthz", "/readyz"} {
		code, body, err := httpGet("http://" + env.httpAddr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if code != http.StatusOK || body != "ok" {
			t.Errorf("GET %s = %d %q, want 200 \"ok\"", path, code, body)
		}
	}
}
