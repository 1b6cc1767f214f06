package events_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/schemas"
)

// schemaDir is the repository's schemas/ directory, relative to this package.
const schemaDir = "../schemas"

func loadSchema(t *testing.T, eventType string) map[string]any {
	t.Helper()
	path := filepath.Join(schemaDir, schemas.File(eventType))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("(a) no schema for %s: %v", eventType, err)
	}
	embedded, err := schemas.Read(eventType)
	if err != nil || !bytes.Equal(b, embedded) {
		t.Fatalf("embedded schema of %s differs from %s (err %v)", eventType, path, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc
}

func compileSchema(t *testing.T, eventType string) *jsonschema.Schema {
	t.Helper()
	b, err := schemas.Read(eventType)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	url := events.SchemaURL(eventType)
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		t.Fatalf("compile schema of %s: %v", eventType, err)
	}
	return sch
}

func TestSchemas(t *testing.T) {
	for _, ev := range events.All() {
		typ := ev.Type()
		t.Run(typ, func(t *testing.T) {
			doc := loadSchema(t, typ)
			goType := reflect.TypeOf(ev)

			if got := doc["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %v, want draft 2020-12", got)
			}
			if got := doc["$id"]; got != events.SchemaURL(typ) {
				t.Errorf("$id = %v, want %s", got, events.SchemaURL(typ))
			}
			if got := doc["title"]; got != goType.Name() {
				t.Errorf("title = %v, want the Go type %s", got, goType.Name())
			}
			if !strings.HasSuffix(goType.Name(), "V1") {
				t.Errorf("Go type %s lacks its version suffix", goType.Name())
			}

			// (b) the schema's properties and required lists match the Go
			// struct's JSON fields, recursively.
			checkShape(t, goType.Name(), goType, doc, doc)

			// (c) an example validates against the schema, and passes Validate.
			ex, ok := examples[typ]
			if !ok {
				t.Fatalf("no example for %s in examples_test.go", typ)
			}
			if reflect.TypeOf(ex) != goType {
				t.Fatalf("example of %s is a %T", typ, ex)
			}
			if err := ex.Validate(); err != nil {
				t.Fatalf("example fails Validate: %v", err)
			}
			sch := compileSchema(t, typ)
			data, err := json.Marshal(ex)
			if err != nil {
				t.Fatal(err)
			}
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if err := sch.Validate(inst); err != nil {
				t.Errorf("example %s does not validate: %v", data, err)
			}
			// The schema rejects an empty object (every type has required fields)
			// and so is not vacuous.
			if err := sch.Validate(map[string]any{}); err == nil {
				t.Errorf("schema accepts {}")
			}
		})
	}
}

// TestNoSchemaWithoutType is check (d): every schema file belongs to a
// registered type, and the embedded set equals the directory.
func TestNoSchemaWithoutType(t *testing.T) {
	entries, err := os.ReadDir(schemaDir)
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if e.IsDir() {
			t.Errorf("unexpected directory schemas/%s", e.Name())
			continue
		}
		if !ok {
			if !strings.HasSuffix(e.Name(), ".go") {
				t.Errorf("unexpected file schemas/%s", e.Name())
			}
			continue
		}
		onDisk = append(onDisk, name)
		if !events.Known(name) {
			t.Errorf("schemas/%s has no registered event type", e.Name())
		}
	}
	embedded, err := schemas.Types()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(onDisk)
	if !slices.Equal(onDisk, embedded) {
		t.Errorf("embedded schemas %v, directory has %v", embedded, onDisk)
	}
	if len(onDisk) != len(events.All()) {
		t.Errorf("%d schema files for %d types", len(onDisk), len(events.All()))
	}
}

var timeType = reflect.TypeOf(time.Time{})

// checkShape compares a Go type with the schema node describing it.
func checkShape(t *testing.T, path string, gt reflect.Type, node, root map[string]any) {
	t.Helper()
	node = resolve(t, path, node, root)
	for gt.Kind() == reflect.Pointer {
		gt = gt.Elem()
	}
	want := ""
	switch {
	case gt == timeType:
		want = "string"
		if node["format"] != "date-time" {
			t.Errorf("%s: time field without format date-time", path)
		}
	case gt.Kind() == reflect.Struct:
		want = "object"
	case gt.Kind() == reflect.Map:
		want = "object"
	case gt.Kind() == reflect.Slice:
		want = "array"
	case gt.Kind() == reflect.String:
		want = "string"
	case gt.Kind() == reflect.Bool:
		want = "boolean"
	case gt.Kind() >= reflect.Int && gt.Kind() <= reflect.Uint64:
		want = "integer"
	default:
		t.Errorf("%s: Go kind %s has no schema mapping", path, gt.Kind())
		return
	}
	if got := node["type"]; got != want {
		t.Errorf("%s: schema type %v, Go type %s wants %q", path, got, gt, want)
		return
	}
	switch {
	case gt == timeType:
	case gt.Kind() == reflect.Struct:
		props, _ := node["properties"].(map[string]any)
		fields := jsonFields(gt)
		var required []string
		for name, f := range fields {
			if !f.omitempty {
				required = append(required, name)
			}
			sub, ok := props[name].(map[string]any)
			if !ok {
				t.Errorf("%s: Go field %s has no schema property", path, name)
				continue
			}
			checkShape(t, path+"."+name, f.typ, sub, root)
		}
		for name := range props {
			if _, ok := fields[name]; !ok {
				t.Errorf("%s: schema property %s has no Go field", path, name)
			}
		}
		var got []string
		if req, ok := node["required"].([]any); ok {
			for _, r := range req {
				s, _ := r.(string)
				got = append(got, s)
			}
		}
		sort.Strings(required)
		sort.Strings(got)
		if !slices.Equal(got, required) {
			t.Errorf("%s: schema requires %v, Go fields without omitempty are %v", path, got, required)
		}
	case gt.Kind() == reflect.Map:
		if gt.Key().Kind() != reflect.String {
			t.Errorf("%s: map key %s is not a string", path, gt.Key())
		}
		sub, ok := node["additionalProperties"].(map[string]any)
		if !ok {
			t.Errorf("%s: map without additionalProperties schema", path)
			return
		}
		checkShape(t, path+"{}", gt.Elem(), sub, root)
	case gt.Kind() == reflect.Slice:
		sub, ok := node["items"].(map[string]any)
		if !ok {
			t.Errorf("%s: array without items schema", path)
			return
		}
		checkShape(t, path+"[]", gt.Elem(), sub, root)
	}
}

// resolve follows a local "#/$defs/X" reference.
func resolve(t *testing.T, path string, node, root map[string]any) map[string]any {
	t.Helper()
	ref, ok := node["$ref"].(string)
	if !ok {
		return node
	}
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		t.Errorf("%s: $ref %q is not a local $defs reference", path, ref)
		return node
	}
	defs, _ := root["$defs"].(map[string]any)
	def, ok := defs[name].(map[string]any)
	if !ok {
		t.Errorf("%s: $ref %q does not resolve", path, ref)
		return node
	}
	return def
}

type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists the JSON object members encoding/json writes for a
// struct type (exported, not "-", named by their tag).
func jsonFields(gt reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := 0; i < gt.NumField(); i++ {
		f := gt.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{typ: f.Type, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")}
	}
	return out
}
