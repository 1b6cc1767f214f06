package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
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
	res := replayUnranged(t, natsURL, prefix, nil)
	for _, f := range baselineRanges(t).Check(res) {
		t.Error("out of range: " + f)
	}
	return res
}

// replayUnranged is replay without the range file's checks; ready, if
// set, is called right before the first Job is created.
func replayUnranged(t *testing.T, natsURL, prefix string, ready func()) *baseline.Result {
	t.Helper()
	var log bytes.Buffer
	// The generator's own clients, as the floor's (cmd/baseline): the
	// suite's are rate-limited lower.
	clients, err := baseline.Clients(env.cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := baseline.Run(context.Background(), clients.Kube, clients.Dyn, baseline.Options{
		Watch:     clients.Watch,
		Profile:   baselineProfile(t).Name,
		Scale:     baselineScale(t),
		Namespace: prefix,
		Prefix:    prefix,
		NATSURL:   natsURL,
		Timeout:   45 * time.Minute,
		Log:       &log,
		Ready:     ready,
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

// TestAdmissionReplicasAtScale replays the profile (SLUICE_BASELINE_PROFILE;
// `make loadtest PROFILE=large-scale REPLICAS=2`) with every service its
// own process and SLUICE_ADMISSION_REPLICAS admission replicas sharing the
// cohort trees. Once the Jobs are coming, each replica must decide a share
// of the trees (from its /metrics); SLUICE_KILL_AFTER (default 2 min)
// into the replay admission-a is SIGKILLed and stays away for a minute:
// the others must hold all its trees within 30 s, and the replay's checks
// (quota at every step, the event audit, every Job finished) must hold.
// The CPU each replica used is logged.
func TestAdmissionReplicasAtScale(t *testing.T) {
	v := os.Getenv("SLUICE_ADMISSION_REPLICAS")
	if v == "" {
		t.Skip("SLUICE_ADMISSION_REPLICAS not set (make loadtest REPLICAS=N)")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 || n > 8 {
		t.Fatalf("SLUICE_ADMISSION_REPLICAS=%q: want 2 to 8", v)
	}
	killAfter := 2 * time.Minute
	if d := os.Getenv("SLUICE_KILL_AFTER"); d != "" {
		if killAfter, err = time.ParseDuration(d); err != nil || killAfter <= 0 {
			t.Fatalf("SLUICE_KILL_AFTER=%q: want a positive duration", d)
		}
	}
	a := startApartWith(t, n)
	names := slices.Sorted(maps.Keys(a.metrics))
	const victim = "admission-a"
	started := make(chan struct{})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-started:
		case <-done:
			return
		}
		split := time.Now()
		for {
			shares, trees := treeShares(a, names)
			if trees > 0 && len(shares) == n && !slices.Contains(slices.Collect(maps.Values(shares)), 0) {
				t.Logf("cohort trees per replica %s after %s: %v of %d", time.Now().Format("15:04:05"), time.Since(split).Round(time.Millisecond), shares, trees)
				break
			}
			if time.Since(split) > killAfter {
				t.Errorf("after %s the replicas still do not each decide some of the trees: %v of %d", killAfter, shares, trees)
				return
			}
			time.Sleep(time.Second)
		}
		select {
		case <-time.After(time.Until(split.Add(killAfter))):
		case <-done:
			t.Errorf("the replay ended before %s, when %s was to be killed", killAfter, victim)
			return
		}
		t.Logf("CPU before the kill: %s", cpuOf(a, names))
		wg.Go(func() { a.kill(victim, time.Minute) })
		killed := time.Now()
		survivors := slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == victim })
		for {
			shares, trees := treeShares(a, survivors)
			held := 0
			for _, c := range shares {
				held += c
			}
			if trees > 0 && held == trees {
				t.Logf("%s SIGKILLed; %v hold all %d trees after %s", victim, shares, trees, time.Since(killed).Round(time.Millisecond))
				break
			}
			if time.Since(killed) > 30*time.Second {
				t.Errorf("30 s after %s was killed the others hold %v of %d trees", victim, shares, trees)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		<-done
		shares, trees := treeShares(a, names)
		t.Logf("at the end: trees per replica %v of %d; CPU %s (%s since its restart)", shares, trees, cpuOf(a, names), victim)
	}()
	defer wg.Wait()
	res := func() *baseline.Result {
		defer close(done)
		return replayUnranged(t, a.nats.ClientURL(), "bl-apart", func() { close(started) })
	}()
	t.Logf("%d admission replicas: wall %s, %d Jobs, services killed: %s", n, res.Wall.Round(time.Millisecond), res.Finished, a.killed())
}

// treeShares reads each named admission replica's cohort trees owned,
// and the trees there are, from its /metrics (a replica that does not
// answer is left out).
func treeShares(a *apart, names []string) (map[string]int, int) {
	shares := map[string]int{}
	trees := 0
	for _, name := range names {
		fams, err := scrapeAt(a.metrics[name])
		if err != nil {
			continue
		}
		if v, ok := value(fams, "sluice_admission_cohort_trees_owned", nil); ok {
			shares[name] = int(v)
		}
		if v, ok := value(fams, "sluice_admission_cohort_trees", nil); ok {
			trees = max(trees, int(v))
		}
	}
	return shares, trees
}

// cpuOf says how much CPU (user and system) each running named service
// used so far.
func cpuOf(a *apart, names []string) string {
	var parts []string
	for _, name := range names {
		pid := a.pid(name)
		if pid == 0 {
			parts = append(parts, name+" not running")
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			parts = append(parts, name+": "+err.Error())
			continue
		}
		// After the command's name (in parentheses): utime and stime are
		// fields 14 and 15 of the line, in clock ticks of 1/100 s.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		parts = append(parts, fmt.Sprintf("%s %.1f s", name, (ut+st)/100))
	}
	return strings.Join(parts, ", ")
}
