// Package nodes reads the file that describes the fake (kwok) nodes of a
// devcluster and turns it into Node objects.
//
// The format is deliberately small:
//
//	nodes:
//	- name: a100-ondemand-0          # one node ...
//	  labels: {instance-type: a100}
//	  capacity: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
//	- namePrefix: cpu                # ... or count identical nodes cpu-0, cpu-1, ...
//	  count: 10
//	  capacity: {cpu: "16", memory: 64Gi, pods: "110"}
//	  allocatable: {cpu: "15", memory: 60Gi, pods: "110"}   # optional, defaults to capacity
//	  annotations: {example.com/note: "x"}                   # optional
//	  taints: [{key: example.com/dedicated, value: x, effect: NoSchedule}]
//
// Every error names the file, the line and the field it is about.
package nodes

import (
	_ "embed"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// KwokAnnotation marks a node as fake; kwok manages exactly the nodes
	// that carry it with the value KwokAnnotationValue.
	KwokAnnotation = "kwok.x-k8s.io/node"
	// KwokAnnotationValue is the value of KwokAnnotation on devcluster nodes.
	KwokAnnotationValue = "fake"
	// MaxNodes bounds how many nodes one file may describe.
	MaxNodes = 5000
)

//go:embed default.yaml
var defaultYAML []byte

//go:embed topology.yaml
var topologyYAML []byte

// Topology returns the nodes of the built-in data center for
// topology-aware scheduling: 2 blocks × 4 racks × 4 nodes of 8
// nvidia.com/gpu, labelled with their block and rack.
func Topology() ([]*corev1.Node, error) { return Parse("built-in topology nodes file", topologyYAML) }

// DefaultYAML returns the text of the built-in nodes file.
func DefaultYAML() []byte { return append([]byte(nil), defaultYAML...) }

// Default returns the built-in nodes: four nodes with 8 nvidia.com/gpu each,
// two of instance-type a100 and two of h100, one of each on spot.
func Default() ([]*corev1.Node, error) { return Parse("built-in nodes file", defaultYAML) }

// Load reads and parses a nodes file.
func Load(path string) ([]*corev1.Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read nodes file: %w", err)
	}
	return Parse(path, data)
}

// FieldError is an error about one field of a nodes file.
type FieldError struct {
	File  string // name of the file, as given to Parse
	Line  int    // 1-based line of the offending value, 0 if unknown
	Field string // path of the field, e.g. nodes[2].capacity["nvidia.com/gpu"]
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.File, e.Field, e.Msg)
}

var (
	topFields   = []string{"nodes"}
	groupFields = []string{"name", "namePrefix", "count", "labels", "annotations", "capacity", "allocatable", "taints"}
	taintFields = []string{"key", "value", "effect"}
	required    = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods}
)

type parser struct{ file string }

func (p *parser) errf(n *yaml.Node, field, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &FieldError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Parse parses the text of a nodes file; file names it in errors.
func Parse(file string, data []byte) ([]*corev1.Node, error) {
	p := &parser{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", file, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, p.errf(nil, "nodes", "missing: the file must hold a top-level \"nodes\" list")
	}
	fields, err := p.mapping(doc.Content[0], "(top level)", topFields)
	if err != nil {
		return nil, err
	}
	list, ok := fields["nodes"]
	if !ok {
		return nil, p.errf(doc.Content[0], "nodes", "missing: the file must hold a top-level \"nodes\" list")
	}
	if list.Kind != yaml.SequenceNode {
		return nil, p.errf(list, "nodes", "must be a list of node entries")
	}
	if len(list.Content) == 0 {
		return nil, p.errf(list, "nodes", "is empty: describe at least one node")
	}

	var out []*corev1.Node
	seen := map[string]string{}
	for i, item := range list.Content {
		path := fmt.Sprintf("nodes[%d]", i)
		group, err := p.group(item, path)
		if err != nil {
			return nil, err
		}
		if len(out)+len(group) > MaxNodes {
			return nil, p.errf(item, path, "too many nodes: at most %d in one file", MaxNodes)
		}
		for _, n := range group {
			if first, dup := seen[n.Name]; dup {
				return nil, p.errf(item, path, "node name %q is already used by %s", n.Name, first)
			}
			seen[n.Name] = path
		}
		out = append(out, group...)
	}
	return out, nil
}

// mapping checks that n is a mapping with only the allowed keys and returns
// its values by key.
func (p *parser) mapping(n *yaml.Node, path string, allowed []string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, path, "must be a mapping with the fields %s", strings.Join(allowed, ", "))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		field := joinPath(path, key)
		if !slices.Contains(allowed, key) {
			return nil, p.errf(k, field, "unknown field (allowed: %s)", strings.Join(allowed, ", "))
		}
		if _, dup := out[key]; dup {
			return nil, p.errf(k, field, "given twice")
		}
		out[key] = v
	}
	return out, nil
}

func (p *parser) scalar(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", p.errf(n, path, "must be a single value, not a list or mapping")
	}
	return n.Value, nil
}

// stringMap reads a mapping of scalars; check validates each key and value.
func (p *parser) stringMap(n *yaml.Node, path string, check func(k, v string) []string) (map[string]string, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, path, "must be a mapping of names to values")
	}
	out := make(map[string]string, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := fmt.Sprintf("%s[%q]", path, k.Value)
		if _, dup := out[k.Value]; dup {
			return nil, p.errf(k, field, "given twice")
		}
		val, err := p.scalar(v, field)
		if err != nil {
			return nil, err
		}
		if problems := check(k.Value, val); len(problems) > 0 {
			return nil, p.errf(v, field, "%s", strings.Join(problems, "; "))
		}
		out[k.Value] = val
	}
	return out, nil
}

func (p *parser) resources(n *yaml.Node, path string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	_, err := p.stringMap(n, path, func(k, v string) []string {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return append([]string{"invalid resource name"}, errs...)
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return []string{fmt.Sprintf("invalid quantity %q: %v", v, err)}
		}
		if q.Sign() < 0 {
			return []string{fmt.Sprintf("quantity %q is negative", v)}
		}
		out[corev1.ResourceName(k)] = q
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (p *parser) group(item *yaml.Node, path string) ([]*corev1.Node, error) {
	f, err := p.mapping(item, path, groupFields)
	if err != nil {
		return nil, err
	}

	var name, prefix string
	count := 1
	if v, ok := f["name"]; ok {
		if name, err = p.scalar(v, path+".name"); err != nil {
			return nil, err
		}
	}
	if v, ok := f["namePrefix"]; ok {
		if prefix, err = p.scalar(v, path+".namePrefix"); err != nil {
			return nil, err
		}
	}
	switch {
	case name == "" && prefix == "":
		return nil, p.errf(item, path+".name", "missing: give either name (one node) or namePrefix and count")
	case name != "" && prefix != "":
		return nil, p.errf(f["namePrefix"], path+".namePrefix", "give either name or namePrefix, not both")
	}
	if v, ok := f["count"]; ok {
		if prefix == "" {
			return nil, p.errf(v, path+".count", "only allowed together with namePrefix")
		}
		s, err := p.scalar(v, path+".count")
		if err != nil {
			return nil, err
		}
		count, err = strconv.Atoi(s)
		if err != nil || count < 1 || count > MaxNodes {
			return nil, p.errf(v, path+".count", "must be a whole number from 1 to %d, got %q", MaxNodes, s)
		}
	} else if prefix != "" {
		return nil, p.errf(item, path+".count", "missing: namePrefix needs a count")
	}

	labels := map[string]string{}
	if v, ok := f["labels"]; ok {
		if labels, err = p.stringMap(v, path+".labels", func(k, val string) []string {
			errs := validation.IsQualifiedName(k)
			for _, e := range validation.IsValidLabelValue(val) {
				errs = append(errs, fmt.Sprintf("value %q: %s", val, e))
			}
			return errs
		}); err != nil {
			return nil, err
		}
	}
	annotations := map[string]string{}
	if v, ok := f["annotations"]; ok {
		if annotations, err = p.stringMap(v, path+".annotations", func(k, _ string) []string {
			return validation.IsQualifiedName(k)
		}); err != nil {
			return nil, err
		}
	}

	capNode, ok := f["capacity"]
	if !ok {
		return nil, p.errf(item, path+".capacity", "missing: give at least cpu, memory and pods")
	}
	capacity, err := p.resources(capNode, path+".capacity")
	if err != nil {
		return nil, err
	}
	for _, r := range required {
		if _, ok := capacity[r]; !ok {
			return nil, p.errf(capNode, fmt.Sprintf("%s.capacity[%q]", path, r), "missing: cpu, memory and pods are required")
		}
	}
	allocatable := capacity.DeepCopy()
	if v, ok := f["allocatable"]; ok {
		if allocatable, err = p.resources(v, path+".allocatable"); err != nil {
			return nil, err
		}
		for r, q := range allocatable {
			c, ok := capacity[r]
			if !ok {
				return nil, p.errf(v, fmt.Sprintf("%s.allocatable[%q]", path, r), "not in capacity")
			}
			if q.Cmp(c) > 0 {
				return nil, p.errf(v, fmt.Sprintf("%s.allocatable[%q]", path, r), "%s exceeds capacity %s", q.String(), c.String())
			}
		}
	}

	var taints []corev1.Taint
	if v, ok := f["taints"]; ok {
		if taints, err = p.taints(v, path+".taints"); err != nil {
			return nil, err
		}
	}

	names := []string{name}
	if prefix != "" {
		names = make([]string, count)
		for i := range names {
			names[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
	}
	out := make([]*corev1.Node, 0, len(names))
	for _, n := range names {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			field, at := path+".name", f["name"]
			if prefix != "" {
				field, at = path+".namePrefix", f["namePrefix"]
			}
			return nil, p.errf(at, field, "node name %q is not valid: %s", n, strings.Join(errs, "; "))
		}
		out = append(out, build(n, labels, annotations, capacity, allocatable, taints))
	}
	return out, nil
}

func (p *parser) taints(n *yaml.Node, path string) ([]corev1.Taint, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, path, "must be a list of {key, value, effect}")
	}
	out := make([]corev1.Taint, 0, len(n.Content))
	for i, item := range n.Content {
		tpath := fmt.Sprintf("%s[%d]", path, i)
		f, err := p.mapping(item, tpath, taintFields)
		if err != nil {
			return nil, err
		}
		var t corev1.Taint
		for _, field := range taintFields {
			v, ok := f[field]
			if !ok {
				continue
			}
			s, err := p.scalar(v, tpath+"."+field)
			if err != nil {
				return nil, err
			}
			switch field {
			case "key":
				t.Key = s
				if errs := validation.IsQualifiedName(s); len(errs) > 0 {
					return nil, p.errf(v, tpath+".key", "%s", strings.Join(errs, "; "))
				}
			case "value":
				t.Value = s
				if errs := validation.IsValidLabelValue(s); len(errs) > 0 {
					return nil, p.errf(v, tpath+".value", "%s", strings.Join(errs, "; "))
				}
			case "effect":
				t.Effect = corev1.TaintEffect(s)
				switch t.Effect {
				case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
				default:
					return nil, p.errf(v, tpath+".effect", "must be NoSchedule, PreferNoSchedule or NoExecute, got %q", s)
				}
			}
		}
		if t.Key == "" {
			return nil, p.errf(item, tpath+".key", "missing")
		}
		if t.Effect == "" {
			return nil, p.errf(item, tpath+".effect", "missing")
		}
		out = append(out, t)
	}
	return out, nil
}

func build(name string, labels, annotations map[string]string, capacity, allocatable corev1.ResourceList, taints []corev1.Taint) *corev1.Node {
	l := map[string]string{
		"type":                   "kwok",
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	for k, v := range labels {
		l[k] = v
	}
	a := map[string]string{}
	for k, v := range annotations {
		a[k] = v
	}
	a[KwokAnnotation] = KwokAnnotationValue
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: a},
		Spec:       corev1.NodeSpec{Taints: append([]corev1.Taint(nil), taints...)},
		Status: corev1.NodeStatus{
			Capacity:    capacity.DeepCopy(),
			Allocatable: allocatable.DeepCopy(),
		},
	}
}

// Summary describes nodes in one line per distinct label set, for humans.
func Summary(ns []*corev1.Node) []string {
	counts := map[string]int{}
	for _, n := range ns {
		keys := make([]string, 0, len(n.Labels))
		for k := range n.Labels {
			if k == "kubernetes.io/hostname" || k == "kubernetes.io/os" || k == "kubernetes.io/arch" || k == "type" {
				continue
			}
			keys = append(keys, k+"="+n.Labels[k])
		}
		sort.Strings(keys)
		res := make([]string, 0, len(n.Status.Capacity))
		for r, q := range n.Status.Capacity {
			res = append(res, string(r)+"="+q.String())
		}
		sort.Strings(res)
		counts["labels{"+strings.Join(keys, ",")+"} capacity{"+strings.Join(res, ",")+"}"]++
	}
	lines := make([]string, 0, len(counts))
	for k, c := range counts {
		lines = append(lines, fmt.Sprintf("%d × %s", c, k))
	}
	sort.Strings(lines)
	return lines
}

func joinPath(path, key string) string {
	if path == "" || path == "(top level)" {
		return key
	}
	return path + "." + key
}
