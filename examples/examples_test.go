// Package examples_test runs every scenario in this directory through the
// simulator and checks the facts its header comment and docs/simulate.md
// promise, so neither can drift from what the engine does.
package examples_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/simulate"
)

// event is one workload transition of a run.
type event struct {
	At   time.Duration
	Type string // last part of the CloudEvents type: admitted, preempted…
	Key  string // namespace/name
	Data simulate.WorkloadData
}

// story is a whole run.
type story struct {
	t       *testing.T
	events  []event
	summary simulate.Summary
}

func runYAML(t *testing.T, name string, yaml []byte) *story {
	t.Helper()
	sc, err := simulate.Load([]simulate.Source{{Name: name, R: bytes.NewReader(yaml)}})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	recs, err := simulate.Run(sc, simulate.Options{})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	s := &story{t: t}
	for _, r := range recs {
		switch d := r.Data.(type) {
		case simulate.WorkloadData:
			at, err := time.Parse(time.RFC3339Nano, r.Time)
			if err != nil {
				t.Fatalf("record %s: %v", r.ID, err)
			}
			s.events = append(s.events, event{
				At:   at.Sub(simulate.DefaultStart),
				Type: r.Type[strings.LastIndex(r.Type, ".")+1:],
				Key:  r.Subject,
				Data: d,
			})
		case simulate.Summary:
			s.summary = d
		}
	}
	return s
}

func runFile(t *testing.T, name string) *story {
	t.Helper()
	yaml, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return runYAML(t, name, yaml)
}

// of lists the events of one type for one workload.
func (s *story) of(typ, key string) []event {
	var out []event
	for _, e := range s.events {
		if e.Type == typ && e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

func (s *story) all(typ string) []event {
	var out []event
	for _, e := range s.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func podSets(d simulate.WorkloadData) string {
	var parts []string
	for _, ps := range d.PodSets {
		var fl []string
		for r, f := range ps.Flavors {
			fl = append(fl, r+"="+f)
		}
		sort.Strings(fl)
		parts = append(parts, fmt.Sprintf("%s×%d %s", ps.Name, ps.Count, strings.Join(fl, ",")))
		if ps.Topology != nil {
			var doms []string
			for _, d := range ps.Topology.Domains {
				doms = append(doms, fmt.Sprintf("%s:%d", d.Values[len(d.Values)-1], d.Count))
			}
			parts = append(parts, "on "+strings.Join(doms, ","))
		}
	}
	return strings.Join(parts, " ")
}

// admitted checks the n-th admission (from 1) of a workload: when, where
// and with what pod sets ("main×4 cpu=spot"; empty to skip).
func (s *story) admitted(key string, n int, at time.Duration, cq, sets string) {
	s.t.Helper()
	adm := s.of("admitted", key)
	if len(adm) < n {
		s.t.Errorf("%s admitted %d times, want admission #%d at %s", key, len(adm), n, at)
		return
	}
	e := adm[n-1]
	if e.At != at || e.Data.ClusterQueue != cq || (sets != "" && podSets(e.Data) != sets) {
		s.t.Errorf("%s admission #%d: at %s in %s with %s; want at %s in %s with %s",
			key, n, e.At, e.Data.ClusterQueue, podSets(e.Data), at, cq, sets)
	}
}

func (s *story) admissions(key string, want int) {
	s.t.Helper()
	if got := len(s.of("admitted", key)); got != want {
		s.t.Errorf("%s admitted %d times, want %d", key, got, want)
	}
}

// preempted checks that victim was preempted exactly once, at at, by
// preemptor, for reason.
func (s *story) preempted(victim string, at time.Duration, preemptor, reason string) {
	s.t.Helper()
	p := s.of("preempted", victim)
	if len(p) != 1 {
		s.t.Errorf("%s preempted %d times, want once", victim, len(p))
		return
	}
	if p[0].At != at || p[0].Data.Preemptor != preemptor || p[0].Data.Reason != reason {
		s.t.Errorf("%s preempted at %s by %s (%s); want at %s by %s (%s)",
			victim, p[0].At, p[0].Data.Preemptor, p[0].Data.Reason, at, preemptor, reason)
	}
}

func (s *story) finished(key string, at time.Duration) {
	s.t.Helper()
	f := s.of("finished", key)
	if len(f) != 1 || f[0].At != at {
		s.t.Errorf("%s finished %v, want once at %s", key, f, at)
	}
}

// pendingWith checks that a workload was pending at at with a reason that
// contains want.
func (s *story) pendingWith(key string, at time.Duration, want string) {
	s.t.Helper()
	for _, e := range s.of("pending", key) {
		if e.At == at && strings.Contains(e.Data.Reason, want) {
			return
		}
	}
	s.t.Errorf("%s not pending at %s with a reason containing %q; pending records: %v", key, at, want, s.of("pending", key))
}

func (s *story) result(key string) simulate.WorkloadResult {
	s.t.Helper()
	for _, w := range s.summary.Workloads {
		if w.Namespace+"/"+w.Name == key {
			return w
		}
	}
	s.t.Fatalf("summary has no %s", key)
	return simulate.WorkloadResult{}
}

func (s *story) utilization(cq, flavor, res string) float64 {
	s.t.Helper()
	for _, q := range s.summary.ClusterQueues {
		for _, r := range q.Resources {
			if q.Name == cq && r.Flavor == flavor && r.Resource == res {
				return r.Utilization
			}
		}
	}
	s.t.Fatalf("summary has no %s %s/%s", cq, flavor, res)
	return 0
}

const (
	second = time.Second
	minute = time.Minute
	hour   = time.Hour
)

// facts holds the checks of every example, by file name.
var facts = map[string]func(s *story){
	"quickstart.yaml": func(s *story) {
		s.admitted("team-a/sweep", 1, 0, "cq-a", "main×8 cpu=a100,nvidia.com/gpu=a100")
		s.preempted("team-a/sweep", 5*minute, "team-b/train", "InCohortReclamation")
		s.admitted("team-b/train", 1, 5*minute, "cq-b", "main×4 cpu=a100,nvidia.com/gpu=a100")
		s.finished("team-b/train", 15*minute)
		s.admitted("team-a/sweep", 2, 15*minute, "cq-a", "")
		s.finished("team-a/sweep", 45*minute)
	},
	"borrowing-and-reclaim.yaml": func(s *story) {
		s.admitted("team-a/sweep-1", 1, 0, "team-a", "worker×2 nvidia.com/gpu=a100")
		s.admitted("team-a/sweep-2", 1, 1*second, "team-a", "")
		s.admitted("team-a/sweep-3", 1, 2*second, "team-a", "")
		// borrowingLimit 2: a fourth pair of GPUs is too much.
		s.pendingWith("team-a/sweep-4", 3*second, "available 0")
		s.admitted("team-b/batch", 1, 4*second, "team-b", "")
		// train reclaims the GPUs sweep-3 borrowed, at the instant it comes.
		s.preempted("team-a/sweep-3", 10*minute, "team-b/train", "InCohortReclamation")
		s.admitted("team-b/train", 1, 10*minute, "team-b", "trainer×2 nvidia.com/gpu=a100")
		s.admitted("team-a/sweep-3", 2, 30*minute, "team-a", "")
		s.admitted("team-a/sweep-4", 1, 30*minute, "team-a", "")
		// Its 30 minutes start again at the second admission.
		s.finished("team-a/sweep-3", 1*hour)
		if got := s.summary.PreemptionCount; got != 1 {
			s.t.Errorf("%d preemptions, want 1", got)
		}
		if u := s.utilization("team-a", "a100", "nvidia.com/gpu"); u <= 1 {
			s.t.Errorf("team-a utilization %g, want above 1 (it borrows)", u)
		}
	},
	"strict-vs-besteffort.yaml": func(s *story) {
		s.admitted("besteffort/small", 1, 2*second, "besteffort", "")
		s.pendingWith("strict/small", 2*second, "waiting behind strict/big")
		s.admitted("strict/small", 1, 1*hour, "strict", "")
		s.admitted("strict/big", 1, 1*hour, "strict", "")
		s.admitted("besteffort/big", 1, 1*hour, "besteffort", "")
		if w := s.result("strict/small").WaitSeconds; w == nil || *w != 3598 {
			s.t.Errorf("strict/small waited %v s, want 3598", w)
		}
	},
	"topology.yaml": func(s *story) {
		s.admitted("default/rack-job", 1, 0, "training", "workers×8 nvidia.com/gpu=tas on b1r1n1:4,b1r1n2:4")
		s.pendingWith("default/too-big", 1*second, "pod set workers: 10 pods need one rack (level example.com/rack) of flavor tas; the best rack has room for 8 pods")
		s.admitted("default/block-job", 1, 2*second, "training", "workers×12 nvidia.com/gpu=tas on b2r1n1:4,b2r1n2:4,b2r2n1:4")
		s.admitted("default/sliced", 1, 3*second, "training", "workers×4 nvidia.com/gpu=tas on b2r2n2:4")
		s.finished("default/rack-job", 10*minute)
		if r := s.result("default/too-big"); r.State != "pending" {
			s.t.Errorf("too-big is %s, want pending for ever", r.State)
		}
		peaks := map[string]float64{}
		for _, d := range s.summary.Domains {
			peaks[strings.Join(d.Domain, "/")] = d.Peak
			if d.Capacity != 4 || d.Resource != "nvidia.com/gpu" {
				s.t.Errorf("domain %+v, want 4 nvidia.com/gpu", d)
			}
		}
		if len(peaks) != 8 || peaks["b1/r2/b1r2n1"] != 0 || peaks["b2/r2/b2r2n2"] != 4 {
			s.t.Errorf("domain peaks %v, want 8 nodes, b1/r2 never used, b2r2n2 full", peaks)
		}
	},
	"partial-admission.yaml": func(s *story) {
		s.admitted("default/service", 1, 0, "gpus", "server×4 nvidia.com/gpu=h100")
		s.admitted("default/elastic", 1, 0, "gpus", "worker×6 nvidia.com/gpu=h100")
		s.pendingWith("default/rigid", 1*second, "requested 4, available 0")
		s.finished("default/service", 10*minute)
		s.admitted("default/rigid", 1, 10*minute, "gpus", "worker×4 nvidia.com/gpu=h100")
		s.admissions("default/elastic", 1)
		if a := s.result("default/service").Admitted; a != simulate.DefaultStart.Add(-20*minute).Format(time.RFC3339Nano) {
			s.t.Errorf("service admitted %s in the summary, want 20m before the start", a)
		}
	},
	"fair-sharing.yaml": func(s *story) {
		for i := 1; i <= 12; i++ {
			s.admitted(fmt.Sprintf("team-a/a-%02d", i), 1, 0, "team-a", "")
		}
		pre := s.all("preempted")
		if len(pre) != 6 {
			s.t.Errorf("%d preemptions, want 6", len(pre))
		}
		for _, p := range pre {
			if p.At != 10*minute || p.Data.Reason != "InCohortFairSharing" || !strings.HasPrefix(p.Data.Preemptor, "team-b/") {
				s.t.Errorf("preemption %+v, want at 10m by team-b for InCohortFairSharing", p)
			}
		}
		for i := 1; i <= 6; i++ {
			s.admitted(fmt.Sprintf("team-b/b-%d", i), 1, 10*minute, "team-b", "")
		}
	},
	"hierarchical-cohorts.yaml": func(s *story) {
		s.admitted("research/exp-1", 1, 0, "cq-research", "")
		s.admitted("research/exp-2", 1, 1*second, "cq-research", "")
		s.pendingWith("research/exp-3", 2*second, "requested 3, available 2")
		s.admitted("prod/serve", 1, 5*minute, "cq-prod", "main×4 nvidia.com/gpu=gpu")
		s.admitted("research/exp-3", 1, 30*minute, "cq-research", "")
		if n := len(s.all("preempted")); n != 0 {
			s.t.Errorf("%d preemptions, want none", n)
		}
	},
	"hierarchical-reclaim.yaml": func(s *story) {
		s.admitted("prod/train", 1, 0, "cq-prod", "main×8 nvidia.com/gpu=gpu")
		s.preempted("prod/train", 5*minute, "research/tune", "InCohortReclamation")
		s.admitted("research/tune", 1, 5*minute, "cq-research", "main×4 nvidia.com/gpu=gpu")
		s.pendingWith("prod/train", 5*minute, "requested 8, available 4")
		s.admitted("prod/etl", 1, 1*second, "cq-prod", "main×2 cpu=spot")
		s.preempted("prod/etl", 10*minute, "batch/urgent", "InCohortReclamation")
		s.admitted("batch/urgent", 1, 10*minute, "cq-batch", "main×2 cpu=spot")
		s.admitted("prod/etl", 2, 20*minute, "cq-prod", "main×2 cpu=spot")
		if p := s.of("preempted", "batch/filler"); len(p) != 0 {
			s.t.Errorf("batch/filler preempted: %v", p)
		}
	},
	"wait-for-pods-ready.yaml": func(s *story) {
		s.admitted("team/first", 1, 0, "cq", "main×4 nvidia.com/gpu=gpu")
		s.pendingWith("team/second", 1*second, "waiting for all admitted workloads to be in PodsReady condition")
		s.admitted("team/second", 1, 30*second, "cq", "main×4 nvidia.com/gpu=gpu")
		evicted := s.of("evicted", "team/second")
		var got []string
		for _, e := range evicted {
			got = append(got, fmt.Sprintf("%s %s", e.At, e.Data.Reason))
		}
		if want := []string{"2m30s PodsReadyTimeout", "4m40s DeactivatedDueToRequeuingLimitExceeded"}; strings.Join(got, "; ") != strings.Join(want, "; ") {
			s.t.Errorf("team/second evictions %v, want %v", got, want)
		}
		s.admitted("team/second", 2, 2*minute+40*second, "cq", "main×4 nvidia.com/gpu=gpu")
		s.pendingWith("team/second", 4*minute+40*second, "deactivated: exceeding the maximum number of re-queuing retries")
		s.finished("team/first", 10*minute+30*second)
	},
	"max-execution-time.yaml": func(s *story) {
		s.admitted("team/sweep", 1, 0, "cq", "main×4 nvidia.com/gpu=gpu")
		s.preempted("team/sweep", 5*minute, "team/urgent", "InClusterQueue")
		s.admitted("team/sweep", 2, 15*minute, "cq", "main×4 nvidia.com/gpu=gpu")
		ev := s.of("evicted", "team/sweep")
		if len(ev) != 1 || ev[0].At != 30*minute || ev[0].Data.Reason != "DeactivatedDueToMaximumExecutionTimeExceeded" {
			s.t.Errorf("team/sweep evictions %v, want one at 30m for its maximum execution time", ev)
		}
		s.pendingWith("team/sweep", 30*minute, "deactivated: exceeding the maximum execution time")
		s.admissions("team/sweep", 2)
		s.finished("team/short", 40*minute)
		if r := s.result("team/sweep"); r.State != "pending" {
			s.t.Errorf("team/sweep ends %s, want pending (deactivated)", r.State)
		}
		// Nothing waits on short's unused hour: the run ends when it does.
		if s.summary.ElapsedSeconds != 2400 {
			s.t.Errorf("run took %vs, want 2400s", s.summary.ElapsedSeconds)
		}
	},
	"jobs-without-a-queue.yaml": func(s *story) {
		s.admitted("team-a/notebook", 1, 0, "cq", "main×2 nvidia.com/gpu=gpu")
		s.admitted("team-b/labelled", 1, 0, "cq", "main×2 nvidia.com/gpu=gpu")
		s.finished("team-a/notebook", 10*minute)
		s.finished("team-b/labelled", 10*minute)
		if r := s.result("team-b/forgotten"); r.State != "pending" || r.Reason != simulate.HeldReason || r.Admissions != 0 {
			s.t.Errorf("team-b/forgotten ends %s (%q) after %d admissions, want pending, held, never admitted", r.State, r.Reason, r.Admissions)
		}
		if ev := s.of("submitted", "team-b/forgotten"); len(ev) != 0 {
			s.t.Errorf("team-b/forgotten was submitted: %v; a held job has no workload", ev)
		}
	},
	"admission-fair-sharing.yaml": func(s *story) {
		for _, w := range []struct {
			key string
			at  time.Duration
		}{
			{"team-a/a-1", 0}, {"team-a/a-2", 0},
			// team-b used nothing: its jobs go before team-a's older ones.
			{"team-b/b-1", 20 * minute}, {"team-b/b-2", 20 * minute},
			{"team-a/a-3", 40 * minute}, {"team-a/a-4", 40 * minute},
			{"team-a/a-5", 60 * minute}, {"team-a/a-6", 60 * minute},
		} {
			s.admitted(w.key, 1, w.at, "research", "main×2 nvidia.com/gpu=gpu")
		}
		// At the end team-a, which held the GPUs for 60 of the 80 minutes,
		// has used more than team-b.
		used := map[string]float64{}
		for _, lq := range s.summary.LocalQueues {
			used[lq.Namespace] = lq.ConsumedResources["nvidia.com/gpu"]
		}
		if len(used) != 2 || used["team-a"] <= used["team-b"] || used["team-b"] <= 0 {
			s.t.Errorf("LocalQueue usage at the end %v, want both above 0 and team-a above team-b", used)
		}
	},
	"elastic-job.yaml": func(s *story) {
		s.admitted("ml/train", 1, 0, "gpus", "main×4 nvidia.com/gpu=a100")
		s.admitted("ml/eval", 1, minute, "gpus", "main×2 nvidia.com/gpu=a100")
		// Its scale-up to 8 waits for eval's 2 GPUs; its scale-down to 2
		// lets report in at the same instant.
		var got []string
		for _, e := range s.of("resized", "ml/train") {
			got = append(got, fmt.Sprintf("%s %s %d", e.At, e.Data.Reason, e.Data.PodSets[0].Count))
		}
		if want := []string{"20m0s ScaledUp 8", "40m0s ScaledDown 2"}; !slices.Equal(got, want) {
			s.t.Errorf("train resized %v, want %v", got, want)
		}
		s.pendingWith("ml/report", 25*minute, "insufficient unused quota for nvidia.com/gpu in flavor a100: requested 6, available 0")
		s.admitted("ml/report", 1, 40*minute, "gpus", "main×6 nvidia.com/gpu=a100")
	},
	"dra-devices.yaml": func(s *story) {
		s.admitted("ml/train-1", 1, 0, "ml", "main×2 cpu=default,example.com/gpu=default")
		s.admitted("ml/train-2", 1, 0, "ml", "main×1 cpu=default,example.com/gpu=default")
		s.pendingWith("ml/train-3", 0, "insufficient unused quota for example.com/gpu in flavor default: requested 1, available 0")
		s.admitted("ml/train-3", 1, 30*minute, "ml", "main×1 cpu=default,example.com/gpu=default")
		// Four devices held for the first 30 minutes, one for the last 30.
		if u := s.utilization("ml", "default", "example.com/gpu"); u < 0.624 || u > 0.626 {
			s.t.Errorf("GPU utilization %v, want 0.625", u)
		}
	},
	"resource-transformations.yaml": func(s *story) {
		s.admitted("team/small", 1, 0, "cq", "main×4 cpu=mig,example.com/accelerator-memory=mig,example.com/credits=budget")
		s.admitted("team/big", 1, 0, "cq", "main×2 cpu=mig,example.com/accelerator-memory=mig,example.com/credits=budget")
		s.pendingWith("team/more", minute, "insufficient unused quota for example.com/accelerator-memory in flavor mig")
		s.admitted("team/more", 1, 10*minute, "cq", "main×2 cpu=mig,example.com/accelerator-memory=mig,example.com/credits=budget")
		// Usage is counted in the transformed resources: 70 credits for
		// the first 10m, 50 until 15m, 30 for the last 15m.
		if u := s.utilization("cq", "budget", "example.com/credits"); u < 0.466 || u > 0.468 {
			s.t.Errorf("credits utilization %v, want about 0.467", u)
		}
		if u := s.utilization("cq", "mig", "example.com/accelerator-memory"); u < 0.707 || u > 0.709 {
			s.t.Errorf("accelerator memory utilization %v, want about 0.708", u)
		}
	},
	"admission-checks.yaml": func(s *story) {
		// train-1 lands on spot, where only the budget check runs.
		if r := s.of("reserved", "team-a/train-1"); len(r) != 1 || len(r[0].Data.Checks) != 1 || r[0].Data.Checks[0].Name != "budget" {
			s.t.Errorf("team-a/train-1 reservations %v, want one awaiting budget", r)
		}
		s.admitted("team-a/train-1", 1, 10*second, "gpu", "main×8 nvidia.com/gpu=spot")
		// train-2 lands on on-demand: prov says Retry (5m), then Ready.
		ev := s.of("evicted", "team-a/train-2")
		if len(ev) != 1 || ev[0].At != 90*second || ev[0].Data.Reason != "AdmissionCheck" {
			s.t.Errorf("team-a/train-2 evictions %v, want one at 1m30s for AdmissionCheck", ev)
		}
		s.pendingWith("team-a/train-2", 90*second, "admission check prov asked to retry: backing off until")
		s.admitted("team-a/train-2", 1, 9*minute+30*second, "gpu", "main×8 nvidia.com/gpu=on-demand")
		// sweep is rejected by the budget check and deactivated.
		s.pendingWith("team-a/sweep", 2*minute+5*second, "deactivated: admission check budget rejected the workload")
		s.admissions("team-a/sweep", 0)
		s.finished("team-a/train-1", 30*minute+10*second)
	},
	"node-selector.yaml": func(s *story) {
		s.admitted("team/wants-h100", 1, 0, "cq", "main×2 nvidia.com/gpu=h100")
		s.admitted("team/wants-zone", 1, 0, "cq", "main×2 nvidia.com/gpu=a100")
		s.admitted("team/wants-v100", 1, 0, "cq", "main×2 nvidia.com/gpu=shared")
	},
	"priority-change.yaml": func(s *story) {
		s.admitted("t/running", 1, 0, "cq", "main×4 cpu=default")
		s.admitted("t/second", 1, 10*minute, "cq", "main×4 cpu=default")
		s.admitted("t/first", 1, 20*minute, "cq", "main×4 cpu=default")
		if got := s.result("t/second").Priority; got != 10 {
			s.t.Errorf("t/second ends with priority %d, want 10", got)
		}
	},
	"flavor-fungibility.yaml": func(s *story) {
		s.admitted("borrow-first/job", 1, 0, "borrow-first", "main×6 cpu=on-demand")
		s.admitted("spot-first/job", 1, 0, "spot-first", "main×6 cpu=spot")
		s.preempted("preempt-first/filler", 5*minute, "preempt-first/urgent", "InClusterQueue")
		s.admitted("preempt-first/urgent", 1, 5*minute, "preempt-first", "main×4 cpu=on-demand")
		s.admitted("preempt-first/filler", 2, 5*minute, "preempt-first", "main×4 cpu=spot")
		s.finished("preempt-first/filler", 65*minute)
		s.admitted("spot-before-preempt/urgent", 1, 5*minute, "spot-before-preempt", "main×4 cpu=spot")
		if p := s.of("preempted", "spot-before-preempt/filler"); len(p) != 0 {
			s.t.Errorf("spot-before-preempt/filler preempted: %v", p)
		}
	},
	"stop-policy.yaml": func(s *story) {
		evicted := func(key, reason string) {
			s.t.Helper()
			ev := s.of("evicted", key)
			if len(ev) != 1 || ev[0].At != 0 || ev[0].Data.Reason != reason {
				s.t.Errorf("%s evictions %v, want one at 0s for %s", key, ev, reason)
			}
		}
		evicted("drained/running", "ClusterQueueStopped")
		evicted("paused/running", "LocalQueueStopped")
		s.pendingWith("drained/running", 0, "ClusterQueue drained is stopped")
		s.pendingWith("paused/running", 0, "LocalQueue paused/q is stopped")
		if ev := s.of("evicted", "held/running"); len(ev) != 0 {
			s.t.Errorf("held/running evicted under Hold: %v", ev)
		}
		s.finished("held/running", 20*minute)
		s.admissions("drained/new", 0)
		s.admissions("held/new", 0)
		s.pendingWith("held/new", 1*minute, "stopPolicy Hold")
		s.admitted("open/job", 1, 1*minute, "shared", "")
		if r := s.result("drained/running"); r.State != "pending" || r.Evictions != 1 {
			s.t.Errorf("summary of drained/running = %+v", r)
		}
	},
}

func TestExamples(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			yaml, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(yaml, []byte("# ")) {
				t.Errorf("%s does not start with a comment saying what it shows", f)
			}
			check, ok := facts[f]
			if !ok {
				t.Fatalf("%s has no facts in examples_test.go: add what it shows", f)
			}
			check(runFile(t, f))
		})
	}
	for name := range facts {
		if _, err := os.Stat(name); err != nil {
			t.Errorf("facts for %s, which does not exist", name)
		}
	}
}

// TestFairSharingExampleWithoutFairSharing follows the example's advice to
// delete the Configuration document: team-b then reclaims only its nominal
// quota.
func TestFairSharingExampleWithoutFairSharing(t *testing.T) {
	yaml, err := os.ReadFile("fair-sharing.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const cfg = "apiVersion: sluice.dev/v1beta1\nkind: Configuration\nfairSharing:\n  enable: true\n---\n"
	if !bytes.Contains(yaml, []byte(cfg)) {
		t.Fatalf("fair-sharing.yaml no longer holds the Configuration document this test removes")
	}
	s := runYAML(t, "fair-sharing-off.yaml", bytes.Replace(yaml, []byte(cfg), nil, 1))
	pre := s.all("preempted")
	if len(pre) != 4 {
		t.Errorf("%d preemptions, want 4", len(pre))
	}
	for _, p := range pre {
		if p.Data.Reason != "InCohortReclamation" {
			t.Errorf("preemption %+v, want InCohortReclamation", p)
		}
	}
	s.pendingWith("team-b/b-5", 10*minute, "available 0")
	s.pendingWith("team-b/b-6", 10*minute, "available 0")
}

// TestExamplesAreDeterministic: the same example gives the same output.
func TestExamplesAreDeterministic(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		var outs [2]bytes.Buffer
		for i := range outs {
			yaml, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			sc, err := simulate.Load([]simulate.Source{{Name: f, R: bytes.NewReader(yaml)}})
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			recs, err := simulate.Run(sc, simulate.Options{})
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := simulate.WriteJSONL(&outs[i], recs); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(outs[0].Bytes(), outs[1].Bytes()) {
			t.Errorf("%s: two runs differ", f)
		}
	}
}
