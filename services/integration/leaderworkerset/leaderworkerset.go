// Package leaderworkerset is Sluice's adapter for LeaderWorkerSets
// (leaderworkerset.x-k8s.io/v1), a parent kind: a LeaderWorkerSet labelled
// sluice.dev/queue-name is never queued itself. Each of its groups (a
// leader and size-1 workers) is one serving pod group, queued by the pod
// integration and admitted as a whole: the webhook writes into the leader
// and worker templates the queue and priority labels, the group's size as
// its total count, the serving mode and a mark that tells the pod
// integration to name each Pod's group after the LeaderWorkerSet and the
// group index the LeaderWorkerSet controller gives it
// (leaderworkerset-<name>-<index>). Pods wait, gated, until their group is
// admitted; scaling replicas up queues new groups, scaling down releases
// theirs; a group the controller recreates (a restart, a rolling update)
// is queued again once its old Pods are gone.
//
// A group is queued once all its Pods exist. Under the startup policy
// LeaderReady the controller creates the workers only once the leader
// runs: such a group is queued on its leader (fast admission) for size
// pods shaped as the leader, so the leader must ask for what a worker does
// (no leaderTemplate, or one of the same shape); otherwise it is refused.
// The exclusive topology annotation, under which the workers are pinned to
// the leader's domain once it is scheduled, is refused.
package leaderworkerset

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	lwsv1 "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Kind is the LeaderWorkerSet's kind.
var Kind = jobframework.Kind{Name: "leaderworkerset", GVK: lwsv1.GroupVersion.WithKind("LeaderWorkerSet"), Resource: "leaderworkersets", QueuedBy: "pod",
	Module: "sigs.k8s.io/lws", CRD: "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
	Title: "LeaderWorkerSet (each group one serving pod group, queued by the pod integration)"}

// Adapter is the LeaderWorkerSet adapter.
type Adapter struct{}

var _ jobframework.Parent = Adapter{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter: a parent's objects are not jobs.
func (Adapter) Decode(runtime.Object) (jobframework.Job, error) {
	return nil, jobframework.ErrParentKind
}

// PodTemplates implements jobframework.Parent: the leader's template is
// optional (without it the leader is made from the workers').
func (Adapter) PodTemplates() [][]string {
	return [][]string{{"spec", "leaderWorkerTemplate", "leaderTemplate"}, {"spec", "leaderWorkerTemplate", "workerTemplate"}}
}

// PodMeta implements jobframework.Parent: the group's size as its total
// count, the serving mode and the mark that names each Pod's group by its
// index.
func (Adapter) PodMeta(obj *unstructured.Unstructured) (map[string]string, map[string]string, error) {
	lws, err := decode(obj)
	if err != nil {
		return nil, nil, err
	}
	size := int32(1)
	if s := lws.Spec.LeaderWorkerTemplate.Size; s != nil {
		size = *s
	}
	if size < 1 {
		return nil, nil, fmt.Errorf("spec.leaderWorkerTemplate.size is %d: a group has at least its leader", size)
	}
	annotations := map[string]string{
		v1beta1.PodGroupTotalCountAnnotation:      strconv.Itoa(int(size)),
		v1beta1.PodGroupServingAnnotation:         "true",
		v1beta1.PodGroupLeaderWorkerSetAnnotation: "true",
	}
	if _, ok := lws.Annotations[lwsv1.ExclusiveKeyAnnotationKey]; ok {
		// The controller creates the workers once the leader is
		// scheduled, each pinned to the leader's domain: a group queued on
		// its leader would have members of two shapes.
		return nil, nil, fmt.Errorf("metadata.annotations[%s]: cannot be queued: with exclusive placement the workers are created only after the leader is scheduled, "+
			"pinned to its domain; use Sluice's topology annotations (sluice.dev/podset-required-topology) instead", lwsv1.ExclusiveKeyAnnotationKey)
	}
	if lws.Spec.StartupPolicy == lwsv1.LeaderReadyStartupPolicy {
		// The workers come once the leader runs: the group is queued on
		// its leader, for size pods shaped as it, which holds only when
		// the leader asks for what a worker does.
		lwt := &lws.Spec.LeaderWorkerTemplate
		if lwt.LeaderTemplate != nil && !jobframework.SameShape(&lwt.LeaderTemplate.Spec, &lwt.WorkerTemplate.Spec) {
			return nil, nil, fmt.Errorf("spec.startupPolicy %s: the workers are created only once the leader runs, so the group is admitted on its leader, for %d pods shaped as it; "+
				"spec.leaderWorkerTemplate.leaderTemplate asks for other requests, node selector, tolerations or affinity than workerTemplate: make them the same, or drop leaderTemplate",
				lwsv1.LeaderReadyStartupPolicy, size)
		}
		annotations[v1beta1.PodGroupFastAdmissionAnnotation] = "true"
	}
	return nil, annotations, nil
}

// Running implements jobframework.Parent: any group's Pods hold (or wait
// for) quota.
func (Adapter) Running(obj *unstructured.Unstructured) bool {
	n, _, _ := unstructured.NestedInt64(obj.Object, "status", "replicas")
	return n > 0
}

// CheckUpdate implements jobframework.Parent: each group is its own
// workload, so replicas may change freely, and a new size or shape rolls
// out group by group, each recreated group queued again.
func (Adapter) CheckUpdate(_, _ *unstructured.Unstructured) error { return nil }

func decode(obj *unstructured.Unstructured) (*lwsv1.LeaderWorkerSet, error) {
	lws := &lwsv1.LeaderWorkerSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, lws); err != nil {
		return nil, fmt.Errorf("not a leaderworkerset.x-k8s.io/v1 LeaderWorkerSet: %w", err)
	}
	return lws, nil
}
