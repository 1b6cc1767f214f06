package queueconfig

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// specsIn is a ClaimSpecs of templates and claims by name.
type specsIn map[string]resourcev1.ResourceClaimSpec

var errMissing = errors.New("not found")

func (s specsIn) Template(ns, name string) (*resourcev1.ResourceClaimSpec, error) {
	return s.get("template/" + ns + "/" + name)
}
func (s specsIn) Claim(ns, name string) (*resourcev1.ResourceClaimSpec, error) {
	return s.get("claim/" + ns + "/" + name)
}
func (s specsIn) get(k string) (*resourcev1.ResourceClaimSpec, error) {
	spec, ok := s[k]
	if !ok {
		return nil, fmt.Errorf("%s: %w", k, errMissing)
	}
	return &spec, nil
}

// devices is a claim spec of exact requests, each class × count.
func devices(reqs ...resourcev1.ExactDeviceRequest) resourcev1.ResourceClaimSpec {
	var spec resourcev1.ResourceClaimSpec
	for i := range reqs {
		spec.Devices.Requests = append(spec.Devices.Requests, resourcev1.DeviceRequest{Name: fmt.Sprint("r", i), Exactly: &reqs[i]})
	}
	return spec
}

func byTemplate(name string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: &name}
}

func TestDeviceRequests(t *testing.T) {
	gpus := &Resources{DeviceClassMappings: []DeviceClassMapping{
		{Name: "example.com/gpu", DeviceClassNames: []string{"a100.example.com", "h100.example.com"}},
		{Name: "example.com/nic", DeviceClassNames: []string{"nic.example.com"}},
	}}
	yes := true
	shared := "shared"
	specs := specsIn{
		"template/ns/one-gpu":   devices(resourcev1.ExactDeviceRequest{DeviceClassName: "a100.example.com"}),
		"template/ns/two-kinds": devices(resourcev1.ExactDeviceRequest{DeviceClassName: "h100.example.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2}, resourcev1.ExactDeviceRequest{DeviceClassName: "nic.example.com"}),
		"template/ns/admin":     devices(resourcev1.ExactDeviceRequest{DeviceClassName: "a100.example.com", AdminAccess: &yes}),
		"template/ns/all":       devices(resourcev1.ExactDeviceRequest{DeviceClassName: "a100.example.com", AllocationMode: resourcev1.DeviceAllocationModeAll}),
		"template/ns/unmapped":  devices(resourcev1.ExactDeviceRequest{DeviceClassName: "fpga.example.com"}),
		"template/ns/first":     {Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "any", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "a", DeviceClassName: "a100.example.com"}}}}}},
		"claim/ns/shared":       devices(resourcev1.ExactDeviceRequest{DeviceClassName: "a100.example.com", Count: 3}),
	}
	cases := []struct {
		name    string
		r       *Resources
		claims  []corev1.PodResourceClaim
		want    corev1.ResourceList
		wantErr error
		errText string
	}{
		{name: "no mappings: nothing counted", r: &Resources{}, claims: []corev1.PodResourceClaim{byTemplate("one-gpu")}},
		{name: "one device of a mapped class", r: gpus, claims: []corev1.PodResourceClaim{byTemplate("one-gpu")},
			want: corev1.ResourceList{"example.com/gpu": q("1")}},
		{name: "counts summed per resource over claims and requests", r: gpus, claims: []corev1.PodResourceClaim{byTemplate("one-gpu"), byTemplate("two-kinds")},
			want: corev1.ResourceList{"example.com/gpu": q("3"), "example.com/nic": q("1")}},
		{name: "a ResourceClaim by name counts too", r: gpus, claims: []corev1.PodResourceClaim{{Name: "s", ResourceClaimName: &shared}},
			want: corev1.ResourceList{"example.com/gpu": q("3")}},
		{name: "admin access counts nothing", r: gpus, claims: []corev1.PodResourceClaim{byTemplate("admin")}},
		{name: "allocationMode All cannot be counted", r: gpus, claims: []corev1.PodResourceClaim{byTemplate("all")}, wantErr: ErrUnsupportedDeviceRequest,
			errText: "resourceClaims[0] (all): devices.requests[0] (r0): allocationMode All: device request cannot be counted against quota"},
		{name: "firstAvailable cannot be counted", r: gpus, claims: []corev1.PodResourceClaim{byTemplate("first")}, wantErr: ErrUnsupportedDeviceRequest},
		{name: "an unmapped DeviceClass is named", r: gpus, claims: []corev1.PodResourceClaim{byTemplate("one-gpu"), byTemplate("unmapped")}, wantErr: ErrUnmappedDeviceClass,
			errText: `resourceClaims[1] (unmapped): devices.requests[0] (r0): DeviceClass "fpga.example.com": DeviceClass is not mapped in resources.deviceClassMappings`},
		{name: "a template not there yet is the lookup's error", r: gpus, claims: []corev1.PodResourceClaim{byTemplate("later")}, wantErr: errMissing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.r.DeviceRequests("ns", tc.claims, specs)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if tc.errText != "" && err.Error() != tc.errText {
				t.Errorf("error text\n got %s\nwant %s", err, tc.errText)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeviceClassMappingsValidation(t *testing.T) {
	r := &Resources{DeviceClassMappings: []DeviceClassMapping{
		{Name: "example.com/gpu", DeviceClassNames: []string{"a100.example.com"}},
		{DeviceClassNames: []string{"a100.example.com"}},
		{Name: "example.com/nic"},
	}}
	var got []string
	for _, e := range r.Validate(field.NewPath("resources")) {
		got = append(got, e.Error())
	}
	want := []string{
		"resources.deviceClassMappings[1].name: Required value: the quota resource the devices count as",
		`resources.deviceClassMappings[1].deviceClassNames[0]: Duplicate value: "a100.example.com (also mapped to example.com/gpu)"`,
		"resources.deviceClassMappings[2].deviceClassNames: Required value: at least one DeviceClass",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}
