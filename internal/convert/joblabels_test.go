package convert

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestConvertJobLabels: with KueueLabels, job manifests of every kind get
// Sluice's names for Kueue's labels and annotations, on the object and on
// each pod template.
func TestConvertJobLabels(t *testing.T) {
	cases := []struct {
		name         string
		in           string
		noFlag       bool
		drop         bool
		want         string
		wantWarnings []string
		wantErr      string
	}{
		{
			name: "a LeaderWorkerSet: its queue label",
			in: `apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: vllm, labels: {kueue.x-k8s.io/queue-name: user-queue}}
spec: {replicas: 2, leaderWorkerTemplate: {size: 3, workerTemplate: {spec: {containers: [{name: w, image: vllm}]}}}}
`,
			want: `apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  labels:
    sluice.dev/queue-name: user-queue
  name: vllm
spec:
  leaderWorkerTemplate:
    size: 3
    workerTemplate:
      spec:
        containers:
        - image: vllm
          name: w
  replicas: 2
`,
		},
		{
			name: "a pod group's members: name, total count, serving and fast admission",
			in: `apiVersion: v1
kind: Pod
metadata:
  name: p0
  labels: {kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/pod-group-name: g, kueue.x-k8s.io/priority-class: high}
  annotations: {kueue.x-k8s.io/pod-group-total-count: "2", kueue.x-k8s.io/pod-group-serving: "true", kueue.x-k8s.io/pod-group-fast-admission: "true"}
spec: {containers: [{name: c, image: busybox}]}
`,
			want: `apiVersion: v1
kind: Pod
metadata:
  annotations:
    sluice.dev/pod-group-fast-admission: "true"
    sluice.dev/pod-group-serving: "true"
    sluice.dev/pod-group-total-count: "2"
  labels:
    sluice.dev/pod-group-name: g
    sluice.dev/priority-class: high
    sluice.dev/queue-name: q
  name: p0
spec:
  containers:
  - image: busybox
    name: c
`,
		},
		{
			name: "a JobSet: topology annotations in each replicatedJob's pod template",
			in: `apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, labels: {kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/max-exec-time-seconds: "600"}}
spec:
  replicatedJobs:
  - name: w
    template: {spec: {template: {metadata: {annotations: {kueue.x-k8s.io/podset-required-topology: rack, kueue.x-k8s.io/podset-group-name: g}}, spec: {containers: [{name: c}]}}}}
`,
			want: `apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  labels:
    sluice.dev/max-exec-time-seconds: "600"
    sluice.dev/queue-name: q
  name: js
spec:
  replicatedJobs:
  - name: w
    template:
      spec:
        template:
          metadata:
            annotations:
              sluice.dev/podset-group-name: g
              sluice.dev/podset-required-topology: rack
          spec:
            containers:
            - name: c
`,
		},
		{
			name: "Kueue's elastic Job (its sample-scalable-job)",
			in: `apiVersion: batch/v1
kind: Job
metadata:
  name: sample-elastic-job
  annotations: {kueue.x-k8s.io/elastic-job: "true"}
  labels: {kueue.x-k8s.io/queue-name: user-queue}
spec: {parallelism: 3, completions: 100, template: {spec: {containers: [{name: c}]}}}
`,
			want: `apiVersion: batch/v1
kind: Job
metadata:
  annotations:
    sluice.dev/elastic-job: "true"
  labels:
    sluice.dev/queue-name: user-queue
  name: sample-elastic-job
spec:
  completions: 100
  parallelism: 3
  template:
    spec:
      containers:
      - name: c
`,
		},
		{
			name: "a Job's partial admission; Sluice's own label wins, with a warning",
			in: `apiVersion: batch/v1
kind: Job
metadata:
  name: j
  labels: {kueue.x-k8s.io/queue-name: old, sluice.dev/queue-name: new}
  annotations: {kueue.x-k8s.io/job-min-parallelism: "2"}
spec: {parallelism: 4, template: {spec: {containers: [{name: c}]}}}
`,
			want: `apiVersion: batch/v1
kind: Job
metadata:
  annotations:
    sluice.dev/job-min-parallelism: "2"
  labels:
    sluice.dev/queue-name: new
  name: j
spec:
  parallelism: 4
  template:
    spec:
      containers:
      - name: c
`,
			wantWarnings: []string{`jobs.yaml: document 1 (Job j): metadata.labels[kueue.x-k8s.io/queue-name] "old" left out: sluice.dev/queue-name is "new"`},
		},
		{
			name: "a Kueue annotation Sluice does not implement names where it is",
			in: `apiVersion: batch/v1
kind: Job
metadata: {name: j, labels: {kueue.x-k8s.io/queue-name: q}}
spec: {template: {metadata: {annotations: {kueue.x-k8s.io/retriable-in-group: "false"}}, spec: {containers: [{name: c}]}}}
`,
			wantErr: "spec.template.metadata.annotations[kueue.x-k8s.io/retriable-in-group]: not supported by Sluice",
		},
		{
			name: "or it is dropped with a warning",
			drop: true,
			in: `apiVersion: batch/v1
kind: Job
metadata: {name: j, labels: {kueue.x-k8s.io/elastic-job: "true"}}
spec: {template: {spec: {containers: [{name: c}]}}}
`,
			want: `apiVersion: batch/v1
kind: Job
metadata:
  labels: {}
  name: j
spec:
  template:
    spec:
      containers:
      - name: c
`,
			wantWarnings: []string{"dropped jobs.yaml: document 1 (Job j): metadata.labels[kueue.x-k8s.io/elastic-job]: not supported by Sluice"},
		},
		{
			name: "a manifest with nothing of Kueue's is written as it is, comments and all",
			in:   "apiVersion: apps/v1\nkind: Deployment # serving\nmetadata: {name: d}\n",
			want: "apiVersion: apps/v1\nkind: Deployment # serving\nmetadata: {name: d}\n",
		},
		{
			name:   "without --kueue-labels a job manifest passes as written",
			noFlag: true,
			in:     "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: {kueue.x-k8s.io/queue-name: q}}\n",
			want:   "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, labels: {kueue.x-k8s.io/queue-name: q}}\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Convert("jobs.yaml", []byte(tc.in), Options{DropUnsupported: tc.drop, KueueLabels: !tc.noFlag})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrUnsupported) {
					t.Fatalf("error %v, want an unsupported one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, string(res.Output)); d != "" {
				t.Errorf("output (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantWarnings, res.Warnings); d != "" {
				t.Errorf("warnings (-want +got):\n%s", d)
			}
		})
	}
}
