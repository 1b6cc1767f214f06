package pki

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEnsureAndKubeconfig(t *testing.T) {
	f := Files{Dir: filepath.Join(t.TempDir(), "pki")}
	made, err := Ensure(f)
	if err != nil || !made {
		t.Fatalf("Ensure = %v, %v", made, err)
	}
	if made, err := Ensure(f); err != nil || made {
		t.Errorf("second Ensure = %v, %v; want to keep the files", made, err)
	}
	ca := readCert(t, f.CACert())
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	api := readCert(t, f.APIServerCert())
	if _, err := api.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("apiserver certificate does not verify for 127.0.0.1: %v", err)
	}
	admin := readCert(t, f.ClientCert("admin"))
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate does not verify: %v", err)
	}
	if len(admin.Subject.Organization) != 1 || admin.Subject.Organization[0] != "system:masters" {
		t.Errorf("admin organization = %v", admin.Subject.Organization)
	}
	if st, err := os.Stat(f.CAKey()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode: %v %v", st.Mode(), err)
	}

	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := WriteKubeconfig(kc, "https://127.0.0.1:6443", f, "admin"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || len(cfg.CAData) == 0 || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 {
		t.Errorf("kubeconfig gives %+v", cfg)
	}
}
