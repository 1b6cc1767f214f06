package admission

import "testing"

func TestReasonClass(t *testing.T) {
	cases := []struct {
		name, a, b string
		wantSame   bool
	}{
		{"another place in line is no news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "waiting behind job/team-a/w7 in ClusterQueue cq", true},
		{"another number is no news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0", true},
		{"another resource is news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"pod set main: insufficient unused quota for memory in flavor default: requested 2, available 1", false},
		{"waiting for preemption after quota is news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"waiting for 1 preempted workload(s) to release quota", false},
		{"another queue is news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "waiting behind job/team-a/w1 in ClusterQueue other", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := reasonClass(tc.a) == reasonClass(tc.b); got != tc.wantSame {
				t.Errorf("reasonClass(%q) == reasonClass(%q): %v, want %v", tc.a, tc.b, got, tc.wantSame)
			}
		})
	}
}
