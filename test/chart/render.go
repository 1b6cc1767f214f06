package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// KubeVersion is the Kubernetes version the chart is rendered for (the
// devcluster's).
const KubeVersion = "1.34.4"

// repo is the repository's root, found from this file.
func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Dir is the chart's directory.
func Dir() string { return filepath.Join(repo(), "charts", "sluice") }

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// Helm returns the helm binary: $SLUICE_HELM, or the one hack/helm.sh
// builds (once) and caches.
func Helm() (string, error) {
	helmOnce.Do(func() {
		if p := os.Getenv("SLUICE_HELM"); p != "" {
			helmPath = p
			return
		}
		var out bytes.Buffer
		cmd := exec.Command(filepath.Join(repo(), "hack", "helm.sh"))
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			helmErr = fmt.Errorf("hack/helm.sh: %w", err)
		}
		helmPath = strings.TrimSpace(out.String())
	})
	return helmPath, helmErr
}

// RenderError is helm refusing to render: its output says why.
type RenderError struct{ Output string }

func (e *RenderError) Error() string { return e.Output }

// Render runs helm template on the chart as release in namespace with the
// --set values given and returns the objects. A refusal is a *RenderError.
func Render(release, namespace string, set ...string) ([]*unstructured.Unstructured, error) {
	return RenderDir(Dir(), release, namespace, set...)
}

// RenderDir is Render of the chart in dir (a changed copy).
func RenderDir(dir, release, namespace string, set ...string) ([]*unstructured.Unstructured, error) {
	bin, err := Helm()
	if err != nil {
		return nil, err
	}
	args := []string{"template", release, dir, "--namespace", namespace, "--kube-version", KubeVersion}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, &RenderError{Output: errOut.String()}
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode rendered chart: %w", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs, nil
}
