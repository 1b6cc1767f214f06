package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func admissionCheck(name string) string {
	return docHead + "kind: AdmissionCheck\nmetadata: {name: " + name + "}\nspec: {controllerName: example.com/" + name + "}\n"
}

// checkSteps lists the reservations, admissions, evictions, finishes and
// checks' answers of a run, the answers as "check=State".
func checkSteps(t *testing.T, recs []Record) []step {
	t.Helper()
	var out []step
	for _, r := range recs {
		ty := r.Type[strings.LastIndex(r.Type, ".")+1:]
		at, err := time.Parse(time.RFC3339Nano, r.Time)
		if err != nil {
			t.Fatal(err)
		}
		s := step{At: at.Sub(DefaultStart), Type: ty, Subject: r.Subject}
		switch d := r.Data.(type) {
		case CheckData:
			s.Detail = d.Check + "=" + d.State
		case WorkloadData:
			switch ty {
			case "reserved":
				for _, c := range d.Checks {
					s.Detail += c.Name + " "
				}
				s.Detail = strings.TrimSpace(s.Detail)
			case "evicted":
				s.Detail = d.Reason + ": " + d.Message
			case "admitted", "finished":
			default:
				continue
			}
		default:
			continue
		}
		out = append(out, s)
	}
	return out
}

func TestAdmissionChecksInTheSimulator(t *testing.T) {
	yaml := scenario(
		flavor("default"),
		admissionCheck("prov"),
		clusterQueue("cq", cpuQueue("default", "4", "  admissionChecks: [prov]\n")),
		localQueue("default", "lq", "  clusterQueue: cq\n"),
		workload("default", "retried", `  queueName: lq
  runtime: 10m
  podSets: [{name: main, count: 4, requests: {cpu: 1}}]
  admissionChecks:
  - name: prov
    answers:
    - {state: Retry, after: 1m, requeueAfter: 5m, message: no capacity}
    - {state: Ready, after: 2m}
`),
		workload("default", "rejected", `  queueName: lq
  submitAt: 30s
  podSets: [{name: main, count: 4, requests: {cpu: 1}}]
  admissionChecks:
  - name: prov
    answers: [{state: Rejected, after: 10s, message: over budget}]
`),
		workload("default", "plain", `  queueName: lq
  submitAt: 2m
  runtime: 1m
  podSets: [{name: main, count: 4, requests: {cpu: 1}}]
`),
	)
	recs := run(t, yaml, Options{})
	want := []step{
		{0, "reserved", "default/retried", "prov"},
		{time.Minute, "updated", "default/retried", "prov=Retry"},
		{time.Minute, "evicted", "default/retried", "AdmissionCheck: admission check prov asked to retry: no capacity"},
		{time.Minute, "reserved", "default/rejected", "prov"},
		{70 * time.Second, "updated", "default/rejected", "prov=Rejected"},
		{70 * time.Second, "evicted", "default/rejected", "Deactivated: admission check prov rejected the workload: over budget"},
		// retried backs off until 6m; plain, submitted at 2m, goes first.
		{2 * time.Minute, "reserved", "default/plain", "prov"},
		{2 * time.Minute, "updated", "default/plain", "prov=Ready"},
		{2 * time.Minute, "admitted", "default/plain", ""},
		{3 * time.Minute, "finished", "default/plain", ""},
		{6 * time.Minute, "reserved", "default/retried", "prov"},
		{8 * time.Minute, "updated", "default/retried", "prov=Ready"},
		{8 * time.Minute, "admitted", "default/retried", ""},
		{18 * time.Minute, "finished", "default/retried", ""},
	}
	if d := cmp.Diff(want, checkSteps(t, recs)); d != "" {
		t.Errorf("steps (-want +got):\n%s", d)
	}
	s := summaryOf(t, recs)
	rej := workloadResult(t, s, "default/rejected")
	if rej.State != "pending" || rej.Reason != "deactivated: admission check prov rejected the workload: over budget" {
		t.Errorf("rejected ends %s: %q", rej.State, rej.Reason)
	}
	if r := workloadResult(t, s, "default/retried"); r.Admissions != 1 || r.Evictions != 1 || r.Admitted != at(8*time.Minute) {
		t.Errorf("retried: %+v", r)
	}
	var table strings.Builder
	if err := WriteTable(&table, recs, DefaultStart); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"Retry: no capacity (retry after 300s)", "awaits prov"} {
		if !strings.Contains(table.String(), line) {
			t.Errorf("the table has no %q:\n%s", line, table.String())
		}
	}
}

func TestAChecksRetryForeverEndsTheRun(t *testing.T) {
	yaml := scenario(
		flavor("default"),
		admissionCheck("prov"),
		clusterQueue("cq", cpuQueue("default", "4", "  admissionChecks: [prov]\n")),
		localQueue("default", "lq", "  clusterQueue: cq\n"),
		workload("default", "a", `  queueName: lq
  podSets: [{name: main, count: 1, requests: {cpu: 1}}]
  admissionChecks: [{name: prov, answers: [{state: Retry}]}]
`),
	)
	s := summaryOf(t, run(t, yaml, Options{}))
	if !strings.Contains(s.Stopped, "default/a was reserved 1000 times") {
		t.Errorf("stopped = %q", s.Stopped)
	}
}

func TestLoadRefusesBadCheckAnswers(t *testing.T) {
	base := []string{flavor("default"), admissionCheck("prov"), clusterQueue("cq", cpuQueue("default", "4", "  admissionChecks: [prov]\n")), localQueue("default", "lq", "  clusterQueue: cq\n")}
	cases := []struct{ name, checks, want string }{
		{"an unknown state", "[{name: prov, answers: [{state: Maybe}]}]", `spec.admissionChecks[0].answers[0].state: Unsupported value: "Maybe"`},
		{"an unknown check", "[{name: other, answers: [{state: Ready}]}]", `spec.admissionChecks[0].name: Not found: "other"`},
		{"a delay on Ready", "[{name: prov, answers: [{state: Ready, requeueAfter: 1m}]}]", "spec.admissionChecks[0].answers[0].requeueAfter: Invalid value"},
		{"no answers", "[{name: prov, answers: []}]", "spec.admissionChecks[0].answers: Required value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			yaml := scenario(append(base, workload("default", "a", "  queueName: lq\n  podSets: [{name: main, count: 1, requests: {cpu: 1}}]\n  admissionChecks: "+c.checks+"\n"))...)
			_, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(yaml)}})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "test.yaml: document 5") {
				t.Errorf("Load: %v, want an error with %q in document 5", err, c.want)
			}
		})
	}
	t.Run("both fields on a ClusterQueue", func(t *testing.T) {
		yaml := scenario(flavor("default"), admissionCheck("prov"),
			clusterQueue("cq", cpuQueue("default", "4", "  admissionChecks: [prov]\n  admissionChecksStrategy: {admissionChecks: [{name: prov}]}\n")))
		_, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(yaml)}})
		if err == nil || !strings.Contains(err.Error(), "either admissionChecks or admissionChecksStrategy") {
			t.Errorf("Load: %v", err)
		}
	})
	t.Run("an AdmissionCheck without controllerName", func(t *testing.T) {
		_, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(docHead + "kind: AdmissionCheck\nmetadata: {name: x}\nspec: {}\n")}})
		if err == nil || !strings.Contains(err.Error(), "spec.controllerName: Required value") {
			t.Errorf("Load: %v", err)
		}
	})
}
