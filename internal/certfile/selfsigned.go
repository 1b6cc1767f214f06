package certfile

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Generated is a serving certificate and the PEM of the CA that signed it.
type Generated struct {
	Cert  tls.Certificate
	CAPEM []byte
}

// SelfSigned creates a throwaway CA and a serving certificate it signs for
// the given DNS names and IPs, valid for validity: for a webhook or an
// aggregated API that no one else issues a certificate for. The CA's key
// is dropped once the serving certificate is signed, so nothing else can
// ever be issued under it. kube-apiserver checks subjectAltNames only
// (never the common name), so every host goes there.
func SelfSigned(dnsNames []string, ips []net.IP, validity time.Duration, now time.Time) (Generated, error) {
	if len(dnsNames) == 0 && len(ips) == 0 {
		return Generated{}, fmt.Errorf("serving certificate needs at least one DNS name or IP")
	}
	notBefore := now.Add(-time.Hour) // tolerate clock skew with the API server
	notAfter := now.Add(validity)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Generated{}, fmt.Errorf("generate CA key: %w", err)
	}
	caSerial, err := randomSerial()
	if err != nil {
		return Generated{}, err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          caSerial,
		Subject:               pkix.Name{CommonName: "sluice self-signed CA", Organization: []string{"sluice.dev"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return Generated{}, fmt.Errorf("self-sign CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Generated{}, fmt.Errorf("parse CA: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Generated{}, fmt.Errorf("generate serving key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return Generated{}, err
	}
	cn := "sluice"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	leafTemplate := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"sluice.dev"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              dnsNames,
		IPAddresses:           ips,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTemplate, caCert, &key.PublicKey, caKey)
	if err != nil {
		return Generated{}, fmt.Errorf("sign serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		return Generated{}, fmt.Errorf("parse serving certificate: %w", err)
	}

	return Generated{
		Cert: tls.Certificate{
			Certificate: [][]byte{leafDER, caDER},
			PrivateKey:  key,
			Leaf:        leaf,
		},
		CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}, nil
}

// Write writes the certificate as dir/tls.crt (with its CA), dir/tls.key
// and dir/ca.crt, the files Load reads and a Secret of type
// kubernetes.io/tls holds.
func (g Generated) Write(dir string) error {
	var certPEM bytes.Buffer
	for _, der := range g.Cert.Certificate {
		if err := pem.Encode(&certPEM, &pem.Block{Type: "CERTIFICATE", Bytes: der}); err != nil {
			return err
		}
	}
	key, ok := g.Cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return fmt.Errorf("certificate key is a %T, not ECDSA", g.Cert.PrivateKey)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"tls.crt": certPEM.Bytes(), "tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), "ca.crt": g.CAPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return n, nil
}
