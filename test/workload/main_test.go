package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     string
		want    config
		wantErr string
	}{
		{name: "nothing given runs until stopped", want: config{forever: true}},
		{name: "flag", args: []string{"-run-for=3s", "-exit-code=7"}, want: config{runFor: 3 * time.Second, exitCode: 7}},
		{name: "annotation through the environment", env: "90s", want: config{runFor: 90 * time.Second}},
		{name: "flag wins over the environment", args: []string{"-run-for=1s"}, env: "90s", want: config{runFor: time.Second}},
		{name: "zero ends at once", args: []string{"-run-for=0s"}, want: config{}},
		{name: "not a duration", env: "soon", wantErr: `run for "soon": not a non-negative Go duration`},
		{name: "negative", args: []string{"-run-for=-1s"}, wantErr: `run for "-1s"`},
		{name: "exit code out of range", args: []string{"-exit-code=300"}, wantErr: "-exit-code 300: must be within 0-255"},
		{name: "stray argument", args: []string{"sleep"}, wantErr: `unexpected arguments ["sleep"]`},
		{name: "in-cluster checks", args: []string{"-run-for=0s", "-check-api", "-resolve=a.b", "-resolve=c.d"}, want: config{apiGets: []apiGet{{"/version", 200}}, resolve: []string{"a.b", "c.d"}}},
		{name: "what a ServiceAccount may not read", args: []string{"-run-for=0s", "-api-get=/api/v1/secrets=403", "-check-api"},
			want: config{apiGets: []apiGet{{"/api/v1/secrets", 403}, {"/version", 200}}}},
		{name: "a status that is not one", args: []string{"-api-get=/api/v1/secrets=forbidden"}, wantErr: `want PATH=STATUS`},
		{name: "a path that is not one", args: []string{"-api-get=secrets=403"}, wantErr: `want PATH=STATUS`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SLUICE_RUN_FOR", tc.env)
			got, err := parse(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parse(%q) error = %v, want one containing %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(config{}, apiGet{})); diff != "" {
				t.Errorf("parse(%q) (-want +got):\n%s", tc.args, diff)
			}
		})
	}
}

func TestRunEndsWithItsCodeAndReportsReady(t *testing.T) {
	t.Setenv("SLUICE_RUN_FOR", "")
	ready := filepath.Join(t.TempDir(), "ready")
	err := run([]string{"-run-for=10ms", "-exit-code=3", "-ready-file=" + ready})
	if got, ok := err.(exitCode); !ok || got != 3 {
		t.Fatalf("run = %v, want exit code 3", err)
	}
	if _, err := os.Stat(ready); err != nil {
		t.Fatalf("ready file not written: %v", err)
	}
}

func TestCheckAPIOutsideAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if err := getFromAPI(t.Context(), t.TempDir(), apiGet{path: "/version", want: 200}); err == nil || !strings.Contains(err.Error(), "not in a pod") {
		t.Errorf("getFromAPI outside a pod = %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "1")
	if err := getFromAPI(t.Context(), t.TempDir(), apiGet{path: "/version", want: 200}); err == nil || !strings.Contains(err.Error(), "service-account token") {
		t.Errorf("getFromAPI without a token = %v", err)
	}
}
