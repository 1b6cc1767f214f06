// Command kindcrds writes the CRDs of the job kinds Sluice integrates, and
// the cluster autoscaler's ProvisioningRequest, into a directory, one file
// per CRD, taken from the upstream projects' own Go modules at the
// versions go.mod pins (the same modules Sluice takes their types from),
// so the schema is the real one:
//
//	go run ./hack/kindcrds DIR
//
// Run it from the repository root; the modules come from the module cache
// or the module proxy.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/kinds"
)

// crds lists each integrated kind's CRD, as its adapter declares it, and
// one that is not a job kind: the cluster autoscaler's
// ProvisioningRequest, which the provisioning admission check creates.
func crds() []jobframework.CRDSource {
	return append(jobframework.CRDSources(kinds.All),
		jobframework.CRDSource{Module: "k8s.io/autoscaler/cluster-autoscaler/apis", Path: "config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml"})
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./hack/kindcrds DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "kindcrds:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range crds() {
		src, err := moduleDir(c.Module)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(src, c.Path))
		if err != nil {
			return fmt.Errorf("%s: %w", c.Module, err)
		}
		// One document per file: drop a leading document marker.
		b = bytes.TrimPrefix(bytes.TrimSpace(b), []byte("---"))
		out := filepath.Join(dir, filepath.Base(c.Path))
		if err := os.WriteFile(out, append(bytes.TrimSpace(b), '\n'), 0o644); err != nil {
			return err
		}
		fmt.Println(out)
	}
	return nil
}

// moduleDir downloads a module at go.mod's version and returns its
// directory.
func moduleDir(module string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", module).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("go mod download %s: %w: %s", module, err, ee.Stderr)
		}
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	var info struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", module, info.Error)
	}
	return info.Dir, nil
}
