package nodes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestDefault(t *testing.T) {
	ns, err := Default()
	if err != nil {
		t.Fatalf("built-in nodes file does not parse: %v", err)
	}
	if len(ns) != 4 {
		t.Fatalf("got %d default nodes, want 4", len(ns))
	}
	types := map[string]int{}
	spot := 0
	for _, n := range ns {
		if got := n.Status.Capacity["nvidia.com/gpu"]; got.Cmp(resource.MustParse("8")) != 0 {
			t.Errorf("%s: nvidia.com/gpu = %s, want 8", n.Name, got.String())
		}
		if got := n.Status.Allocatable[corev1.ResourcePods]; got.Cmp(resource.MustParse("110")) != 0 {
			t.Errorf("%s: allocatable pods = %s, want 110", n.Name, got.String())
		}
		if n.Annotations[KwokAnnotation] != KwokAnnotationValue {
			t.Errorf("%s: missing kwok annotation", n.Name)
		}
		if len(n.Spec.Taints) != 0 {
			t.Errorf("%s: has taints %v, want none", n.Name, n.Spec.Taints)
		}
		types[n.Labels["instance-type"]]++
		if n.Labels["sluice.dev/spot"] == "true" {
			spot++
		}
	}
	if types["a100"] != 2 || types["h100"] != 2 || spot != 2 {
		t.Errorf("default nodes: instance types %v, %d spot; want 2 a100, 2 h100, 2 spot", types, spot)
	}
}

func TestGroups(t *testing.T) {
	in := `
nodes:
- namePrefix: cpu
  count: 3
  labels: {pool: cpu, sluice.dev/spot: true}
  capacity: {cpu: 16, memory: 64Gi, pods: 110}
  allocatable: {cpu: 15, memory: 60Gi, pods: 110}
  taints:
  - {key: example.com/dedicated, value: batch, effect: NoSchedule}
- name: single
  annotations: {example.com/note: hello}
  capacity: {cpu: "1", memory: 1Gi, pods: "10"}
`
	ns, err := Parse("groups.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range ns {
		names = append(names, n.Name)
	}
	if got, want := strings.Join(names, ","), "cpu-0,cpu-1,cpu-2,single"; got != want {
		t.Fatalf("names = %s, want %s", got, want)
	}
	cpu := ns[1]
	if cpu.Labels["sluice.dev/spot"] != "true" || cpu.Labels["pool"] != "cpu" || cpu.Labels["kubernetes.io/hostname"] != "cpu-1" {
		t.Errorf("labels = %v", cpu.Labels)
	}
	if got := cpu.Status.Allocatable[corev1.ResourceCPU]; got.String() != "15" {
		t.Errorf("allocatable cpu = %s, want 15", got.String())
	}
	if len(cpu.Spec.Taints) != 1 || cpu.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("taints = %v", cpu.Spec.Taints)
	}
	if ns[3].Annotations["example.com/note"] != "hello" || ns[3].Annotations[KwokAnnotation] != KwokAnnotationValue {
		t.Errorf("annotations = %v", ns[3].Annotations)
	}
	// Changing one node of a group must not change its siblings.
	ns[0].Status.Capacity[corev1.ResourceCPU] = resource.MustParse("1")
	if got := ns[1].Status.Capacity[corev1.ResourceCPU]; got.String() != "16" {
		t.Errorf("nodes of a group share their capacity map")
	}
}

func TestBadInput(t *testing.T) {
	const ok = "  capacity: {cpu: 1, memory: 1Gi, pods: 10}\n"
	cases := []struct {
		name string
		in   string
		want []string // each must appear in the error
	}{
		{"not yaml", "nodes: [\n", []string{"bad.yaml", "not valid YAML"}},
		{"empty", "", []string{"bad.yaml", "nodes", "missing"}},
		{"no nodes key", "nodez: []\n", []string{"bad.yaml:1", "nodez", "unknown field"}},
		{"nodes not a list", "nodes: {a: b}\n", []string{"bad.yaml:1", "nodes", "must be a list"}},
		{"empty list", "nodes: []\n", []string{"nodes", "is empty"}},
		{"unknown field", "nodes:\n- name: a\n" + ok + "  capcity: {}\n", []string{"bad.yaml:4", "nodes[0].capcity", "unknown field"}},
		{"no name", "nodes:\n-" + ok[1:], []string{"nodes[0].name", "missing"}},
		{"name and prefix", "nodes:\n- name: a\n  namePrefix: b\n  count: 2\n" + ok, []string{"nodes[0].namePrefix", "not both"}},
		{"count without prefix", "nodes:\n- name: a\n  count: 2\n" + ok, []string{"nodes[0].count", "namePrefix"}},
		{"prefix without count", "nodes:\n- namePrefix: a\n" + ok, []string{"nodes[0].count", "missing"}},
		{"count not a number", "nodes:\n- namePrefix: a\n  count: two\n" + ok, []string{"bad.yaml:3", "nodes[0].count", `"two"`}},
		{"count zero", "nodes:\n- namePrefix: a\n  count: 0\n" + ok, []string{"nodes[0].count"}},
		{"count too big", "nodes:\n- namePrefix: a\n  count: 5001\n" + ok, []string{"nodes[0].count"}},
		{"bad node name", "nodes:\n- name: Bad_Name\n" + ok, []string{"nodes[0].name", "Bad_Name"}},
		{"bad quantity", "nodes:\n- name: a\n  capacity: {cpu: 1, memory: 1Gi, pods: 10, nvidia.com/gpu: eight}\n",
			[]string{"bad.yaml:3", `nodes[0].capacity["nvidia.com/gpu"]`, "invalid quantity"}},
		{"negative quantity", "nodes:\n- name: a\n  capacity: {cpu: -1, memory: 1Gi, pods: 10}\n", []string{`nodes[0].capacity["cpu"]`, "negative"}},
		{"missing pods", "nodes:\n- name: a\n  capacity: {cpu: 1, memory: 1Gi}\n", []string{`nodes[0].capacity["pods"]`, "missing"}},
		{"missing capacity", "nodes:\n- name: a\n", []string{"nodes[0].capacity", "missing"}},
		{"capacity a list", "nodes:\n- name: a\n  capacity: [1, 2]\n", []string{"nodes[0].capacity", "mapping"}},
		{"allocatable too big", "nodes:\n- name: a\n" + ok + "  allocatable: {cpu: 2}\n", []string{`nodes[0].allocatable["cpu"]`, "exceeds capacity"}},
		{"bad label value", "nodes:\n- name: a\n  labels: {instance-type: a100 sxm}\n" + ok, []string{"bad.yaml:3", `nodes[0].labels["instance-type"]`}},
		{"bad label key", "nodes:\n- name: a\n  labels: {bad key: x}\n" + ok, []string{`nodes[0].labels["bad key"]`}},
		{"label value a list", "nodes:\n- name: a\n  labels: {a: [1]}\n" + ok, []string{`nodes[0].labels["a"]`, "single value"}},
		{"bad taint effect", "nodes:\n- name: a\n" + ok + "  taints: [{key: k, effect: Never}]\n", []string{"nodes[0].taints[0].effect", "Never"}},
		{"taint without key", "nodes:\n- name: a\n" + ok + "  taints: [{effect: NoSchedule}]\n", []string{"nodes[0].taints[0].key", "missing"}},
		{"taint unknown field", "nodes:\n- name: a\n" + ok + "  taints: [{key: k, effect: NoSchedule, operator: Exists}]\n", []string{"nodes[0].taints[0].operator", "unknown field"}},
		{"duplicate name", "nodes:\n- name: a-0\n" + ok + "- namePrefix: a\n  count: 2\n" + ok, []string{"nodes[1]", `"a-0"`, "nodes[0]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, err := Parse("bad.yaml", []byte(tc.in))
			if err == nil {
				t.Fatalf("no error; got %d nodes", len(ns))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFieldErrorType(t *testing.T) {
	_, err := Parse("f.yaml", []byte("nodes:\n- name: a\n  capacity: {cpu: x, memory: 1Gi, pods: 1}\n"))
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a *FieldError", err)
	}
	if fe.File != "f.yaml" || fe.Line != 3 || fe.Field != `nodes[0].capacity["cpu"]` {
		t.Errorf("got %+v", fe)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nodes.yaml")
	if err := os.WriteFile(path, []byte("nodes:\n- name: a\n  capacity: {cpu: 1, memory: 1Gi, pods: ten}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `nodes[0].capacity["pods"]`) {
		t.Errorf("Load(bad file) error = %v; want it to name %s and the field", err, path)
	}
	_, err = Load(filepath.Join(dir, "missing.yaml"))
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing file) error = %v", err)
	}
	if err := os.WriteFile(path, DefaultYAML(), 0o644); err != nil {
		t.Fatal(err)
	}
	if ns, err := Load(path); err != nil || len(ns) != 4 {
		t.Errorf("Load(default file) = %d nodes, %v", len(ns), err)
	}
}

func TestTopologyNodes(t *testing.T) {
	ns, err := Topology()
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 32 {
		t.Fatalf("%d nodes, want 2 blocks × 4 racks × 4 nodes = 32", len(ns))
	}
	racks := map[string]int{}
	for _, n := range ns {
		block, rack := n.Labels["cloud.provider.com/topology-block"], n.Labels["cloud.provider.com/topology-rack"]
		if block == "" || !strings.HasPrefix(rack, block+"-") || n.Labels["kubernetes.io/hostname"] != n.Name || n.Labels["node-group"] != "tas" {
			t.Errorf("node %s labels %v: want its block, a rack of that block, its hostname and node-group tas", n.Name, n.Labels)
		}
		if gpu := n.Status.Allocatable["nvidia.com/gpu"]; gpu.Value() != 8 {
			t.Errorf("node %s has %s GPUs, want 8", n.Name, gpu.String())
		}
		racks[rack]++
	}
	if len(racks) != 8 {
		t.Errorf("racks %v, want 8 of 4 nodes", racks)
	}
	for r, n := range racks {
		if n != 4 {
			t.Errorf("rack %s has %d nodes, want 4", r, n)
		}
	}
}
