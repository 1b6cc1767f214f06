package simulate

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// noQueueJob is a workload of 1 cpu without a queue name.
func noQueueJob(ns, name string) string {
	return workload(ns, name, "  runtime: 10s\n  podSets:\n  - {name: main, count: 1, requests: {cpu: \"1\"}}\n")
}

func namespaceDoc(name, labels string) string {
	return "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + name + ", labels: " + labels + "}\n"
}

// TestWorkloadsWithoutAQueue: a workload without a queue name goes to its
// namespace's LocalQueue named default; where there is none and jobs
// without a queue are held, it is held (pending, never submitted); where
// nothing would take it, the scenario is refused by name.
func TestWorkloadsWithoutAQueue(t *testing.T) {
	base := []string{flavor("f"), clusterQueue("cq", cpuQueue("f", "4", "")),
		localQueue("team", "default", "  clusterQueue: cq\n"), localQueue("batch", "q", "  clusterQueue: cq\n"),
		namespaceDoc("team", "{kind: batch}"), namespaceDoc("batch", "{kind: batch}"), namespaceDoc("infra", "{kind: infra}")}
	held := docHead + "kind: Configuration\nmanageJobsWithoutQueueName: true\nmanagedJobsNamespaceSelector: {matchLabels: {kind: batch}}\n"
	cases := []struct {
		name        string
		docs        []string
		wantStates  map[string]string // namespace/name → state (reason when pending)
		wantErr     string
		wantErrPath string
	}{
		{
			name:       "the namespace's LocalQueue named default takes it",
			docs:       []string{noQueueJob("team", "a")},
			wantStates: map[string]string{"team/a": "finished cq"},
		},
		{
			name:       "held where jobs without a queue are held and no default LocalQueue is",
			docs:       []string{held, noQueueJob("batch", "b"), noQueueJob("team", "a")},
			wantStates: map[string]string{"batch/b": "pending " + HeldReason, "team/a": "finished cq"},
		},
		{
			name:    "refused where nothing would take it",
			docs:    []string{noQueueJob("batch", "b")},
			wantErr: "namespace batch has no LocalQueue named default",
		},
		{
			name:    "refused in a namespace the selector leaves out, held or not",
			docs:    []string{held, noQueueJob("infra", "c")},
			wantErr: "namespace infra is not one managedJobsNamespaceSelector picks",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			yaml := scenario(append(append([]string(nil), base...), tc.docs...)...)
			if tc.wantErr != "" {
				_, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(yaml)}})
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "spec.queueName") {
					t.Fatalf("Load: %v, want an invalid scenario naming spec.queueName and %q", err, tc.wantErr)
				}
				return
			}
			sum := summaryOf(t, run(t, yaml, Options{}))
			got := map[string]string{}
			for _, w := range sum.Workloads {
				got[w.Namespace+"/"+w.Name] = w.State + " " + w.ClusterQueue
				if w.State == "pending" {
					got[w.Namespace+"/"+w.Name] = w.State + " " + w.Reason
				}
			}
			if d := cmp.Diff(tc.wantStates, got); d != "" {
				t.Errorf("workloads (-want +got):\n%s", d)
			}
		})
	}
}
