package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--kubeconfig", ""}, "--kubeconfig (or KUBECONFIG) is required"},
		{[]string{"--kubeconfig", "k", "--scale", "0"}, "--scale 0: must be more than 0"},
		{[]string{"--kubeconfig", "k", "--scale", "-1"}, "--scale -1"},
		{[]string{"--kubeconfig", "k", "--scale", "x"}, "invalid value"},
		{[]string{"--kubeconfig", "k", "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"--kubeconfig", "k", "--creators", "-1"}, "--creators -1: must be positive"},
		{[]string{"--kubeconfig", "k", "--completers", "-2"}, "--completers -2: must be positive"},
		{[]string{"--kubeconfig", "k", "--namespace", "Bad_NS"}, `--namespace "Bad_NS"`},
		{[]string{"--kubeconfig", "k", "--prefix", "x.y"}, `--prefix "x.y"`},
		{[]string{"--kubeconfig", "k", "--nats", "http://h:1"}, "want nats://HOST:PORT"},
		{[]string{"--kubeconfig", "k", "--profile", "huge"}, `--profile: profile "huge": no such built-in profile (baseline, large-scale, tas)`},
		{[]string{"--kubeconfig", "k", "--profile", "/nonexistent/g.yaml"}, "--profile: open /nonexistent/g.yaml"},
		{[]string{"--kubeconfig", "k", "--profile", "large-scale", "--ranges", "../../ranges/full.yaml"}, "the ranges are for profile baseline, the run is of large-scale"},
		{[]string{"--kubeconfig", "k", "extra"}, "unexpected arguments"},
		{[]string{"--nope"}, "flag provided but not defined"},
		{[]string{"--kubeconfig", "k", "--ranges", "/nonexistent/r.yaml"}, "--ranges: open /nonexistent/r.yaml"},
		{[]string{"--kubeconfig", "k", "--ranges", "../../../go.mod"}, "--ranges: ../../../go.mod"},
	} {
		var out, errb bytes.Buffer
		if code := run(tt.args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", tt.args, code, errb.String())
		}
		if !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%q: stderr %q, want it to contain %q", tt.args, errb.String(), tt.want)
		}
	}
}
