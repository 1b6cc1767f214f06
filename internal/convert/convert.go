package convert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// ErrUnsupported marks a Kueue kind or field Sluice does not implement.
var ErrUnsupported = errors.New("not supported by Sluice")

// Options tune a conversion.
type Options struct {
	// DropUnsupported drops what Sluice does not implement, with a warning,
	// instead of failing.
	DropUnsupported bool
	// KueueLabels gives job manifests (documents outside Kueue's API
	// groups) Sluice's names for Kueue's labels and annotations.
	KueueLabels bool
}

// Result is the converted text and the warnings of what was dropped.
type Result struct {
	Output   []byte
	Warnings []string
}

// kinds Sluice has, by Kueue's kind name: an empty object of Sluice's type
// checks that nothing unknown is left after the renames.
var kinds = map[string]func() any{
	"ResourceFlavor":            func() any { return &v1beta1.ResourceFlavor{} },
	"ClusterQueue":              func() any { return &v1beta1.ClusterQueue{} },
	"LocalQueue":                func() any { return &v1beta1.LocalQueue{} },
	"Cohort":                    func() any { return &v1beta1.Cohort{} },
	"WorkloadPriorityClass":     func() any { return &v1beta1.WorkloadPriorityClass{} },
	"AdmissionCheck":            func() any { return &v1beta1.AdmissionCheck{} },
	"ProvisioningRequestConfig": func() any { return &v1beta1.ProvisioningRequestConfig{} },
	// Kueue's MultiKueueConfig lists the worker clusters, as Sluice's
	// MultiClusterConfig does (whose workers join over NATS: Kueue's
	// MultiKueueClusters, holding kubeconfigs, have no counterpart).
	"MultiKueueConfig": func() any { return &v1beta1.MultiClusterConfig{} },
	"Topology":         func() any { return &v1beta1.Topology{} },
}

// renamedKinds are Kueue's kinds that Sluice calls otherwise.
var renamedKinds = map[string]string{"MultiKueueConfig": "MultiClusterConfig"}

// controllers maps Kueue's built-in admission check controllers to
// Sluice's.
var controllers = map[string]string{
	"kueue.x-k8s.io/provisioning-request": "sluice.dev/provisioning-request",
	"kueue.x-k8s.io/multikueue":           "sluice.dev/multicluster",
}

// serverSet is metadata the API server writes: not part of what a user
// applies.
var serverSet = []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"}

// docSeparator is a line holding only "---" (and maybe a comment).
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// Convert converts the documents of one file; name is how errors and
// warnings call it.
func Convert(name string, in []byte, opts Options) (Result, error) {
	var res Result
	var out [][]byte
	docs := docSeparator.Split(string(in), -1)
	n := 0
	for _, doc := range docs {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		n++
		loc := fmt.Sprintf("%s: document %d", name, n)
		converted, warnings, err := convertDoc(loc, []byte(doc), opts)
		if err != nil {
			return Result{}, err
		}
		res.Warnings = append(res.Warnings, warnings...)
		if converted != nil {
			out = append(out, converted)
		}
	}
	for i, d := range out {
		if i > 0 {
			res.Output = append(res.Output, "---\n"...)
		}
		d = bytes.TrimLeft(d, "\n")
		res.Output = append(res.Output, d...)
		if len(d) > 0 && d[len(d)-1] != '\n' {
			res.Output = append(res.Output, '\n')
		}
	}
	return res, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// convertDoc converts one document; nil output drops it.
func convertDoc(loc string, doc []byte, opts Options) ([]byte, []string, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: not valid YAML: %w", loc, err)
	}
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil || obj == nil {
		return nil, nil, fmt.Errorf("%s: a document must be a mapping with apiVersion and kind", loc)
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if apiVersion == "v1" && kind == "List" {
		return convertList(loc, obj, opts)
	}
	group, version, _ := strings.Cut(apiVersion, "/")
	if group == "config.kueue.x-k8s.io" && kind == "Configuration" {
		return convertConfiguration(loc, obj, opts)
	}
	what := kind
	if md, ok := obj["metadata"].(map[string]any); ok {
		if nm, _ := md["name"].(string); nm != "" {
			what = kind + " " + nm
			if ns, _ := md["namespace"].(string); ns != "" {
				what = kind + " " + ns + "/" + nm
			}
		}
	}
	if !strings.HasSuffix(group, "kueue.x-k8s.io") {
		if opts.KueueLabels {
			return carryJobLabels(loc+" ("+what+")", doc, obj, opts)
		}
		return doc, nil, nil // not Kueue's: as written
	}
	loc = loc + " (" + what + ")"
	newType, known := kinds[kind]
	if group != "kueue.x-k8s.io" || !known || (version != "v1beta1" && version != "v1beta2" && version != "v1alpha1") {
		err := fmt.Errorf("%s: %s of %s: %w", loc, kind, apiVersion, ErrUnsupported)
		if opts.DropUnsupported {
			return nil, []string{"dropped " + err.Error()}, nil
		}
		return nil, nil, err
	}

	obj["apiVersion"] = v1beta1.GroupVersion.String()
	if k, ok := renamedKinds[kind]; ok {
		obj["kind"] = k
	}
	delete(obj, "status")
	if md, ok := obj["metadata"].(map[string]any); ok {
		for _, f := range serverSet {
			delete(md, f)
		}
		dropKueueMetadata(md)
	}
	if err := rename(obj, kind); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", loc, err)
	}
	// What Sluice's type lacks is unsupported.
	return finish(loc, obj, newType, opts, nil)
}

// finish refuses or drops what Sluice's type lacks (dropUnknown) and
// writes the converted object.
func finish(loc string, obj map[string]any, newType func() any, opts Options, warnings []string) ([]byte, []string, error) {
	more, err := dropUnknown(loc, obj, newType, opts)
	if err != nil {
		return nil, nil, err
	}
	warnings = append(warnings, more...)
	out, err := yaml.Marshal(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", loc, err)
	}
	return out, warnings, nil
}

// dropUnknown refuses (or, with DropUnsupported, drops with a warning)
// every field of obj that Sluice's type, made by newType, does not have.
func dropUnknown(loc string, obj map[string]any, newType func() any, opts Options) ([]string, error) {
	var warnings []string
	for {
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", loc, err)
		}
		strict, err := sigsjson.UnmarshalStrict(b, newType())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", loc, err)
		}
		paths := unknownFields(strict)
		if len(paths) == 0 {
			return warnings, nil
		}
		err = fmt.Errorf("%s: %s: %w", loc, strings.Join(paths, ", "), ErrUnsupported)
		if !opts.DropUnsupported {
			return nil, err
		}
		removed := 0
		for _, p := range paths {
			if removeField(obj, p) {
				removed++
			}
		}
		if removed == 0 {
			// Nothing matched: another pass would find the same fields.
			return nil, fmt.Errorf("%s: %s: cannot find the field to drop: %w", loc, strings.Join(paths, ", "), ErrUnsupported)
		}
		warnings = append(warnings, "dropped "+err.Error())
	}
}

// convertList converts the items of a List (kubectl get -o yaml of
// several objects) as documents of their own.
func convertList(loc string, obj map[string]any, opts Options) ([]byte, []string, error) {
	items, _ := obj["items"].([]any)
	var out [][]byte
	var warnings []string
	for i, item := range items {
		b, err := yaml.Marshal(item)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: items[%d]: %w", loc, i, err)
		}
		converted, w, err := convertDoc(fmt.Sprintf("%s, items[%d]", loc, i), b, opts)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, w...)
		if converted != nil {
			out = append(out, bytes.TrimRight(converted, "\n"))
		}
	}
	if len(out) == 0 {
		return nil, warnings, nil
	}
	return append(bytes.Join(out, []byte("\n---\n")), '\n'), warnings, nil
}

// dropKueueMetadata removes what Kueue's controllers and kubectl wrote:
// Kueue's finalizers (nothing would ever remove them from a Sluice object)
// and kubectl's record of the last applied Kueue manifest.
func dropKueueMetadata(md map[string]any) {
	if fs, ok := md["finalizers"].([]any); ok {
		var keep []any
		for _, f := range fs {
			if s, _ := f.(string); !strings.HasPrefix(s, "kueue.x-k8s.io/") {
				keep = append(keep, f)
			}
		}
		if len(keep) == 0 {
			delete(md, "finalizers")
		} else {
			md["finalizers"] = keep
		}
	}
	if an, ok := md["annotations"].(map[string]any); ok {
		delete(an, "kubectl.kubernetes.io/last-applied-configuration")
		if len(an) == 0 {
			delete(md, "annotations")
		}
	}
}

// rename applies the field renames of Kueue's versions.
func rename(obj map[string]any, kind string) error {
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil {
		return nil
	}
	move := func(from, to string) error {
		v, ok := spec[from]
		if !ok {
			return nil
		}
		if w, both := spec[to]; both && fmt.Sprint(w) != fmt.Sprint(v) {
			return fmt.Errorf("spec.%s and spec.%s name the same field with different values", from, to)
		}
		delete(spec, from)
		spec[to] = v
		return nil
	}
	switch kind {
	case "ClusterQueue":
		return move("cohortName", "cohort") // v1beta2
	case "Cohort":
		return move("parentName", "parent") // v1beta1, v1beta2
	case "AdmissionCheck":
		if c, ok := controllers[fmt.Sprint(spec["controllerName"])]; ok {
			spec["controllerName"] = c
		}
		if p, ok := spec["parameters"].(map[string]any); ok && p["apiGroup"] == "kueue.x-k8s.io" {
			p["apiGroup"] = v1beta1.GroupVersion.Group
			if k, ok := renamedKinds[fmt.Sprint(p["kind"])]; ok {
				p["kind"] = k
			}
		}
	}
	return nil
}

// unknownField matches a strict decoder's report of a field its type
// lacks; the path is a quoted Go string (a key may hold '"').
var unknownField = regexp.MustCompile(`unknown field ("(?:[^"\\]|\\.)*")`)

func unknownFields(errs []error) []string {
	var out []string
	for _, e := range errs {
		if m := unknownField.FindStringSubmatch(e.Error()); m != nil {
			if p, err := strconv.Unquote(m[1]); err == nil {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// removeField deletes the field a strict decoder's path names, and reports
// whether it found one. The path joins keys with '.', which a key may
// hold too ("example.com/x"): at each level every key that the path
// starts with is tried.
func removeField(cur any, path string) bool {
	switch c := cur.(type) {
	case map[string]any:
		if _, ok := c[path]; ok {
			delete(c, path)
			return true
		}
		for k, v := range c {
			if rest, ok := strings.CutPrefix(path, k); ok && rest != "" {
				if rest[0] == '.' {
					rest = rest[1:]
				} else if rest[0] != '[' {
					continue
				}
				if removeField(v, rest) {
					return true
				}
			}
		}
	case []any:
		if !strings.HasPrefix(path, "[") {
			return false
		}
		j := strings.IndexByte(path, ']')
		if j < 0 {
			return false
		}
		i, err := strconv.Atoi(path[1:j])
		if err != nil || i < 0 || i >= len(c) {
			return false
		}
		rest := path[j+1:]
		rest = strings.TrimPrefix(rest, ".")
		return rest != "" && removeField(c[i], rest)
	}
	return false
}
