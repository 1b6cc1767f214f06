package jobframework

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-dev/sluice/internal/certfile"
)

func TestWebhookServesTLSWithGeneratedCA(t *testing.T) {
	w := newTestWebhook(t)
	stop := runWebhook(t, w)
	client := clientTrusting(t, w.CABundle())

	for _, host := range []string{"127.0.0.1", "localhost"} {
		t.Run(host, func(t *testing.T) {
			u, err := w.URL(host, testKind)
			if err != nil {
				t.Fatalf("URL() unexpected error: %v", err)
			}
			health := strings.Replace(u, MutatePath(testKind), HealthzPath, 1)
			resp, err := client.Get(health)
			if err != nil {
				t.Fatalf("GET %s with the generated CA: %v", health, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s = %s, want 200", health, resp.Status)
			}
		})
	}

	t.Run("a client without the CA is refused", func(t *testing.T) {
		u, _ := w.URL("127.0.0.1", testKind)
		plain := &http.Client{Timeout: 5 * time.Second}
		resp, err := plain.Post(u, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("POST without the CA succeeded")
		}
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("error = %v, want an unknown-authority error", err)
		}
	})

	t.Run("a host outside the certificate is refused", func(t *testing.T) {
		addr, _ := w.Listen()
		_, port, _ := net.SplitHostPort(addr.String())
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(w.CABundle())
		conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", port), &tls.Config{RootCAs: roots, ServerName: "webhook.elsewhere.example"})
		if err == nil {
			conn.Close()
			t.Fatalf("TLS with a wrong server name succeeded")
		}
	})

	if err := stop(); err != nil {
		t.Errorf("Run() after cancel = %v, want nil", err)
	}
	if _, err := client.Get("https://" + mustListen(t, w) + HealthzPath); err == nil {
		t.Errorf("server still answers after shutdown")
	}
}

func TestWebhookCertificateHosts(t *testing.T) {
	w := newTestWebhook(t, WithHosts("sluice-webhook.sluice-system.svc", "10.0.0.7", "::1"))
	leaf := w.cert.Leaf
	got := struct {
		DNS []string
		IPs []string
	}{DNS: leaf.DNSNames}
	for _, ip := range leaf.IPAddresses {
		got.IPs = append(got.IPs, ip.String())
	}
	want := struct {
		DNS []string
		IPs []string
	}{DNS: []string{"sluice-webhook.sluice-system.svc"}, IPs: []string{"10.0.0.7", "::1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("certificate SANs mismatch (-want +got):\n%s", diff)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(w.CABundle())
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "sluice-webhook.sluice-system.svc", Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate does not verify against the CA bundle: %v", err)
	}
}

func TestWebhookServesGivenCertFiles(t *testing.T) {
	sc, err := certfile.SelfSigned([]string{"localhost"}, nil, time.Hour, time.Now())
	if err != nil {
		t.Fatalf("generate certificate: %v", err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := sc.Write(dir); err != nil {
		t.Fatal(err)
	}

	w := newTestWebhook(t, WithCertFiles(certFile, keyFile), WithCABundle(sc.CAPEM))
	if !bytes.Equal(w.CABundle(), sc.CAPEM) {
		t.Errorf("CABundle() is not the given bundle")
	}
	runWebhook(t, w)
	u, err := w.URL("localhost", testKind)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := clientTrusting(t, sc.CAPEM).Get(strings.Replace(u, MutatePath(testKind), HealthzPath, 1))
	if err != nil {
		t.Fatalf("GET healthz with the given certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz status = %d", resp.StatusCode)
	}
}

func TestNewWebhookOptionErrors(t *testing.T) {
	cases := []struct {
		name string
		opt  WebhookOption
	}{
		{name: "empty address", opt: WithAddress("")},
		{name: "no hosts", opt: WithHosts()},
		{name: "blank host", opt: WithHosts("localhost", " ")},
		{name: "cert without key", opt: WithCertFiles("tls.crt", "")},
		{name: "missing cert files", opt: WithCertFiles("/nonexistent/tls.crt", "/nonexistent/tls.key")},
		{name: "zero validity", opt: WithCertValidity(0)},
		{name: "negative shutdown timeout", opt: WithShutdownTimeout(-time.Second)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewWebhook(nil, tc.opt); err == nil {
				t.Errorf("NewWebhook() succeeded, want an error")
			}
		})
	}
}

func TestWebhookRunTwice(t *testing.T) {
	w := newTestWebhook(t)
	runWebhook(t, w)
	// Wait until the first Run owns the server.
	client := clientTrusting(t, w.CABundle())
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Get("https://" + mustListen(t, w) + HealthzPath)
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never became ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Errorf("second Run() succeeded, want an error")
	}
}

func newTestWebhook(t *testing.T, opts ...WebhookOption) *Webhook {
	t.Helper()
	opts = append([]WebhookOption{WithAddress("127.0.0.1:0"), WithLogger(zerolog.New(io.Discard))}, opts...)
	w, err := NewWebhook(nil, opts...)
	if err != nil {
		t.Fatalf("NewWebhook() unexpected error: %v", err)
	}
	return w
}

func runWebhook(t *testing.T, w *Webhook) (stop func() error) {
	t.Helper()
	if _, err := w.Listen(); err != nil {
		t.Fatalf("Listen() unexpected error: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("Run did not return after cancel")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func clientTrusting(t *testing.T, caPEM []byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("CA bundle holds no certificate: %q", caPEM)
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
}

func mustListen(t *testing.T, w *Webhook) string {
	t.Helper()
	addr, err := w.Listen()
	if err != nil {
		t.Fatal(err)
	}
	return addr.String()
}

// testKind is a kind the server tests name in URLs; no adapter serves it.
var testKind = Kind{Name: "job", GVK: schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}, Resource: "jobs"}
