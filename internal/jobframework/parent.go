package jobframework

import (
	"fmt"
	"maps"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// mutateParent reviews a create or update of a Parent's object (a
// Deployment, a StatefulSet): its pod templates get the object's queue and
// priority labels and what the adapter adds, so that the pod integration
// queues its Pods; an update that would leave running Pods outside the
// quota they run on is refused.
func (w *Webhook) mutateParent(ad Adapter, p Parent, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) *admissionv1.AdmissionResponse {
	k := ad.Kind()
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return resp
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(req.Object.Raw); err != nil {
		return deny(resp, k, "request object is not a "+k.GVK.String()+": "+err.Error())
	}
	var old *unstructured.Unstructured
	if req.Operation == admissionv1.Update {
		old = &unstructured.Unstructured{}
		if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
			return deny(resp, k, "request old object is not a "+k.GVK.String()+": "+err.Error())
		}
	}
	var ops []jsonPatchOp
	labels := obj.GetLabels()
	queue, prio := labels[v1beta1.QueueNameLabel], labels[v1beta1.PriorityClassLabel]
	if queue == "" && old == nil && w.kueueLabels && labels[v1beta1.KueueQueueNameLabel] != "" {
		// Kueue's labels, made Sluice's (the object has labels: Kueue's).
		queue = labels[v1beta1.KueueQueueNameLabel]
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels/" + escapeJSONPointer(v1beta1.QueueNameLabel), Value: queue})
		if pc := labels[v1beta1.KueuePriorityClassLabel]; pc != "" && prio == "" {
			prio = pc
			ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels/" + escapeJSONPointer(v1beta1.PriorityClassLabel), Value: pc})
		}
	}
	if q := w.unqueued; queue == "" && old == nil && q != nil && q.DefaultQueue != nil && !q.ownedByQueuedKind(obj) && q.DefaultQueue(req.Namespace) {
		// Kueue's LocalQueue defaulting: its pods queue in the
		// namespace's LocalQueue default.
		queue = DefaultLocalQueue
		ops = append(ops, labelOp(obj, v1beta1.QueueNameLabel, queue))
	}
	was := ""
	if old != nil {
		was = old.GetLabels()[v1beta1.QueueNameLabel]
	}
	if queue != "" {
		if err := CheckQueueName(queue); err != nil {
			return deny(resp, k, err.Error())
		}
	}
	if old != nil && was != queue && p.Running(old) {
		return deny(resp, k, fmt.Sprintf("metadata.labels[%s]: may not be %s while the %s has pods on quota: "+
			"they run on the quota of the queue they were admitted by; scale it to 0 first", v1beta1.QueueNameLabel, queueChange(was, queue), k.Name))
	}
	if queue == "" && was == "" {
		return resp
	}
	if old != nil && queue != "" && was != "" {
		if err := p.CheckUpdate(old, obj); err != nil {
			return deny(resp, k, err.Error())
		}
	}
	// Also for an object that leaves its queue: what it added goes.
	extraLabels, extraAnnotations, err := p.PodMeta(obj)
	if err != nil && queue != "" {
		return deny(resp, k, err.Error())
	}
	for _, path := range p.PodTemplates() {
		op, err := stampTemplate(obj, path, queue, prio, extraLabels, extraAnnotations)
		if err != nil {
			return deny(resp, k, err.Error())
		}
		if op != nil {
			ops = append(ops, *op)
		}
	}
	w.log.Info().Str("workload", k.Name+"/"+req.Namespace+"/"+obj.GetName()).Str("queue", queue).Str("operation", string(req.Operation)).
		Int("ops", len(ops)).Msg("pod templates labelled for queueing")
	return withPatch(resp, k, ops)
}

// parentPodKeys are the template labels and annotations the webhook of a
// Parent owns: set from the object, removed when the object leaves its
// queue.
var parentPodKeys = []string{v1beta1.QueueNameLabel, v1beta1.PriorityClassLabel}

// stampTemplate returns the operation that gives the pod template at path
// the queue and priority labels and the adapter's labels and annotations,
// or takes them away when queue is empty (the object left its queue); nil
// when there is nothing to change.
func stampTemplate(obj *unstructured.Unstructured, path []string, queue, prio string, labels, annotations map[string]string) (*jsonPatchOp, error) {
	where := strings.Join(path, ".")
	tpl, found, err := unstructured.NestedMap(obj.Object, path...)
	if err != nil {
		return nil, fmt.Errorf("%s: not a pod template: %w", where, err)
	}
	if !found {
		return nil, nil // an optional template the object leaves out
	}
	md, _ := tpl["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	gotLabels, err := stringMap(md["labels"])
	if err != nil {
		return nil, fmt.Errorf("%s.metadata.labels: %w", where, err)
	}
	gotAnnotations, err := stringMap(md["annotations"])
	if err != nil {
		return nil, fmt.Errorf("%s.metadata.annotations: %w", where, err)
	}
	wantLabels, wantAnnotations := maps.Clone(gotLabels), maps.Clone(gotAnnotations)
	for _, key := range parentPodKeys {
		delete(wantLabels, key)
	}
	if queue != "" {
		wantLabels[v1beta1.QueueNameLabel] = queue
		if prio != "" {
			wantLabels[v1beta1.PriorityClassLabel] = prio
		}
		maps.Copy(wantLabels, labels)
		maps.Copy(wantAnnotations, annotations)
	} else {
		for key := range labels {
			delete(wantLabels, key)
		}
		for key := range annotations {
			delete(wantAnnotations, key)
		}
	}
	if maps.Equal(gotLabels, wantLabels) && maps.Equal(gotAnnotations, wantAnnotations) {
		return nil, nil
	}
	md["labels"], md["annotations"] = wantLabels, wantAnnotations
	if len(wantAnnotations) == 0 {
		delete(md, "annotations")
	}
	if len(wantLabels) == 0 {
		delete(md, "labels")
	}
	ptr := ""
	for _, f := range path {
		ptr += "/" + escapeJSONPointer(f)
	}
	return &jsonPatchOp{Op: "add", Path: ptr + "/metadata", Value: md}, nil
}

// stringMap reads a JSON object of strings (nil: empty).
func stringMap(v any) (map[string]string, error) {
	out := map[string]string{}
	if v == nil {
		return out, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("is a %T, not a map of strings", v)
	}
	for key, val := range m {
		s, ok := val.(string)
		if !ok {
			return nil, fmt.Errorf("%s is a %T, not a string", key, val)
		}
		out[key] = s
	}
	return out, nil
}

// SameShape reports whether two pod specs ask for the same quota and
// placement: requests, node selector, tolerations, affinity, priority and
// runtime class, overhead.
func SameShape(a, b *corev1.PodSpec) bool {
	requests := func(cs []corev1.Container) []corev1.ResourceList {
		out := make([]corev1.ResourceList, len(cs))
		for i, c := range cs {
			out[i] = c.Resources.Requests
		}
		return out
	}
	eq := apiequality.Semantic.DeepEqual
	return eq(requests(a.Containers), requests(b.Containers)) && eq(requests(a.InitContainers), requests(b.InitContainers)) &&
		eq(a.NodeSelector, b.NodeSelector) && eq(a.Tolerations, b.Tolerations) && eq(a.Affinity, b.Affinity) &&
		a.PriorityClassName == b.PriorityClassName && eq(a.RuntimeClassName, b.RuntimeClassName) && eq(a.Overhead, b.Overhead) &&
		eq(a.Resources, b.Resources)
}
