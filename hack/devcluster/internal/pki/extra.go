package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"slices"
)

// The real node's components get certificates of their own, issued by the
// devcluster CA on demand: a PKI made before the first "up --real-node"
// lacks them, and a cluster without a real node never needs them.

// EnsureClient issues a client certificate for user (the files
// ClientCert(user) and ClientKey(user)) with the subject commonName and
// groups, unless a certificate with that subject is already there.
func EnsureClient(f Files, user, commonName string, groups []string) error {
	if cert, err := loadCert(f.ClientCert(user)); err == nil {
		if cert.Subject.CommonName == commonName && slices.Equal(cert.Subject.Organization, groups) {
			if _, err := os.Stat(f.ClientKey(user)); err == nil {
				return nil
			}
		}
	}
	ca, err := loadCA(f)
	if err != nil {
		return err
	}
	serial, err := randomSerial()
	if err != nil {
		return err
	}
	name := pkix.Name{CommonName: commonName, Organization: groups}
	return issue(ca, f.ClientCert(user), f.ClientKey(user), name, nil, nil, x509.ExtKeyUsageClientAuth, serial)
}

// EnsureAPIServerIP makes sure kube-apiserver's serving certificate names
// ip, re-issuing it with the same names plus ip if not: a cluster first
// started without a real node has a certificate for loopback only.
func EnsureAPIServerIP(f Files, ip string) error {
	want := net.ParseIP(ip)
	if want == nil {
		return fmt.Errorf("not an IP address: %q", ip)
	}
	cert, err := loadCert(f.APIServerCert())
	if err != nil {
		return err
	}
	if slices.ContainsFunc(cert.IPAddresses, want.Equal) {
		return nil
	}
	ca, err := loadCA(f)
	if err != nil {
		return err
	}
	serial, err := randomSerial()
	if err != nil {
		return err
	}
	ips := append(slices.Clone(cert.IPAddresses), want)
	return issue(ca, f.APIServerCert(), f.APIServerKey(), cert.Subject, cert.DNSNames, ips, x509.ExtKeyUsageServerAuth, serial)
}

func loadCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no PEM certificate in %s", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate %s: %w", path, err)
	}
	return cert, nil
}

func loadCA(f Files) (keyPair, error) {
	cert, err := loadCert(f.CACert())
	if err != nil {
		return keyPair{}, fmt.Errorf("CA: %w", err)
	}
	data, err := os.ReadFile(f.CAKey())
	if err != nil {
		return keyPair{}, fmt.Errorf("read CA key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return keyPair{}, errors.New("no PEM key in " + f.CAKey())
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return keyPair{}, fmt.Errorf("parse CA key: %w", err)
	}
	return keyPair{cert: cert, key: key}, nil
}

// randomSerial makes serial numbers that cannot collide with the fixed
// ones of the certificates generate issues.
func randomSerial() (int64, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return 0, fmt.Errorf("serial number: %w", err)
	}
	return n.Int64() + 1000, nil
}
