package cluster

import (
	"archive/tar"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/pki"
)

func TestRealNodeConfigs(t *testing.T) {
	l := layout{"/state"}
	p := RealNodePorts{KubeletHealthz: 11, ProxyHealthz: 12, ProxyMetrics: 13, DNSHealth: 14, DNSReady: 15}

	ctrd := containerdConfig(l, "docker.io/library/sluice-pause:dev")
	for _, want := range []string{
		`sandbox_image = "docker.io/library/sluice-pause:dev"`,
		`address = "/state/realnode/containerd.sock"`,
		`root = "/state/realnode/containerd/root"`,
		"restrict_oom_score_adj = true",
		"SystemdCgroup = false",
		`conf_dir = "/state/realnode/cni/net.d"`,
	} {
		if !strings.Contains(ctrd, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, ctrd)
		}
	}

	var cni struct {
		Name    string
		Plugins []map[string]any
	}
	if err := json.Unmarshal([]byte(cniConfig(l)), &cni); err != nil {
		t.Fatalf("CNI config is not JSON: %v", err)
	}
	if cni.Name != cniNetwork || len(cni.Plugins) != 2 || cni.Plugins[0]["bridge"] != bridgeName {
		t.Errorf("CNI config = %+v", cni)
	}

	var kubelet map[string]any
	if err := yaml.Unmarshal([]byte(kubeletConfig(l, p)), &kubelet); err != nil {
		t.Fatalf("kubelet config is not YAML: %v", err)
	}
	for k, want := range map[string]any{
		"cgroupDriver": "cgroupfs", "failCgroupV1": false, "failSwapOn": false, "address": NodeIP,
		"healthzBindAddress": "127.0.0.1", "healthzPort": 11, "readOnlyPort": 0, "imageGCHighThresholdPercent": 100,
		"containerRuntimeEndpoint": "unix:///state/realnode/containerd.sock",
	} {
		if kubelet[k] != want {
			t.Errorf("kubelet config %s = %v, want %v", k, kubelet[k], want)
		}
	}
	if dns, _ := kubelet["clusterDNS"].([]any); len(dns) != 1 || dns[0] != DNSServiceIP {
		t.Errorf("kubelet clusterDNS = %v", kubelet["clusterDNS"])
	}
	args := strings.Join(kubeletArgs(l), " ")
	for _, want := range []string{"--hostname-override=realnode-0", "--register-with-taints=sluice.dev/real-node=true:NoSchedule", "--node-labels=sluice.dev/real-node=true", "--root-dir=/state/realnode/kubelet"} {
		if !strings.Contains(args, want) {
			t.Errorf("kubelet args lack %q: %s", want, args)
		}
	}

	var proxy map[string]any
	if err := yaml.Unmarshal([]byte(kubeProxyConfig(l, p)), &proxy); err != nil {
		t.Fatalf("kube-proxy config is not YAML: %v", err)
	}
	if proxy["mode"] != "iptables" || proxy["healthzBindAddress"] != "127.0.0.1:12" || proxy["metricsBindAddress"] != "127.0.0.1:13" {
		t.Errorf("kube-proxy config = %v", proxy)
	}
	if npa, _ := proxy["nodePortAddresses"].([]any); len(npa) != 1 || npa[0] != NodeIP+"/32" {
		t.Errorf("kube-proxy nodePortAddresses = %v", proxy["nodePortAddresses"])
	}

	cf := corefile(l, p)
	for _, want := range []string{"bind " + NodeIP, "health 127.0.0.1:14", "ready 127.0.0.1:15", "kubeconfig /state/config/coredns.kubeconfig " + pki.ContextName} {
		if !strings.Contains(cf, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, cf)
		}
	}
}

// With the real node, kube-apiserver listens on the bridge only and
// reconciles the kubernetes Service's endpoints; without it, nothing
// changes (TestComponentsStayOnLoopback).
func TestRealNodeComponents(t *testing.T) {
	l := layout{"/state"}
	p := Ports{EtcdClient: 1, EtcdPeer: 2, APIServer: 3, ControllerManager: 4, Scheduler: 5, Kwok: 6}
	comps := components(l, binsForTest(), "/self", p, false, true)
	api := comps[1]
	if api.name != APIServer || api.health != "https://10.88.0.1:3/readyz" {
		t.Fatalf("API server component %s, health %s", api.name, api.health)
	}
	for _, want := range []string{"--bind-address=10.88.0.1", "--advertise-address=10.88.0.1", "--kubelet-client-certificate=/state/pki/admin.crt"} {
		if !slices.Contains(api.spec.Args, want) {
			t.Errorf("API server args lack %s", want)
		}
	}
	for _, a := range api.spec.Args {
		if a == "--endpoint-reconciler-type=none" || strings.Contains(a, "0.0.0.0") {
			t.Errorf("API server arg %s", a)
		}
	}
	kcm := strings.Join(comps[2].spec.Args, " ")
	if !strings.Contains(kcm, "endpointslice-controller") || !strings.Contains(kcm, "job-controller") {
		t.Errorf("controller manager with a real node: %s", kcm)
	}
	plain := strings.Join(components(l, binsForTest(), "/self", p, false, false)[2].spec.Args, " ")
	if strings.Contains(plain, "endpointslice-controller") {
		t.Errorf("controller manager without a real node runs the endpointslice controller: %s", plain)
	}
}

func TestIPTablesCleanup(t *testing.T) {
	rules := `-P POSTROUTING ACCEPT
-N CNI-0123abcd
-N KUBE-FIREWALL
-N OTHER
-A INPUT -j KUBE-FIREWALL
-A INPUT -j OTHER
-A POSTROUTING -s 10.88.0.2/32 -m comment --comment "name: \"sluice\" id: \"abc\"" -j CNI-0123abcd
-A POSTROUTING -s 10.1.0.2/32 -m comment --comment "name: \"other\" id: \"def\"" -j CNI-ffff
-A CNI-0123abcd -d 10.88.0.0/24 -m comment --comment "name: \"sluice\" id: \"abc\"" -j ACCEPT
-A KUBE-FIREWALL -j DROP
`
	dels, chains := iptablesCleanup(rules)
	want := [][]string{
		{"INPUT", "-j", "KUBE-FIREWALL"},
		{"POSTROUTING", "-s", "10.88.0.2/32", "-m", "comment", "--comment", `name: "sluice" id: "abc"`, "-j", "CNI-0123abcd"},
	}
	if !slices.EqualFunc(dels, want, slices.Equal) {
		t.Errorf("rules to delete = %q, want %q", dels, want)
	}
	if !slices.Equal(chains, []string{"CNI-0123abcd", "KUBE-FIREWALL"}) {
		t.Errorf("chains to delete = %q", chains)
	}
}

func TestImageNames(t *testing.T) {
	for in, want := range map[string]string{
		"sluice-pause:dev":          "docker.io/library/sluice-pause:dev",
		"me/app:1":                  "docker.io/me/app:1",
		"sluice.local/pause:v1":     "sluice.local/pause:v1",
		"localhost/x:1":             "localhost/x:1",
		"registry:5000/team/app:v2": "registry:5000/team/app:v2",
	} {
		if got := normalizeImage(in); got != want {
			t.Errorf("normalizeImage(%q) = %q, want %q", in, got, want)
		}
	}
	path := filepath.Join(t.TempDir(), "pause.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	manifest := []byte(`[{"Config":"sha256:x","RepoTags":["sluice-pause:dev"],"Layers":[]}]`)
	if err := tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: int64(len(manifest))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(manifest); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, err := ImageName(path); err != nil || got != "docker.io/library/sluice-pause:dev" {
		t.Errorf("ImageName = %q, %v", got, err)
	}
	if _, err := ImageName(filepath.Join(t.TempDir(), "none.tar")); err == nil {
		t.Error("ImageName of a missing file did not fail")
	}
}

func TestMissingPackages(t *testing.T) {
	all := func(string) bool { return true }
	if got := missingPackages(all); len(got) != 0 {
		t.Errorf("missingPackages(all there) = %v", got)
	}
	noCNI := func(f string) bool { return !strings.HasPrefix(f, "/usr/lib/cni/") && f != "conntrack" }
	if got := missingPackages(noCNI); !slices.Equal(got, []string{"containernetworking-plugins", "conntrack"}) {
		t.Errorf("missingPackages = %v", got)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/a\040b/c`); got != "/a b/c" {
		t.Errorf("unescapeMount = %q", got)
	}
}
