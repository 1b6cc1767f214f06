package engine

import "testing"

func TestFormat(t *testing.T) {
	cases := []struct {
		res  string
		v    int64
		want string
	}{
		{"cpu", 1500, "1500m"},
		{"cpu", 2000, "2"},
		{"memory", 1 << 30, "1Gi"},
		{"memory", 1000, "1k"},
		{"nvidia.com/gpu", 8, "8"},
		{"nvidia.com/gpu", 1024, "1024"},
		{"example.com/accelerator-memory", 10 << 30, "10Gi"},
		{"example.com/accelerator-memory", 0, "0"},
		{"example.com/credits", 37, "37"},
	}
	for _, tc := range cases {
		if got := Format(tc.res, tc.v); got != tc.want {
			t.Errorf("Format(%s, %d) = %q, want %q", tc.res, tc.v, got, tc.want)
		}
	}
}
