package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/build"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/nodes"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/pki"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/proc"
)

// Up starts the devcluster described by c unless it already runs, and
// returns once the API server is ready, every node is Ready and the
// controllers work. The processes keep running after Up returns.
func Up(ctx context.Context, c Config) error {
	c.defaults()
	dir, err := absDir(c.Dir)
	if err != nil {
		return err
	}
	l := layout{dir}

	// A bad nodes file fails before anything is built or started.
	want, err := loadNodes(c.NodesFile)
	if err != nil {
		return err
	}
	if c.Topology {
		more, err := nodes.Topology()
		if err != nil {
			return fmt.Errorf("built-in topology nodes: %w", err)
		}
		for _, n := range more {
			if slices.ContainsFunc(want, func(w *corev1.Node) bool { return w.Name == n.Name }) {
				return fmt.Errorf("--topology: node %s is also in the nodes file", n.Name)
			}
		}
		want = append(want, more...)
	}
	if c.RealNode {
		if os.Geteuid() != 0 {
			return errors.New("the real node needs root (for containers, mounts, the bridge and iptables); run devcluster up --real-node as root")
		}
		if c.ImagesDir == "" {
			c.ImagesDir = filepath.Join("bin", "images")
		}
		if _, err := os.Stat(filepath.Join(c.ImagesDir, "pause.tar")); err != nil {
			return fmt.Errorf("--images %s must hold pause.tar, the pods' sandbox image (build the images in the main module: go run ./hack/images -out bin/images -only pause,workload): %w", c.ImagesDir, err)
		}
	}
	if err := l.mkdirs(); err != nil {
		return err
	}
	lockCtx, cancelLock := context.WithTimeout(ctx, c.BuildTimeout)
	unlock, err := proc.Lock(lockCtx, l.lockFile())
	cancelLock()
	if err != nil {
		return err
	}
	defer unlock()

	prev, err := readState(l)
	if err != nil {
		return err
	}
	if prev != nil && len(prev.Processes) > 0 {
		if running(ctx, l, prev) {
			if c.RealNode && prev.RealNode == nil {
				return fmt.Errorf("devcluster in %s already runs without a real node; stop it first (devcluster down --dir %s) to start it with one", dir, dir)
			}
			fmt.Fprintf(c.Out, "devcluster is already running in %s (since %s)\n", dir, prev.StartedAt.Format(time.RFC3339))
			if prev.RealNode != nil {
				fmt.Fprintf(c.Out, "  real node %s; more images with: devcluster images import --dir %s DIR\n", RealNodeName, dir)
			}
			printAccess(c, l, prev)
			return nil
		}
		fmt.Fprintf(c.Out, "devcluster in %s is only partly running; stopping what is left and starting again\n", dir)
		if err := stopProcesses(ctx, c.Out, prev.Processes); err != nil {
			return err
		}
	}
	if c.RealNode {
		if err := checkRealNodeFree(c, l); err != nil {
			return err
		}
	}
	// What is left of an earlier real node (its containers, mounts,
	// iptables rules) goes before anything starts.
	if err := stopRealNode(ctx, c, l, prev); err != nil {
		return fmt.Errorf("clean up the earlier real node: %w", err)
	}
	if _, err := stopStrays(ctx, c, l, prev); err != nil {
		return err
	}

	buildCtx, cancelBuild := context.WithTimeout(ctx, c.BuildTimeout)
	bopts := build.Options{CacheDir: c.CacheDir, Module: c.Module, Out: c.Out}
	bins, err := build.Ensure(buildCtx, bopts)
	var nodeBins build.NodeBinaries
	if err == nil && c.RealNode {
		nodeBins, err = build.EnsureNode(buildCtx, bopts)
	}
	cancelBuild()
	if err != nil {
		return fmt.Errorf("build the control plane: %w", err)
	}

	began := time.Now()
	if c.Fresh {
		if err := os.RemoveAll(l.etcdData()); err != nil {
			return fmt.Errorf("wipe etcd data: %w", err)
		}
		if err := os.RemoveAll(l.rn()); err != nil {
			return fmt.Errorf("wipe the real node's data: %w", err)
		}
	}
	if _, err := pki.Ensure(l.pki()); err != nil {
		return err
	}
	var prevPorts Ports
	if prev != nil {
		prevPorts = prev.Ports
	}
	ports, err := choosePorts(prevPorts)
	if err != nil {
		return err
	}
	st := &State{
		KubeVersion: build.KubeVersion,
		KwokVersion: build.KwokVersion,
		Server:      "https://" + apiServerAddr(c.RealNode, ports.APIServer),
		Kubeconfig:  l.Kubeconfig(),
		Ports:       ports,
		StartedAt:   time.Now().UTC(),
	}
	if c.RealNode {
		if err := prepareRealNode(ctx, c, l, st, prev); err != nil {
			return err
		}
	}
	if err := writeConfigs(l, st.Server); err != nil {
		return err
	}

	startCtx, cancelStart := context.WithTimeout(ctx, c.StartTimeout)
	err = start(startCtx, c, l, bins, nodeBins, st, want)
	cancelStart()
	if err != nil {
		fmt.Fprintln(c.Out, "devcluster did not come up; stopping what was started (logs stay in "+l.logs()+")")
		stopCtx, cancelStop := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancelStop()
		if serr := stopRealNode(stopCtx, c, l, st); serr != nil {
			err = errors.Join(err, serr)
		}
		if serr := stopProcesses(stopCtx, c.Out, st.Processes); serr != nil {
			err = errors.Join(err, serr)
		}
		st.Processes = nil
		if werr := writeState(l, st); werr != nil {
			err = errors.Join(err, werr)
		}
		return err
	}
	fmt.Fprintf(c.Out, "devcluster is up after %s: Kubernetes %s and kwok %s with %d nodes, in %s\n",
		time.Since(began).Round(100*time.Millisecond), st.KubeVersion, st.KwokVersion, st.Nodes, dir)
	for _, s := range nodes.Summary(want) {
		fmt.Fprintf(c.Out, "  nodes: %s\n", s)
	}
	if st.RealNode != nil {
		fmt.Fprintf(c.Out, "  real node: %s at %s (taint %s=true:NoSchedule; images from %s)\n", RealNodeName, NodeIP, RealNodeLabel, st.RealNode.ImagesDir)
	}
	printAccess(c, l, st)
	return nil
}

func printAccess(c Config, l layout, st *State) {
	fmt.Fprintf(c.Out, "  kubeconfig: %s\n", st.Kubeconfig)
	fmt.Fprintf(c.Out, "  API server: %s\n", st.Server)
	fmt.Fprintf(c.Out, "  logs:       %s\n", l.logs())
	fmt.Fprintf(c.Out, "Pods on its nodes run for the duration in their annotation %s (e.g. \"30s\"), then succeed.\n", RunForAnnotation)
	fmt.Fprintf(c.Out, "Their GPUs are also devices of DeviceClass %s, for pods that claim them (Dynamic Resource Allocation).\n", GPUDeviceClass)
	fmt.Fprintf(c.Out, "Use it with: export KUBECONFIG=%s\n", st.Kubeconfig)
}

func loadNodes(file string) ([]*corev1.Node, error) {
	if file == "" {
		ns, err := nodes.Default()
		if err != nil {
			return nil, fmt.Errorf("built-in nodes: %w", err)
		}
		return ns, nil
	}
	return nodes.Load(file)
}

// running reports whether every recorded process runs and the API server
// is ready.
func running(ctx context.Context, l layout, st *State) bool {
	for _, p := range st.Processes {
		if !proc.Alive(p.Identity) {
			return false
		}
	}
	hc, err := healthClient(l)
	if err != nil {
		return false
	}
	for _, p := range st.Processes {
		if p.Name == APIServer {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return checkHealth(cctx, hc, p.Health) == nil
		}
	}
	return false
}

// choosePorts picks free loopback ports, keeping the previous ones where
// they are still free so that addresses stay put across down and up.
func choosePorts(prev Ports) (Ports, error) {
	var p Ports
	var listeners []net.Listener
	defer func() {
		for _, ln := range listeners {
			ln.Close()
		}
	}()
	old := prev.all()
	for i, ptr := range p.all() {
		var ln net.Listener
		if *old[i] > 0 {
			ln, _ = net.Listen("tcp", loopback(*old[i]))
		}
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				return p, fmt.Errorf("find a free loopback port: %w", err)
			}
		}
		listeners = append(listeners, ln)
		addr, ok := ln.Addr().(*net.TCPAddr)
		if !ok {
			return p, fmt.Errorf("unexpected listener address %s", ln.Addr())
		}
		*ptr = addr.Port
	}
	return p, nil
}

type exit struct {
	name string
	err  error
}

// deathError reports a component that exited while it should run.
type deathError struct {
	name, log string
	err       error
}

func (e *deathError) Error() string {
	how := "with exit status 0"
	if e.err != nil {
		how = "(" + e.err.Error() + ")"
	}
	return fmt.Sprintf("%s exited %s; last lines of %s:\n%s", e.name, how, e.log, tail(e.log, 25))
}

func (e *deathError) Unwrap() error { return e.err }

// start starts the components one after the other, each once the previous
// is healthy, then creates the nodes and waits for the cluster to work.
func start(ctx context.Context, c Config, l layout, bins build.Binaries, nodeBins build.NodeBinaries, st *State, want []*corev1.Node) error {
	hc, err := healthClient(l)
	if err != nil {
		return err
	}
	self := c.Self
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return fmt.Errorf("find the devcluster executable (it runs etcd): %w", err)
		}
	}
	// died yields the first component that exits while Up waits.
	died := make(chan error, 1)
	deaths := make(chan exit, 8)
	go func() {
		select {
		case e := <-deaths:
			died <- &deathError{name: e.name, err: e.err, log: l.log(e.name)}
		case <-ctx.Done():
		}
	}()

	comps := components(l, bins, self, st.Ports, c.EtcdFsync, st.RealNode != nil)
	if st.RealNode != nil {
		comps = append(comps, realNodeComponentList(c, l, nodeBins, st)...)
	}
	for _, comp := range comps {
		comp.spec.Log = l.log(comp.name)
		if comp.prepare != nil {
			if err := comp.prepare(ctx); err != nil {
				return fmt.Errorf("prepare %s: %w", comp.name, err)
			}
		}
		t0 := time.Now()
		id, exited, err := proc.Start(comp.spec)
		if err != nil {
			return fmt.Errorf("start %s: %w", comp.name, err)
		}
		st.Processes = append(st.Processes, Process{Name: comp.name, Identity: id, Exe: comp.spec.Path, Log: comp.spec.Log, Health: comp.health})
		if err := writeState(l, st); err != nil {
			return err
		}
		go func(name string) {
			if err, ok := <-exited; ok {
				select {
				case deaths <- exit{name: name, err: err}:
				default:
				}
			}
		}(comp.name)
		if err := poll(ctx, 100*time.Millisecond, died, func(ctx context.Context) error {
			return checkHealth(ctx, hc, comp.health)
		}); err != nil {
			var de *deathError
			if errors.As(err, &de) {
				return err
			}
			return fmt.Errorf("%s is not healthy: %w\nlast lines of %s:\n%s", comp.name, err, comp.spec.Log, tail(comp.spec.Log, 25))
		}
		fmt.Fprintf(c.Out, "%-24s ready after %5.1fs  (pid %d)\n", comp.name, time.Since(t0).Seconds(), id.PID)
	}

	cs, err := clientset(l)
	if err != nil {
		return err
	}
	if err := syncNodes(ctx, cs, want); err != nil {
		return err
	}
	if err := syncDevices(ctx, cs, want); err != nil {
		return err
	}
	names := make([]string, len(want))
	for i, n := range want {
		names[i] = n.Name
	}
	if st.RealNode != nil {
		names = append(names, RealNodeName)
	} else if err := deleteRealNode(ctx, cs); err != nil {
		return err
	}
	t0 := time.Now()
	if err := waitNodesReady(ctx, cs, names, died); err != nil {
		return fmt.Errorf("nodes did not become Ready (kwok marks them; the real node's kubelet itself): %w", err)
	}
	fmt.Fprintf(c.Out, "%-24s ready after %5.1fs\n", fmt.Sprintf("%d nodes", len(names)), time.Since(t0).Seconds())
	if err := waitServiceAccount(ctx, cs, died); err != nil {
		return fmt.Errorf("kube-controller-manager did not create the default service account: %w", err)
	}
	st.Nodes = len(names)
	return writeState(l, st)
}

// stopProcesses stops ps in reverse start order.
func stopProcesses(ctx context.Context, out io.Writer, ps []Process) error {
	var errs []string
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		if !proc.Alive(p.Identity) {
			continue
		}
		t0 := time.Now()
		grace := 15 * time.Second
		if p.Name == APIServer {
			// It stops serving at once but exits only after a minute
			// while clients keep connections open; nothing is lost by
			// killing it (etcd, stopped next, keeps the data).
			grace = 3 * time.Second
		}
		if err := proc.Stop(ctx, p.Identity, grace); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", p.Name, err))
			continue
		}
		fmt.Fprintf(out, "stopped %-24s (pid %d) in %.1fs\n", p.Name, p.PID, time.Since(t0).Seconds())
	}
	if len(errs) > 0 {
		return fmt.Errorf("could not stop: %s", strings.Join(errs, "; "))
	}
	return nil
}
