package certfile

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writePair writes a self-signed certificate for host and its key.
func writePair(t *testing.T, host, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReloadWhenChanged: a renewed Secret is served without a restart, a
// broken one keeps the last good certificate serving.
func TestReloadWhenChanged(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, "first.example", certFile, keyFile)
	now := time.Unix(1000, 0)
	var errs []error
	fc, err := Load(certFile, keyFile, func() time.Time { return now }, func(err error) { errs = append(errs, err) })
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		t.Helper()
		c, err := fc.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.DNSNames[0]
	}
	writePair(t, "renewed.example", certFile, keyFile)
	if got := served(); got != "first.example" {
		t.Errorf("right after the change (not looked at yet): serving %s, want first.example", got)
	}
	now = now.Add(ReloadEvery)
	if got := served(); got != "renewed.example" {
		t.Errorf("after the reload interval: serving %s, want renewed.example", got)
	}
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(ReloadEvery)
	if got := served(); got != "renewed.example" {
		t.Errorf("after a broken write: serving %s, want the last good renewed.example", got)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), certFile) {
		t.Errorf("errors reported = %v, want one naming %s", errs, certFile)
	}
	if _, err := Load(filepath.Join(dir, "missing.crt"), keyFile, time.Now, nil); err == nil || !strings.Contains(err.Error(), "missing.crt") {
		t.Errorf("Load of a missing file: %v, want an error naming it", err)
	}
}

// TestSelfSignedWritten: a generated certificate written to a directory
// loads, and verifies for its host against the CA written beside it.
func TestSelfSignedWritten(t *testing.T) {
	g, err := SelfSigned([]string{"sluice-visibility.sluice-dev.svc", "localhost"}, nil, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := g.Write(dir); err != nil {
		t.Fatal(err)
	}
	p, err := Load(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "sluice-visibility.sluice-dev.svc", Roots: roots}); err != nil {
		t.Errorf("does not verify: %v", err)
	}
	if _, err := SelfSigned(nil, nil, time.Hour, time.Now()); err == nil {
		t.Error("a certificate for no host was made")
	}
}
