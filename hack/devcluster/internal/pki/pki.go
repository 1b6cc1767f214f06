// Package pki makes the certificates and keys of a devcluster: one CA, the
// serving certificates (kube-apiserver, and one shared by the other
// components' health endpoints), a client certificate per user and the
// service-account signing key. Everything is for 127.0.0.1 only.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Client users that get a certificate. All but the front proxy are in
// system:masters: this is a development cluster on loopback, and it keeps
// RBAC out of the way of the components while RBAC still applies to
// everything else. FrontProxy is the identity kube-apiserver presents to
// aggregated API servers.
var Clients = []string{"admin", "kube-controller-manager", "kube-scheduler", "kwok", FrontProxy}

// FrontProxy is the user of the front-proxy client certificate.
const FrontProxy = "front-proxy-client"

const validity = 10 * 365 * 24 * time.Hour

// Files names the files in a PKI directory.
type Files struct{ Dir string }

func (f Files) path(name string) string { return filepath.Join(f.Dir, name) }

// CACert is the CA certificate that signed every other certificate.
func (f Files) CACert() string { return f.path("ca.crt") }

// CAKey is the CA's private key.
func (f Files) CAKey() string { return f.path("ca.key") }

// APIServerCert is kube-apiserver's serving certificate.
func (f Files) APIServerCert() string { return f.path("apiserver.crt") }

// APIServerKey is kube-apiserver's serving key.
func (f Files) APIServerKey() string { return f.path("apiserver.key") }

// ServingCert is the serving certificate of the other components.
func (f Files) ServingCert() string { return f.path("serving.crt") }

// ServingKey is the serving key of the other components.
func (f Files) ServingKey() string { return f.path("serving.key") }

// SAKey is the private key that signs service-account tokens.
func (f Files) SAKey() string { return f.path("sa.key") }

// SAPub is the public key that verifies service-account tokens.
func (f Files) SAPub() string { return f.path("sa.pub") }

// ClientCert is the client certificate of user.
func (f Files) ClientCert(user string) string { return f.path(user + ".crt") }

// ClientKey is the client key of user.
func (f Files) ClientKey(user string) string { return f.path(user + ".key") }

func (f Files) all() []string {
	out := []string{f.CACert(), f.CAKey(), f.APIServerCert(), f.APIServerKey(),
		f.ServingCert(), f.ServingKey(), f.SAKey(), f.SAPub()}
	for _, u := range Clients {
		out = append(out, f.ClientCert(u), f.ClientKey(u))
	}
	return out
}

// Ensure makes the PKI in f.Dir unless all of its files are already there.
// It reports whether it made new files.
func Ensure(f Files) (bool, error) {
	complete := true
	for _, p := range f.all() {
		if _, err := os.Stat(p); err != nil {
			complete = false
			break
		}
	}
	if complete {
		return false, nil
	}
	if err := os.MkdirAll(f.Dir, 0o700); err != nil {
		return false, fmt.Errorf("create pki dir: %w", err)
	}
	if err := generate(f); err != nil {
		return false, err
	}
	return true, nil
}

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func generate(f Files) error {
	now := time.Now().Add(-time.Hour)
	caKey, err := newKey()
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice-devcluster-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("parse CA certificate: %w", err)
	}
	ca := keyPair{cert: caCert, key: caKey}
	if err := writePair(f.CACert(), f.CAKey(), caDER, caKey); err != nil {
		return err
	}

	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
	apiserverIPs := append([]net.IP{net.ParseIP(ServiceIP)}, loopback...)
	apiserverNames := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local"}
	if err := issue(ca, f.APIServerCert(), f.APIServerKey(), pkix.Name{CommonName: "kube-apiserver"},
		apiserverNames, apiserverIPs, x509.ExtKeyUsageServerAuth, 2); err != nil {
		return err
	}
	if err := issue(ca, f.ServingCert(), f.ServingKey(), pkix.Name{CommonName: "devcluster-components"},
		[]string{"localhost"}, loopback, x509.ExtKeyUsageServerAuth, 3); err != nil {
		return err
	}
	for i, u := range Clients {
		name := pkix.Name{CommonName: "system:" + u, Organization: []string{"system:masters"}}
		switch u {
		case "admin":
			name.CommonName = "devcluster-admin"
		case FrontProxy:
			name = pkix.Name{CommonName: FrontProxy}
		}
		if err := issue(ca, f.ClientCert(u), f.ClientKey(u), name, nil, nil, x509.ExtKeyUsageClientAuth, int64(10+i)); err != nil {
			return err
		}
	}

	saKey, err := newKey()
	if err != nil {
		return err
	}
	if err := writeKey(f.SAKey(), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return fmt.Errorf("encode service-account public key: %w", err)
	}
	return writePEM(f.SAPub(), "PUBLIC KEY", pub, 0o644)
}

// ServiceIP is the cluster IP of the kubernetes Service: the first address
// of the service range that devcluster gives kube-apiserver. It is only a
// name in certificates; nothing is ever sent to it.
const ServiceIP = "10.96.0.1"

func issue(ca keyPair, certPath, keyPath string, subject pkix.Name, dns []string, ips []net.IP,
	usage x509.ExtKeyUsage, serial int64) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      subject,
		NotBefore:    now,
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return fmt.Errorf("create certificate %s: %w", filepath.Base(certPath), err)
	}
	return writePair(certPath, keyPath, der, key)
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return k, nil
}

func writePair(certPath, keyPath string, der []byte, key crypto.Signer) error {
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func writeKey(path string, key crypto.Signer) error {
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return errors.New("only ECDSA keys are supported")
	}
	der, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		return fmt.Errorf("encode key %s: %w", filepath.Base(path), err)
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
