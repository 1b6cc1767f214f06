package kinds_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/services/integration/kinds"
)

const module = "github.com/sluice-dev/sluice/"

// upstream is the module of each kind's own API types, as the kind
// declares it.
func upstream() map[string]string {
	out := map[string]string{}
	for _, ad := range kinds.All {
		out[ad.Kind().Name] = ad.Kind().Module
	}
	return out
}

// shared are packages under services/integration that serve the kinds of
// one API module (what the training operator's jobs have in common).
var shared = map[string]string{
	"kubeflow": "github.com/kubeflow/training-operator",
}

// Each adapter depends on the framework and its own kind's types: no other
// service, no adapter of another API, no other kind's API module (unless
// its own kind's module brings it: an AppWrapper's project reads the pod
// sets of the kinds it wraps).
func TestAdaptersImportTheFrameworkAndTheirOwnKindOnly(t *testing.T) {
	upstream := upstream()
	for _, name := range kinds.Names() {
		t.Run(name, func(t *testing.T) {
			own := upstream[name]
			pkg := module + "services/integration/" + name
			out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", pkg, err)
			}
			var deps []string
			ours := map[string]bool{} // imported by a package of Sluice's
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				f := strings.Fields(line)
				deps = append(deps, f[0])
				if strings.HasPrefix(f[0], module) {
					for _, imp := range f[1:] {
						ours[imp] = true
					}
				}
			}
			framework := false
			for _, d := range deps {
				switch {
				case d == module+"internal/jobframework":
					framework = true
				case d == pkg:
				case sameAPI(upstream, own, d):
					// A RayJob embeds a RayCluster's spec: its adapter reads
					// pod sets with the RayCluster adapter's code; the
					// training operator's jobs share package kubeflow.
				case strings.HasPrefix(d, module+"services/"):
					t.Errorf("imports %s", d)
				}
				for other, mod := range upstream {
					if mod != "" && mod != own && strings.HasPrefix(d, mod+"/") && ours[d] {
						t.Errorf("imports %s, the API of %s", d, other)
					}
				}
			}
			if !framework {
				t.Errorf("does not import the framework (internal/jobframework)")
			}
		})
	}
}

// sameAPI: pkg is the adapter of a kind whose types come from mod too, or
// a package shared by such kinds.
func sameAPI(upstream map[string]string, mod, pkg string) bool {
	name, ok := strings.CutPrefix(pkg, module+"services/integration/")
	return ok && mod != "" && (upstream[name] == mod || shared[name] == mod)
}

// Each kind's declared module is one go.mod requires, and its CRD is in it:
// the devcluster installs that file (hack/kindcrds).
func TestKindsDeclareTheirCRD(t *testing.T) {
	for _, ad := range kinds.All {
		k := ad.Kind()
		t.Run(k.Name, func(t *testing.T) {
			if k.Title == "" {
				t.Errorf("kind %s declares no Title for the docs' table", k.Name)
			}
			if k.Module == "" {
				if k.CRD != "" {
					t.Errorf("kind %s names a CRD (%s) but no module", k.Name, k.CRD)
				}
				return
			}
			out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", k.Module).Output()
			if err != nil {
				t.Fatalf("kind %s: module %s is not one go.mod requires: %v", k.Name, k.Module, err)
			}
			dir := strings.TrimSpace(string(out))
			if dir == "" {
				t.Skipf("module %s is not downloaded", k.Module)
			}
			b, err := os.ReadFile(filepath.Join(dir, k.CRD))
			if err != nil {
				t.Fatalf("kind %s: its CRD: %v", k.Name, err)
			}
			if want := "name: " + k.Resource + "." + k.GVK.Group; !strings.Contains(string(b), want) {
				t.Errorf("kind %s: %s has no %q", k.Name, k.CRD, want)
			}
		})
	}
}
