package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// baseScenario is three documents: a flavor, a ClusterQueue and a
// LocalQueue. Bad-input cases append their document as document 4.
const baseScenario = `# A comment before the first document belongs to it.
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: main-cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 4}
      - {name: memory, nominalQuota: 16Gi}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: team-queue, namespace: team}
spec: {clusterQueue: main-cq}
`

// workloads exercises queueing, same-instant preemption and readmission.
const workloads = `
apiVersion: sluice.dev/v1beta1
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 100
---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: first, namespace: team}
spec:
  queueName: team-queue
  runtime: 10m
  podSets:
  - {name: main, count: 3, requests: {cpu: "1", memory: 1Gi}}
---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: second, namespace: team}
spec:
  queueName: team-queue
  submitAt: 1m
  runtime: 5m
  podSets:
  - {name: main, count: 2, requests: {cpu: "1", memory: 1Gi}}
---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: elastic, namespace: team}
spec:
  queueName: team-queue
  submitAt: 2m
  runtime: 30m
  podSets:
  - {name: main, count: 4, minCount: 1, requests: {cpu: 500m, memory: 1Gi}}
---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: lost, namespace: team}
spec:
  queueName: no-such-queue
  submitAt: 3m
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: pre, namespace: team}
spec:
  queueName: team-queue
  priorityClassName: urgent
  runtime: 15m
  podSets:
  - {name: main, count: 1, requests: {cpu: 500m}}
  admitted:
    clusterQueue: main-cq
    at: -5m
    podSets:
    - {name: main, count: 1, flavors: {cpu: default-flavor}}
`

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runSluice(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = execute(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// record is the part of an output line the tests read.
type record struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Time            string          `json:"time"`
	Subject         string          `json:"subject"`
	DataContentType string          `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
}

type workloadData struct {
	Namespace    string  `json:"namespace"`
	Name         string  `json:"name"`
	ClusterQueue *string `json:"clusterQueue"`
	PodSets      []struct {
		Name    string            `json:"name"`
		Count   int32             `json:"count"`
		Flavors map[string]string `json:"flavors"`
	} `json:"podSets"`
	Reason    string `json:"reason"`
	Preemptor string `json:"preemptor"`
}

type summaryData struct {
	Start     string `json:"start"`
	End       string `json:"end"`
	Workloads []struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		State     string `json:"state"`
		Admitted  string `json:"admitted"`
		Finished  string `json:"finished"`
	} `json:"workloads"`
	ClusterQueues []struct {
		Name      string `json:"name"`
		Resources []struct {
			Flavor      string   `json:"flavor"`
			Resource    string   `json:"resource"`
			Utilization *float64 `json:"utilization"`
		} `json:"resources"`
	} `json:"clusterQueues"`
}

func parseLines(t *testing.T, out string) []record {
	t.Helper()
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("output does not end with a newline: %q", out)
	}
	var recs []record
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var r record
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %d is not a record: %v\n%s", i+1, err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestSimulateValidRun(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "scenario.yaml", baseScenario+"---"+workloads)
	code, out, errOut := runSluice(t, "simulate", "-f", f)
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, errOut)
	}
	if errOut != "" {
		t.Errorf("stderr not empty on success:\n%s", errOut)
	}
	recs := parseLines(t, out)
	if len(recs) < 2 {
		t.Fatalf("got %d lines, want transitions and a summary", len(recs))
	}
	ids := map[string]bool{}
	var last time.Time
	types := map[string]int{}
	for i, r := range recs {
		if r.SpecVersion != "1.0" || r.ID == "" || r.Source == "" || r.DataContentType != "application/json" {
			t.Errorf("line %d: missing CloudEvents attributes: %+v", i+1, r)
		}
		if ids[r.ID] {
			t.Errorf("line %d: id %q repeats", i+1, r.ID)
		}
		ids[r.ID] = true
		ts, err := time.Parse(time.RFC3339Nano, r.Time)
		if err != nil {
			t.Errorf("line %d: time %q: %v", i+1, r.Time, err)
		}
		if ts.Before(last) {
			t.Errorf("line %d: time %s goes back from %s", i+1, r.Time, last)
		}
		last = ts
		if ts.Before(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("line %d: time %s is before the default start", i+1, r.Time)
		}
		types[r.Type]++
		if i == len(recs)-1 {
			continue
		}
		if !strings.HasPrefix(r.Type, "dev.sluice.workload.v1.") {
			t.Errorf("line %d: type %q is not a workload transition", i+1, r.Type)
			continue
		}
		var d workloadData
		if err := json.Unmarshal(r.Data, &d); err != nil {
			t.Fatalf("line %d: data: %v", i+1, err)
		}
		if d.Namespace == "" || d.Name == "" || d.ClusterQueue == nil {
			t.Errorf("line %d: data lacks namespace, name or clusterQueue: %s", i+1, r.Data)
		}
		if r.Subject != d.Namespace+"/"+d.Name {
			t.Errorf("line %d: subject %q, want %s/%s", i+1, r.Subject, d.Namespace, d.Name)
		}
		switch strings.TrimPrefix(r.Type, "dev.sluice.workload.v1.") {
		case "admitted":
			if len(d.PodSets) == 0 {
				t.Errorf("line %d: admitted without podSets: %s", i+1, r.Data)
			}
			for _, ps := range d.PodSets {
				if ps.Name == "" || ps.Count < 1 || len(ps.Flavors) == 0 {
					t.Errorf("line %d: incomplete pod set assignment: %s", i+1, r.Data)
				}
			}
		case "preempted":
			if d.Reason == "" || d.Preemptor == "" {
				t.Errorf("line %d: preempted without reason or preemptor: %s", i+1, r.Data)
			}
		case "pending", "evicted":
			if d.Reason == "" {
				t.Errorf("line %d: %s without reason: %s", i+1, r.Type, r.Data)
			}
		case "submitted", "finished":
		default:
			t.Errorf("line %d: unknown type %q", i+1, r.Type)
		}
	}
	sum := recs[len(recs)-1]
	if sum.Type != "dev.sluice.simulation.v1.summary" {
		t.Fatalf("last line has type %q, want the summary", sum.Type)
	}
	var s summaryData
	if err := json.Unmarshal(sum.Data, &s); err != nil {
		t.Fatalf("summary data: %v", err)
	}
	if len(s.Workloads) != 5 {
		t.Errorf("summary lists %d workloads, want 5", len(s.Workloads))
	}
	if len(s.ClusterQueues) != 1 || s.ClusterQueues[0].Name != "main-cq" || len(s.ClusterQueues[0].Resources) != 2 {
		t.Errorf("summary clusterQueues = %+v, want main-cq with cpu and memory", s.ClusterQueues)
	}
	for _, q := range s.ClusterQueues {
		for _, r := range q.Resources {
			if r.Utilization == nil {
				t.Errorf("summary %s %s/%s has no utilization", q.Name, r.Flavor, r.Resource)
			}
		}
	}
	for _, typ := range []string{"submitted", "pending", "admitted", "finished"} {
		if types["dev.sluice.workload.v1."+typ] == 0 {
			t.Errorf("no %s record; the scenario should produce one", typ)
		}
	}
	if got := strings.Count(out, `"type":"dev.sluice.simulation.v1.summary"`); got != 1 {
		t.Errorf("%d summaries, want 1", got)
	}
}

func TestSimulateDeterministic(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "scenario.yaml", baseScenario+"---"+workloads)
	inputs := [][]string{{"-f", f}}
	// The examples exercise cohorts, fair sharing and preemption.
	examples, _ := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	for _, e := range examples {
		inputs = append(inputs, []string{"-f", e})
	}
	for _, in := range inputs {
		for _, format := range []string{"jsonl", "table"} {
			args := append([]string{"simulate", "-o", format}, in...)
			code1, out1, err1 := runSluice(t, args...)
			code2, out2, err2 := runSluice(t, args...)
			if code1 != exitOK || code2 != exitOK {
				t.Fatalf("%v: exit %d and %d; stderr:\n%s%s", args, code1, code2, err1, err2)
			}
			if out1 == "" {
				t.Errorf("%v: no output", args)
			}
			if out1 != out2 {
				t.Errorf("%v: two runs differ:\n%s\n----\n%s", args, out1, out2)
			}
		}
	}
}

func TestSimulateStartAndUntil(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "scenario.yaml", baseScenario+"---"+workloads)
	code, out, errOut := runSluice(t, "simulate", "-f", f, "--start", "2024-05-01T12:00:00+02:00", "--until", "4m")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	recs := parseLines(t, out)
	if recs[0].Time != "2024-05-01T10:00:00Z" {
		t.Errorf("first record at %s, want the start in UTC, 2024-05-01T10:00:00Z", recs[0].Time)
	}
	for _, r := range recs {
		if r.Time > "2024-05-01T10:04:00Z" {
			t.Errorf("record %s at %s, after --until", r.Type, r.Time)
		}
	}
	var s summaryData
	if err := json.Unmarshal(recs[len(recs)-1].Data, &s); err != nil {
		t.Fatal(err)
	}
	if s.Start != "2024-05-01T10:00:00Z" || s.End != "2024-05-01T10:04:00Z" {
		t.Errorf("summary start %s end %s, want 10:00:00Z to 10:04:00Z", s.Start, s.End)
	}
}

func TestSimulateSeveralFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "queues.yaml", baseScenario)
	wls := writeFile(t, dir, "jobs.yaml", workloads)
	code, out, errOut := runSluice(t, "simulate", "-f", cfg, "-f", wls)
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	both := writeFile(t, dir, "both.yaml", baseScenario+"---"+workloads)
	_, want, _ := runSluice(t, "simulate", "-f", both)
	if out != want {
		t.Errorf("two files give other output than one file with the same documents:\n%s\n----\n%s", out, want)
	}
}

func TestSimulateTableOutput(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "scenario.yaml", baseScenario+"---"+workloads)
	code, out, errOut := runSluice(t, "simulate", "-f", f, "--output", "table")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	for _, want := range []string{"ELAPSED", "team/first", "admitted", "Summary:", "main-cq", "UTILIZATION"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"specversion"`) {
		t.Errorf("table output contains JSON:\n%s", out)
	}
}

// TestSimulateTableReadableQuantities: the table is for a person, yet it
// prints memory in bytes with %g, so 16Gi shows as 1.7179869184e+10.
func TestSimulateTableReadableQuantities(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "scenario.yaml", baseScenario+"---"+workloads)
	code, out, errOut := runSluice(t, "simulate", "-f", f, "--output", "table")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "memory") && strings.Contains(line, "e+") {
			t.Errorf("table shows a quantity in exponent notation: %q", line)
		}
	}
}

// hasPath reports whether msg names path as a whole field path, not as part
// of a longer or mangled one (such as "[].spec.x" or "spec.x.y" for
// "spec.x").
func hasPath(msg, path string) bool {
	for from := 0; ; {
		i := strings.Index(msg[from:], path)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(path)
		before := i == 0 || strings.ContainsRune(" \t\n\"'(:", rune(msg[i-1]))
		after := end == len(msg) || strings.ContainsRune(" \t\n\"'):;,", rune(msg[end]))
		if before && after {
			return true
		}
		from = i + 1
	}
}

func TestHasPath(t *testing.T) {
	for _, c := range []struct {
		msg, path string
		want      bool
	}{
		{`doc 4 (X a): spec.runtime: Invalid`, "spec.runtime", true},
		{`unknown field "spec.podSets[0].cont"`, "spec.podSets[0].cont", true},
		{`doc 4: [].spec.runtime: Invalid`, "spec.runtime", false},
		{`doc 4: spec.admitted: x`, "spec.admitted.clusterQueue", false},
		{`doc 4: spec.admitted.clusterQueue: x`, "spec.admitted", false},
		{`doc 4: spec.podSets.count: x`, "spec.podSets[0].count", false},
	} {
		if got := hasPath(c.msg, c.path); got != c.want {
			t.Errorf("hasPath(%q, %q) = %v, want %v", c.msg, c.path, got, c.want)
		}
	}
}

func TestSimulateBadScenario(t *testing.T) {
	type badCase struct {
		name string
		// doc is appended to baseScenario as document 4.
		doc string
		// kind and object must both be named in the message; path is the
		// field path of the mistake.
		kind, object, path string
	}
	cases := []badCase{
		{
			name: "negative nominalQuota",
			doc: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: negative-cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: -2}]
`,
			kind: "ClusterQueue", object: "negative-cq", path: "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
		},
		{
			name: "negative borrowingLimit",
			doc: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: greedy-cq}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 2, borrowingLimit: "-1"}]
`,
			kind: "ClusterQueue", object: "greedy-cq", path: "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
		},
		{
			name: "borrowingLimit without cohort",
			doc: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: lonely-cq}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 2, borrowingLimit: 2}]
`,
			kind: "ClusterQueue", object: "lonely-cq", path: "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
		},
		{
			name: "flavor missing a covered resource",
			doc: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: half-cq}
spec:
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 2}]
`,
			kind: "ClusterQueue", object: "half-cq", path: "spec.resourceGroups[0].flavors[0].resources",
		},
		{
			name: "unknown queueingStrategy",
			doc: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: hasty-cq}
spec:
  queueingStrategy: Fastest
`,
			kind: "ClusterQueue", object: "hasty-cq", path: "spec.queueingStrategy",
		},
		{
			name: "unknown field",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: typo-job, namespace: team}
spec:
  queueName: team-queue
  podSets:
  - name: main
    cont: 3
    requests: {cpu: "1"}
`,
			kind: "SimulatedWorkload", object: "typo-job", path: "spec.podSets[0].cont",
		},
		{
			name: "duplicate field",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: twice-job, namespace: team}
spec:
  queueName: team-queue
  queueName: other-queue
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "twice-job", path: "spec.queueName",
		},
		{
			name: "wrong type",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: wordy-job, namespace: team}
spec:
  queueName: team-queue
  podSets:
  - {name: main, count: two, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "wordy-job", path: "spec.podSets[0].count",
		},
		{
			name: "bad quantity",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: vague-job, namespace: team}
spec:
  queueName: team-queue
  podSets:
  - {name: main, count: 1, requests: {cpu: lots}}
`,
			kind: "SimulatedWorkload", object: "vague-job", path: "spec.podSets[0].requests[cpu]",
		},
		{
			name: "bad duration",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: someday-job, namespace: team}
spec:
  queueName: team-queue
  runtime: a while
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "someday-job", path: "spec.runtime",
		},
		{
			name: "negative submitAt",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: early-job, namespace: team}
spec:
  queueName: team-queue
  submitAt: -5m
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "early-job", path: "spec.submitAt",
		},
		{
			name: "zero runtime",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: instant-job, namespace: team}
spec:
  queueName: team-queue
  runtime: 0s
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "instant-job", path: "spec.runtime",
		},
		{
			name: "minCount above count",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: greedy-job, namespace: team}
spec:
  queueName: team-queue
  podSets:
  - {name: main, count: 2, minCount: 3, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "greedy-job", path: "spec.podSets[0].minCount",
		},
		{
			name: "unknown kind",
			doc: `apiVersion: sluice.dev/v1beta1
kind: Workload
metadata: {name: mystery-object}
`,
			kind: "Workload", object: "mystery-object", path: "kind",
		},
		{
			name: "wrong apiVersion",
			doc: `apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: kueue-cq}
`,
			kind: "ClusterQueue", object: "kueue-cq", path: "apiVersion",
		},
		{
			name: "duplicate ClusterQueue",
			doc: `apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: main-cq}
spec:
  namespaceSelector: {}
`,
			kind: "ClusterQueue", object: "main-cq", path: "metadata.name",
		},
		{
			name: "LocalQueue without clusterQueue",
			doc: `apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: aimless-queue, namespace: team}
spec: {}
`,
			kind: "LocalQueue", object: "aimless-queue", path: "spec.clusterQueue",
		},
		{
			name: "priorityClassName naming a missing class",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: vip-job, namespace: team}
spec:
  queueName: team-queue
  priorityClassName: platinum
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "vip-job", path: "spec.priorityClassName",
		},
		{
			name: "admitted naming a missing ClusterQueue",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: ghost-job, namespace: team}
spec:
  queueName: team-queue
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
  admitted:
    clusterQueue: ghost-cq
    podSets: [{name: main, count: 1, flavors: {cpu: default-flavor}}]
`,
			kind: "SimulatedWorkload", object: "ghost-job", path: "spec.admitted.clusterQueue",
		},
		{
			name: "admitted naming a missing flavor",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: gilded-job, namespace: team}
spec:
  queueName: team-queue
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
  admitted:
    clusterQueue: main-cq
    podSets: [{name: main, count: 1, flavors: {cpu: gold}}]
`,
			kind: "SimulatedWorkload", object: "gilded-job", path: "spec.admitted.podSets[0].flavors[cpu]",
		},
		{
			name: "podsReadyAfter neither Never nor a duration",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: hopeful-job, namespace: team}
spec:
  queueName: team-queue
  podsReadyAfter: soon
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "hopeful-job", path: "spec.podsReadyAfter",
		},
		{
			name: "negative podsReadyAfter",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: eager-job, namespace: team}
spec:
  queueName: team-queue
  podsReadyAfter: -1s
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "eager-job", path: "spec.podsReadyAfter",
		},
		{
			name: "priority change with both a class and a number",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: torn-job, namespace: team}
spec:
  queueName: team-queue
  priorityChanges: [{at: 1m, priority: 3, priorityClassName: x}]
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "torn-job", path: "spec.priorityChanges[0]",
		},
		{
			name: "priority change to a missing class",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: classless-job, namespace: team}
spec:
  queueName: team-queue
  priorityChanges: [{at: 1m, priorityClassName: nobody}]
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
`,
			kind: "SimulatedWorkload", object: "classless-job", path: "spec.priorityChanges[0].priorityClassName",
		},
		{
			name: "fair sharing strategies in an order Kueue refuses",
			doc: `apiVersion: sluice.dev/v1beta1
kind: Configuration
fairSharing: {enable: true, preemptionStrategies: [LessThanInitialShare, LessThanOrEqualToFinalShare]}
`,
			kind: "Configuration", path: "fairSharing.preemptionStrategies",
		},
		{
			name: "waitForPodsReady timeout of zero",
			doc: `apiVersion: sluice.dev/v1beta1
kind: Configuration
waitForPodsReady: {timeout: 0s}
`,
			kind: "Configuration", path: "waitForPodsReady.timeout",
		},
		{
			name: "a namespace selector with an operator the API server does not know",
			doc: `apiVersion: sluice.dev/v1beta1
kind: Configuration
manageJobsWithoutQueueName: true
managedJobsNamespaceSelector: {matchExpressions: [{key: team, operator: Sometimes}]}
`,
			kind: "Configuration", path: "managedJobsNamespaceSelector",
		},
		{
			name: "waitForPodsReady requeuing timestamp unknown",
			doc: `apiVersion: sluice.dev/v1beta1
kind: Configuration
waitForPodsReady:
  requeuingStrategy: {timestamp: Admission}
`,
			kind: "Configuration", path: "waitForPodsReady.requeuingStrategy.timestamp",
		},
		{
			name: "admitted after the start",
			doc: `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: future-job, namespace: team}
spec:
  queueName: team-queue
  podSets:
  - {name: main, count: 1, requests: {cpu: "1"}}
  admitted:
    clusterQueue: main-cq
    at: 5m
    podSets: [{name: main, count: 1, flavors: {cpu: default-flavor}}]
`,
			kind: "SimulatedWorkload", object: "future-job", path: "spec.admitted.at",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			f := writeFile(t, dir, "bad-scenario.yaml", baseScenario+"---\n"+c.doc)
			code, out, errOut := runSluice(t, "simulate", "-f", f)
			if code != exitBadInput {
				t.Errorf("exit %d, want %d", code, exitBadInput)
			}
			if out != "" {
				t.Errorf("stdout not empty:\n%s", out)
			}
			var missing []string
			if !strings.Contains(errOut, f) {
				missing = append(missing, "the file "+f)
			}
			if !strings.Contains(errOut, "document 4") {
				missing = append(missing, "the document number (document 4)")
			}
			if !strings.Contains(errOut, c.kind) {
				missing = append(missing, "the kind "+c.kind)
			}
			if !strings.Contains(errOut, c.object) {
				missing = append(missing, "the name "+c.object)
			}
			if !hasPath(errOut, c.path) {
				missing = append(missing, "the field path "+c.path)
			}
			if len(missing) > 0 {
				t.Errorf("stderr lacks %s:\n%s", strings.Join(missing, ", "), errOut)
			}
		})
	}
}

// TestSimulateBadScenarioSecondFile: the message names the file that holds
// the mistake, and numbers documents within that file.
func TestSimulateBadScenarioSecondFile(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "queues.yaml", baseScenario)
	bad := writeFile(t, dir, "jobs.yaml", `apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: fine-job, namespace: team}
spec:
  queueName: team-queue
  podSets: [{name: main, count: 1, requests: {cpu: "1"}}]
---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: broken-job, namespace: team}
spec:
  queueName: team-queue
  podSets: [{name: main, count: 0, requests: {cpu: "1"}}]
`)
	code, out, errOut := runSluice(t, "simulate", "-f", good, "-f", bad)
	if code != exitBadInput || out != "" {
		t.Errorf("exit %d with stdout %q, want exit 2 and nothing", code, out)
	}
	for _, want := range []string{bad, "document 2", "SimulatedWorkload", "broken-job"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !hasPath(errOut, "spec.podSets[0].count") {
		t.Errorf("stderr lacks the field path spec.podSets[0].count:\n%s", errOut)
	}
	if strings.Contains(errOut, good) {
		t.Errorf("stderr blames the good file:\n%s", errOut)
	}
}

// TestSimulateBadScenarioStableMessage: a document with several mistakes
// gives the same message every time.
func TestSimulateBadScenarioStableMessage(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "bad.yaml", baseScenario+`---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: messy-job, namespace: team}
spec:
  queueName: team-queue
  podSets:
  - {name: main, count: 1, requests: {cpu: x1, memory: x2, nvidia.com/gpu: x3, example.com/fpga: x4}}
`)
	_, _, first := runSluice(t, "simulate", "-f", f)
	for i := 0; i < 20; i++ {
		if _, _, again := runSluice(t, "simulate", "-f", f); again != first {
			t.Fatalf("the message changed between runs:\n%s\n----\n%s", first, again)
		}
	}
}

func TestSimulateBadCommandLine(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "scenario.yaml", baseScenario)
	missing := filepath.Join(dir, "not-there.yaml")
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"bad --output", []string{"simulate", "-f", f, "--output", "yaml"}, []string{"--output", "yaml"}},
		{"bad -o", []string{"simulate", "-f", f, "-o", "csv"}, []string{"--output", "csv"}},
		{"bad --start", []string{"simulate", "-f", f, "--start", "yesterday"}, []string{"--start", "yesterday"}},
		{"--start without zone", []string{"simulate", "-f", f, "--start", "2024-01-01T00:00:00"}, []string{"--start"}},
		{"bad --until", []string{"simulate", "-f", f, "--until", "5 minutes"}, []string{"--until"}},
		{"negative --until", []string{"simulate", "-f", f, "--until", "-1m"}, []string{"--until"}},
		{"negative --stop-delay", []string{"simulate", "-f", f, "--stop-delay", "-5s"}, []string{"--stop-delay", "-5s"}},
		{"missing file", []string{"simulate", "-f", missing}, []string{missing}},
		{"no file", []string{"simulate"}, []string{"-f"}},
		{"unknown flag", []string{"simulate", "-f", f, "--speed", "2"}, []string{"--speed"}},
		{"stray argument", []string{"simulate", "-f", f, "extra.yaml"}, []string{"extra.yaml"}},
		// Not simulate's, but the same kind of mistake on the command line.
		{"events tail of an unknown type", []string{"events", "tail", "--type", "bogus"}, []string{`--type "bogus": no such event`, "workload.admitted"}},
		{"a --config that is no Configuration", []string{"admission", "--config", f}, []string{"--config", "only a Configuration document"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runSluice(t, c.args...)
			if code != exitBadInput {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitBadInput, errOut)
			}
			if out != "" {
				t.Errorf("stdout not empty:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, errOut := runSluice(t, "--version")
	if code != exitOK || !strings.HasPrefix(out, "sluice ") || errOut != "" {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestKnownTransition(t *testing.T) {
	for _, tc := range []struct {
		typ, entity, transition string
		ok                      bool
	}{
		{"admitted", "*", "admitted", true},
		{"workload.admitted", "workload", "admitted", true},
		{"requested", "*", "requested", true},
		{"quota.admitted", "quota", "admitted", false},
		{"bogus", "*", "bogus", false},
	} {
		if err := knownTransition(tc.typ, tc.entity, tc.transition); (err == nil) != tc.ok {
			t.Errorf("knownTransition(%q) = %v, want ok %v", tc.typ, err, tc.ok)
		}
	}
}

// TestSimulateTableLocalQueueUsage: with Admission Fair Sharing the table
// ends with each LocalQueue's usage and share.
func TestSimulateTableLocalQueueUsage(t *testing.T) {
	code, out, errOut := runSluice(t, "simulate", "-f", filepath.Join("..", "..", "examples", "admission-fair-sharing.yaml"), "--output", "table")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, errOut)
	}
	for _, want := range []string{"LOCALQUEUE", "team-a/jobs  nvidia.com/gpu=2.30", "team-b/jobs  nvidia.com/gpu=0.63"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
