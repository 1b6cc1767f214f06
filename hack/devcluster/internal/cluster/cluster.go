// Package cluster starts, inspects and stops a devcluster: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok as
// detached processes on loopback, with their state in one directory.
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/pki"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/proc"
)

// RunForAnnotation is the pod annotation that sets how long a pod on a kwok
// node runs before it succeeds, as a Go duration ("30s", "5m").
const RunForAnnotation = "sluice.dev/run-for"

// Config configures Up, Down and Status.
type Config struct {
	// Dir holds the cluster's state: kubeconfig, certificates, etcd data,
	// logs and the record of running processes.
	Dir string
	// CacheDir holds the built binaries, shared by all state dirs.
	CacheDir string
	// NodesFile describes the fake nodes; empty means the built-in nodes.
	NodesFile string
	// Topology adds the built-in data center of nodes labelled with block
	// and rack (nodes.Topology).
	Topology bool
	// Module holds the devcluster module's go.mod and go.sum, to build
	// the Kubernetes binaries from.
	Module fs.FS
	// Self is the devcluster executable; etcd runs as "Self etcd ...".
	Self string
	// Out receives progress and results.
	Out io.Writer

	// StartTimeout bounds starting the processes and waiting for the
	// cluster to be ready (not the build).
	StartTimeout time.Duration
	// BuildTimeout bounds building the binaries.
	BuildTimeout time.Duration
	// Fresh wipes etcd's data before starting, for an empty cluster.
	Fresh bool
	// EtcdFsync makes etcd sync to disk on each commit (slower).
	EtcdFsync bool
	// RealNode adds the real node (kubelet, containerd, kube-proxy,
	// CoreDNS) to the cluster; it needs root.
	RealNode bool
	// ImagesDir holds the image tarballs (*.tar, pause.tar among them)
	// that the real node's containerd imports.
	ImagesDir string
}

func (c *Config) defaults() {
	if c.StartTimeout <= 0 {
		c.StartTimeout = 5 * time.Minute
	}
	if c.BuildTimeout <= 0 {
		c.BuildTimeout = time.Hour
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Component names, in start order.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kwok              = "kwok"
)

// layout names the files in a state directory.
type layout struct{ dir string }

func (l layout) path(p ...string) string      { return filepath.Join(append([]string{l.dir}, p...)...) }
func (l layout) stateFile() string            { return l.path("state.json") }
func (l layout) lockFile() string             { return l.path(".lock") }
func (l layout) Kubeconfig() string           { return l.path("kubeconfig") }
func (l layout) pki() pki.Files               { return pki.Files{Dir: l.path("pki")} }
func (l layout) etcdData() string             { return l.path("etcd") }
func (l layout) logs() string                 { return l.path("logs") }
func (l layout) log(name string) string       { return l.path("logs", name+".log") }
func (l layout) config(name string) string    { return l.path("config", name) }
func (l layout) kubeconfigOf(n string) string { return l.path("config", n+".kubeconfig") }

func (l layout) mkdirs() error {
	for _, d := range []string{l.dir, l.logs(), l.path("config")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}

// KubeconfigPath is where the admin kubeconfig of the devcluster in dir is.
func KubeconfigPath(dir string) string { return layout{dir}.Kubeconfig() }

// Ports are the loopback ports of a devcluster.
type Ports struct {
	EtcdClient        int `json:"etcdClient"`
	EtcdPeer          int `json:"etcdPeer"`
	APIServer         int `json:"apiserver"`
	ControllerManager int `json:"controllerManager"`
	Scheduler         int `json:"scheduler"`
	Kwok              int `json:"kwok"`
}

func (p *Ports) all() []*int {
	return []*int{&p.EtcdClient, &p.EtcdPeer, &p.APIServer, &p.ControllerManager, &p.Scheduler, &p.Kwok}
}

// Process is one started component.
type Process struct {
	Name string `json:"name"`
	proc.Identity
	Exe string `json:"exe"`
	Log string `json:"log"`
	// Health is the URL that answers 200 while the component is healthy.
	Health string `json:"health"`
}

// State is what state.json records about a devcluster.
type State struct {
	KubeVersion string    `json:"kubeVersion"`
	KwokVersion string    `json:"kwokVersion"`
	Server      string    `json:"server"`
	Kubeconfig  string    `json:"kubeconfig"`
	Ports       Ports     `json:"ports"`
	StartedAt   time.Time `json:"startedAt"`
	Nodes       int       `json:"nodes"`
	Processes   []Process `json:"processes"`
	// RealNode is set while the cluster has a real node.
	RealNode *RealNodeState `json:"realNode,omitempty"`
}

func readState(l layout) (*State, error) {
	data, err := os.ReadFile(l.stateFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("read state %s: %w", l.stateFile(), err)
	}
	return &st, nil
}

func writeState(l layout, st *State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	tmp := l.stateFile() + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp, l.stateFile()); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

func absDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("no state directory given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("state directory %s: %w", dir, err)
	}
	return abs, nil
}
