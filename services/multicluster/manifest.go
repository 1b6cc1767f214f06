package multicluster

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Labels and annotations on a worker's copy.
const (
	// OriginLabel carries the UID of the manager's workload.
	OriginLabel = "sluice.dev/multicluster-origin"
	// AdmissionAnnotation names the manager's reservation the copy was
	// offered for.
	AdmissionAnnotation = "sluice.dev/multicluster-admission"
	// ManagerAnnotation names the manager's job (namespace/name).
	ManagerAnnotation = "sluice.dev/multicluster-manager-job"
	// RanAnnotation marks a copy the agent saw running once the manager
	// picked its worker: suspended again, it was stopped in the worker.
	RanAnnotation = "sluice.dev/multicluster-ran"
	// LostAfterAnnotation is the manager's workerLostTimeout for the copy
	// (Message.LostAfter): its agent removes it when the manager has been
	// out of reach for nearly that long.
	LostAfterAnnotation = "sluice.dev/multicluster-lost-after"
)

// userAnnotations are Sluice's annotations that a user writes on a job
// (not the manager's bookkeeping): a copy keeps them.
var userAnnotations = map[string]bool{
	v1beta1.MinParallelismAnnotation:          true,
	v1beta1.PodGroupTotalCountAnnotation:      true,
	v1beta1.PodGroupServingAnnotation:         true,
	v1beta1.PodGroupFastAdmissionAnnotation:   true,
	v1beta1.PodGroupLeaderWorkerSetAnnotation: true,
}

// remoteCopy is the object a worker creates for a manager's job: its
// name, namespace, labels, user annotations and spec, suspended (the
// worker's Sluice admits it), without what the manager's API server
// generated for it or what hands it to the multicluster dispatcher.
func remoteCopy(ad jobframework.Adapter, obj *unstructured.Unstructured) (json.RawMessage, error) {
	job, err := ad.Decode(obj)
	if err != nil {
		return nil, err
	}
	job.SetSuspended(true)
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job.Object())
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", obj.GetName(), err)
	}
	in := &unstructured.Unstructured{Object: content}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(obj.GetAPIVersion())
	out.SetKind(obj.GetKind())
	out.SetName(obj.GetName())
	out.SetNamespace(obj.GetNamespace())
	out.SetLabels(in.GetLabels())
	ann := map[string]string{}
	for k, v := range in.GetAnnotations() {
		if strings.HasPrefix(k, "sluice.dev/") && !userAnnotations[k] || k == "kubectl.kubernetes.io/last-applied-configuration" {
			continue // the manager's bookkeeping, not the user's
		}
		ann[k] = v
	}
	if len(ann) > 0 {
		out.SetAnnotations(ann)
	}
	spec, ok := in.Object["spec"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s %s/%s has no spec", ad.Kind().Name, obj.GetNamespace(), obj.GetName())
	}
	for _, path := range [][]string{{"managedBy"}, {"runPolicy", "managedBy"}} {
		v, _, _ := unstructured.NestedString(spec, path...)
		if v == v1beta1.MultiClusterController || v == v1beta1.KueueMultiKueueManagedBy {
			unstructured.RemoveNestedField(spec, path...)
		}
	}
	// The copy is deleted by the manager once its end is reported; a
	// TTL could delete it first (the manager's own object keeps it).
	unstructured.RemoveNestedField(spec, "ttlSecondsAfterFinished")
	if ad.Kind().GVK == corev1.SchemeGroupVersion.WithKind("Pod") {
		// Where the manager's scheduler would have put it, and the
		// priority its admission computed: the worker's own decide.
		unstructured.RemoveNestedField(spec, "nodeName")
		unstructured.RemoveNestedField(spec, "priority")
	}
	if ad.Kind().Name == "job" {
		// The API server generates a Job's selector and the labels that
		// match it from the Job's UID; the worker's generates its own.
		unstructured.RemoveNestedField(spec, "selector")
		for _, l := range []string{"controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name"} {
			unstructured.RemoveNestedField(spec, "template", "metadata", "labels", l)
		}
	}
	out.Object["spec"] = spec
	raw, err := json.Marshal(out.Object)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", obj.GetName(), err)
	}
	return raw, nil
}

// statusOf decodes a reported status ({} when there is none).
func statusOf(raw json.RawMessage) (map[string]any, error) {
	status := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &status); err != nil {
			return nil, fmt.Errorf("%w: status: %v", ErrBadMessage, err)
		}
	}
	return status, nil
}

// groupTotal is the total count a pod group's member declares (0 when it
// declares none that can be read).
func groupTotal(annotations map[string]string) int {
	n, err := strconv.Atoi(annotations[v1beta1.PodGroupTotalCountAnnotation])
	if err != nil {
		return 0
	}
	return n
}
