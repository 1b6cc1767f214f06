package natsconn_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/natsconn"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	cases := []struct {
		name    string
		cfg     natsconn.Config
		wantErr error
		wantMsg string
	}{
		{name: "a URL alone", cfg: natsconn.Config{URL: "nats://n:4222"}},
		{name: "a user and password over TLS", cfg: natsconn.Config{URL: "tls://n:4222", User: "quota", Password: "p", CAFile: file}},
		{name: "no URL", cfg: natsconn.Config{}, wantErr: natsconn.ErrNoURL},
		{name: "two kinds of credentials", cfg: natsconn.Config{URL: "u", CredsFile: file, User: "a"}, wantErr: natsconn.ErrCredentials},
		{name: "a password without a user", cfg: natsconn.Config{URL: "u", Password: "p"}, wantErr: natsconn.ErrPasswordAlone},
		{name: "a certificate without its key", cfg: natsconn.Config{URL: "u", CertFile: file}, wantErr: natsconn.ErrCertPair},
		{name: "a CA file that does not exist", cfg: natsconn.Config{URL: "u", CAFile: missing}, wantErr: os.ErrNotExist, wantMsg: "--nats-ca " + missing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Validate() = %v, want %v naming %q", err, tc.wantErr, tc.wantMsg)
			}
		})
	}
}

func TestOptionsRefusesABadCA(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := natsconn.Config{URL: "tls://n:4222", CAFile: ca}.Options("sluice-quota")
	if err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("Options() = %v, want an error naming the CA file's content", err)
	}
}
