package workloads_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/workloads"
)

func TestName(t *testing.T) {
	ref := events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train.v2/x", UID: "u-1"}
	n := workloads.NameOf(ref)
	if got, want := n.KV(), "job.team-a.train.v2/x"; got != want {
		t.Errorf("KV %q; want %q", got, want)
	}
	if got, want := n.Engine(), "job/team-a/train.v2/x"; got != want {
		t.Errorf("Engine %q; want %q", got, want)
	}
	if got, want := n.Object(), "team-a/train.v2/x"; got != want {
		t.Errorf("Object %q; want %q", got, want)
	}
	if diff := cmp.Diff(ref, n.Ref("u-1")); diff != "" {
		t.Errorf("Ref (-want +got):\n%s", diff)
	}
	// The name may hold either separator: it is everything after the
	// second.
	for _, tc := range []struct {
		name  string
		parse func(string) (workloads.Name, bool)
		key   string
		want  workloads.Name
		ok    bool
	}{
		{"a KV key", workloads.ParseKV, n.KV(), n, true},
		{"an engine key", workloads.ParseEngine, n.Engine(), n, true},
		{"a KV key of two parts", workloads.ParseKV, "job.team-a", workloads.Name{}, false},
		{"an engine key of two parts", workloads.ParseEngine, "job/team-a", workloads.Name{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.parse(tc.key)
			if ok != tc.ok || got != tc.want {
				t.Errorf("parse %q: %+v, %v; want %+v, %v", tc.key, got, ok, tc.want, tc.ok)
			}
		})
	}
	if got := workloads.EngineKeyFromKV("not-a-workload"); got != "not-a-workload" {
		t.Errorf("EngineKeyFromKV of a key that is no workload's: %q; want it unchanged", got)
	}
	if got, want := workloads.KVKeyFromEngine(n.Engine()), n.KV(); got != want {
		t.Errorf("KVKeyFromEngine %q; want %q", got, want)
	}
}
