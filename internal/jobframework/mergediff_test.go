package jobframework

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// randomValue is a JSON value of at most depth levels, drawn from a
// small alphabet so that two draws are often equal.
func randomValue(r *rand.Rand, depth int) any {
	switch n := r.IntN(7); {
	case n == 0:
		return nil
	case n == 1:
		return r.IntN(2) == 0
	case n == 2:
		return float64(r.IntN(3))
	case n == 3:
		return fmt.Sprint("s", r.IntN(3))
	case n == 4 && depth > 0:
		out := make([]any, r.IntN(3))
		for i := range out {
			out[i] = randomValue(r, depth-1)
		}
		return out
	case depth > 0:
		return randomObject(r, depth-1)
	default:
		return "leaf"
	}
}

func randomObject(r *rand.Rand, depth int) map[string]any {
	out := map[string]any{}
	for range r.IntN(5) {
		out[fmt.Sprint("k", r.IntN(6))] = randomValue(r, depth)
	}
	return out
}

// mutate returns a copy of o with some keys changed, added or removed.
func mutate(r *rand.Rand, o map[string]any, depth int) map[string]any {
	out := map[string]any{}
	for k, v := range o {
		switch r.IntN(6) {
		case 0: // removed
		case 1:
			out[k] = randomValue(r, depth)
		case 2:
			if m, ok := v.(map[string]any); ok {
				out[k] = mutate(r, m, depth-1)
				continue
			}
			out[k] = v
		default:
			out[k] = v
		}
	}
	if r.IntN(3) == 0 {
		out[fmt.Sprint("k", r.IntN(8))] = randomValue(r, depth)
	}
	return out
}

// TestRawDiffIsTheLibrarysPatch: rawDiff makes the same patch as
// jsonpatch.CreateMergePatch (which MergePatch used before it) for random
// documents and their random changes, both encoded compactly as
// encoding/json does, or both indented alike.
func TestRawDiffIsTheLibrarysPatch(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 58))
	for i := range 3000 {
		a := randomObject(r, 3)
		b := mutate(r, a, 3)
		if i%5 == 0 {
			b = randomObject(r, 3)
		}
		ab, _ := json.Marshal(a)
		bb, _ := json.Marshal(b)
		lib, err := jsonpatch.CreateMergePatch(ab, bb)
		if err != nil {
			t.Fatalf("case %d: library: %v", i, err)
		}
		var want map[string]any
		if err := json.Unmarshal(lib, &want); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			// White space between the tokens, the same in both,
			// changes nothing.
			ab, _ = json.MarshalIndent(a, " ", "\t")
			bb, _ = json.MarshalIndent(b, " ", "\t")
		}
		d, err := rawDiff(ab, bb)
		if err != nil {
			t.Fatalf("case %d: %s → %s: %v", i, ab, bb, err)
		}
		enc, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("case %d: encode the patch: %v", i, err)
		}
		var got map[string]any
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("case %d: %s → %s (-library +rawDiff):\n%s", i, ab, bb, diff)
		}
	}
}

func TestRawMembers(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string
		wantErr   bool
	}{
		{name: "empty", doc: `{}`, want: nil},
		{name: "spaced empty", doc: ` { } `, want: nil},
		{name: "scalars", doc: `{"a":1,"b":-2.5e3,"c":true,"d":null,"e":"x"}`, want: []string{`a=1`, `b=-2.5e3`, `c=true`, `d=null`, `e="x"`}},
		{name: "nested", doc: `{"a":{"b":[1,{"c":"]}"}]},"d":[]}`, want: []string{`a={"b":[1,{"c":"]}"}]}`, `d=[]`}},
		{name: "escaped key and value", doc: `{"a\u0026b":"q\"}","c\\":"\\"}`, want: []string{`a&b="q\"}"`, `c\="\\"`}},
		{name: "spaced", doc: "{ \"a\" : 1 ,\n\"b\":\t[ 1, 2 ] }", want: []string{`a=1`, `b=[ 1, 2 ]`}},
		{name: "an array", doc: `[1]`, wantErr: true},
		{name: "a string", doc: `"x"`, wantErr: true},
		{name: "cut short", doc: `{"a":{"b":1}`, wantErr: true},
		{name: "unterminated string", doc: `{"a":"x}`, wantErr: true},
		{name: "no colon", doc: `{"a" 1}`, wantErr: true},
		{name: "no value", doc: `{"a":}`, wantErr: true},
		{name: "nothing", doc: ``, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms, err := rawMembers([]byte(c.doc))
			if (err != nil) != c.wantErr {
				t.Fatalf("rawMembers(%s) error %v, want error %v", c.doc, err, c.wantErr)
			}
			var got []string
			for _, m := range ms {
				got = append(got, m.key+"="+string(m.value))
			}
			if d := cmp.Diff(c.want, got); d != "" && !c.wantErr {
				t.Errorf("rawMembers(%s) (-want +got):\n%s", c.doc, d)
			}
		})
	}
}

// BenchmarkMergePatch: the patch of a Job's start (suspend false, node
// selector, admission annotation), as the integration makes it for every
// start.
func BenchmarkMergePatch(b *testing.B) {
	before := &batchv1.Job{}
	before.Name, before.Namespace = "train", "team-a"
	before.Labels = map[string]string{"sluice.dev/queue-name": "main"}
	before.Spec.Suspend = ptr(true)
	before.Spec.Parallelism = ptr(int32(4))
	before.Spec.Template.Spec.Containers = []corev1.Container{{Name: "main", Image: "trainer:1",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
	after := before.DeepCopy()
	after.Spec.Suspend = ptr(false)
	after.Annotations = map[string]string{"sluice.dev/admission": `{"clusterQueue":"cq","podSets":[{"name":"main","flavors":{"cpu":"default"},"count":4}]}`}
	after.Spec.Template.Spec.NodeSelector = map[string]string{"instance-type": "a100"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MergePatch(before, after, "uid-1", "42"); err != nil {
			b.Fatal(err)
		}
	}
}
