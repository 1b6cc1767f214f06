package admission

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestShapes: requests that ask for the same thing share one pair of
// maps, whatever map they came in; other requests get their own, and a
// request that is not a quantity is refused by name.
func TestShapes(t *testing.T) {
	var s shapes
	first, err := s.of(map[string]string{"cpu": "1", "memory": "2Gi"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"cpu": 1000, "memory": 2 << 30}, first.canon); diff != "" {
		t.Errorf("canonical requests (-want +got):\n%s", diff)
	}
	same := func(a, b shape) bool {
		return reflect.ValueOf(a.text).Pointer() == reflect.ValueOf(b.text).Pointer() &&
			reflect.ValueOf(a.canon).Pointer() == reflect.ValueOf(b.canon).Pointer()
	}
	cases := []struct {
		name     string
		reqs     map[string]string
		wantSame bool
		wantErr  string
	}{
		{name: "the same requests in another map", reqs: map[string]string{"memory": "2Gi", "cpu": "1"}, wantSame: true},
		{name: "another quantity", reqs: map[string]string{"cpu": "2", "memory": "2Gi"}},
		{name: "one resource more", reqs: map[string]string{"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"}},
		{name: "one resource less", reqs: map[string]string{"cpu": "1"}},
		{name: "not a quantity", reqs: map[string]string{"cpu": "lots"}, wantErr: `request cpu="lots"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.of(tc.reqs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if same(got, first) != tc.wantSame {
				t.Errorf("shares the first requests' maps: %v, want %v", !tc.wantSame, tc.wantSame)
			}
			if diff := cmp.Diff(tc.reqs, got.text); diff != "" {
				t.Errorf("requests as written (-want +got):\n%s", diff)
			}
		})
	}
}
