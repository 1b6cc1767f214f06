package health_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/health"
)

func TestProbe(t *testing.T) {
	connected := errors.New("not connected")
	gate := health.NewGate("watches not synced")
	p := health.New()
	p.Live("nats", func() error { return nil })
	p.Ready("nats", func() error { return connected })
	p.Ready("service", gate.Check)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	steps := []struct {
		name       string
		do         func()
		path       string
		wantStatus int
		wantBody   string
	}{
		{"alive while not ready", nil, "/healthz", 200, "ok"},
		{"not ready names every failing check", nil, "/readyz", 503, "nats: not connected\nservice: watches not synced"},
		{"connected but not synced", func() { connected = nil }, "/readyz", 503, "service: watches not synced"},
		{"the parts waited for are named", func() { gate.Wait("ledger", "job objects", "ledger") }, "/readyz", 503, "service: watches not synced (waiting for ledger, job objects)"},
		{"a loaded part is no longer named", func() { gate.Loaded("ledger") }, "/readyz", 503, "service: watches not synced (waiting for job objects)"},
		{"ready once the gate opens", gate.Open, "/readyz", 200, "ok"},
		{"a failed liveness check fails readiness too", func() { p.Live("nats", func() error { return errors.New("connection closed") }) }, "/readyz", 503, "nats: connection closed"},
		{"and liveness", nil, "/healthz", 503, "nats: connection closed"},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		status, body := get(s.path)
		if status != s.wantStatus || body != s.wantBody {
			t.Errorf("%s: GET %s = %d %q, want %d %q", s.name, s.path, status, body, s.wantStatus, s.wantBody)
		}
	}
}
