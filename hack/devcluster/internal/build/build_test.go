package build

import (
	"os"
	"strings"
	"testing"
)

// The cache names binaries by KubeVersion and KwokVersion; go.mod must pin
// the same Kubernetes, or a cached binary would not match the module.
func TestVersionsMatchGoMod(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	staging := "v0." + strings.TrimPrefix(KubeVersion, "v1.")
	var sawKube bool
	replaces := 0
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "k8s.io/kubernetes":
			sawKube = true
			if f[1] != KubeVersion {
				t.Errorf("go.mod requires k8s.io/kubernetes %s, KubeVersion is %s", f[1], KubeVersion)
			}
		case len(f) == 4 && f[1] == "=>" && strings.HasPrefix(f[0], "k8s.io/"):
			replaces++
			if f[0] != f[2] || f[3] != staging {
				t.Errorf("go.mod: %q; want %s => %s %s", strings.TrimSpace(line), f[0], f[0], staging)
			}
		}
	}
	if !sawKube {
		t.Error("go.mod does not require k8s.io/kubernetes")
	}
	if replaces < 25 {
		t.Errorf("go.mod pins %d staging modules; k8s.io/kubernetes needs every one of them", replaces)
	}
}

func TestLDFlags(t *testing.T) {
	got := LDFlags()
	for _, want := range []string{
		"-X k8s.io/component-base/version.gitVersion=" + KubeVersion,
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=34",
		"-X k8s.io/client-go/pkg/version.gitVersion=" + KubeVersion,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("LDFlags() = %q lacks %q", got, want)
		}
	}
}

func TestPathsCarryVersions(t *testing.T) {
	b := Paths("/c")
	if b.APIServer != "/c/bin/kube-apiserver-"+KubeVersion || b.Kwok != "/c/bin/kwok-"+KwokVersion {
		t.Errorf("Paths = %+v", b)
	}
	if got := Missing(t.TempDir()); len(got) != 4 {
		t.Errorf("Missing(empty cache) = %v, want all four", got)
	}
}

// The CoreDNS binary is cached by CoreDNSVersion; its module must pin it.
func TestCoreDNSVersionMatchesModule(t *testing.T) {
	data, err := os.ReadFile("../../coredns/coredns.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "github.com/coredns/coredns "+CoreDNSVersion+"\n") {
		t.Errorf("coredns/coredns.mod does not require github.com/coredns/coredns %s", CoreDNSVersion)
	}
	main, err := os.ReadFile("../../coredns/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(main), coreDNSConstraint) {
		t.Errorf("coredns/main.go does not start with %q, which keeps it out of the devcluster module", coreDNSConstraint)
	}
	b := NodePaths("/c")
	if b.Kubelet != "/c/bin/kubelet-"+KubeVersion || b.CoreDNS != "/c/bin/coredns-"+CoreDNSVersion {
		t.Errorf("NodePaths = %+v", b)
	}
}
