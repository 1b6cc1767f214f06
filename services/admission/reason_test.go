package admission

import (
	"testing"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/engine"
)

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
			if got := !news(engine.ReasonClass(tc.a), engine.ReasonClass(tc.b)); got != tc.wantSame {
				t.Errorf("news(%q, %q) = %v, want %v", tc.a, tc.b, !got, !tc.wantSame)
			}
		})
	}
}

// TestPreemptionID: a request made again for the same victims' same
// admissions keeps its id (a re-send); one for a later admission of a
// victim, or with another reason, is a new request.
func TestPreemptionID(t *testing.T) {
	req := func(admission, reason string) events.PreemptionRequestedV1 {
		return events.PreemptionRequestedV1{
			Preemptor:    events.WorkloadRef{Kind: "job", Namespace: "team-b", Name: "big", UID: "u-big"},
			ClusterQueue: "cq-b",
			Victims: []events.VictimV1{{
				Workload:     events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "w1", UID: "u-w1"},
				ClusterQueue: "cq-a", Reason: reason, Admission: admission,
			}},
		}
	}
	first := preemptionID(req("2026-11-27T10:00:00Z", "InCohortReclamation"))
	cases := []struct {
		name     string
		req      events.PreemptionRequestedV1
		wantSame bool
	}{
		{"the same request again", req("2026-11-27T10:00:00Z", "InCohortReclamation"), true},
		{"the victim's next admission", req("2026-11-27T10:05:00Z", "InCohortReclamation"), false},
		{"another reason", req("2026-11-27T10:00:00Z", "InClusterQueue"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := preemptionID(tc.req) == first; got != tc.wantSame {
				t.Errorf("same id as the first request: %v, want %v", got, tc.wantSame)
			}
		})
	}
}
