package queueconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// rl builds a ResourceList from name, quantity pairs.
func rl(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

// asStrings renders a ResourceList for comparison (quantities compare by
// value, not by how they were written).
func asStrings(l corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for n, q := range l {
		out[string(n)] = q.String()
	}
	return out
}

func TestResourcesApply(t *testing.T) {
	mig := &Resources{Transformations: []ResourceTransformation{
		{Input: "nvidia.com/mig-1g.5gb", Strategy: Replace, Outputs: rl("example.com/accelerator-memory", "5Gi", "example.com/credits", "10")},
		{Input: "nvidia.com/mig-2g.10gb", Strategy: Replace, Outputs: rl("example.com/accelerator-memory", "10Gi", "example.com/credits", "15")},
		{Input: "cpu", Outputs: rl("example.com/credits", "1")},
	}}
	cases := []struct {
		name     string
		r        *Resources
		requests corev1.ResourceList
		want     corev1.ResourceList
	}{
		{name: "no block: requests as they are", r: nil, requests: rl("cpu", "1", "memory", "1Gi"), want: rl("cpu", "1", "memory", "1Gi")},
		{name: "excluded prefixes are not counted",
			r:        &Resources{ExcludeResourcePrefixes: []string{"example.com/", "ephemeral-"}},
			requests: rl("cpu", "1", "example.com/nic", "2", "ephemeral-storage", "1Gi"),
			want:     rl("cpu", "1")},
		{name: "Replace counts the outputs per unit of input, summed over inputs; Retain keeps the input",
			r:        mig,
			requests: rl("nvidia.com/mig-1g.5gb", "2", "nvidia.com/mig-2g.10gb", "1", "cpu", "2", "memory", "100M"),
			want:     rl("example.com/accelerator-memory", "20Gi", "example.com/credits", "37", "cpu", "2", "memory", "100M")},
		{name: "a fractional input counts as its value rounded up, as in Kueue",
			r:        mig,
			requests: rl("cpu", "500m"),
			want:     rl("cpu", "500m", "example.com/credits", "1")},
		{name: "exclusion comes before transformation",
			r:        &Resources{ExcludeResourcePrefixes: []string{"nvidia.com/"}, Transformations: mig.Transformations},
			requests: rl("nvidia.com/mig-1g.5gb", "2", "memory", "1Gi"),
			want:     rl("memory", "1Gi")},
		{name: "Replace without outputs drops the input",
			r:        &Resources{Transformations: []ResourceTransformation{{Input: "example.com/license", Strategy: Replace}}},
			requests: rl("example.com/license", "1", "cpu", "1"),
			want:     rl("cpu", "1")},
		{name: "an output that is requested too adds to the request",
			r:        &Resources{Transformations: []ResourceTransformation{{Input: "example.com/big-cpu", Strategy: Replace, Outputs: rl("cpu", "4")}}},
			requests: rl("example.com/big-cpu", "2", "cpu", "1"),
			want:     rl("cpu", "9")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.requests.DeepCopy()
			got := tc.r.Apply(tc.requests)
			if d := cmp.Diff(asStrings(tc.want), asStrings(got)); d != "" {
				t.Errorf("Apply (-want +got):\n%s", d)
			}
			if d := cmp.Diff(asStrings(before), asStrings(tc.requests)); d != "" {
				t.Errorf("Apply changed its input (-before +after):\n%s", d)
			}
		})
	}
}

func TestResourcesValidate(t *testing.T) {
	cases := []struct {
		name string
		r    *Resources
		want []string // substrings, one per error
	}{
		{name: "valid", r: &Resources{ExcludeResourcePrefixes: []string{"x/"}, Transformations: []ResourceTransformation{{Input: "cpu", Strategy: Retain, Outputs: rl("credits", "1")}}}},
		{name: "an empty prefix", r: &Resources{ExcludeResourcePrefixes: []string{""}}, want: []string{"resources.excludeResourcePrefixes[0]"}},
		{name: "no input", r: &Resources{Transformations: []ResourceTransformation{{Outputs: rl("credits", "1")}}}, want: []string{"resources.transformations[0].input"}},
		{name: "one input twice", r: &Resources{Transformations: []ResourceTransformation{{Input: "cpu"}, {Input: "cpu"}}},
			want: []string{`resources.transformations[1].input: Duplicate value: "cpu (also transformations[0])"`}},
		{name: "an unknown strategy", r: &Resources{Transformations: []ResourceTransformation{{Input: "cpu", Strategy: "Keep"}}},
			want: []string{`resources.transformations[0].strategy: Unsupported value: "Keep"`}},
		{name: "a negative output", r: &Resources{Transformations: []ResourceTransformation{{Input: "cpu", Outputs: rl("credits", "-1")}}},
			want: []string{"resources.transformations[0].outputs[credits]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.r.Validate(field.NewPath("resources"))
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate() = %v, want %d errors", errs, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i].Error(), w)
				}
			}
		})
	}
}
