package jobframework

import "testing"

func TestWorkloadUID(t *testing.T) {
	cases := []struct {
		name       string
		object     string
		n          int
		wantUID    string
		wantObject string
		wantN      int
	}{
		{name: "the first workload is the object's UID", object: "8f2c-11", n: 0, wantUID: "8f2c-11", wantObject: "8f2c-11"},
		{name: "a later one carries its number", object: "8f2c-11", n: 3, wantUID: "8f2c-11_3", wantObject: "8f2c-11", wantN: 3},
		{name: "a group's UID has no number", object: "group-8f2c", n: 0, wantUID: "group-8f2c", wantObject: "group-8f2c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			uid := WorkloadUID(tc.object, tc.n)
			if uid != tc.wantUID || ObjectUID(uid) != tc.wantObject || IncarnationOf(uid) != tc.wantN {
				t.Errorf("WorkloadUID(%q, %d) = %q (object %q, n %d); want %q (%q, %d)",
					tc.object, tc.n, uid, ObjectUID(uid), IncarnationOf(uid), tc.wantUID, tc.wantObject, tc.wantN)
			}
		})
	}
	if n := IncarnationOf("u_x"); n != 0 {
		t.Errorf("incarnationOf of a malformed suffix = %d, want 0", n)
	}
}
