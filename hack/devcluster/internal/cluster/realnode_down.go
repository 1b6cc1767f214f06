package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/build"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/proc"
)

// applyKubeDNS creates the kube-dns Service, the pods' resolver, with an
// EndpointSlice of its own to CoreDNS on the bridge: CoreDNS runs on the
// machine, not in a pod that an endpoint controller would find.
func applyKubeDNS(ctx context.Context, cs kubernetes.Interface) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: DNSServiceIP,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	if _, err := cs.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Service kube-system/kube-dns: %w", err)
	}
	ready := true
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	port := int32(53)
	dnsName, tcpName := "dns", "dns-tcp"
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-devcluster", Namespace: metav1.NamespaceSystem, Labels: map[string]string{
			discoveryv1.LabelServiceName: "kube-dns",
			// Not the endpointslice controller's: it leaves the slice be.
			discoveryv1.LabelManagedBy: "devcluster",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: &dnsName, Port: &port, Protocol: &udp},
			{Name: &tcpName, Port: &port, Protocol: &tcp},
		},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{NodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(eps.Namespace).Create(ctx, eps, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create EndpointSlice kube-system/%s: %w", eps.Name, err)
	}
	return nil
}

// deleteRealNode removes the real node's Node object when a cluster starts
// without it, so that no NotReady node lingers from an earlier run.
func deleteRealNode(ctx context.Context, cs kubernetes.Interface) error {
	err := cs.CoreV1().Nodes().Delete(ctx, RealNodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %s: %w", RealNodeName, err)
	}
	return nil
}

// stopRealNode stops the real node of the devcluster in l and removes what
// it set up on the machine: its processes and containers, its mounts, the
// iptables rules of kube-proxy, the kubelet and the CNI plugins, the pods'
// network namespaces and the bridge. It does nothing if the state dir never
// had a real node. Containers go first: their shims are not in containerd's
// process group, and kube-proxy and the kubelet must not restart them.
func stopRealNode(ctx context.Context, c Config, l layout, st *State) error {
	if _, err := os.Stat(l.rn()); err != nil {
		return nil
	}
	var errs []error
	// Recorded processes: CoreDNS, kube-proxy, the kubelet (not containerd).
	if st != nil {
		var ps []Process
		for _, p := range st.Processes {
			if isRealNodeComponent(p.Name) && p.Name != Containerd {
				ps = append(ps, p)
			}
		}
		if err := stopProcesses(ctx, c.Out, ps); err != nil {
			errs = append(errs, err)
		}
	}
	nb := build.NodePaths(c.CacheDir)
	inDir := func(args []string) bool {
		return strings.Contains(strings.Join(args, " "), l.dir+string(os.PathSeparator))
	}
	if strays, err := proc.Find([]string{nb.Kubelet, nb.KubeProxy, nb.CoreDNS}, inDir); err == nil {
		for _, id := range strays {
			if err := proc.Stop(ctx, id, 10*time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if n, err := killContainers(ctx, l); err != nil {
		errs = append(errs, err)
	} else if n > 0 {
		fmt.Fprintf(c.Out, "stopped %d container shims of the real node\n", n)
	}
	if st != nil {
		for _, p := range st.Processes {
			if p.Name == Containerd {
				if err := stopProcesses(ctx, c.Out, []Process{p}); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if exe, err := exec.LookPath("containerd"); err == nil {
		if strays, err := proc.Find([]string{exe}, inDir); err == nil {
			for _, id := range strays {
				if err := proc.Stop(ctx, id, 10*time.Second); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	// The bridge and the iptables rules are the machine's: leave them to
	// the state dir whose real node runs, if that is another one.
	if data, err := os.ReadFile(realNodeMarker); err != nil || strings.TrimSpace(string(data)) == l.dir {
		cleanupHost(ctx, c.Out, l, nb.KubeProxy)
	}
	if err := unmountUnder(l.rn()); err != nil {
		errs = append(errs, err)
	}
	// Runtime state and addresses of containers that no longer exist; the
	// images (containerd's root) stay for the next start.
	for _, d := range []string{l.containerdState(), l.cniIPAM()} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	if data, err := os.ReadFile(realNodeMarker); err == nil && strings.TrimSpace(string(data)) == l.dir {
		_ = os.Remove(realNodeMarker)
	}
	return errors.Join(errs...)
}

// killContainers kills the containerd shims of the real node's containerd
// and every process under them (the containers), and reports how many
// shims there were.
func killContainers(ctx context.Context, l layout) (int, error) {
	shimExe, err := exec.LookPath("containerd-shim-runc-v2")
	if err != nil {
		return 0, nil
	}
	sock := l.containerdSock()
	shims, err := proc.Find([]string{shimExe}, func(args []string) bool {
		for i, a := range args {
			if (a == "-address" || a == "--address") && i+1 < len(args) && args[i+1] == sock {
				return true
			}
		}
		return false
	})
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, s := range shims {
		kids, err := proc.Descendants(s.PID)
		if err != nil {
			errs = append(errs, err)
		}
		for _, k := range kids {
			_ = syscall.Kill(k.PID, syscall.SIGKILL)
		}
		if err := proc.Stop(ctx, s, 5*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return len(shims), errors.Join(errs...)
}

// cleanupHost removes what the real node left in the machine's network:
// kube-proxy's rules (kube-proxy --cleanup), the kubelet's chains, the CNI
// plugins' rules of our network, the pods' network namespaces and the
// bridge. It goes on past failures (what is not there cannot be removed)
// and logs to the kube-proxy-cleanup log.
func cleanupHost(ctx context.Context, out io.Writer, l layout, kubeProxy string) {
	logf, err := os.OpenFile(l.log("realnode-cleanup"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		logf = nil
	}
	logw := io.Writer(io.Discard)
	if logf != nil {
		defer logf.Close()
		logw = logf
	}
	fmt.Fprintf(logw, "==== %s cleanup\n", time.Now().Format(time.RFC3339))
	do := func(name string, args ...string) string {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, name, args...)
		data, err := cmd.CombinedOutput()
		fmt.Fprintf(logw, "$ %s %s (%v)\n%s", name, strings.Join(args, " "), err, data)
		return string(data)
	}
	if _, err := os.Stat(kubeProxy); err == nil {
		do(kubeProxy, "--cleanup")
	}
	for _, ipt := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(ipt); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle"} {
			cleanIPTables(ipt, table, do)
		}
	}
	// Network namespaces of pods on our bridge (containerd 1.6 keeps them
	// in /run/netns): removing one also removes the pod's veth pair.
	if nss, err := filepath.Glob("/run/netns/cni-*"); err == nil {
		for _, ns := range nss {
			name := filepath.Base(ns)
			if strings.Contains(do("ip", "-n", name, "-o", "-4", "addr", "show"), " "+strings.TrimSuffix(podSubnet, "0/24")) {
				do("ip", "netns", "delete", name)
			}
		}
	}
	if _, err := os.Stat("/sys/class/net/" + bridgeName); err == nil {
		do("ip", "link", "delete", bridgeName)
		fmt.Fprintf(out, "deleted bridge %s\n", bridgeName)
	}
}

// kubeletChains are the chains the kubelet makes in every table and family.
var kubeletChains = map[string]bool{"KUBE-FIREWALL": true, "KUBE-KUBELET-CANARY": true, "KUBE-IPTABLES-HINT": true, "KUBE-PROXY-CANARY": true}

// cleanIPTables deletes the rules that jump to the kubelet's chains or that
// the CNI plugins made for our network, then the chains themselves.
func cleanIPTables(ipt, table string, do func(string, ...string) string) {
	rules := do(ipt, "-w", "-t", table, "-S")
	dels, chains := iptablesCleanup(rules)
	for _, r := range dels {
		do(ipt, append([]string{"-w", "-t", table, "-D"}, r...)...)
	}
	for _, ch := range chains {
		do(ipt, "-w", "-t", table, "-F", ch)
	}
	for _, ch := range chains {
		do(ipt, "-w", "-t", table, "-X", ch)
	}
}

// iptablesCleanup reads "iptables -S" output and returns the rules to
// delete (as arguments after -D) and the chains to flush and delete: the
// kubelet's chains, and chains that rules of the CNI network cniNetwork
// (commented `name: "sluice"`) jump to.
func iptablesCleanup(rules string) (dels [][]string, chains []string) {
	ours := map[string]bool{}
	for name := range kubeletChains {
		ours[name] = true
	}
	sc := bufio.NewScanner(strings.NewReader(rules))
	var appends [][]string
	for sc.Scan() {
		f := splitRule(sc.Text())
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		appends = append(appends, f[1:])
		if strings.Contains(sc.Text(), `name: \"`+cniNetwork+`\"`) || strings.Contains(sc.Text(), `name: "`+cniNetwork+`"`) {
			if j := jumpTarget(f); j != "" && !isBuiltinTarget(j) {
				ours[j] = true
			}
		}
	}
	for _, r := range appends {
		chain := r[0]
		if ours[chain] {
			continue // goes with the chain
		}
		j := jumpTarget(r)
		line := strings.Join(r, " ")
		if ours[j] || strings.Contains(line, `name: "`+cniNetwork+`"`) || strings.Contains(line, `name: \"`+cniNetwork+`\"`) {
			dels = append(dels, r)
		}
	}
	present := map[string]bool{}
	sc = bufio.NewScanner(strings.NewReader(rules))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "-N" && ours[f[1]] {
			present[f[1]] = true
		}
	}
	for name := range present {
		chains = append(chains, name)
	}
	sort.Strings(chains)
	return dels, chains
}

func jumpTarget(f []string) string {
	for i, a := range f {
		if (a == "-j" || a == "-g") && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}

func isBuiltinTarget(t string) bool {
	switch t {
	case "ACCEPT", "DROP", "RETURN", "MASQUERADE", "SNAT", "DNAT", "MARK", "REJECT", "LOG":
		return true
	}
	return false
}

// splitRule splits an "iptables -S" line into arguments, keeping quoted
// comments whole and unquoted, as exec passes them back to iptables.
func splitRule(line string) []string {
	var out []string
	var cur strings.Builder
	inQuote, escaped, have := false, false, false
	for _, r := range line {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && inQuote:
			escaped = true
		case r == '"':
			inQuote = !inQuote
			have = true
		case r == ' ' && !inQuote:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// unmountUnder unmounts every mount point under dir, the most recent first
// (so that mounts on top of others go first); the kubelet bind-mounts its
// root dir, and pods' volumes and containers' root filesystems are there.
func unmountUnder(dir string) error {
	prefix := filepath.Clean(dir)
	var errs []error
	for range 3 { // a mount may show up again under a propagated one
		points, err := mountsUnder(prefix)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		errs = errs[:0]
		for i := len(points) - 1; i >= 0; i-- {
			if err := syscall.Unmount(points[i], 0); err != nil {
				if err2 := syscall.Unmount(points[i], syscall.MNT_DETACH); err2 != nil && !errors.Is(err2, syscall.EINVAL) && !errors.Is(err2, syscall.ENOENT) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", points[i], err2))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func mountsUnder(prefix string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			out = append(out, p)
		}
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
