package jobframework

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

// Adapter teaches the framework one kind of job. It reads and changes the
// kind's own objects; everything else (the watch, the webhook, the workload
// record, admission, eviction, finish, events, the bus) is the framework's.
type Adapter interface {
	// Kind names the kind: its name in workload keys, subjects, consumer
	// names and the CLI, its GroupVersionKind and its resource.
	Kind() Kind
	// Decode returns the object an informer or the API server handed out
	// (typed, or *unstructured.Unstructured) as a Job of this kind. The Job
	// is a copy: changing it changes nothing else.
	Decode(obj runtime.Object) (Job, error)
}

// Kind names a kind of job.
type Kind struct {
	// Name is short and lower case: "job", "jobset".
	Name string
	GVK  schema.GroupVersionKind
	// Resource is the plural resource name: "jobs", "jobsets".
	Resource string
	// SuspendField is the boolean field that suspends an object of the
	// kind, as a path ("spec", "suspend"); empty when suspension is not
	// one field (a Pod's scheduling gate). With it, the webhook is not
	// called for objects created suspended (see WebhookMatchCondition).
	SuspendField []string

	// What the kind declares about itself, from which the lists elsewhere
	// are generated (`make generate`): the CRDs the devcluster installs
	// (hack/kindcrds), the chart's table of kinds (hack/kindgen), the
	// table in docs/integrations.md, and the API module the adapter alone
	// may import (services/integration/kinds' dependency test).

	// Module is the Go module of the kind's API types and CRD, as go.mod
	// requires it; "" for a kind of Kubernetes itself.
	Module string
	// CRD is the path of the kind's CRD manifest inside Module.
	CRD string
	// Title says what the kind is in the docs' table: "PyTorchJob
	// (training-operator)".
	Title string
	// EnabledByDefault: the chart runs the kind's integration unless its
	// values say otherwise.
	EnabledByDefault bool
	// Elastic: objects of the kind may be elastic (their jobs are
	// Resizable), so the integration lifts the elastic gate of its pods.
	Elastic bool
	// SuspendGate is the scheduling gate that holds an object of the kind
	// back when it has no SuspendField (a Pod): the webhook refuses its
	// removal from a held object as it refuses lifting a suspension.
	SuspendGate string
	// CountField is the path of the field that says how many pods run at
	// once ({"spec", "parallelism"}), when the kind has one a user may
	// change: the webhook refuses a change of it while the object runs,
	// unless the object is elastic. Nil: none.
	CountField []string
	// ManagedBy is the path of the kind's managedBy field ({"spec",
	// "managedBy"}): for an object created in a queue whose ClusterQueue
	// dispatches to worker clusters, the webhook sets it, so that the
	// kind's own controller leaves the manager's object to Sluice (its
	// status mirrors the worker's copy). Nil: the kind has no such field.
	ManagedBy []string
	// ManagedByValue is what the webhook writes there; empty means
	// v1beta1.MultiClusterController. The Kubeflow, MPI and Ray
	// operators accept only their own name and Kueue's reserved
	// MultiKueue value (v1beta1.KueueMultiKueueManagedBy) there.
	ManagedByValue string
	// ManagedByDefault is the value the kind's CRD defaults its managedBy
	// field to (the kind's own controller), which counts as unset: the
	// webhook replaces it too. Empty: no default.
	ManagedByDefault string
	// QueuedBy makes the kind a parent kind: its objects are never queued
	// themselves; the objects they create are, by the integration of the
	// kind named here ("pod" for a Deployment's Pods, "raycluster" for a
	// RayService's clusters), and the adapter is a Parent. Its own
	// integration runs only its webhook.
	QueuedBy string
	// References are the kinds, other than this one, whose objects the
	// adapter reads to know a job's pod sets (a TrainJob's runtimes):
	// the devcluster installs their CRDs (from Module) with the kind's,
	// and the chart lets the kind's integration read them. Such an
	// adapter is a Binder.
	References []Reference
}

// Reference is a kind an adapter reads.
type Reference struct {
	GVR schema.GroupVersionResource
	// CRD is the path of its CRD manifest inside the referring kind's
	// Module.
	CRD string
}

// MultiClusterManagedBy is the value the webhook writes into the kind's
// managedBy field for an object dispatched to worker clusters.
func (k Kind) MultiClusterManagedBy() string {
	if k.ManagedByValue != "" {
		return k.ManagedByValue
	}
	return v1beta1.MultiClusterController
}

// IsParent reports whether the kind is a parent kind (QueuedBy).
func (k Kind) IsParent() bool { return k.QueuedBy != "" }

// GVR is the kind's group, version and resource.
func (k Kind) GVR() schema.GroupVersionResource {
	return k.GVK.GroupVersion().WithResource(k.Resource)
}

// Job is one object of an adapter's kind, decoded into the adapter's own
// types. The framework reads it, changes it in memory and sends the API
// server the difference as a merge patch, so an adapter never builds a
// patch itself.
type Job interface {
	// Object is the typed object: what the framework encodes to compute
	// patches, and what Kubernetes Events are recorded on.
	Object() runtime.Object
	// Meta is the object's metadata, changed in place by the framework
	// (annotations).
	Meta() metav1.Object
	// PodSets returns the pod sets in a fixed order. Each Spec points into
	// the object: the framework writes node selectors and tolerations there.
	// An error names the field that cannot be read.
	PodSets() ([]PodSet, error)
	// IsSuspended reports whether the object's pods are held back.
	IsSuspended() bool
	// SetSuspended suspends (true) or resumes (false) the object.
	SetSuspended(bool)
	// Finished reports whether the object reached its end, as its
	// controller writes it in its status, whether it succeeded, and why.
	Finished() (finished, succeeded bool, message string)
}

// PodSet is one group of identical pods of a Job.
type PodSet struct {
	Name string
	// Count is the number of pods that run at once when fully admitted.
	Count int32
	// MinCount is the least number of pods the Job may run with (partial
	// admission); 0 means Count.
	MinCount int32
	// Spec is the pod template's spec, inside the object.
	Spec *corev1.PodSpec
	// Meta is the pod template's metadata, inside the object, where the
	// framework writes the labels and annotations admission checks add.
	// Nil when the kind has no template for the pod set (the pods get
	// none of them then). A Pod's pod set is the Pod itself: Meta is its
	// own metadata, changed once when it starts and never restored (a Pod
	// stops by deletion).
	Meta *metav1.ObjectMeta
}

// Optional parts of an adapter's Job, found by type assertion.
type (
	// Scaler is a Job that can run a pod set with fewer pods than it
	// asks for (partial admission). The framework records the original
	// count and restores it on eviction.
	Scaler interface {
		// Scale returns the pod set's count field as written (nil: unset).
		Scale(podSet string) *int32
		// SetScale sets it (nil: unset).
		SetScale(podSet string, count *int32)
	}

	// Unlocker is a Job whose pod templates can only be restored after a
	// write to its status (a batch/v1 Job keeps status.startTime, which
	// locks the template, until it is cleared).
	Unlocker interface {
		// UnlockPatch returns the merge patch for the status subresource
		// that unlocks the templates of the suspended object, or nil when
		// they are not locked.
		UnlockPatch() []byte
	}

	// Deleter is a Job that cannot be held back again once admitted (a
	// Pod, whose scheduling gate cannot be added back): the framework
	// stops it by deleting it, and whoever created it creates it again.
	Deleter interface {
		// StopsByDeletion reports whether a stop must delete the object
		// now.
		StopsByDeletion() bool
	}

	// PodsReadier is a Job that knows, from its status, whether all the
	// pods it runs at once are ready (for waitForPodsReady). A Job without
	// it counts as ready once it is started.
	PodsReadier interface {
		PodsReady() bool
	}

	// Ignorer is a Job that may belong to another integration (a Pod of
	// a Job): the framework leaves it alone, webhook included.
	Ignorer interface {
		// Ignored reports whether the object is another integration's.
		Ignored() bool
	}

	// Labeller is a Job that takes, when it is created, labels that only
	// the object itself can say (a LeaderWorkerSet Pod's group, named
	// after the group index the LeaderWorkerSet gives the Pod): the
	// webhook adds them.
	Labeller interface {
		// CreateLabels returns the labels to add, or an error naming the
		// field that is missing or wrong, which refuses the create.
		CreateLabels() (map[string]string, error)
	}

	// Grouper is an adapter whose objects may form a group that is queued
	// as one workload (pod groups): the members share a label naming the
	// group and each says how many members the group has in all. The
	// group is queued once all of them exist and admitted all at once
	// (gang); its workload is named after the group. Each member has one
	// pod set; members whose pod sets ask for the same (requests, node
	// selector, tolerations) share one pod set of the workload.
	Grouper interface {
		// GroupLabel is the label that names a member's group.
		GroupLabel() string
		// GroupOf returns the group obj belongs to ("" for none) and the
		// number of members the group has in all. An error names the
		// field that cannot be read.
		GroupOf(obj metav1.Object) (name string, total int32, err error)
		// GroupModeOf says how the group of member obj is queued and
		// when it ends (its oldest member's mode is the group's).
		GroupModeOf(obj metav1.Object) GroupMode
	}

	// Parent is the adapter of a kind whose objects are not queued
	// themselves but create objects that are (Kind.QueuedBy): a
	// Deployment's or a StatefulSet's Pods, a RayService's RayClusters.
	// The framework's webhook writes into each of the kind's pod
	// templates, on create and on every update, the queue and priority
	// labels of the object and what PodMeta adds, and refuses what
	// CheckUpdate refuses. Its Decode is not called.
	Parent interface {
		// PodTemplates are the field paths of the kind's pod templates:
		// {{"spec", "template"}}. A path the object leaves out (an
		// optional template) is skipped.
		PodTemplates() [][]string
		// PodMeta returns the labels and annotations, beyond the queue
		// and priority labels, that obj's pods need (a pod group's), or an
		// error naming the field that cannot be read.
		PodMeta(obj *unstructured.Unstructured) (labels, annotations map[string]string, err error)
		// Running reports whether obj has pods running under quota: its
		// queue may not change then.
		Running(obj *unstructured.Unstructured) bool
		// CheckUpdate refuses, with an error naming the field, an update
		// of a queued object that would break its pods' accounting.
		CheckUpdate(old, obj *unstructured.Unstructured) error
	}

	// Stager is a Job whose kind refuses a change of its templates in
	// the write that resumes it (a TrainJob's podSpecOverrides): the
	// framework writes the admission's templates while it is still
	// suspended, and resumes it in a second write.
	Stager interface {
		StagesStart() bool
	}

	// Binder is an adapter whose jobs read other objects (its Kind's
	// References): unbound, their pod sets cannot be read. A process
	// that runs the kind binds it to its client first (kinds.Clients).
	Binder interface {
		// Bind returns the adapter reading through dyn.
		Bind(dyn dynamic.Interface) Adapter
	}

	// CacheTrimmer is an adapter that drops, in place, parts of its
	// informer's copy of an object that no decision reads (see
	// TrimPodSpec). Managed fields and kubectl's last-applied manifest
	// are dropped for every kind.
	CacheTrimmer interface {
		TrimForCache(obj runtime.Object)
	}

	// InformerSource is an adapter that watches its kind with a typed
	// informer (smaller in memory than an unstructured one). The
	// framework keeps the informer's objects packed, so its Decode must
	// take them as DecodeAs does.
	InformerSource interface {
		// NewInformer returns an informer over the kind's objects that
		// carry labelSelector.
		NewInformer(kube kubernetes.Interface, resync time.Duration, labelSelector string) cache.SharedIndexInformer
		// Get reads one object from the API server with the typed
		// client, for a look past the informer (a stop acts on what the
		// server holds now). It speaks what the informer does (protobuf
		// for built-in kinds) and decodes straight into the typed
		// object: through the dynamic client, a Job came as JSON, an
		// unstructured map and then a conversion, several times the
		// work on both ends.
		Get(ctx context.Context, kube kubernetes.Interface, namespace, name string) (runtime.Object, error)
	}
)

// GroupMode is how a pod group is queued and ends.
type GroupMode struct {
	// Serving: the group serves until it is deleted or scaled to zero; a
	// member that ends does not end it (its owner replaces the member,
	// which starts under the group's admission).
	Serving bool
	// FastAdmission: the group is queued as soon as its first member
	// exists, with the group's total count of pods of the first member's
	// shape, rather than once all its members exist (a StatefulSet that
	// creates its pods one by one, each once the one before is ready).
	FastAdmission bool
}

// DecodeAs returns obj as a copy of the typed object *T: a *T is deep
// copied, an unstructured object converted, an object packed in a typed
// informer's cache unpacked. what names the kind in errors ("batch/v1
// Job"). It is the usual body of an adapter's Decode, and the body of an
// InformerSource's.
func DecodeAs[T any, PT interface {
	*T
	runtime.Object
}](obj runtime.Object, what string) (PT, error) {
	switch o := obj.(type) {
	case *packed:
		u, err := o.unpack()
		if err != nil {
			return nil, fmt.Errorf("not a %s: %w", what, err)
		}
		if t, ok := u.(PT); ok {
			return t, nil // a fresh copy already
		}
		return nil, fmt.Errorf("not a %s: %T", what, u)
	case PT:
		if cp, ok := o.DeepCopyObject().(PT); ok {
			return cp, nil
		}
		return nil, fmt.Errorf("not a %s: nil", what)
	case *unstructured.Unstructured:
		out := PT(new(T))
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			return nil, fmt.Errorf("not a %s: %w", what, err)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("not a %s: %T", what, obj)
	}
}

// ConditionText is what a condition says, for a finished job's message:
// its message, else its reason, else fallback.
func ConditionText(c *metav1.Condition, fallback string) string {
	switch {
	case c.Message != "":
		return c.Message
	case c.Reason != "":
		return c.Reason
	default:
		return fallback
	}
}
