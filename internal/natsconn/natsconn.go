// Package natsconn turns a service's NATS settings (URL, credentials, TLS)
// into a checked connection configuration. Every service connects the same
// way, each as its own NATS user, so that the server's permissions decide
// which subjects it may publish and subscribe.
package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// PasswordEnv names the environment variable a password is read from, so
// that it never appears in a process listing.
const PasswordEnv = "SLUICE_NATS_PASSWORD"

// Config is how a service reaches NATS. At most one kind of credentials is
// set: a credentials file (JWT and NKey seed, decentralized auth), an NKey
// seed file, or a user with the password in PasswordEnv.
type Config struct {
	// URL lists the servers, comma-separated (nats:// or tls://).
	URL string
	// CredsFile is a NATS credentials file (user JWT and seed).
	CredsFile string
	// NKeyFile holds an NKey user seed.
	NKeyFile string
	// User is a user name; its password comes from Password.
	User     string
	Password string
	// CAFile verifies the server's certificate (PEM); CertFile and
	// KeyFile are the client certificate, for servers that ask for one.
	CAFile   string
	CertFile string
	KeyFile  string
}

// Errors of the configuration.
var (
	ErrNoURL         = errors.New("no NATS URL")
	ErrCredentials   = errors.New("more than one kind of NATS credentials")
	ErrPasswordAlone = errors.New("a NATS password needs a user")
	ErrCertPair      = errors.New("a client certificate needs both --nats-cert and --nats-key")
)

// Validate checks that the settings agree and that the files they name
// can be read, naming the setting at fault.
func (c Config) Validate() error {
	if strings.TrimSpace(c.URL) == "" {
		return ErrNoURL
	}
	kinds := 0
	for _, set := range []bool{c.CredsFile != "", c.NKeyFile != "", c.User != ""} {
		if set {
			kinds++
		}
	}
	if kinds > 1 {
		return fmt.Errorf("%w: use one of --nats-creds, --nats-nkey, --nats-user", ErrCredentials)
	}
	if c.Password != "" && c.User == "" {
		return fmt.Errorf("%w (%s is set)", ErrPasswordAlone, PasswordEnv)
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return ErrCertPair
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-creds", c.CredsFile}, {"--nats-nkey", c.NKeyFile}, {"--nats-ca", c.CAFile},
		{"--nats-cert", c.CertFile}, {"--nats-key", c.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s %s: %w", f.flag, f.path, err)
		}
	}
	return nil
}

// InboxPrefix is the reply-subject prefix of a client named name (e.g.
// "sluice-admission"): a server can then let replies to its requests reach
// it alone ("_INBOX_sluice_admission.>").
func InboxPrefix(name string) string { return "_INBOX_" + strings.ReplaceAll(name, "-", "_") }

// Options returns the connection options for a client named name, after
// Validate. Replies come on the client's own inbox prefix.
func (c Config) Options(name string) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.CustomInboxPrefix(InboxPrefix(name))}
	switch {
	case c.CredsFile != "":
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	case c.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey %s: %w", c.NKeyFile, err)
		}
		opts = append(opts, o)
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.CAFile != "" || c.CertFile != "" {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-ca %s: %w", c.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--nats-ca %s: no PEM certificate in it", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-cert %s / --nats-key %s: %w", c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// Connect validates c and connects as name.
func Connect(c Config, name string) (*nats.Conn, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts, err := c.Options(name)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", c.URL, err)
	}
	return nc, nil
}
