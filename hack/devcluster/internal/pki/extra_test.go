package pki

import (
	"crypto/x509"
	"net"
	"path/filepath"
	"slices"
	"testing"
)

func TestEnsureClientAndAPIServerIP(t *testing.T) {
	f := Files{Dir: filepath.Join(t.TempDir(), "pki")}
	if _, err := Ensure(f); err != nil {
		t.Fatal(err)
	}
	if err := EnsureClient(f, "kubelet", "system:node:n1", []string{"system:nodes"}); err != nil {
		t.Fatal(err)
	}
	c := readCert(t, f.ClientCert("kubelet"))
	if c.Subject.CommonName != "system:node:n1" || !slices.Equal(c.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("kubelet certificate subject = %v", c.Subject)
	}
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, f.CACert()))
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kubelet certificate does not verify against the CA: %v", err)
	}
	// A second call keeps the certificate.
	if err := EnsureClient(f, "kubelet", "system:node:n1", []string{"system:nodes"}); err != nil {
		t.Fatal(err)
	}
	if again := readCert(t, f.ClientCert("kubelet")); again.SerialNumber.Cmp(c.SerialNumber) != 0 {
		t.Error("EnsureClient re-issued an existing certificate")
	}

	before := readCert(t, f.APIServerCert())
	if err := EnsureAPIServerIP(f, "10.88.0.1"); err != nil {
		t.Fatal(err)
	}
	after := readCert(t, f.APIServerCert())
	if !slices.ContainsFunc(after.IPAddresses, net.ParseIP("10.88.0.1").Equal) {
		t.Errorf("API server certificate IPs = %v, want 10.88.0.1 among them", after.IPAddresses)
	}
	if len(after.IPAddresses) != len(before.IPAddresses)+1 || !slices.Equal(after.DNSNames, before.DNSNames) {
		t.Errorf("re-issued certificate: IPs %v names %v; before: IPs %v names %v", after.IPAddresses, after.DNSNames, before.IPAddresses, before.DNSNames)
	}
	if _, err := after.Verify(x509.VerifyOptions{Roots: pool, DNSName: "10.88.0.1"}); err != nil {
		t.Errorf("re-issued certificate does not verify for 10.88.0.1: %v", err)
	}
	if err := EnsureAPIServerIP(f, "10.88.0.1"); err != nil {
		t.Fatal(err)
	}
	if again := readCert(t, f.APIServerCert()); again.SerialNumber.Cmp(after.SerialNumber) != 0 {
		t.Error("EnsureAPIServerIP re-issued a certificate that already names the IP")
	}
}
