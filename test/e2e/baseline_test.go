package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/loadtest/baseline"
)

// baselineScale is the share of Kueue's baseline workload (15,000 Jobs at
// 1) the tests below replay: SLUICE_BASELINE_SCALE, default 0.2 (3,000
// Jobs, about 30 s each). `make loadtest` runs them at full scale.
func baselineScale(t *testing.T) float64 {
	v := os.Getenv("SLUICE_BASELINE_SCALE")
	if v == "" {
		return 0.2
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || s <= 0 {
		t.Fatalf("SLUICE_BASELINE_SCALE=%q: want a positive number", v)
	}
	return s
}

// baselineProfile is the workload the tests below replay:
// SLUICE_BASELINE_PROFILE, a built-in profile (default baseline) or a Kueue
// generator file's path.
func baselineProfile(t *testing.T) *baseline.Profile {
	t.Helper()
	p, err := baseline.LoadProfile(cmp.Or(os.Getenv("SLUICE_BASELINE_PROFILE"), "baseline"))
	if err != nil {
		t.Fatalf("SLUICE_BASELINE_PROFILE: %v", err)
	}
	return p
}

// baselineRanges is the range file of the profile and scale replayed: for
// the baseline, full scale's at 1 and CI's below; for another built-in
// profile, its own (loadtest/ranges/<profile>.yaml) at scale 1, and none
// otherwise.
func baselineRanges(t *testing.T) baseline.Ranges {
	t.Helper()
	p := baselineProfile(t)
	name := "ci.yaml"
	switch {
	case p.Name != "baseline" && (baselineScale(t) != 1 || !slices.Contains(baseline.BuiltinProfiles(), p.Name)):
		return baseline.Ranges{}
	case p.Name != "baseline":
		name = p.Name + ".yaml"
	case baselineScale(t) >= 1:
		name = "full.yaml"
	}
	r, err := baseline.LoadRanges(filepath.Join(root(), "loadtest", "ranges", name), p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// replay runs the baseline workload against the cluster and fails the test
// on every quota violation, order violation of the event stream, or Job
// that did not finish.
func replay(t *testing.T, natsURL, prefix string) *baseline.Result {
	t.Helper()
	var log bytes.Buffer
	res, err := baseline.Run(context.Background(), env.kube, env.dyn, baseline.Options{
		Profile:   baselineProfile(t).Name,
		Scale:     baselineScale(t),
		Namespace: prefix,
		Prefix:    prefix,
		NATSURL:   natsURL,
		Timeout:   45 * time.Minute,
		Log:       &log,
	})
	if err != nil {
		t.Fatalf("baseline run: %v\n%s", err, log.String())
	}
	var report bytes.Buffer
	res.Print(&report)
	t.Logf("%s at scale %g:\n%s", res.Profile.Name, baselineScale(t), report.String())
	for _, f := range res.Failures() {
		t.Error(f)
	}
	for _, f := range baselineRanges(t).Check(res) {
		t.Error("out of range: " + f)
	}
	if res.Preemptions == 0 && res.Profile.Name == "baseline" {
		t.Error("no Job was preempted: the run did not meet the race it is meant to")
	}
	return res
}

// TestBaselineQuotaHolds replays Kueue's baseline workload (5 cohorts of 6
// ClusterQueues, small, medium and large Jobs that preempt each other
// across the queues of a cohort) through `sluice dev`.
func TestBaselineQuotaHolds(t *testing.T) {
	replay(t, env.nats, "bl-dev")
	if env.sluice != nil {
		if peak, err := peakResident(env.sluice.Process.Pid); err == nil {
			t.Logf("sluice dev peak resident memory so far: %d MB", peak>>20)
			for _, f := range baselineRanges(t).CheckMemory(peak) {
				t.Error("out of range: " + f)
			}
		} else {
			t.Logf("sluice dev peak resident memory unknown: %v", err)
		}
	}
}

// peakResident reads a process's peak resident set size (VmHWM) in bytes.
func peakResident(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// TestBaselineQuotaHoldsWhileServicesAreKilled replays it with every
// service its own process (two admission replicas, two replicas of the Job
// integration) and one of them killed with SIGKILL every few seconds, in
// turn.
func TestBaselineQuotaHoldsWhileServicesAreKilled(t *testing.T) {
	a := startApart(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		victims := []string{"admission-a", "preemption", "quota", "admission-b", "job", "watcher", "job-b"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Second):
			}
			a.kill(victims[i%len(victims)], 300*time.Millisecond)
		}
	}()
	replay(t, a.nats.ClientURL(), "bl-apart")
	close(stop)
	wg.Wait()
	t.Logf("services killed: %s", a.killed())
}
