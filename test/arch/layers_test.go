package arch

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const module = "github.com/sluice-dev/sluice"

// pkg is one package of the main module as go list reports it, paths
// relative to the module ("internal/engine"; "" is the module's root).
type pkg struct {
	Path    string
	Dir     string
	Imports []string // direct, non-test imports, full import paths
	Files   []string // non-test Go files
}

// ioPackages are the imports that do I/O or read the clock's source: the
// decision core must not import them (nor anything that does, see
// the deps check).
var ioPackages = []string{"net", "net/http", "os", "os/exec", "os/signal", "io/ioutil", "syscall", "math/rand", "math/rand/v2",
	"crypto/rand", "log", "log/slog"}

// ioPrefixes are libraries whose use is I/O.
var ioPrefixes = []string{"github.com/nats-io/", "k8s.io/client-go/", "github.com/rs/zerolog", "go.opentelemetry.io/",
	"github.com/prometheus/", "github.com/cloudevents/"}

// clockReads are the time functions that read or wait on the clock: the
// engine is handed "now".
var clockReads = []string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker"}

// adapterRoot is the parent of the job kinds' adapters; the package itself
// is the integration service.
const adapterRoot = "services/integration"

// layerOf names a package's layer.
func layerOf(p string) string {
	top, _, _ := strings.Cut(p, "/")
	switch {
	case p == "internal/engine" || strings.HasPrefix(p, "internal/engine/"):
		return "engine"
	case top == "api" || top == "events" || top == "schemas" || top == "checks" || top == "internal":
		return "contract"
	case top == "services":
		return "service"
	default:
		return "composition"
	}
}

// serviceOf is the service a package under services/ belongs to, and
// whether it is a job kind's adapter (or the registry of them).
func serviceOf(p string) (name string, adapter bool) {
	rest, ok := strings.CutPrefix(p, "services/")
	if !ok {
		return "", false
	}
	name, sub, _ := strings.Cut(rest, "/")
	return name, "services/"+name == adapterRoot && sub != ""
}

// violations applies the layering rules to the import graph.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			rel, own := strings.CutPrefix(imp, module+"/")
			if !own {
				if layerOf(p.Path) == "engine" && isIO(imp) {
					out = append(out, fmt.Sprintf("%s imports %s: the decision core does no I/O", p.Path, imp))
				}
				if strings.HasPrefix(imp, "k8s.io/kubernetes/") {
					out = append(out, fmt.Sprintf("%s imports %s: Sluice does not depend on k8s.io/kubernetes", p.Path, imp))
				}
				continue
			}
			if v := crossing(p.Path, rel); v != "" {
				out = append(out, fmt.Sprintf("%s imports %s: %s", p.Path, rel, v))
			}
		}
	}
	slices.Sort(out)
	return out
}

// crossing says why from may not import to, or "".
func crossing(from, to string) string {
	switch layerOf(from) {
	case "engine":
		if layerOf(to) != "engine" {
			return "the decision core imports nothing else of Sluice's"
		}
	case "contract":
		switch layerOf(to) {
		case "service":
			return "the contract and plumbing import no service"
		case "composition":
			return "the contract and plumbing import no command or test"
		}
	case "service":
		if layerOf(to) == "composition" {
			return "a service imports no command or test"
		}
		fromSvc, fromAdapter := serviceOf(from)
		toSvc, toAdapter := serviceOf(to)
		switch {
		case toSvc == "":
		case fromAdapter && to == adapterRoot:
			return "an adapter builds on the framework (internal/jobframework), not on the integration service"
		case toAdapter:
			// Adapters are the one thing services share.
		case fromSvc != toSvc:
			return "a service imports no other service"
		}
	}
	return ""
}

func isIO(imp string) bool {
	if slices.Contains(ioPackages, imp) {
		return true
	}
	for _, p := range ioPrefixes {
		if strings.HasPrefix(imp, p) {
			return true
		}
	}
	return false
}

// clockViolations lists the engine's reads of the clock, file:line.
func clockViolations(t *testing.T, pkgs []pkg) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	for _, p := range pkgs {
		if layerOf(p.Path) != "engine" {
			continue
		}
		for _, name := range p.Files {
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			out = append(out, clockReadsIn(fset, f, p.Path+"/"+name)...)
		}
	}
	return out
}

// clockReadsIn finds time.<clockRead> selectors in one file.
func clockReadsIn(fset *token.FileSet, f *ast.File, name string) []string {
	timeName := ""
	for _, imp := range f.Imports {
		if imp.Path.Value == `"time"` {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	if timeName == "" {
		return nil
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && slices.Contains(clockReads, sel.Sel.Name) {
			out = append(out, fmt.Sprintf("%s:%d: time.%s: the engine is given the time", name, fset.Position(sel.Pos()).Line, sel.Sel.Name))
		}
		return true
	})
	return out
}

// load lists the main module's packages (hack/devcluster is a module of
// its own and not listed).
func load(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .Imports \" \"}}\t{{join .GoFiles \" \"}}", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		pkgs = append(pkgs, pkg{Path: rel, Dir: f[1], Imports: strings.Fields(f[2]), Files: strings.Fields(f[3])})
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the module has more: is the test run from inside it?", len(pkgs))
	}
	return pkgs
}

func TestLayers(t *testing.T) {
	pkgs := load(t)
	if v := violations(pkgs); len(v) > 0 {
		t.Errorf("imports across layers (see this package's doc):\n%s", strings.Join(v, "\n"))
	}
	if v := clockViolations(t, pkgs); len(v) > 0 {
		t.Errorf("the decision core reads the clock:\n%s", strings.Join(v, "\n"))
	}
}

// TestNoKubernetesModule: not one package the main module builds, its
// tests included, comes from k8s.io/kubernetes.
func TestNoKubernetesModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list -deps -test: %v", err)
	}
	var bad []string
	for p := range strings.FieldsSeq(string(out)) {
		if p == "k8s.io/kubernetes" || strings.HasPrefix(p, "k8s.io/kubernetes/") {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Errorf("the main module needs k8s.io/kubernetes:\n%s", strings.Join(bad, "\n"))
	}
}

// The rules themselves, each on a graph with one deliberate violation.
func TestViolationsFound(t *testing.T) {
	m := func(rel string) string { return module + "/" + rel }
	cases := []struct {
		name string
		pkgs []pkg
		want []string
	}{
		{
			name: "the layering as it is meant",
			pkgs: []pkg{
				{Path: "internal/engine", Imports: []string{"time", "k8s.io/api/core/v1"}},
				{Path: "internal/jobframework", Imports: []string{m("api/v1beta1"), m("events")}},
				{Path: "services/integration", Imports: []string{m("internal/jobframework")}},
				{Path: "services/integration/job", Imports: []string{m("internal/jobframework")}},
				{Path: "services/integration/kinds", Imports: []string{m("services/integration/job")}},
				{Path: "services/multicluster", Imports: []string{m("internal/jobframework"), m("services/integration/kinds")}},
				{Path: "cmd/sluice", Imports: []string{m("services/admission"), m("services/integration")}},
			},
		},
		{
			name: "the engine does I/O",
			pkgs: []pkg{{Path: "internal/engine", Imports: []string{"github.com/nats-io/nats.go", "os"}}},
			want: []string{
				"internal/engine imports github.com/nats-io/nats.go: the decision core does no I/O",
				"internal/engine imports os: the decision core does no I/O",
			},
		},
		{
			name: "the engine imports plumbing",
			pkgs: []pkg{{Path: "internal/engine", Imports: []string{m("internal/ledger")}}},
			want: []string{"internal/engine imports internal/ledger: the decision core imports nothing else of Sluice's"},
		},
		{
			name: "a service imports another service",
			pkgs: []pkg{{Path: "services/provisioning", Imports: []string{m("services/integration")}}},
			want: []string{"services/provisioning imports services/integration: a service imports no other service"},
		},
		{
			name: "an adapter imports the integration service",
			pkgs: []pkg{{Path: "services/integration/job", Imports: []string{m("services/integration")}}},
			want: []string{"services/integration/job imports services/integration: an adapter builds on the framework (internal/jobframework), not on the integration service"},
		},
		{
			name: "events and api import a service",
			pkgs: []pkg{
				{Path: "events", Imports: []string{m("services/quota")}},
				{Path: "api/v1beta1", Imports: []string{m("services/integration/job")}},
			},
			want: []string{
				"api/v1beta1 imports services/integration/job: the contract and plumbing import no service",
				"events imports services/quota: the contract and plumbing import no service",
			},
		},
		{
			name: "plumbing imports a service or the command",
			pkgs: []pkg{{Path: "internal/invariant", Imports: []string{m("services/integration/job"), m("cmd/sluice/natsperm")}}},
			want: []string{
				"internal/invariant imports cmd/sluice/natsperm: the contract and plumbing import no command or test",
				"internal/invariant imports services/integration/job: the contract and plumbing import no service",
			},
		},
		{
			name: "anything imports k8s.io/kubernetes",
			pkgs: []pkg{{Path: "cmd/sluice", Imports: []string{"k8s.io/kubernetes/pkg/scheduler"}}},
			want: []string{"cmd/sluice imports k8s.io/kubernetes/pkg/scheduler: Sluice does not depend on k8s.io/kubernetes"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, violations(tc.pkgs)); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClockReadsFound(t *testing.T) {
	src := `package engine

import clock "time"

func f() clock.Duration {
	start := clock.Now()
	d := clock.Duration(5) * clock.Second
	return clock.Since(start) + d
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "cycle.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"internal/engine/cycle.go:6: time.Now: the engine is given the time",
		"internal/engine/cycle.go:8: time.Since: the engine is given the time",
	}
	if diff := cmp.Diff(want, clockReadsIn(fset, f, "internal/engine/cycle.go")); diff != "" {
		t.Errorf("clock reads (-want +got):\n%s", diff)
	}
}
