package cluster

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/build"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/pki"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/proc"
)

// The real node: one kubelet with containerd, kube-proxy and a cluster DNS,
// all on a bridge that devcluster creates, so that pods run in real
// containers beside the kwok nodes. It needs root (network, mounts,
// cgroups) and there can be one per machine: the bridge, the kubelet's
// port and the iptables chains are the machine's.
const (
	// RealNodeName is the real node's name.
	RealNodeName = "realnode-0"
	// RealNodeLabel labels the real node (value "true") and is the key of
	// its NoSchedule taint: only pods that tolerate and select it run there,
	// never the kwok-bound pods of examples and load tests.
	RealNodeLabel = "sluice.dev/real-node"

	bridgeName = "sluice0"
	// NodeIP is the bridge's address: the real node's address, and where
	// kube-apiserver and CoreDNS listen when the real node is on, so that
	// pods reach them while nothing listens on the machine's own network.
	NodeIP    = "10.88.0.1"
	podSubnet = "10.88.0.0/24"
	// proxyClusterCIDR tells kube-proxy which sources are pods.
	proxyClusterCIDR = "10.88.0.0/16"
	// DNSServiceIP is the kube-dns Service's cluster IP, the pods' resolver.
	DNSServiceIP = "10.96.0.10"
	kubeletPort  = 10250
	// cniNetwork names the CNI network; the bridge plugin marks its
	// iptables rules with it, which is how down finds leftovers.
	cniNetwork = "sluice"
	ctrNS      = "k8s.io" // the containerd namespace of the CRI plugin
)

// Real-node component names, in start order after the control plane.
const (
	Containerd = "containerd"
	Kubelet    = "kubelet"
	KubeProxy  = "kube-proxy"
	CoreDNS    = "coredns"
)

var realNodeComponents = []string{Containerd, Kubelet, KubeProxy, CoreDNS}

func isRealNodeComponent(name string) bool {
	for _, n := range realNodeComponents {
		if n == name {
			return true
		}
	}
	return false
}

// RealNodePorts are the loopback ports of the real node's health and
// metrics endpoints.
type RealNodePorts struct {
	KubeletHealthz int `json:"kubeletHealthz"`
	ProxyHealthz   int `json:"proxyHealthz"`
	ProxyMetrics   int `json:"proxyMetrics"`
	DNSHealth      int `json:"dnsHealth"`
	DNSReady       int `json:"dnsReady"`
}

func (p *RealNodePorts) all() []*int {
	return []*int{&p.KubeletHealthz, &p.ProxyHealthz, &p.ProxyMetrics, &p.DNSHealth, &p.DNSReady}
}

// RealNodeState is what state.json records about the real node.
type RealNodeState struct {
	Ports        RealNodePorts `json:"ports"`
	SandboxImage string        `json:"sandboxImage"`
	ImagesDir    string        `json:"imagesDir"`
}

// Files of the real node, all under <state dir>/realnode.
func (l layout) rn(p ...string) string {
	return l.path(append([]string{"realnode"}, p...)...)
}
func (l layout) containerdSock() string   { return l.rn("containerd.sock") }
func (l layout) containerdConfig() string { return l.rn("containerd.toml") }
func (l layout) containerdRoot() string   { return l.rn("containerd", "root") }
func (l layout) containerdState() string  { return l.rn("containerd", "state") }
func (l layout) cniConfDir() string       { return l.rn("cni", "net.d") }
func (l layout) cniIPAM() string          { return l.rn("cni", "ipam") }
func (l layout) kubeletRoot() string      { return l.rn("kubelet") }

// realNodeMarker records which state dir owns the machine's real node.
const realNodeMarker = "/run/sluice-devcluster-realnode"

// aptPackages maps each Debian package the real node needs to files that
// tell whether it is installed.
var aptPackages = []struct {
	pkg   string
	files []string // commands (looked up in PATH) or absolute paths
}{
	{"containerd", []string{"containerd", "ctr", "containerd-shim-runc-v2"}},
	{"runc", []string{"runc"}},
	{"containernetworking-plugins", []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/portmap", "/usr/lib/cni/loopback"}},
	{"iptables", []string{"iptables", "ip6tables"}},
	{"conntrack", []string{"conntrack"}},
	{"iproute2", []string{"ip"}},
	{"mount", []string{"mount"}},
}

// missingPackages lists the packages of aptPackages that are not installed.
func missingPackages(have func(string) bool) []string {
	var out []string
	for _, p := range aptPackages {
		for _, f := range p.files {
			if !have(f) {
				out = append(out, p.pkg)
				break
			}
		}
	}
	return out
}

func haveFile(f string) bool {
	if filepath.IsAbs(f) {
		_, err := os.Stat(f)
		return err == nil
	}
	_, err := exec.LookPath(f)
	return err == nil
}

// ensurePackages installs what the real node needs with apt-get when
// running as root, since there is nothing else to get containerd from.
func ensurePackages(ctx context.Context, out io.Writer) error {
	missing := missingPackages(haveFile)
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the real node needs these packages: apt-get install -y %s", strings.Join(missing, " "))
	}
	fmt.Fprintf(out, "installing %s with apt-get\n", strings.Join(missing, " "))
	t0 := time.Now()
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq"}, missing...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = env
		if data, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", args[0], err, tailBytes(data, 20))
		}
	}
	fmt.Fprintf(out, "installed %s in %s\n", strings.Join(missing, " "), time.Since(t0).Round(100*time.Millisecond))
	if still := missingPackages(haveFile); len(still) > 0 {
		return fmt.Errorf("still missing after apt-get install: %s", strings.Join(still, " "))
	}
	return nil
}

func tailBytes(data []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkRealNodeFree fails if the real node of another state dir runs: its
// kubelet, or the marker of a real node whose processes still run.
func checkRealNodeFree(c Config, l layout) error {
	if data, err := os.ReadFile(realNodeMarker); err == nil {
		other := strings.TrimSpace(string(data))
		if other != "" && other != l.dir {
			if st, err := readState(layout{other}); err == nil && st != nil {
				for _, p := range st.Processes {
					if isRealNodeComponent(p.Name) && proc.Alive(p.Identity) {
						return fmt.Errorf("the real node of the devcluster in %s runs (%s, pid %d); there can be one per machine: stop it first with devcluster down --dir %s", other, p.Name, p.PID, other)
					}
				}
			}
		}
	}
	nb := build.NodePaths(c.CacheDir)
	found, err := proc.Find([]string{nb.Kubelet}, func(args []string) bool {
		return !strings.Contains(strings.Join(args, " "), l.dir+string(os.PathSeparator))
	})
	if err != nil {
		return err
	}
	if len(found) > 0 {
		return fmt.Errorf("a devcluster kubelet of another state dir runs (pid %d); there can be one real node per machine: stop its cluster first", found[0].PID)
	}
	return nil
}

// ImageName returns the name of the image in a docker-save tarball (the
// first tag in its manifest.json), as containerd names it: with the
// registry and repository path a bare name implies.
func ImageName(tarball string) (string, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return "", fmt.Errorf("open image tarball: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s has no manifest.json: not a docker-save tarball", tarball)
		}
		if err != nil {
			return "", fmt.Errorf("read %s: %w", tarball, err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			return "", fmt.Errorf("%s: manifest.json: %w", tarball, err)
		}
		if len(m) == 0 || len(m[0].RepoTags) == 0 {
			return "", fmt.Errorf("%s: manifest.json names no image", tarball)
		}
		return normalizeImage(m[0].RepoTags[0]), nil
	}
}

// normalizeImage expands a bare image name the way Docker and containerd
// do: "pause:1" is "docker.io/library/pause:1".
func normalizeImage(ref string) string {
	first, rest, found := strings.Cut(ref, "/")
	if !found {
		return "docker.io/library/" + ref
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return ref
	}
	return "docker.io/" + first + "/" + rest
}

// imageTarballs lists the *.tar files in dir; pause.tar must be one.
func imageTarballs(dir string) ([]string, error) {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, fmt.Errorf("list images in %s: %w", dir, err)
	}
	if len(tars) == 0 {
		return nil, fmt.Errorf("no *.tar images in %s", dir)
	}
	sort.Strings(tars)
	return tars, nil
}

// importImages loads the image tarballs of dir into the real node's
// containerd, where the kubelet finds them (pods use imagePullPolicy Never
// or IfNotPresent: nothing is pulled from a registry).
func importImages(ctx context.Context, out io.Writer, sock, dir string) error {
	tars, err := imageTarballs(dir)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for _, t := range tars {
		cmd := exec.CommandContext(ctx, "ctr", "-a", sock, "-n", ctrNS, "images", "import", t)
		if data, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("import image %s: %w\n%s", t, err, tailBytes(data, 10))
		}
		name, err := ImageName(t)
		if err != nil {
			name = filepath.Base(t)
		}
		fmt.Fprintf(out, "  image %s\n", name)
	}
	fmt.Fprintf(out, "imported %d images from %s in %.1fs\n", len(tars), dir, time.Since(t0).Seconds())
	return nil
}

// ImportImages imports the images in imagesDir into the running real node
// of the devcluster in c.Dir.
func ImportImages(ctx context.Context, c Config, imagesDir string) error {
	c.defaults()
	dir, err := absDir(c.Dir)
	if err != nil {
		return err
	}
	l := layout{dir}
	st, err := readState(l)
	if err != nil {
		return err
	}
	if st == nil || st.RealNode == nil {
		return fmt.Errorf("the devcluster in %s has no real node (start it with up --real-node)", dir)
	}
	for _, p := range st.Processes {
		if p.Name == Containerd && proc.Alive(p.Identity) {
			return importImages(ctx, c.Out, l.containerdSock(), imagesDir)
		}
	}
	return fmt.Errorf("the real node's containerd does not run in %s", dir)
}

// setupNetwork creates the bridge with the node's address and turns on
// forwarding and iptables for bridged traffic, which kube-proxy's Service
// rules need for pod-to-pod traffic through a Service.
func setupNetwork(ctx context.Context) error {
	if _, err := net.InterfaceByName(bridgeName); err != nil {
		if err := run(ctx, "ip", "link", "add", bridgeName, "type", "bridge"); err != nil {
			return err
		}
	}
	addrs, err := run2(ctx, "ip", "-o", "-4", "addr", "show", "dev", bridgeName)
	if err != nil {
		return err
	}
	if !strings.Contains(addrs, " "+NodeIP+"/24 ") {
		if err := run(ctx, "ip", "addr", "add", NodeIP+"/24", "dev", bridgeName); err != nil {
			return err
		}
	}
	if err := run(ctx, "ip", "link", "set", bridgeName, "up"); err != nil {
		return err
	}
	const nf = "/proc/sys/net/bridge/bridge-nf-call-iptables"
	if _, err := os.Stat(nf); err != nil {
		// The module is not loaded; modprobe may be missing or not allowed
		// in a container, so only the write below decides.
		_ = run(ctx, "modprobe", "br_netfilter")
	}
	for _, s := range []string{"/proc/sys/net/ipv4/ip_forward", nf} {
		if err := os.WriteFile(s, []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("set %s: %w", strings.TrimPrefix(s, "/proc/sys/"), err)
		}
	}
	return nil
}

func run(ctx context.Context, name string, args ...string) error {
	_, err := run2(ctx, name, args...)
	return err
}

func run2(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	data, err := cmd.CombinedOutput()
	if err != nil {
		return string(data), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(data)))
	}
	return string(data), nil
}

// prepareRealNode does what the real node needs before its processes start:
// packages, the bridge, certificates, ports and config files.
func prepareRealNode(ctx context.Context, c Config, l layout, st *State, prev *State) error {
	if os.Geteuid() != 0 {
		return errors.New("the real node needs root (for containers, mounts, the bridge and iptables); run devcluster as root")
	}
	if err := ensurePackages(ctx, c.Out); err != nil {
		return err
	}
	pause := filepath.Join(c.ImagesDir, "pause.tar")
	sandbox, err := ImageName(pause)
	if err != nil {
		return fmt.Errorf("--images %s must hold pause.tar, the pods' sandbox image (build: go run ./hack/images -out %s -only pause,workload in the main module): %w", c.ImagesDir, c.ImagesDir, err)
	}
	if err := os.WriteFile(realNodeMarker, []byte(l.dir+"\n"), 0o644); err != nil {
		return fmt.Errorf("record the real node's owner: %w", err)
	}
	if err := setupNetwork(ctx); err != nil {
		return fmt.Errorf("set up bridge %s: %w", bridgeName, err)
	}
	f := l.pki()
	if err := pki.EnsureAPIServerIP(f, NodeIP); err != nil {
		return err
	}
	for _, u := range []struct {
		user, cn string
		groups   []string
	}{
		// The kubelet's identity for the Node authorizer.
		{Kubelet, "system:node:" + RealNodeName, []string{"system:nodes"}},
		// Bound to system:node-proxier by the default RBAC policy.
		{KubeProxy, "system:kube-proxy", nil},
		// Like the control-plane components: system:masters.
		{CoreDNS, "system:coredns", []string{"system:masters"}},
	} {
		if err := pki.EnsureClient(f, u.user, u.cn, u.groups); err != nil {
			return fmt.Errorf("certificate of %s: %w", u.user, err)
		}
	}
	var prevPorts RealNodePorts
	if prev != nil && prev.RealNode != nil {
		prevPorts = prev.RealNode.Ports
	}
	ports, err := chooseRealNodePorts(prevPorts)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(c.ImagesDir)
	if err != nil {
		return fmt.Errorf("images dir: %w", err)
	}
	st.RealNode = &RealNodeState{Ports: ports, SandboxImage: sandbox, ImagesDir: abs}
	return writeRealNodeConfigs(l, st)
}

func chooseRealNodePorts(prev RealNodePorts) (RealNodePorts, error) {
	var p RealNodePorts
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
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
		lns = append(lns, ln)
		*ptr = ln.Addr().(*net.TCPAddr).Port
	}
	return p, nil
}

func writeRealNodeConfigs(l layout, st *State) error {
	for _, d := range []string{l.cniConfDir(), l.cniIPAM(), l.containerdRoot(), l.containerdState(), l.kubeletRoot(), l.rn("kubelet-pki"), l.rn("pod-logs"), l.rn("volume-plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	f := l.pki()
	for _, u := range []string{Kubelet, KubeProxy, CoreDNS} {
		if err := pki.WriteKubeconfig(l.kubeconfigOf(u), st.Server, f, u); err != nil {
			return err
		}
	}
	files := map[string]string{
		l.containerdConfig(): containerdConfig(l, st.RealNode.SandboxImage),
		filepath.Join(l.cniConfDir(), "10-sluice.conflist"): cniConfig(l),
		l.config("kubelet.yaml"):                            kubeletConfig(l, st.RealNode.Ports),
		l.config("kube-proxy.yaml"):                         kubeProxyConfig(l, st.RealNode.Ports),
		l.config("Corefile"):                                corefile(l, st.RealNode.Ports),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Base(path), err)
		}
	}
	return nil
}

// containerdConfig is containerd's configuration: its own root, state and
// socket in the state dir, so that it stays apart from a containerd of the
// machine.
func containerdConfig(l layout, sandboxImage string) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Without it every sandbox fails in a container that may not lower
  # oom_score_adj ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # There is no systemd: cgroups are plain directories (cgroupfs).
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, l.containerdRoot(), l.containerdState(), l.containerdSock(), l.containerdSock()+".ttrpc", sandboxImage, l.cniConfDir())
}

// cniConfig is the pod network: a bridge with host-local addresses from
// podSubnet, masquerading traffic that leaves it, and host ports.
func cniConfig(l layout) string {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       cniNetwork,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      bridgeName,
				"isGateway":   true,
				"ipMasq":      true,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  []any{[]any{map[string]any{"subnet": podSubnet, "gateway": NodeIP}}},
					"routes":  []any{map[string]any{"dst": "0.0.0.0/0"}},
					"dataDir": l.cniIPAM(),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
	data, _ := json.MarshalIndent(conf, "", "  ") // maps of strings: cannot fail
	return string(data) + "\n"
}

func kubeletConfig(l layout, p RealNodePorts) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# No systemd, and this machine may have cgroup v1: plain cgroup directories,
# and no refusal of v1 (deprecated in Kubernetes, still supported).
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[1]s
imageServiceEndpoint: unix://%[1]s
address: %[2]s
port: %[3]d
healthzBindAddress: 127.0.0.1
healthzPort: %[4]d
readOnlyPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[5]q
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS:
- %[6]s
resolvConf: /etc/resolv.conf
podLogsDir: %[7]q
enforceNodeAllocatable: []
cgroupsPerQOS: true
# Imported images cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
evictionPressureTransitionPeriod: 10s
serializeImagePulls: false
registerNode: true
maxPods: 50
podPidsLimit: -1
`, l.containerdSock(), NodeIP, kubeletPort, p.KubeletHealthz, l.pki().CACert(), DNSServiceIP, l.rn("pod-logs"))
}

func kubeletArgs(l layout) []string {
	return []string{
		"--config=" + l.config("kubelet.yaml"),
		"--kubeconfig=" + l.kubeconfigOf(Kubelet),
		"--hostname-override=" + RealNodeName,
		"--node-ip=" + NodeIP,
		"--node-labels=" + RealNodeLabel + "=true",
		"--register-with-taints=" + RealNodeLabel + "=true:NoSchedule",
		"--root-dir=" + l.kubeletRoot(),
		"--cert-dir=" + l.rn("kubelet-pki"),
		"--volume-plugin-dir=" + l.rn("volume-plugins"),
	}
}

func kubeProxyConfig(l layout, p RealNodePorts) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
detectLocalMode: ClusterCIDR
bindAddress: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
# NodePorts only on the bridge, never on the machine's own network.
nodePortAddresses:
- %s/32
conntrack:
  maxPerCore: 0
iptables:
  masqueradeAll: false
  localhostNodePorts: false
`, l.kubeconfigOf(KubeProxy), RealNodeName, proxyClusterCIDR, NodeIP, p.ProxyHealthz, p.ProxyMetrics, NodeIP)
}

// corefile is CoreDNS's configuration: cluster names from the API server,
// the rest forwarded to the machine's resolvers, served on the bridge only.
func corefile(l layout, p RealNodePorts) string {
	return fmt.Sprintf(`.:53 {
    bind %s
    errors
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    forward . /etc/resolv.conf
    cache 5
}
`, NodeIP, p.DNSHealth, p.DNSReady, l.kubeconfigOf(CoreDNS), pki.ContextName)
}

// realNodeComponents returns the real node's processes.
func realNodeComponentList(c Config, l layout, nb build.NodeBinaries, st *State) []component {
	p := st.RealNode.Ports
	// The full path, as the process's /proc/<pid>/exe shows it, so that a
	// later down finds it if the state is lost.
	ctrd, err := exec.LookPath("containerd")
	if err != nil {
		ctrd = "containerd"
	}
	return []component{
		{
			name:   Containerd,
			spec:   proc.Spec{Path: ctrd, Args: []string{"--config=" + l.containerdConfig()}},
			health: "unix://" + l.containerdSock(),
		},
		{
			name: Kubelet,
			spec: proc.Spec{Path: nb.Kubelet, Args: kubeletArgs(l)},
			// The pods' sandbox image must be there before the first pod.
			prepare: func(ctx context.Context) error {
				return importImages(ctx, c.Out, l.containerdSock(), st.RealNode.ImagesDir)
			},
			health: "http://" + loopback(p.KubeletHealthz) + "/healthz",
		},
		{
			name:   KubeProxy,
			spec:   proc.Spec{Path: nb.KubeProxy, Args: []string{"--config=" + l.config("kube-proxy.yaml")}},
			health: "http://" + loopback(p.ProxyHealthz) + "/livez",
		},
		{
			name: CoreDNS,
			spec: proc.Spec{Path: nb.CoreDNS, Args: []string{"-conf", l.config("Corefile")}},
			prepare: func(ctx context.Context) error {
				cs, err := clientset(l)
				if err != nil {
					return err
				}
				return applyKubeDNS(ctx, cs)
			},
			health: "http://" + loopback(p.DNSReady) + "/ready",
		},
	}
}

// realNodeArgs adapts kube-apiserver's arguments to the real node: it
// listens on the bridge, where the kubelet and pods reach it, reconciles the
// kubernetes Service's endpoints to the bridge address, and reaches the
// kubelet (logs, exec) with the admin certificate.
func realNodeAPIServerArgs(args []string, f pki.Files) []string {
	var out []string
	for _, a := range args {
		switch {
		case a == "--endpoint-reconciler-type=none":
			continue
		case strings.HasPrefix(a, "--bind-address="):
			a = "--bind-address=" + NodeIP
		case strings.HasPrefix(a, "--advertise-address="):
			a = "--advertise-address=" + NodeIP
		}
		out = append(out, a)
	}
	return append(out,
		"--kubelet-client-certificate="+f.ClientCert("admin"),
		"--kubelet-client-key="+f.ClientKey("admin"),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		// Webhooks and aggregated APIs are reached at their endpoints'
		// pod IPs, not through a Service IP that only kube-proxy knows.
		"--enable-aggregator-routing=true",
	)
}

// RealNodeControllers are the controllers a devcluster with a real node runs
// on top of Controllers: what Services and DaemonSets need on a node that
// runs their pods. Without a real node they stay off, since load tests run
// 15,000 pods on kwok.
var RealNodeControllers = []string{
	"endpoints-controller",
	"endpointslice-controller",
	"endpointslice-mirroring-controller",
	"daemonset-controller",
	"disruption-controller",
}

// apiServerHost is where kube-apiserver listens.
func apiServerHost(realNode bool) string {
	if realNode {
		return NodeIP
	}
	return "127.0.0.1"
}

func apiServerAddr(realNode bool, port int) string {
	return net.JoinHostPort(apiServerHost(realNode), strconv.Itoa(port))
}
