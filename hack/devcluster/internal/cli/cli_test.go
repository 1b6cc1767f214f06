package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &out, &errb, fstest.MapFS{})
	return code, out.String(), errb.String()
}

// A bad nodes file is refused before anything is built or started, with an
// error that names the file and the field.
func TestUpRefusesBadNodesFile(t *testing.T) {
	tmp := t.TempDir()
	bad := filepath.Join(tmp, "nodes.yaml")
	if err := os.WriteFile(bad, []byte("nodes:\n- name: gpu-0\n  capacity: {cpu: 8, memory: 1Gi, pods: 10}\n  labels: {gpu: [a100]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(tmp, "cache")
	code, _, stderr := runMain(t, "up", "--nodes", bad, "--dir", filepath.Join(tmp, "state"), "--cache", cache)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	for _, want := range []string{bad + ":4", `nodes[0].labels["gpu"]`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
	if _, err := os.Stat(cache); !os.IsNotExist(err) {
		t.Errorf("the cache was touched (%v): up should stop before building", err)
	}
}

func TestUsage(t *testing.T) {
	if code, _, _ := runMain(t); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	if code, _, stderr := runMain(t, "frobnicate"); code != 2 || !strings.Contains(stderr, "unknown command") {
		t.Errorf("unknown command: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ := runMain(t, "status", "--bogus"); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
	if code, _, stderr := runMain(t, "-h"); code != 0 || !strings.Contains(stderr, "sluice.dev/run-for") {
		t.Errorf("-h: exit %d, stderr %q", code, stderr)
	}
}

func TestKubeconfigAndStatusOfNothing(t *testing.T) {
	dir := t.TempDir()
	code, out, _ := runMain(t, "kubeconfig", "--dir", dir)
	if code != 0 || strings.TrimSpace(out) != filepath.Join(dir, "kubeconfig") {
		t.Errorf("kubeconfig: exit %d, output %q", code, out)
	}
	code, out, _ = runMain(t, "status", "--dir", dir)
	if code != 1 || !strings.Contains(out, "not running") {
		t.Errorf("status of an empty dir: exit %d, output %q", code, out)
	}
	code, out, _ = runMain(t, "down", "--dir", filepath.Join(dir, "none"))
	if code != 0 || !strings.Contains(out, "not running") {
		t.Errorf("down of nothing: exit %d, output %q", code, out)
	}
}

// Without pause.tar in --images, up --real-node fails before it builds or
// starts anything, and says what to build.
func TestUpRealNodeNeedsImages(t *testing.T) {
	tmp := t.TempDir()
	cache := filepath.Join(tmp, "cache")
	code, _, stderr := runMain(t, "up", "--real-node", "--images", filepath.Join(tmp, "none"), "--dir", filepath.Join(tmp, "state"), "--cache", cache)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(stderr, "pause.tar") && !strings.Contains(stderr, "needs root") {
		t.Errorf("stderr %q names neither pause.tar nor root", stderr)
	}
	if _, err := os.Stat(cache); !os.IsNotExist(err) {
		t.Errorf("the cache was touched (%v): up should stop before building", err)
	}
}

func TestImagesUsage(t *testing.T) {
	if code, _, _ := runMain(t, "images"); code != 2 {
		t.Errorf("images without a subcommand: exit %d, want 2", code)
	}
	if code, _, _ := runMain(t, "images", "import"); code != 2 {
		t.Errorf("images import without a directory: exit %d, want 2", code)
	}
	dir := t.TempDir()
	code, _, stderr := runMain(t, "images", "import", "--dir", dir, dir)
	if code != 1 || !strings.Contains(stderr, "no real node") {
		t.Errorf("images import into a dir without a cluster: exit %d, stderr %q", code, stderr)
	}
}
