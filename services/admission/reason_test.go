package admission

import (
	"testing"

	"github.com/sluice-dev/sluice/events"
)

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
