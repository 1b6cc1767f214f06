package jobframework

import (
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// DefaultLocalQueue is the name of the LocalQueue an object created
// without a queue label goes to, when its namespace has one (Kueue's
// LocalQueue defaulting).
const DefaultLocalQueue = "default"

// Unqueued is what the webhook does with an object created without a
// queue label in a namespace Sluice manages (the webhook configuration's
// namespace selector decides which: WithUnqueuedEntry).
type Unqueued struct {
	// DefaultQueue reports whether a namespace has a LocalQueue named
	// DefaultLocalQueue; such an object is labelled for it and queued.
	DefaultQueue func(namespace string) bool
	// Hold suspends any other such object, and refuses to let it run
	// until it has a queue (Kueue's manageJobsWithoutQueueName).
	Hold bool
	// Owners are the kinds Sluice queues: an object one of them controls
	// is left alone (its owner is queued, or held, instead).
	Owners []schema.GroupKind
}

// WithUnqueued gives the webhook what to do with objects created without
// a queue label (Unqueued).
func WithUnqueued(u Unqueued) WebhookOption {
	return func(c *webhookConfig) error {
		c.unqueued = &u
		return nil
	}
}

// ownedByQueuedKind reports whether m's controller is of a kind Sluice
// queues.
func (u *Unqueued) ownedByQueuedKind(m metav1.Object) bool {
	owner := metav1.GetControllerOfNoCopy(m)
	if owner == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	if err != nil {
		return false
	}
	return slices.Contains(u.Owners, schema.GroupKind{Group: gv.Group, Kind: owner.Kind})
}

// labelOp adds a label to m, whose labels may be nil (the map is added
// whole then), and to m itself for the checks that follow.
func labelOp(m metav1.Object, key, value string) jsonPatchOp {
	labels := m.GetLabels()
	if labels == nil {
		m.SetLabels(map[string]string{key: value})
		return jsonPatchOp{Op: "add", Path: "/metadata/labels", Value: map[string]string{key: value}}
	}
	labels[key] = value
	m.SetLabels(labels)
	return jsonPatchOp{Op: "add", Path: "/metadata/labels/" + escapeJSONPointer(key), Value: value}
}

// unqueuedCreate decides for a create without a queue label: the queue it
// goes to (DefaultLocalQueue, with the op labelling it), or, when it has
// none, the response (the object as it is, or held).
func (w *Webhook) unqueuedCreate(ad Adapter, u *unstructured.Unstructured, job Job, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) (string, *jsonPatchOp, *admissionv1.AdmissionResponse) {
	q := w.unqueued
	m := job.Meta()
	if q == nil || q.ownedByQueuedKind(m) {
		return "", nil, resp
	}
	if ig, ok := job.(Ignorer); ok && ig.Ignored() {
		return "", nil, resp
	}
	if q.DefaultQueue != nil && q.DefaultQueue(req.Namespace) {
		op := labelOp(m, v1beta1.QueueNameLabel, DefaultLocalQueue)
		return DefaultLocalQueue, &op, nil
	}
	if !q.Hold || job.IsSuspended() {
		return "", nil, resp
	}
	k := ad.Kind()
	suspended, err := ad.Decode(u.DeepCopy())
	if err != nil {
		return "", nil, deny(resp, k, err.Error())
	}
	suspended.SetSuspended(true)
	spec, err := suspendedSpec(req.Object.Raw, job, suspended)
	if err != nil {
		return "", nil, deny(resp, k, err.Error())
	}
	resp.Warnings = append(resp.Warnings, heldMessage(k, req.Namespace))
	w.log.Info().Str("workload", k.Name+"/"+req.Namespace+"/"+objectName(m)).Str("uid", string(req.UID)).
		Msg("create: held, no queue")
	return "", nil, withPatch(resp, k, []jsonPatchOp{{Op: "add", Path: "/spec", Value: spec}})
}

// heldMessage tells the creator of a held object what lets it run.
func heldMessage(k Kind, namespace string) string {
	return fmt.Sprintf("held: a %s without the %s label does not run in namespace %s; give it a LocalQueue with that label",
		k.Name, v1beta1.QueueNameLabel, namespace)
}

// reviewUnqueuedUpdate refuses, when objects without a queue are held,
// to let one run: its suspension may not be lifted while it has no queue.
func (w *Webhook) reviewUnqueuedUpdate(ad Adapter, job, old Job) (string, bool) {
	q := w.unqueued
	if q == nil || !q.Hold || !old.IsSuspended() || job.IsSuspended() || q.ownedByQueuedKind(job.Meta()) {
		return "", true
	}
	if job.Meta().GetLabels()[v1beta1.QueueNameLabel] != "" {
		return "", true
	}
	if ig, ok := job.(Ignorer); ok && ig.Ignored() {
		return "", true
	}
	if done, _, _ := job.Finished(); done {
		return "", true
	}
	k := ad.Kind()
	if k.SuspendGate != "" {
		return fmt.Sprintf("spec.schedulingGates: %s may not be removed while the %s has no %s label: "+
			"in this namespace a pod runs only through a LocalQueue", k.SuspendGate, k.Name, v1beta1.QueueNameLabel), false
	}
	return fmt.Sprintf("%s: may not be lifted while the %s has no %s label: "+
		"in this namespace a job runs only through a LocalQueue", strings.Join(append([]string{"spec"}, k.SuspendField...), "."), k.Name, v1beta1.QueueNameLabel), false
}

// holds: objects of the kind can be held back (suspended, or gated).
func (k Kind) holds() bool { return len(k.SuspendField) > 0 || k.SuspendGate != "" }

// objectName names an object in the log; one created with generateName
// has only its prefix yet.
func objectName(m metav1.Object) string {
	if n := m.GetName(); n != "" {
		return n
	}
	return m.GetGenerateName() + "*"
}

// UnqueuedEntry is the webhook entry for objects without a queue label
// (Unqueued), in the namespaces selector picks. With hold, every create
// there and every update that would lift a suspension is sent; without,
// only creates in namespaces (those with a LocalQueue named
// DefaultLocalQueue; nil: any, for a chart that cannot know them), and
// the API server lets a create through unchanged when the webhook does
// not answer (the object did not ask for a queue).
type UnqueuedEntry struct {
	Hold       bool
	Namespaces []string
	Selector   *metav1.LabelSelector
}

// WithUnqueuedEntry adds the entry for objects without a queue label; with
// no namespaces and no hold there is none.
func WithUnqueuedEntry(e UnqueuedEntry) ConfigurationOption {
	return func(o *configurationOptions) { o.unqueued = &e }
}

// unqueuedWebhookName names the entry: "unqueued.suspend.job.sluice.dev".
func unqueuedWebhookName(k Kind) string { return "unqueued." + WebhookName(k) }

// unqueuedWebhook is the entry for objects without a queue label, made
// from the kind's first entry; nil when it has nothing to do.
func unqueuedWebhook(k Kind, first admissionregistrationv1.MutatingWebhook, kueueLabels bool, e UnqueuedEntry) *admissionregistrationv1.MutatingWebhook {
	if !e.Hold && e.Namespaces != nil && len(e.Namespaces) == 0 {
		return nil
	}
	uw := *first.DeepCopy()
	uw.Name = unqueuedWebhookName(k)
	absent := []metav1.LabelSelectorRequirement{{Key: v1beta1.QueueNameLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}
	if kueueLabels {
		absent = append(absent, metav1.LabelSelectorRequirement{Key: v1beta1.KueueQueueNameLabel, Operator: metav1.LabelSelectorOpDoesNotExist})
	}
	uw.ObjectSelector = &metav1.LabelSelector{MatchExpressions: absent}
	uw.NamespaceSelector = e.Selector.DeepCopy()
	if uw.NamespaceSelector == nil {
		uw.NamespaceSelector = &metav1.LabelSelector{}
	}
	uw.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: MatchConditionName, Expression: UnqueuedMatchCondition(k, e.Hold, e.Namespaces)}}
	uw.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
	if e.Hold {
		if k.holds() {
			uw.Rules[0].Operations = append(uw.Rules[0].Operations, admissionregistrationv1.Update)
		}
	} else {
		ignore := admissionregistrationv1.Ignore
		uw.FailurePolicy = &ignore
	}
	return &uw
}

// UnqueuedMatchCondition is the CEL expression under which the API server
// sends an object without a queue label to the webhook: on create, one
// nobody controls or whose controller is not of a kind Sluice queues
// (checked by the webhook), in one of namespaces unless hold (nil: any);
// on update (hold only), one whose suspension is lifted.
func UnqueuedMatchCondition(k Kind, hold bool, namespaces []string) string {
	create := "true"
	if !hold && namespaces != nil {
		quoted := make([]string, len(namespaces))
		for i, n := range namespaces {
			quoted[i] = fmt.Sprintf("%q", n)
		}
		create = fmt.Sprintf("request.namespace in [%s]", strings.Join(quoted, ", "))
	}
	if !hold || !k.holds() {
		return create
	}
	suspended := func(obj string) string {
		if k.SuspendGate != "" {
			return fmt.Sprintf("(has(%[1]s.spec) && has(%[1]s.spec.schedulingGates) && %[1]s.spec.schedulingGates.exists(g, g.name == %[2]q))", obj, k.SuspendGate)
		}
		var has []string
		path := obj
		for _, f := range k.SuspendField {
			has = append(has, "has("+path+"."+f+")")
			path += "." + f
		}
		return "(" + strings.Join(has, " && ") + " && " + path + " == true)"
	}
	return fmt.Sprintf("request.operation == \"UPDATE\" ? (%s && !%s) : %s", suspended("oldObject"), suspended("object"), create)
}
