package main

import (
	"errors"
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    int64
		wantErr string
	}{
		{name: "the dev default", in: devMemoryLimit, want: 900 << 20},
		{name: "bytes without a unit", in: "1048576", want: 1 << 20},
		{name: "bytes with B", in: "512B", want: 512},
		{name: "KiB", in: "4KiB", want: 4 << 10},
		{name: "GiB", in: "2GiB", want: 2 << 30},
		{name: "TiB", in: "1TiB", want: 1 << 40},
		{name: "off", in: "off", want: 0},
		{name: "zero is none", in: "0", want: 0},
		{name: "empty", in: "", wantErr: `"": want a whole number`},
		{name: "a unit alone", in: "MiB", wantErr: `"MiB": want a whole number`},
		{name: "decimal units are not GOMEMLIMIT's", in: "900MB", wantErr: `"900MB": want a whole number`},
		{name: "a fraction", in: "1.5GiB", wantErr: `"1.5GiB": want a whole number`},
		{name: "negative", in: "-1", wantErr: `"-1": want a whole number`},
		{name: "a sign", in: "+5MiB", wantErr: `"+5MiB": want a whole number`},
		{name: "lower case", in: "900mib", wantErr: `"900mib": want a whole number`},
		{name: "too large", in: "9000000TiB", wantErr: `"9000000TiB": larger than`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMemoryLimit(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseMemoryLimit(%q) = %d, %v; want an error with %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseMemoryLimit(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestApplyMemoryLimit(t *testing.T) {
	// The runtime's limit is process-wide: put back what the test found.
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	cases := []struct {
		name      string
		flag, env string
		wantSaid  string
		wantLimit int64 // the runtime's limit afterwards
		wantErr   bool
	}{
		{name: "the flag when the environment sets none", flag: "900MiB", wantSaid: "900MiB", wantLimit: 900 << 20},
		{name: "the environment wins", flag: "900MiB", env: "2GiB", wantSaid: "GOMEMLIMIT=2GiB", wantLimit: math.MaxInt64},
		{name: "off leaves the runtime's default", flag: "off", wantSaid: "none", wantLimit: math.MaxInt64},
		{name: "a bad flag is refused even with the environment set", flag: "lots", env: "2GiB", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(math.MaxInt64)
			said, err := applyMemoryLimit(tc.flag, tc.env)
			if tc.wantErr {
				var ue usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--memory-limit") {
					t.Fatalf("applyMemoryLimit(%q, %q) error = %v; want a usage error naming --memory-limit", tc.flag, tc.env, err)
				}
				return
			}
			if err != nil || said != tc.wantSaid {
				t.Fatalf("applyMemoryLimit(%q, %q) = %q, %v; want %q", tc.flag, tc.env, said, err, tc.wantSaid)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
				t.Errorf("runtime limit = %d, want %d", got, tc.wantLimit)
			}
		})
	}
}

func TestApplyGCPercent(t *testing.T) {
	// GOGC is process-wide: put back what the test found.
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	cases := []struct {
		name     string
		flag     int
		env      string
		wantSaid string
		wantGC   int // the runtime's GOGC afterwards
		wantErr  bool
	}{
		{name: "the default when the environment sets none", flag: defaultGCPercent, wantSaid: "50", wantGC: 50},
		{name: "another flag", flag: 200, wantSaid: "200", wantGC: 200},
		{name: "the environment wins", flag: 50, env: "80", wantSaid: "GOGC=80", wantGC: 100},
		{name: "zero is refused", flag: 0, wantErr: true},
		{name: "a negative flag is refused even with the environment set", flag: -1, env: "off", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			said, err := applyGCPercent(tc.flag, tc.env)
			if tc.wantErr {
				var ue usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--gc-percent") {
					t.Fatalf("applyGCPercent(%d, %q) error = %v; want a usage error naming --gc-percent", tc.flag, tc.env, err)
				}
				return
			}
			if err != nil || said != tc.wantSaid {
				t.Fatalf("applyGCPercent(%d, %q) = %q, %v; want %q", tc.flag, tc.env, said, err, tc.wantSaid)
			}
			if got := debug.SetGCPercent(100); got != tc.wantGC {
				t.Errorf("runtime GOGC = %d, want %d", got, tc.wantGC)
			}
		})
	}
}
