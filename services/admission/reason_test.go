package admission

import "testing"

func TestNews(t *testing.T) {
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
		{"someone getting ahead is no news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"waiting behind job/team-a/w1 in ClusterQueue cq", true},
		{"reaching the head of the queue short of quota is no news",
			"waiting behind job/team-a/w1 in ClusterQueue cq",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1", true},
		{"first in an empty queue after waiting behind is no news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "waiting in ClusterQueue cq", true},
		{"someone getting ahead while preemption frees quota is no news",
			"waiting for 2 preempted workload(s) to release quota", "waiting behind job/team-a/w1 in ClusterQueue cq", true},
		{"reaching the head to wait for preemption is news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "waiting for 1 preempted workload(s) to release quota", false},
		{"more than the queue can ever use is news",
			"waiting behind job/team-a/w1 in ClusterQueue cq",
			"pod set main: insufficient quota for cpu in flavor default: requested 200, more than the ClusterQueue can ever use (64)", false},
		{"a stopped queue is news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "LocalQueue team-a/q is stopped (stopPolicy Hold)", false},
		{"leaving a stopped queue is news",
			"LocalQueue team-a/q is stopped (stopPolicy Hold)", "waiting behind job/team-a/w1 in ClusterQueue cq", false},
		{"the quota it fits in kept for a preemptor after lacking quota is no news",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 1",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota", true},
		{"lacking quota again once the preemptor runs is no news",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota",
			"pod set main: insufficient unused quota for cpu in flavor default: requested 2, available 0", true},
		{"another preemptor keeping the quota is no news",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota",
			"the quota it fits in is kept for job/team-c/huge, which waits for preempted workload(s) to release quota", true},
		{"reaching the head to find the quota kept for a preemptor is no news",
			"waiting behind job/team-a/w1 in ClusterQueue cq",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota", true},
		{"waiting for its own victims after the quota was kept for another is news",
			"the quota it fits in is kept for job/team-b/big, which waits for preempted workload(s) to release quota",
			"waiting for 1 preempted workload(s) to release quota", false},
		{"another queue is news",
			"waiting behind job/team-a/w1 in ClusterQueue cq", "waiting behind job/team-a/w1 in ClusterQueue other", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := !news(reasonClass(tc.a), reasonClass(tc.b)); got != tc.wantSame {
				t.Errorf("news(%q, %q) = %v, want %v", tc.a, tc.b, !got, !tc.wantSame)
			}
		})
	}
}
