// Package build compiles the control-plane binaries of a devcluster once and
// keeps them in a cache directory: kube-apiserver, kube-controller-manager
// and kube-scheduler from k8s.io/kubernetes (pinned by the devcluster
// module's go.mod), and kwok; for a real node also kubelet and kube-proxy
// (same module) and a small CoreDNS (its own module, embedded from
// coredns/).
package build

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/proc"
)

const (
	// KubeVersion is the Kubernetes release the control plane is built
	// from; go.mod pins k8s.io/kubernetes to it (a test checks).
	KubeVersion = "v1.34.4"
	// KwokVersion is the kwok release that plays the nodes.
	KwokVersion = "v0.7.0"
	// CoreDNSVersion is the CoreDNS release of the real node's cluster
	// DNS; coredns/coredns.mod pins it (a test checks).
	CoreDNSVersion = "v1.12.4"

	kubePkg = "k8s.io/kubernetes/cmd/"
	kwokPkg = "sigs.k8s.io/kwok/cmd/kwok"
)

// Binaries are the paths of the control-plane executables.
type Binaries struct {
	APIServer         string
	ControllerManager string
	Scheduler         string
	Kwok              string
}

// All lists the paths.
func (b Binaries) All() []string {
	return []string{b.APIServer, b.ControllerManager, b.Scheduler, b.Kwok}
}

// Paths returns where the binaries are cached under cacheDir. The file names
// carry the versions, so a version bump builds anew.
func Paths(cacheDir string) Binaries {
	bin := filepath.Join(cacheDir, "bin")
	return Binaries{
		APIServer:         filepath.Join(bin, "kube-apiserver-"+KubeVersion),
		ControllerManager: filepath.Join(bin, "kube-controller-manager-"+KubeVersion),
		Scheduler:         filepath.Join(bin, "kube-scheduler-"+KubeVersion),
		Kwok:              filepath.Join(bin, "kwok-"+KwokVersion),
	}
}

// NodeBinaries are the paths of the real node's executables.
type NodeBinaries struct {
	Kubelet   string
	KubeProxy string
	CoreDNS   string
}

// All lists the paths.
func (b NodeBinaries) All() []string { return []string{b.Kubelet, b.KubeProxy, b.CoreDNS} }

// NodePaths returns where the real node's binaries are cached under
// cacheDir, named by version like Paths.
func NodePaths(cacheDir string) NodeBinaries {
	bin := filepath.Join(cacheDir, "bin")
	return NodeBinaries{
		Kubelet:   filepath.Join(bin, "kubelet-"+KubeVersion),
		KubeProxy: filepath.Join(bin, "kube-proxy-"+KubeVersion),
		CoreDNS:   filepath.Join(bin, "coredns-"+CoreDNSVersion),
	}
}

// Options configure Ensure.
type Options struct {
	CacheDir string
	// Module holds go.mod and go.sum of the devcluster module; the
	// Kubernetes binaries are built in a directory that has just these two.
	// It also holds coredns/main.go, coredns/coredns.mod and
	// coredns/coredns.sum, the CoreDNS module of the real node.
	Module fs.FS
	// Go is the go command; "go" (from PATH) if empty.
	Go string
	// Out receives progress and the compiler's output.
	Out io.Writer
}

// Ensure returns the binaries, building those that are not cached yet.
func Ensure(ctx context.Context, o Options) (Binaries, error) {
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	b := Paths(o.CacheDir)
	if missing(b) == nil {
		return b, nil
	}
	if err := os.MkdirAll(filepath.Join(o.CacheDir, "bin"), 0o755); err != nil {
		return b, fmt.Errorf("create cache dir: %w", err)
	}
	unlock, err := proc.Lock(ctx, filepath.Join(o.CacheDir, "build.lock"))
	if err != nil {
		return b, err
	}
	defer unlock()

	var kube []string // package names still to build
	targets := map[string]string{"kube-apiserver": b.APIServer, "kube-controller-manager": b.ControllerManager, "kube-scheduler": b.Scheduler}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if !exists(targets[name]) {
			kube = append(kube, name)
		}
	}
	if len(kube) > 0 {
		if err := buildKube(ctx, o, kube, targets); err != nil {
			return b, err
		}
	}
	if !exists(b.Kwok) {
		if err := buildKwok(ctx, o, b.Kwok); err != nil {
			return b, err
		}
	}
	if m := missing(b); m != nil {
		return b, fmt.Errorf("binaries still missing after the build: %s", strings.Join(m, ", "))
	}
	return b, nil
}

// EnsureNode returns the real node's binaries, building those that are not
// cached yet: kubelet and kube-proxy like the control plane, CoreDNS from its
// own small module.
func EnsureNode(ctx context.Context, o Options) (NodeBinaries, error) {
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	b := NodePaths(o.CacheDir)
	if missingOf(b.All()) == nil {
		return b, nil
	}
	if err := os.MkdirAll(filepath.Join(o.CacheDir, "bin"), 0o755); err != nil {
		return b, fmt.Errorf("create cache dir: %w", err)
	}
	unlock, err := proc.Lock(ctx, filepath.Join(o.CacheDir, "build.lock"))
	if err != nil {
		return b, err
	}
	defer unlock()
	var kube []string
	targets := map[string]string{"kubelet": b.Kubelet, "kube-proxy": b.KubeProxy}
	for _, name := range []string{"kubelet", "kube-proxy"} {
		if !exists(targets[name]) {
			kube = append(kube, name)
		}
	}
	if len(kube) > 0 {
		if err := buildKube(ctx, o, kube, targets); err != nil {
			return b, err
		}
	}
	if !exists(b.CoreDNS) {
		if err := buildCoreDNS(ctx, o, b.CoreDNS); err != nil {
			return b, err
		}
	}
	if m := missingOf(b.All()); m != nil {
		return b, fmt.Errorf("binaries still missing after the build: %s", strings.Join(m, ", "))
	}
	return b, nil
}

// coreDNSConstraint is the first line of coredns/main.go. "ignore" is the
// one tag that "go mod tidy" does not assume: with any other, tidy in the
// devcluster module would add CoreDNS to its go.mod. The build removes the
// line rather than pass -tags=ignore, which would also take in the
// generators that CoreDNS's dependencies mark with it.
const coreDNSConstraint = "//go:build ignore\n"

// coreDNSFiles maps the embedded files of the CoreDNS module to their names
// in the build directory.
var coreDNSFiles = map[string]string{
	"coredns/main.go":     "main.go",
	"coredns/coredns.mod": "go.mod",
	"coredns/coredns.sum": "go.sum",
}

func buildCoreDNS(ctx context.Context, o Options, target string) error {
	src := filepath.Join(o.CacheDir, "src-coredns")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("create CoreDNS build dir: %w", err)
	}
	for from, to := range coreDNSFiles {
		data, err := fs.ReadFile(o.Module, from)
		if err != nil {
			return fmt.Errorf("read embedded %s: %w", from, err)
		}
		if to == "main.go" {
			data = []byte(strings.Replace(string(data), coreDNSConstraint, "", 1))
		}
		if err := os.WriteFile(filepath.Join(src, to), data, 0o644); err != nil {
			return fmt.Errorf("write %s for the CoreDNS build: %w", to, err)
		}
	}
	out, err := os.MkdirTemp(o.CacheDir, "build-")
	if err != nil {
		return fmt.Errorf("create build output dir: %w", err)
	}
	defer os.RemoveAll(out)
	fmt.Fprintf(o.Out, "building coredns %s\n", CoreDNSVersion)
	start := time.Now()
	tmp := filepath.Join(out, "coredns")
	if err := run(ctx, o, src, nil, "build", "-ldflags=-s -w", "-o", tmp, "."); err != nil {
		return fmt.Errorf("build coredns: %w", err)
	}
	if err := os.Rename(tmp, target); err != nil {
		return fmt.Errorf("install coredns: %w", err)
	}
	fmt.Fprintf(o.Out, "built coredns in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// KubectlPath is where kubectl is cached under cacheDir.
func KubectlPath(cacheDir string) string {
	return filepath.Join(cacheDir, "bin", "kubectl-"+KubeVersion)
}

// Kubectl returns kubectl of KubeVersion, building it if it is not cached.
// It is not part of Ensure: the cluster does not need it.
func Kubectl(ctx context.Context, o Options) (string, error) {
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	path := KubectlPath(o.CacheDir)
	if exists(path) {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Join(o.CacheDir, "bin"), 0o755); err != nil {
		return "", fmt.Errorf("create cache dir: %w", err)
	}
	unlock, err := proc.Lock(ctx, filepath.Join(o.CacheDir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if exists(path) {
		return path, nil
	}
	if err := buildKube(ctx, o, []string{"kubectl"}, map[string]string{"kubectl": path}); err != nil {
		return "", err
	}
	return path, nil
}

// Missing lists the binaries that are not cached.
func Missing(cacheDir string) []string { return missing(Paths(cacheDir)) }

func missing(b Binaries) []string { return missingOf(b.All()) }

func missingOf(paths []string) []string {
	var out []string
	for _, p := range paths {
		if !exists(p) {
			out = append(out, filepath.Base(p))
		}
	}
	return out
}

func exists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// LDFlags are the linker flags of the Kubernetes binaries: no debug
// information, and the version they report.
func LDFlags() string {
	v := strings.TrimPrefix(KubeVersion, "v")
	parts := strings.SplitN(v, ".", 3)
	major, minor := parts[0], ""
	if len(parts) > 1 {
		minor = parts[1]
	}
	flags := []string{"-s", "-w"}
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+KubeVersion,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
			"-X", pkg+".gitTreeState=clean",
		)
	}
	return strings.Join(flags, " ")
}

func buildKube(ctx context.Context, o Options, names []string, targets map[string]string) error {
	src := filepath.Join(o.CacheDir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("create build dir: %w", err)
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := fs.ReadFile(o.Module, f)
		if err != nil {
			return fmt.Errorf("read embedded %s: %w", f, err)
		}
		if err := os.WriteFile(filepath.Join(src, f), data, 0o644); err != nil {
			return fmt.Errorf("write %s for the build: %w", f, err)
		}
	}
	out, err := os.MkdirTemp(o.CacheDir, "build-")
	if err != nil {
		return fmt.Errorf("create build output dir: %w", err)
	}
	defer os.RemoveAll(out)

	args := []string{"build", "-ldflags=" + LDFlags(), "-o", out + string(os.PathSeparator)}
	for _, n := range names {
		args = append(args, kubePkg+n)
	}
	fmt.Fprintf(o.Out, "building %s %s (a first build takes minutes: about 10 for the control plane on 2 cores)\n", strings.Join(names, ", "), KubeVersion)
	start := time.Now()
	if err := run(ctx, o, src, nil, args...); err != nil {
		return fmt.Errorf("build %s: %w", strings.Join(names, ", "), err)
	}
	for _, n := range names {
		if err := os.Rename(filepath.Join(out, n), targets[n]); err != nil {
			return fmt.Errorf("install %s: %w", n, err)
		}
	}
	fmt.Fprintf(o.Out, "built %s in %s\n", strings.Join(names, ", "), time.Since(start).Round(time.Second))
	return nil
}

func buildKwok(ctx context.Context, o Options, target string) error {
	out, err := os.MkdirTemp(o.CacheDir, "build-")
	if err != nil {
		return fmt.Errorf("create build output dir: %w", err)
	}
	defer os.RemoveAll(out)
	fmt.Fprintf(o.Out, "building kwok %s\n", KwokVersion)
	start := time.Now()
	// "go install pkg@version" builds kwok with its own go.mod, apart from
	// the Kubernetes module graph above.
	if err := run(ctx, o, out, []string{"GOBIN=" + out}, "install", kwokPkg+"@"+KwokVersion); err != nil {
		return fmt.Errorf("build kwok: %w", err)
	}
	if err := os.Rename(filepath.Join(out, "kwok"), target); err != nil {
		return fmt.Errorf("install kwok: %w", err)
	}
	fmt.Fprintf(o.Out, "built kwok in %s\n", time.Since(start).Round(time.Second))
	return nil
}

func run(ctx context.Context, o Options, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, o.Go, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout = o.Out
	cmd.Stderr = o.Out
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("go %s: %w", args[0], ctx.Err())
		}
		return fmt.Errorf("go %s: %w", args[0], err)
	}
	return nil
}
