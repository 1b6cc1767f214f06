package simulate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// header is what every document must say about itself.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

func (h header) id() string {
	if h.Metadata.Namespace != "" {
		return h.Metadata.Namespace + "/" + h.Metadata.Name
	}
	return h.Metadata.Name
}

// describe renders " (Kind namespace/name)" for error locations.
func (h header) describe() string {
	kind := h.Kind
	if kind == "" {
		kind = "document without kind"
	}
	if h.Metadata.Name == "" {
		return " (" + kind + ")"
	}
	return " (" + kind + " " + h.id() + ")"
}

// readHeader converts a document to JSON and reads its kind and name, so
// that every later error can name the object.
func readHeader(doc []byte) (header, []byte, error) {
	var h header
	js, err := sigsyaml.YAMLToJSON(doc)
	if err != nil {
		return h, nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var top any
	if err := json.Unmarshal(js, &top); err != nil {
		return h, nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if _, ok := top.(map[string]any); !ok {
		return h, nil, errors.New("a document must be a mapping with apiVersion, kind and metadata")
	}
	// Loose decoding: a wrongly typed header field is reported later, with
	// its path, by the strict pass.
	_ = json.Unmarshal(js, &h)
	return h, js, nil
}

// decode fills obj from one document, refusing duplicate keys, values of
// the wrong type, unparsable quantities and durations, and unknown fields,
// each with its field path.
func decode(loc string, doc, js []byte, obj any) error {
	errs := duplicateKeys(doc)
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return docError(loc, err.Error())
	}
	// A status is what a cluster wrote (a manifest exported with kubectl
	// get -o yaml, Kueue's status fields included): accepted and ignored.
	// A Node's is what the simulator reads of it (allocatable).
	_, node := obj.(*corev1.Node)
	if m, ok := generic.(map[string]any); ok && !node {
		if _, has := m["status"]; has {
			delete(m, "status")
			stripped, err := json.Marshal(m)
			if err != nil {
				return docError(loc, err.Error())
			}
			js = stripped
		}
	}
	errs = append(errs, typeCheck(nil, generic, reflect.TypeOf(obj).Elem())...)
	if len(errs) > 0 {
		return fieldErrors(loc, errs)
	}
	strict, err := sigsjson.UnmarshalStrict(js, obj)
	if err != nil {
		return docError(loc, err.Error())
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		sort.Strings(msgs)
		return docError(loc, strings.Join(msgs, "; "))
	}
	return nil
}

// duplicateKeys finds keys set twice in one mapping; YAML-to-JSON
// conversion would otherwise keep the last silently.
func duplicateKeys(doc []byte) field.ErrorList {
	var n yaml.Node
	if err := yaml.Unmarshal(doc, &n); err != nil {
		return nil // syntax errors surface in readHeader
	}
	var errs field.ErrorList
	var walk func(p *field.Path, n *yaml.Node)
	walk = func(p *field.Path, n *yaml.Node) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(p, c)
			}
		case yaml.MappingNode:
			seen := map[string]int{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				cp := child(p, k.Value)
				if line, ok := seen[k.Value]; ok {
					errs = append(errs, field.Invalid(cp, k.Value, fmt.Sprintf("set twice (lines %d and %d)", line, k.Line)))
					continue
				}
				seen[k.Value] = k.Line
				walk(cp, n.Content[i+1])
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(p.Index(i), c)
			}
		}
	}
	walk(nil, &n)
	return errs
}

func child(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

var (
	unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	quantityType    = reflect.TypeOf(resource.Quantity{})
)

// typeCheck walks a decoded document beside the Go type it will fill and
// reports every value of the wrong type with its path; JSON decoding alone
// names only the struct field, without list indexes or map keys.
func typeCheck(p *field.Path, v any, t reflect.Type) field.ErrorList {
	if v == nil {
		return nil
	}
	if t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(unmarshalerType) {
		b, _ := json.Marshal(v)
		if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(b); err != nil {
			msg := err.Error()
			if t == quantityType {
				msg = "must be a quantity such as 4, 500m or 16Gi"
			}
			return field.ErrorList{field.Invalid(p, v, msg)}
		}
		return nil
	}
	wrong := func(want string) field.ErrorList {
		return field.ErrorList{field.Invalid(p, v, "must be "+want)}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeCheck(p, v, t.Elem())
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return wrong("an object")
		}
		fields := jsonFields(t)
		var errs field.ErrorList
		for _, k := range sortedKeys(m) {
			if ft, ok := fields[k]; ok {
				errs = append(errs, typeCheck(child(p, k), m[k], ft)...)
			}
		}
		return errs
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return wrong("an object")
		}
		var errs field.ErrorList
		for _, k := range sortedKeys(m) {
			errs = append(errs, typeCheck(p.Key(k), m[k], t.Elem())...)
		}
		return errs
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			return wrong("a list")
		}
		var errs field.ErrorList
		for i, e := range l {
			errs = append(errs, typeCheck(p.Index(i), e, t.Elem())...)
		}
		return errs
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wrong("a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wrong("true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) {
			return wrong("a whole number")
		}
		if reflect.New(t).Elem().OverflowInt(int64(f)) && t.Kind() <= reflect.Int64 {
			return wrong("a whole number in range")
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(float64); !ok {
			return wrong("a number")
		}
	}
	return nil
}

// jsonFields maps the JSON names of a struct's fields to their types,
// flattening inline embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			for k, v := range jsonFields(ft) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
