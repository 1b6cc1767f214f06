package jobframework

import (
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
	"time"
)

// servingCert is a serving certificate and the PEM of the CA that signed it.
type servingCert struct {
	cert  tls.Certificate
	caPEM []byte
}

// selfSignedServingCert creates a throwaway CA and a serving certificate it
// signs for the given DNS names and IPs, valid for validity. The CA's key is
// dropped once the serving certificate is signed, so nothing else can ever
// be issued under it. kube-apiserver checks subjectAltNames only (never the
// common name), so every host goes there.
func selfSignedServingCert(dnsNames []string, ips []net.IP, validity time.Duration, now time.Time) (servingCert, error) {
	if len(dnsNames) == 0 && len(ips) == 0 {
		return servingCert{}, fmt.Errorf("serving certificate needs at least one DNS name or IP")
	}
	notBefore := now.Add(-time.Hour) // tolerate clock skew with the API server
	notAfter := now.Add(validity)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return servingCert{}, fmt.Errorf("generate CA key: %w", err)
	}
	caSerial, err := randomSerial()
	if err != nil {
		return servingCert{}, err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          caSerial,
		Subject:               pkix.Name{CommonName: "sluice job webhook CA", Organization: []string{"sluice.dev"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return servingCert{}, fmt.Errorf("self-sign CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return servingCert{}, fmt.Errorf("parse CA: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return servingCert{}, fmt.Errorf("generate serving key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return servingCert{}, err
	}
	cn := "sluice-job-webhook"
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
		return servingCert{}, fmt.Errorf("sign serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		return servingCert{}, fmt.Errorf("parse serving certificate: %w", err)
	}

	return servingCert{
		cert: tls.Certificate{
			Certificate: [][]byte{leafDER, caDER},
			PrivateKey:  key,
			Leaf:        leaf,
		},
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	}, nil
}

func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	return n, nil
}
