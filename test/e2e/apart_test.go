package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/embeddednats"
)

// apart runs Sluice as a real deployment does: every service its own
// process, all against one NATS JetStream server (here in the test
// process), so that a test can kill one service at a time. While it runs,
// the suite's `sluice dev` is stopped, so that the Jobs are the apart
// services' alone.
type apart struct {
	t    *testing.T
	nats *embeddednats.Server
	dir  string
	log  *os.File
	args map[string][]string
	// metrics is each admission replica's /healthz, /readyz and /metrics
	// address.
	metrics map[string]string

	mu    sync.Mutex
	procs map[string]*exec.Cmd
	kills map[string]int
}

// startApart stops `sluice dev` and starts watcher, two replicas of the Job
// integration (one serving the webhook, as a Service would pick one), two
// admission replicas, preemption and quota. Cleanup stops them and starts `sluice
// dev` again.
func startApart(t *testing.T) *apart { return startApartWith(t, 2) }

// startApartWith is startApart with n admission replicas (admission-a,
// admission-b, …), each serving /metrics on an address of its own
// (apart.metrics).
func startApartWith(t *testing.T, n int) *apart {
	t.Helper()
	srv, dir, logf := withoutSluiceDev(t)
	kubeconfig := env.kubeconfig
	common := []string{"--nats", srv.ClientURL(), "--log-level", "info"}
	kube := append([]string{"--kubeconfig", kubeconfig}, common...)
	a := &apart{t: t, nats: srv, dir: dir, log: logf, procs: map[string]*exec.Cmd{}, kills: map[string]int{},
		metrics: map[string]string{},
		args: map[string][]string{
			"watcher":    append([]string{"watcher", "--status-interval", "1s"}, kube...),
			"job":        append([]string{"integration", "job", "--webhook-address", env.hookAddr}, kube...),
			"job-b":      append([]string{"integration", "job", "--webhook-address", ""}, kube...),
			"preemption": append([]string{"preemption"}, common...),
			"quota":      append([]string{"quota", "--reconcile", "5s"}, common...),
		}}
	for i := range n {
		name := fmt.Sprintf("admission-%c", 'a'+i)
		addr := fmt.Sprintf("127.0.0.1:%d", freePort())
		a.metrics[name] = addr
		a.args[name] = append([]string{"admission", "--replica", name, "--http-address", addr}, common...)
	}
	t.Cleanup(a.stopAll)
	for _, name := range a.names() {
		a.start(name)
	}
	if err := waitWebhook(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *apart) names() []string {
	var out []string
	for n := range a.args {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// start launches a service; its output goes to the shared log with its
// name in front of each line (zerolog's JSON carries "service" too).
func (a *apart) start(name string) {
	a.t.Helper()
	cmd := exec.Command(env.sluiceBin, a.args[name]...)
	cmd.Env = append(os.Environ(), env.sluiceEnv...)
	cmd.Stdout, cmd.Stderr = a.log, a.log
	if err := cmd.Start(); err != nil {
		a.t.Fatalf("start %s: %v", name, err)
	}
	a.mu.Lock()
	a.procs[name] = cmd
	a.mu.Unlock()
}

// kill ends a service with SIGKILL (nothing flushed, nothing acked) and
// starts it again after pause.
func (a *apart) kill(name string, pause time.Duration) {
	a.mu.Lock()
	cmd := a.procs[name]
	delete(a.procs, name)
	a.kills[name]++
	a.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	time.Sleep(pause)
	a.start(name)
}

// pid is a running service's process id (0 if it is not running).
func (a *apart) pid(name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cmd := a.procs[name]; cmd != nil {
		return cmd.Process.Pid
	}
	return 0
}

func (a *apart) stopAll() {
	a.mu.Lock()
	procs := a.procs
	a.procs = map[string]*exec.Cmd{}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, cmd := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}()
	}
	wg.Wait()
}

// killed says how often each service was killed.
func (a *apart) killed() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var parts []string
	for _, n := range a.names() {
		if k := a.kills[n]; k > 0 {
			parts = append(parts, fmt.Sprintf("%s×%d", n, k))
		}
	}
	return fmt.Sprint(parts)
}

// withoutSluiceDev stops the suite's `sluice dev` for a test that runs
// services of its own: it starts a JetStream server for them and a shared
// log file in a temporary directory. Cleanup, after the test's own, prints
// the log's end if the test failed, stops the server and starts `sluice dev`
// again.
func withoutSluiceDev(t *testing.T) (*embeddednats.Server, string, *os.File) {
	t.Helper()
	stopSluice(os.Interrupt)
	dir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Options{StoreDir: filepath.Join(dir, "jetstream")})
	if err != nil {
		t.Fatalf("start NATS: %v", err)
	}
	logf, err := os.Create(filepath.Join(dir, "services.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("last lines of the services' log:\n%s", tail(string(b), 60))
				// The whole log, for what happened long before the end.
				out := filepath.Join(root(), "bin", "e2e-output")
				if os.MkdirAll(out, 0o755) == nil {
					name := filepath.Join(out, strings.ReplaceAll(t.Name(), "/", "_")+".services.log")
					if os.WriteFile(name, b, 0o644) == nil {
						t.Logf("the services' whole log: %s", name)
					}
				}
			}
		}
		_ = logf.Close()
		if err := startSluice(); err != nil {
			t.Errorf("restart sluice dev: %v", err)
			return
		}
		if err := waitWebhook(30 * time.Second); err != nil {
			t.Error(err)
		}
	})
	return srv, dir, logf
}
