package events_test

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/events"
)

var (
	exampleRef = events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train.v2", UID: "6f1c7a52-0d1e-4c1b-9a53-1d2f0f3c9b11"}
	otherRef   = events.WorkloadRef{Kind: "jobset", Namespace: "team-b", Name: "sweep-7", UID: "0b3a4c52-5e6f-4a7b-8c9d-0e1f2a3b4c5d"}
	tolSeconds = int64(30)
)

// examples holds one fully populated value of every registered type, keyed
// by CloudEvents type; the schema test requires an entry for each.
var examples = map[string]events.Event{
	events.TypeWorkloadSubmittedV1: events.WorkloadSubmittedV1{
		Workload:      exampleRef,
		LocalQueue:    "team-a-queue",
		Priority:      100,
		PriorityClass: "high",
		CreationTime:  time.Date(2025, 3, 4, 5, 6, 7, 800000000, time.UTC),
		PodSets: []events.PodSetV1{{
			Name:         "main",
			Count:        4,
			MinCount:     2,
			Requests:     map[string]string{"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
			NodeSelector: map[string]string{"cloud.google.com/gke-accelerator": "nvidia-a100"},
			Tolerations: []corev1.Toleration{{
				Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: &tolSeconds,
			}, {
				Key: "spot", Operator: corev1.TolerationOpEqual, Value: "true",
			}},
		}},
	},
	events.TypeWorkloadPendingV1: events.WorkloadPendingV1{Workload: exampleRef, ClusterQueue: "gpu", Reason: "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu"},
	events.TypeWorkloadAdmittedV1: events.WorkloadAdmittedV1{
		Workload:     exampleRef,
		ClusterQueue: "gpu",
		PodSets:      []events.PodSetAssignmentV1{{Name: "main", Count: 4, Flavors: map[string]string{"cpu": "default", "nvidia.com/gpu": "a100.spot"}}},
	},
	events.TypeWorkloadReservedV1: events.WorkloadReservedV1{
		Workload:     exampleRef,
		ClusterQueue: "gpu",
		PodSets:      []events.PodSetAssignmentV1{{Name: "main", Count: 4, Flavors: map[string]string{"nvidia.com/gpu": "a100"}}},
		Admission:    "2025-03-04T05:06:08.123456789Z",
		Checks:       []string{"provisioning"},
	},
	events.TypeCheckUpdatedV1: events.CheckUpdatedV1{
		Workload:   exampleRef,
		Admission:  "2025-03-04T05:06:08.123456789Z",
		Check:      "provisioning",
		Controller: "sluice.dev/provisioning-request",
		State:      events.CheckReady,
		Message:    "capacity provisioned",
		PodSetUpdates: []events.PodSetUpdateV1{{
			Name:         "main",
			Labels:       map[string]string{"team": "a"},
			Annotations:  map[string]string{"autoscaling.x-k8s.io/consume-provisioning-request": "train-v2-provisioning-1"},
			NodeSelector: map[string]string{"pool": "a100"},
			Tolerations:  []corev1.Toleration{{Key: "provisioned", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		}},
	},
	events.TypeWorkloadPreemptedV1: events.WorkloadPreemptedV1{Workload: otherRef, ClusterQueue: "gpu", Reason: "InClusterQueue", Preemptor: exampleRef},
	events.TypeWorkloadEvictedV1:   events.WorkloadEvictedV1{Workload: otherRef, ClusterQueue: "gpu", Reason: "Preempted"},
	events.TypeWorkloadMovedV1: events.WorkloadMovedV1{
		Workload: exampleRef, ClusterQueue: "gpu", Reason: "NodeReplaced", Admission: "2026-11-29T10:00:00.5Z",
		Message: "node b1r1n2 of its placement is not Ready; pod set main: 2 pods from b1r1n2 to b1r1n3:2",
		PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 4, Flavors: map[string]string{"nvidia.com/gpu": "tas"},
			TopologyAssignment: &events.TopologyAssignmentV1{Levels: []string{"kubernetes.io/hostname"},
				Domains: []events.TopologyDomainV1{{Values: []string{"b1r1n1"}, Count: 2}, {Values: []string{"b1r1n3"}, Count: 2}}}}},
	},
	events.TypeWorkloadResizedV1: events.WorkloadResizedV1{
		Workload: exampleRef, ClusterQueue: "gpu", Reason: "ScaledUp", Admission: "2026-11-29T10:00:00.5Z",
		PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 6, Flavors: map[string]string{"nvidia.com/gpu": "a100"}}},
	},
	events.TypeWorkloadStartedV1:  events.WorkloadStartedV1{Workload: exampleRef, ClusterQueue: "gpu"},
	events.TypeWorkloadStoppedV1:  events.WorkloadStoppedV1{Workload: otherRef, ClusterQueue: "gpu", Reason: "Evicted"},
	events.TypeWorkloadFinishedV1: events.WorkloadFinishedV1{Workload: exampleRef, ClusterQueue: "gpu", Succeeded: false, Message: "BackoffLimitExceeded"},
	events.TypeWorkloadDeletedV1:  events.WorkloadDeletedV1{Workload: exampleRef},
	events.TypePreemptionRequestedV1: events.PreemptionRequestedV1{
		Preemptor:    exampleRef,
		ClusterQueue: "gpu",
		Victims:      []events.VictimV1{{Workload: otherRef, ClusterQueue: "gpu-shared", Reason: "InCohortReclamation"}},
	},
	events.TypeQuotaReleasedV1: events.QuotaReleasedV1{Workload: otherRef, ClusterQueue: "gpu"},
	events.TypeQuotaUsageV1: events.QuotaUsageV1{
		ClusterQueue: "gpu",
		Usage:        map[string]map[string]string{"a100.spot": {"nvidia.com/gpu": "4", "cpu": "8"}, "default": {"memory": "32Gi"}},
		Pending:      3,
		Admitted:     1,
	},
	events.TypeConfigChangedV1: events.ConfigChangedV1{Kind: "localqueue", Namespace: "team-a", Name: "team-a-queue", Deleted: false, Revision: 42},
}
