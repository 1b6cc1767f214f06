package pod

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

const (
	// MainPodSet is the name of the only pod set of a Pod.
	MainPodSet = "main"
	// SchedulingGate holds a queued Pod back until it is admitted.
	SchedulingGate = "sluice.dev/admission"
	// The pod group label and annotations (api/v1beta1).
	GroupNameLabel               = v1beta1.PodGroupNameLabel
	GroupTotalCountAnnotation    = v1beta1.PodGroupTotalCountAnnotation
	GroupServingAnnotation       = v1beta1.PodGroupServingAnnotation
	GroupFastAdmissionAnnotation = v1beta1.PodGroupFastAdmissionAnnotation
)

// Kind is the Pod's kind.
var Kind = jobframework.Kind{Name: "pod", GVK: corev1.SchemeGroupVersion.WithKind("Pod"), Resource: "pods",
	Title: "Pod (a plain Pod, owned by no other integrated kind)", SuspendGate: SchedulingGate}

// ownedKinds are the API groups and kinds whose Pods belong to another
// integration: the group of the owner's apiVersion and its kind.
var ownedKinds = map[string][]string{
	"batch":                    {"Job"},
	"jobset.x-k8s.io":          {"JobSet"},
	"ray.io":                   {"RayCluster", "RayJob"},
	"kubeflow.org":             {"MPIJob", "PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob"},
	"leaderworkerset.x-k8s.io": {"LeaderWorkerSet"},
	"workload.codeflare.dev":   {"AppWrapper"},
}

// Adapter is the plain Pod adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[corev1.Pod](obj, "v1 Pod")
	if err != nil {
		return nil, err
	}
	return &Pod{o}, nil
}

// NewInformer implements jobframework.InformerSource.
func (Adapter) NewInformer(kube kubernetes.Interface, resync time.Duration, labelSelector string) cache.SharedIndexInformer {
	return informers.NewSharedInformerFactoryWithOptions(kube, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelSelector })).Core().V1().Pods().Informer()
}

// Get implements jobframework.InformerSource.
func (Adapter) Get(ctx context.Context, kube kubernetes.Interface, namespace, name string) (runtime.Object, error) {
	return kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// TrimForCache implements jobframework.CacheTrimmer: the pod spec's unread
// parts and the containers' statuses (a pod's phase and conditions are
// what its workload reads).
func (Adapter) TrimForCache(obj runtime.Object) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	jobframework.TrimPodSpec(&p.Spec)
	p.Status.ContainerStatuses = nil
	p.Status.InitContainerStatuses = nil
	p.Status.EphemeralContainerStatuses = nil
}

var _ jobframework.Grouper = Adapter{}

// GroupLabel implements jobframework.Grouper.
func (Adapter) GroupLabel() string { return GroupNameLabel }

// GroupOf implements jobframework.Grouper: the group label, and the total
// count annotation every member of a group must carry.
func (Adapter) GroupOf(m metav1.Object) (string, int32, error) {
	name := m.GetLabels()[GroupNameLabel]
	if name == "" {
		return "", 0, nil
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return name, 0, fmt.Errorf("label %s: %q names the group's workload and must be a lower-case DNS name: %s: %w",
			GroupNameLabel, name, strings.Join(errs, "; "), jobframework.ErrInvalidJob)
	}
	raw, ok := m.GetAnnotations()[GroupTotalCountAnnotation]
	if !ok {
		return name, 0, fmt.Errorf("annotation %s: missing on a member of pod group %q: %w", GroupTotalCountAnnotation, name, jobframework.ErrInvalidJob)
	}
	n, err := strconv.ParseInt(raw, 10, 32)
	if err != nil || n < 1 {
		return name, 0, fmt.Errorf("annotation %s: %q is not a positive whole number: %w", GroupTotalCountAnnotation, raw, jobframework.ErrInvalidJob)
	}
	return name, int32(n), nil
}

// GroupModeOf implements jobframework.Grouper: the serving and fast
// admission annotations.
func (Adapter) GroupModeOf(m metav1.Object) jobframework.GroupMode {
	a := m.GetAnnotations()
	return jobframework.GroupMode{Serving: a[GroupServingAnnotation] == "true", FastAdmission: a[GroupFastAdmissionAnnotation] == "true"}
}

// Pod is a plain Pod under the framework.
type Pod struct{ *corev1.Pod }

// Object implements jobframework.Job.
func (p *Pod) Object() runtime.Object { return p.Pod }

// Meta implements jobframework.Job.
func (p *Pod) Meta() metav1.Object { return p.Pod }

// IsSuspended implements jobframework.Job: the Pod carries Sluice's gate.
func (p *Pod) IsSuspended() bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == SchedulingGate })
}

// SetSuspended implements jobframework.Job: adds or removes the gate. The
// API server accepts the addition only on create (the webhook).
func (p *Pod) SetSuspended(s bool) {
	gates := slices.DeleteFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == SchedulingGate })
	if s {
		gates = append(gates, corev1.PodSchedulingGate{Name: SchedulingGate})
	}
	if len(gates) == 0 {
		gates = nil
	}
	p.Spec.SchedulingGates = gates
}

// PodSets implements jobframework.Job: one pod set of one pod.
func (p *Pod) PodSets() ([]jobframework.PodSet, error) {
	return []jobframework.PodSet{{Name: MainPodSet, Count: 1, Spec: &p.Spec, Meta: &p.ObjectMeta}}, nil
}

// Finished implements jobframework.Job: phase Succeeded or Failed.
func (p *Pod) Finished() (finished, succeeded bool, message string) {
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return true, true, text(p.Status, "pod succeeded")
	case corev1.PodFailed:
		return true, false, text(p.Status, "pod failed")
	}
	return false, false, ""
}

// PodsReady implements jobframework.PodsReadier: the pod's Ready condition
// (or, a pod that ended, having run).
func (p *Pod) PodsReady() bool {
	if p.Status.Phase == corev1.PodSucceeded {
		return true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func text(s corev1.PodStatus, fallback string) string {
	switch {
	case s.Message != "":
		return s.Message
	case s.Reason != "":
		return s.Reason
	default:
		return fallback
	}
}

// StopsByDeletion implements jobframework.Deleter: a Pod that is no longer
// gated cannot be held back again.
func (p *Pod) StopsByDeletion() bool { return !p.IsSuspended() }

// Ignored implements jobframework.Ignorer: Pods of another integrated kind
// are that kind's.
func (p *Pod) Ignored() bool {
	for _, ref := range p.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			continue
		}
		if slices.Contains(ownedKinds[gv.Group], ref.Kind) {
			return true
		}
	}
	return false
}

// The labels a LeaderWorkerSet's webhook and controller give its Pods.
const (
	lwsSetLabel         = "leaderworkerset.sigs.k8s.io/name"
	lwsGroupIndexLabel  = "leaderworkerset.sigs.k8s.io/group-index"
	lwsWorkerIndexLabel = "leaderworkerset.sigs.k8s.io/worker-index"
	// LeaderWorkerSetGroupPrefix starts the name of a LeaderWorkerSet
	// group's pod group.
	LeaderWorkerSetGroupPrefix = "leaderworkerset-"
)

var _ jobframework.Labeller = (*Pod)(nil)

// CreateLabels implements jobframework.Labeller: a Pod of a queued
// LeaderWorkerSet (PodGroupLeaderWorkerSetAnnotation) belongs to the pod
// group of its leader-worker group. The index is the group-index label:
// the LeaderWorkerSet's controller writes it into its workers' template,
// and its webhook gives it to a leader from the leader's ordinal, which is
// read here too in case Sluice's webhook is called first.
func (p *Pod) CreateLabels() (map[string]string, error) {
	if p.Annotations[v1beta1.PodGroupLeaderWorkerSetAnnotation] != "true" || p.Labels[GroupNameLabel] != "" {
		return nil, nil
	}
	set := p.Labels[lwsSetLabel]
	if set == "" {
		return nil, fmt.Errorf("metadata.labels[%s]: missing on a Pod marked %s: the LeaderWorkerSet controller names its Pods' set",
			lwsSetLabel, v1beta1.PodGroupLeaderWorkerSetAnnotation)
	}
	index := p.Labels[lwsGroupIndexLabel]
	if index == "" && p.Labels[lwsWorkerIndexLabel] == "0" {
		index = ordinal(p.Name)
	}
	if _, err := strconv.ParseUint(index, 10, 32); err != nil {
		return nil, fmt.Errorf("metadata.labels[%s]: %q is not a group index: a LeaderWorkerSet's Pods carry their group's", lwsGroupIndexLabel, index)
	}
	return map[string]string{GroupNameLabel: LeaderWorkerSetGroupName(set, index)}, nil
}

// LeaderWorkerSetGroupName is the pod group of group index of the
// LeaderWorkerSet set: within a label value's 63 characters, with a hash
// of the whole name in place of what does not fit.
func LeaderWorkerSetGroupName(set, index string) string {
	return jobframework.GroupLabelValue(LeaderWorkerSetGroupPrefix+set, set, "-"+index)
}

// LeaderWorkerSetOf is the LeaderWorkerSet (namespace/name) whose group
// the Pod m is a member of, "" for a Pod of none.
func LeaderWorkerSetOf(m metav1.Object) string {
	if m.GetAnnotations()[v1beta1.PodGroupLeaderWorkerSetAnnotation] != "true" || m.GetLabels()[lwsSetLabel] == "" {
		return ""
	}
	return m.GetNamespace() + "/" + m.GetLabels()[lwsSetLabel]
}

// ordinal is what follows a StatefulSet Pod's name's last "-" when it is a
// number, "" otherwise.
func ordinal(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return ""
	}
	if _, err := strconv.ParseUint(name[i+1:], 10, 32); err != nil {
		return ""
	}
	return name[i+1:]
}
