package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/bcrypt"
)

// passwordHashes reads each user's password from the file of its name in
// dir and hashes it with bcrypt: nats-server compares a login's password
// with the hash, so its configuration never holds a password. Every user
// must have one: a server that came up without a service's user would
// refuse that service at its first login, far from the cause.
func passwordHashes(dir string, users []string) (map[string]string, error) {
	out := make(map[string]string, len(users))
	var missing []string
	for _, u := range users {
		data, err := os.ReadFile(filepath.Join(dir, u))
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, u)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("--passwords-from: password of user %s: %w", u, err)
		}
		// Used as it is, a trailing newline too: the service sends the
		// Secret's value unchanged.
		pw := data
		if len(pw) < 8 || len(pw) > 72 {
			return nil, fmt.Errorf("--passwords-from: password of user %s (%s): %d bytes; it must be 8 to 72", u, filepath.Join(dir, u), len(pw))
		}
		h, err := bcrypt.GenerateFromPassword(pw, bcrypt.DefaultCost)
		if err != nil {
			return nil, fmt.Errorf("--passwords-from: hash the password of user %s: %w", u, err)
		}
		out[u] = string(h)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("--passwords-from %s: no password for user(s) %q (a file, or a key of the Secret, of each name)", dir, missing)
	}
	return out, nil
}
