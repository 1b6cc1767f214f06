package kinds_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/services/integration/kinds"
)

const module = "github.com/sluice-dev/sluice/"

// upstream is the module of each kind's own API types.
var upstream = map[string]string{
	"job":        "",
	"pod":        "",
	"jobset":     "sigs.k8s.io/jobset",
	"rayjob":     "github.com/ray-project/kuberay/ray-operator",
	"raycluster": "github.com/ray-project/kuberay/ray-operator",
	"mpijob":     "github.com/kubeflow/mpi-operator",
	"pytorchjob": "github.com/kubeflow/training-operator",
	"tfjob":      "github.com/kubeflow/training-operator",
	"xgboostjob": "github.com/kubeflow/training-operator",
	"paddlejob":  "github.com/kubeflow/training-operator",
}

// shared are packages under services/integration that serve the kinds of
// one API module (what the training operator's jobs have in common).
var shared = map[string]string{
	"kubeflow": "github.com/kubeflow/training-operator",
}

// Each adapter depends on the framework and its own kind's types: no other
// service, no adapter of another API, no other kind's API module.
func TestAdaptersImportTheFrameworkAndTheirOwnKindOnly(t *testing.T) {
	for _, name := range kinds.Names() {
		t.Run(name, func(t *testing.T) {
			own, ok := upstream[name]
			if !ok {
				t.Fatalf("kind %s: its API module is not listed in this test", name)
			}
			pkg := module + "services/integration/" + name
			out, err := exec.Command("go", "list", "-deps", pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", pkg, err)
			}
			deps := strings.Fields(string(out))
			framework := false
			for _, d := range deps {
				switch {
				case d == module+"internal/jobframework":
					framework = true
				case d == pkg:
				case sameAPI(own, d):
					// A RayJob embeds a RayCluster's spec: its adapter reads
					// pod sets with the RayCluster adapter's code; the
					// training operator's jobs share package kubeflow.
				case strings.HasPrefix(d, module+"services/"):
					t.Errorf("imports %s", d)
				}
				for other, mod := range upstream {
					if mod != "" && mod != own && strings.HasPrefix(d, mod+"/") {
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
func sameAPI(mod, pkg string) bool {
	name, ok := strings.CutPrefix(pkg, module+"services/integration/")
	return ok && mod != "" && (upstream[name] == mod || shared[name] == mod)
}
