// Package cli is the command line of devcluster.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/build"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/cluster"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/etcd"
)

const usage = `devcluster runs a real Kubernetes control plane on loopback for Sluice's
development and tests: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler (Kubernetes %s) and kwok (%s) for fake GPU nodes.

Usage:
  devcluster up [--nodes FILE] [--topology] [--dir DIR] [--fresh]   build if needed, start, wait until ready
  devcluster up --real-node [--images DIR] ...        also a real node for real containers (root)
  devcluster images import [--dir DIR] IMAGES_DIR     import *.tar images into the running real node
  devcluster down [--dir DIR] [--purge]               stop every process of the cluster
  devcluster status [--dir DIR]                       what runs; exits 1 unless all is healthy
  devcluster kubeconfig [--dir DIR]                   print the admin kubeconfig's path
  devcluster kubectl [--dir DIR] ARGS...              run kubectl %s on the cluster (built on first use)
  devcluster build [--real-node]                      only build the binaries into the cache

The state dir (--dir) defaults to $DEVCLUSTER_DIR, else ~/.sluice-devcluster;
the binary cache (--cache) to $DEVCLUSTER_CACHE, else %s.
Pods run for the duration in their annotation %s, then succeed.
Run "devcluster <command> -h" for a command's flags.
`

// Main runs devcluster with args (without the program name) and returns the
// exit code: 0 on success, 1 on failure, 2 on bad usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, module fs.FS) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, usage, build.KubeVersion, build.KwokVersion, build.KubeVersion, defaultCache(), cluster.RunForAnnotation)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "up":
		err = up(ctx, rest, stdout, stderr, module)
	case "down":
		err = down(ctx, rest, stdout, stderr)
	case "status":
		err = status(ctx, rest, stdout, stderr)
	case "kubeconfig":
		err = kubeconfig(rest, stdout, stderr)
	case "build":
		err = buildCmd(ctx, rest, stdout, stderr, module)
	case "kubectl":
		err = kubectl(ctx, rest, stdout, stderr, module)
	case "images":
		err = imagesCmd(ctx, rest, stdout, stderr)
	case "etcd":
		err = runEtcd(ctx, rest, stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "Kubernetes %s, kwok %s\n", build.KubeVersion, build.KwokVersion)
	default:
		fmt.Fprintf(stderr, "devcluster: unknown command %q; run devcluster -h\n", cmd)
		return 2
	}
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, errUnhealthy):
		return 1
	default:
		fmt.Fprintf(stderr, "devcluster %s: %v\n", cmd, err)
		return 1
	}
}

var (
	errUsage     = errors.New("usage")
	errUnhealthy = errors.New("not healthy")
)

// exitError passes on the exit code of a command devcluster ran.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// common are the flags of every command that works on a state dir.
type common struct {
	dir, cache string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.dir, "dir", defaultDir(), "state `directory` of the cluster (kubeconfig, certificates, etcd data, logs)")
	fs.StringVar(&c.cache, "cache", defaultCache(), "`directory` that caches the built binaries")
}

func (c *common) config(out io.Writer) cluster.Config {
	return cluster.Config{Dir: c.dir, CacheDir: c.cache, Out: out}
}

func defaultDir() string {
	if d := os.Getenv("DEVCLUSTER_DIR"); d != "" {
		return d
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".sluice-devcluster")
	}
	return ".sluice-devcluster"
}

func defaultCache() string {
	if d := os.Getenv("DEVCLUSTER_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sluice-devcluster")
	}
	return filepath.Join(os.TempDir(), "sluice-devcluster-cache")
}

// parse parses a command's flags; it accepts no positional arguments.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "devcluster %s: unexpected arguments: %s\n", fs.Name(), strings.Join(fs.Args(), " "))
		return errUsage
	}
	return nil
}

func up(ctx context.Context, args []string, stdout, stderr io.Writer, module fs.FS) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	var c common
	c.register(fs)
	nodesFile := fs.String("nodes", "", "YAML `file` that describes the fake nodes (default: 4 nodes with 8 nvidia.com/gpu each)")
	topology := fs.Bool("topology", false, "also add 32 nodes of 8 nvidia.com/gpu in 2 blocks of 4 racks, labelled cloud.provider.com/topology-block and -rack, for topology-aware scheduling")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long starting may take, after the build")
	buildTimeout := fs.Duration("build-timeout", time.Hour, "how long building the binaries may take")
	fresh := fs.Bool("fresh", false, "wipe the cluster's data first, for an empty cluster")
	fsync := fs.Bool("etcd-fsync", false, "make etcd sync to disk on every commit (slower; off for a throw-away cluster)")
	realNode := fs.Bool("real-node", false, "add a real node ("+cluster.RealNodeName+": kubelet, containerd, kube-proxy, CoreDNS) for pods in real containers; needs root")
	images := fs.String("images", filepath.Join("bin", "images"), "`directory` of image tarballs (*.tar, with pause.tar) that the real node imports")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	cfg := c.config(stdout)
	cfg.NodesFile = *nodesFile
	cfg.Topology = *topology
	cfg.Module = module
	cfg.StartTimeout = *timeout
	cfg.BuildTimeout = *buildTimeout
	cfg.Fresh = *fresh
	cfg.EtcdFsync = *fsync
	cfg.RealNode = *realNode
	cfg.ImagesDir = *images
	return cluster.Up(ctx, cfg)
}

func down(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	var c common
	c.register(fs)
	purge := fs.Bool("purge", false, "also delete the state directory (data, certificates, logs)")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long stopping may take")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	return cluster.Down(ctx, c.config(stdout), *purge)
}

func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var c common
	c.register(fs)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	healthy, err := cluster.Status(ctx, c.config(stdout))
	if err != nil {
		return err
	}
	if !healthy {
		return errUnhealthy
	}
	return nil
}

func kubeconfig(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kubeconfig", flag.ContinueOnError)
	var c common
	c.register(fs)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	fmt.Fprintln(stdout, cluster.KubeconfigPath(dir))
	return nil
}

func buildCmd(ctx context.Context, args []string, stdout, stderr io.Writer, module fs.FS) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var c common
	c.register(fs)
	timeout := fs.Duration("timeout", time.Hour, "how long the build may take")
	realNode := fs.Bool("real-node", false, "also build the real node's kubelet, kube-proxy and CoreDNS")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	o := build.Options{CacheDir: c.cache, Module: module, Out: stdout}
	bins, err := build.Ensure(ctx, o)
	if err != nil {
		return err
	}
	paths := bins.All()
	if *realNode {
		nb, err := build.EnsureNode(ctx, o)
		if err != nil {
			return err
		}
		paths = append(paths, nb.All()...)
	}
	for _, b := range paths {
		fmt.Fprintln(stdout, b)
	}
	return nil
}

// kubectl runs kubectl with the cluster's admin kubeconfig. Leading --dir
// and --cache flags are devcluster's; everything else goes to kubectl.
func kubectl(ctx context.Context, args []string, stdout, stderr io.Writer, module fs.FS) error {
	c := common{dir: defaultDir(), cache: defaultCache()}
	for len(args) > 0 {
		var val *string
		name, value, hasValue := strings.Cut(args[0], "=")
		switch name {
		case "--dir", "-dir":
			val = &c.dir
		case "--cache", "-cache":
			val = &c.cache
		}
		if val == nil {
			break
		}
		if hasValue {
			*val, args = value, args[1:]
			continue
		}
		if len(args) < 2 {
			fmt.Fprintf(stderr, "devcluster kubectl: %s needs a value\n", name)
			return errUsage
		}
		*val, args = args[1], args[2:]
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	path, err := build.Kubectl(bctx, build.Options{CacheDir: c.cache, Module: module, Out: stderr})
	cancel()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.KubeconfigPath(dir))
	cmd.Stdin = os.Stdin
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return &exitError{code: ee.ExitCode()}
		}
		return fmt.Errorf("run kubectl: %w", err)
	}
	return nil
}

// runEtcd is the etcd process that "up" starts.
func runEtcd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	var o etcd.Options
	fs.StringVar(&o.DataDir, "data-dir", "", "etcd data `directory`")
	fs.IntVar(&o.ClientPort, "client-port", 0, "loopback `port` for clients")
	fs.IntVar(&o.PeerPort, "peer-port", 0, "loopback `port` for peers")
	fs.BoolVar(&o.Fsync, "fsync", false, "sync to disk on every commit")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	return etcd.Run(ctx, o, stdout)
}

// imagesCmd is "images import IMAGES_DIR": more images for a running real
// node, e.g. after rebuilding one.
func imagesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "import" {
		fmt.Fprintln(stderr, "usage: devcluster images import [--dir DIR] IMAGES_DIR")
		return errUsage
	}
	fs := flag.NewFlagSet("images import", flag.ContinueOnError)
	var c common
	c.register(fs)
	fs.SetOutput(stderr)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "devcluster images import: want one directory of *.tar images")
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	return cluster.ImportImages(ctx, c.config(stdout), fs.Arg(0))
}
