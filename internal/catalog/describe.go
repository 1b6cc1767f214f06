package catalog

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sluice-dev/sluice/events"
)

// Describe is one line saying what an event tells of its workload, for a
// timeline.
func Describe(ev events.Event) string {
	switch v := ev.(type) {
	case events.WorkloadSubmittedV1:
		pods := int32(0)
		for _, ps := range v.PodSets {
			pods += ps.Count
		}
		return fmt.Sprintf("submitted to LocalQueue %s, priority %d, %d pods", v.LocalQueue, v.Priority, pods)
	case events.WorkloadPendingV1:
		return "waits in ClusterQueue " + v.ClusterQueue + ": " + v.Reason
	case events.WorkloadReservedV1:
		return "quota reserved in ClusterQueue " + v.ClusterQueue + " (" + strings.Join(flavorsOf(v.PodSets), ", ") + "); waiting for admission checks"
	case events.WorkloadAdmittedV1:
		return "admitted by ClusterQueue " + v.ClusterQueue + " (" + strings.Join(flavorsOf(v.PodSets), ", ") + ")"
	case events.WorkloadMovedV1:
		return "moved: " + v.Reason + colon(v.Message)
	case events.WorkloadResizedV1:
		return "resized: " + v.Reason + " (" + counts(v.PodSets) + ")"
	case events.WorkloadStartedV1:
		return "started in ClusterQueue " + v.ClusterQueue
	case events.WorkloadPreemptedV1:
		return "preempted (" + v.Reason + ") by " + v.Preemptor.Namespace + "/" + v.Preemptor.Name
	case events.WorkloadEvictedV1:
		return "evicted: " + v.Reason + colon(v.Message)
	case events.WorkloadStoppedV1:
		return "stopped: " + v.Reason
	case events.WorkloadFinishedV1:
		if v.Succeeded {
			return "finished: succeeded" + colon(v.Message)
		}
		return "finished: failed" + colon(v.Message)
	case events.WorkloadDeletedV1:
		return "deleted" + colon(v.Reason)
	}
	return ev.Type()
}

func counts(podSets []events.PodSetAssignmentV1) string {
	var out []string
	for _, ps := range podSets {
		out = append(out, fmt.Sprintf("%s=%d", ps.Name, ps.Count))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
