package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/cmd/sluice/natsperm"
)

// TestAuthorizationWithHashedPasswords: the block written from a directory
// of passwords (a mounted Secret) carries no password, only hashes, and a
// real nats-server lets each user in with its own password and no other.
func TestAuthorizationWithHashedPasswords(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	if err := os.Mkdir(users, 0o700); err != nil {
		t.Fatal(err)
	}
	opts := []natsperm.Option{natsperm.WithCheckControllers("example.com/gate"), natsperm.WithWorkers("hub", "east")}
	for _, u := range natsperm.LoginUsers(opts...) {
		if err := os.WriteFile(filepath.Join(users, u), []byte("secret-of-"+u), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	auth := filepath.Join(dir, "auth", "authorization.conf")
	if err := os.Mkdir(filepath.Dir(auth), 0o700); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runSluice(t, "nats-authorization", "--check-controllers", "example.com/gate", "--workers", "east",
		"--passwords-from", users, "--out", auth)
	if code != exitOK {
		t.Fatalf("nats-authorization: exit %d: %s", code, errOut)
	}
	data, err := os.ReadFile(auth)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "secret-of-") || strings.Contains(string(data), "$SLUICE_") {
		t.Fatalf("the block holds a password or a variable:\n%s", data)
	}
	// Included as the chart's server configuration includes it: relative
	// to the configuration's own directory.
	confDir := filepath.Join(dir, "config")
	if err := os.Mkdir(confDir, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(confDir, "nats.conf")
	if err := os.WriteFile(conf, []byte("listen: 127.0.0.1:-1\ninclude ../auth/authorization.conf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sopts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server refuses the configuration: %v", err)
	}
	sopts.NoLog, sopts.NoSigs = true, true
	srv, err := server.NewServer(sopts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(5 * time.Second) {
		t.Fatal("server not ready")
	}
	for _, tc := range []struct {
		user, password string
		wantIn         bool
	}{
		{"admission", "secret-of-admission", true},
		{"check-example-com-gate", "secret-of-check-example-com-gate", true},
		{"east", "secret-of-east", true},
		{"admission", "secret-of-quota", false},
		{"setup", "", false},
	} {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(tc.user, tc.password), nats.MaxReconnects(0))
		if got := err == nil; got != tc.wantIn {
			t.Errorf("login %s with %q: err %v; want in: %t", tc.user, tc.password, err, tc.wantIn)
		}
		if nc != nil {
			nc.Close()
		}
	}
}

func TestAuthorizationNamesMissingPasswords(t *testing.T) {
	users := t.TempDir()
	for _, u := range natsperm.Users() {
		if u == "reader" {
			continue
		}
		if err := os.WriteFile(filepath.Join(users, u), []byte("long enough"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(users, "quota"), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := passwordHashes(users, natsperm.Users())
	if err == nil || !strings.Contains(err.Error(), "password of user quota") || !strings.Contains(err.Error(), "5 bytes") {
		t.Errorf("short password: %v", err)
	}
	if err := os.WriteFile(filepath.Join(users, "quota"), []byte("long enough"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = passwordHashes(users, natsperm.Users())
	if err == nil || !strings.Contains(err.Error(), `no password for user(s) ["reader"]`) {
		t.Errorf("missing password: %v", err)
	}
}
