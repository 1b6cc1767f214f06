package simulate

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds the scenario loader any file: it must never panic, and
// every refusal must be ErrInvalid naming the file; a scenario it accepts
// must convert into the engine's configuration or be refused with a
// message.
func FuzzLoad(f *testing.F) {
	seeds, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no example scenarios to seed from: %v", err)
	}
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("kind: ClusterQueue\n---\n---\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := Load([]Source{{Name: "fuzz.yaml", R: bytes.NewReader(b)}})
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("refusal %q is not ErrInvalid naming the file", err)
			}
			return
		}
		// What Load accepts runs, or is refused as bad input.
		if _, err := Run(sc, Options{}); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("a loaded scenario failed to run: %v", err)
		}
	})
}
