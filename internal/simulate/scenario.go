package simulate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/queueconfig"
)

// ErrInvalid marks every error caused by bad scenario input.
var ErrInvalid = errors.New("invalid scenario")

// Duration is a Go duration string ("30s", "-5m") or a number of seconds.
type Duration struct{ time.Duration }

// UnmarshalJSON accepts "1m30s" or 90.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 30s or 5m", s)
		}
		d.Duration = v
		return nil
	}
	var n float64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("%s is not a duration such as 30s or 5m", b)
	}
	d.Duration = time.Duration(n * float64(time.Second))
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// ReadyAfter is a duration, or "Never" for pods that are never all ready.
type ReadyAfter struct {
	Never bool
	After time.Duration
}

// UnmarshalJSON accepts "Never", "1m30s" or 90.
func (r *ReadyAfter) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil && s == "Never" {
		*r = ReadyAfter{Never: true}
		return nil
	}
	var d Duration
	if err := d.UnmarshalJSON(b); err != nil {
		return fmt.Errorf("%s is not Never or a duration such as 30s or 5m", b)
	}
	*r = ReadyAfter{After: d.Duration}
	return nil
}

// MarshalJSON writes "Never" or the duration string.
func (r ReadyAfter) MarshalJSON() ([]byte, error) {
	if r.Never {
		return json.Marshal("Never")
	}
	return json.Marshal(r.After.String())
}

// SimulatedWorkload is a simulator-only stand-in for a job.
type SimulatedWorkload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SimulatedWorkloadSpec `json:"spec"`
	// held: created without a queue where such jobs are held
	// (manageJobsWithoutQueueName), it is never queued.
	held bool
}

// SimulatedWorkloadSpec describes the job and, optionally, its admission at
// the start.
type SimulatedWorkloadSpec struct {
	// QueueName is the LocalQueue in the workload's namespace. Left out,
	// it is the namespace's LocalQueue named "default" if there is one
	// (Kueue's LocalQueue defaulting), or, with the Configuration's
	// manageJobsWithoutQueueName, the workload is held and never queued.
	QueueName         string        `json:"queueName,omitempty"`
	PriorityClassName string        `json:"priorityClassName,omitempty"`
	Priority          *int32        `json:"priority,omitempty"`
	SubmitAt          Duration      `json:"submitAt,omitempty"`
	Runtime           *Duration     `json:"runtime,omitempty"`
	PodSets           []SimPodSet   `json:"podSets"`
	Admitted          *SimAdmission `json:"admitted,omitempty"`
	// PodsReadyAfter is how long after each admission the workload's
	// pods are all ready (default 0s), or "Never"; it matters only with
	// waitForPodsReady.
	PodsReadyAfter *ReadyAfter `json:"podsReadyAfter,omitempty"`
	// PriorityChanges change the workload's priority during the run, as a
	// changed priority class label does on a job.
	PriorityChanges []PriorityChange `json:"priorityChanges,omitempty"`
	// AdmissionChecks say how the admission checks of its ClusterQueue
	// answer for this workload. A check not listed is Ready at once.
	AdmissionChecks []SimCheck `json:"admissionChecks,omitempty"`
	// MaximumExecutionTimeSeconds bounds how long the workload may stay
	// admitted in total (Kueue's max-exec-time-seconds label).
	MaximumExecutionTimeSeconds *int32 `json:"maximumExecutionTimeSeconds,omitempty"`
	// Elastic: its pod counts may change while it runs (an elastic Job);
	// Resizes change them.
	Elastic bool `json:"elastic,omitempty"`
	// Resizes change an elastic workload's pod counts during the run, as
	// a changed parallelism does on an elastic Job.
	Resizes []Resize `json:"resizes,omitempty"`
}

// Resize is new pod counts, by pod set name, from a moment of the run
// on; a pod set not named keeps its count.
type Resize struct {
	At      Duration         `json:"at"`
	PodSets map[string]int32 `json:"podSets"`
}

// SimCheck is how one admission check answers a workload's reservations.
type SimCheck struct {
	// Name of the AdmissionCheck.
	Name string `json:"name"`
	// Answers, one per reservation in turn; the last one repeats.
	Answers []SimCheckAnswer `json:"answers"`
}

// SimCheckAnswer is one answer of a check, given After the reservation.
type SimCheckAnswer struct {
	// State is Ready, Retry or Rejected.
	State string   `json:"state"`
	After Duration `json:"after,omitempty"`
	// RequeueAfter (Retry only) is how long after the eviction the
	// workload may be reserved again.
	RequeueAfter *Duration `json:"requeueAfter,omitempty"`
	Message      string    `json:"message,omitempty"`
}

// PriorityChange is a new priority from a moment of the run on: a
// WorkloadPriorityClass's value, or a number.
type PriorityChange struct {
	At                Duration `json:"at"`
	PriorityClassName string   `json:"priorityClassName,omitempty"`
	Priority          *int32   `json:"priority,omitempty"`
}

// SimPodSet is a group of identical pods.
type SimPodSet struct {
	Name         string              `json:"name"`
	Count        int32               `json:"count"`
	MinCount     *int32              `json:"minCount,omitempty"`
	Requests     corev1.ResourceList `json:"requests"`
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	// Annotations are the pod template's: the topology-aware scheduling
	// annotations, under Sluice's prefix or Kueue's.
	Annotations map[string]string `json:"annotations,omitempty"`
	// topology is the request read from Annotations.
	topology engine.TopologyRequest
	// ResourceClaims are the pod template's Dynamic Resource Allocation
	// claims, by ResourceClaimTemplate (given in the scenario); with the
	// Configuration's resources.deviceClassMappings they count against
	// quota.
	ResourceClaims []corev1.PodResourceClaim `json:"resourceClaims,omitempty"`
	// devices is what the claims count as, per pod.
	devices corev1.ResourceList
}

// SimAdmission is a workload's admission before time 0.
type SimAdmission struct {
	ClusterQueue string               `json:"clusterQueue"`
	At           Duration             `json:"at,omitempty"`
	PodSets      []SimPodSetAdmission `json:"podSets"`
}

// SimPodSetAdmission is the flavor of each resource of one admitted pod set.
type SimPodSetAdmission struct {
	Name    string            `json:"name"`
	Count   int32             `json:"count"`
	Flavors map[string]string `json:"flavors"`
	// TopologyAssignment places the pods of a pod set admitted on a
	// topology-aware flavor.
	TopologyAssignment *engine.TopologyAssignment `json:"topologyAssignment,omitempty"`
}

// Configuration holds the cluster-wide settings of the services.
type Configuration struct {
	metav1.TypeMeta `json:",inline"`
	FairSharing     *struct {
		// Enable is Kueue v1beta1's switch; left out, the block turns fair
		// sharing on (as in Kueue v1beta2, which has no switch).
		Enable *bool `json:"enable,omitempty"`
		// PreemptionStrategies: Kueue's names and the orders Kueue allows.
		PreemptionStrategies []string `json:"preemptionStrategies,omitempty"`
	} `json:"fairSharing,omitempty"`
	WaitForPodsReady *queueconfig.WaitForPodsReady `json:"waitForPodsReady,omitempty"`
	// Resources is Kueue's resources block: excluded resource prefixes
	// and resource transformations.
	Resources *queueconfig.Resources `json:"resources,omitempty"`
	// ManageJobsWithoutQueueName holds jobs created without a queue label
	// in the namespaces ManagedJobsNamespaceSelector picks (default: all
	// but kube-system and Sluice's and Kueue's own) until they get one;
	// the selector also bounds LocalQueue defaulting (Kueue's names).
	ManageJobsWithoutQueueName   bool                  `json:"manageJobsWithoutQueueName,omitempty"`
	ManagedJobsNamespaceSelector *metav1.LabelSelector `json:"managedJobsNamespaceSelector,omitempty"`
	// AdmissionFairSharing orders the workloads of ClusterQueues whose
	// admissionScope asks for it by their LocalQueues' recent usage.
	AdmissionFairSharing *queueconfig.AdmissionFairSharing `json:"admissionFairSharing,omitempty"`
}

// namespace is the part of a v1 Namespace the simulator reads.
type namespace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// Scenario is everything read from the input files.
type Scenario struct {
	Config    queueconfig.Objects
	Workloads []SimulatedWorkload
	// Nodes are the v1 Node documents topology-aware flavors place on.
	Nodes []engine.Node
	// where records each workload's document (by namespace/name) and each
	// flavor's ("ResourceFlavor <name>"), for error messages.
	where map[string]string
	// claimTemplates are the ResourceClaimTemplates' specs, by
	// namespace/name.
	claimTemplates map[string]resourcev1.ResourceClaimSpec
}

// Source is one named input.
type Source struct {
	Name string
	R    io.Reader
}

// docError names the file, document number, kind/name and the problem.
func docError(loc, what string) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, loc, what)
}

func fieldErrors(loc string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return docError(loc, strings.Join(msgs, "; "))
}

// Load parses every document of every source, checking each as the API
// server would and the references between them.
func Load(sources []Source) (*Scenario, error) {
	sc := &Scenario{where: map[string]string{}, claimTemplates: map[string]resourcev1.ResourceClaimSpec{}}
	sc.Config.Namespaces = map[string]map[string]string{}
	seen := map[string]string{}
	sawConfig := ""
	for _, src := range sources {
		r := utilyaml.NewYAMLReader(bufio.NewReader(src.R))
		for n := 1; ; n++ {
			doc, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, docError(fmt.Sprintf("%s: document %d", src.Name, n), err.Error())
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				n--
				continue
			}
			loc := fmt.Sprintf("%s: document %d", src.Name, n)
			if err := sc.add(loc, doc, seen, &sawConfig); err != nil {
				return nil, err
			}
		}
	}
	if err := sc.crossCheck(); err != nil {
		return nil, err
	}
	if err := sc.resolveQueues(); err != nil {
		return nil, err
	}
	if err := sc.countDevices(); err != nil {
		return nil, err
	}
	return sc, nil
}

// countDevices works out what each pod set's device claims count as,
// refusing a claim that cannot be counted (naming the workload's
// document and the pod set).
func (sc *Scenario) countDevices() error {
	for i := range sc.Workloads {
		w := &sc.Workloads[i]
		for j := range w.Spec.PodSets {
			ps := &w.Spec.PodSets[j]
			devs, err := sc.Config.Resources.DeviceRequests(w.Namespace, ps.ResourceClaims, sc)
			if err != nil {
				return docError(sc.where[w.Namespace+"/"+w.Name], fmt.Sprintf("spec.podSets[%d] (%s): %v", j, ps.Name, err))
			}
			ps.devices = devs
		}
	}
	return nil
}

// Template finds a ResourceClaimTemplate of the scenario.
func (sc *Scenario) Template(namespace, name string) (*resourcev1.ResourceClaimSpec, error) {
	spec, ok := sc.claimTemplates[namespace+"/"+name]
	if !ok {
		return nil, fmt.Errorf("ResourceClaimTemplate %s/%s is not in the scenario", namespace, name)
	}
	return &spec, nil
}

// Claim refuses a ResourceClaim by name: the simulator takes templates.
func (sc *Scenario) Claim(namespace, name string) (*resourcev1.ResourceClaimSpec, error) {
	return nil, fmt.Errorf("ResourceClaim %s/%s: the simulator reads claims from ResourceClaimTemplates only (resourceClaimTemplateName)", namespace, name)
}

// resolveQueues gives each workload without a queue name what the
// webhook would: its namespace's LocalQueue named "default", or, where
// jobs without a queue are held, nothing ever (held). In a namespace the
// Configuration's selector leaves out, or without either, such a job runs
// outside Sluice: there is nothing to simulate, and the scenario is
// refused.
func (sc *Scenario) resolveQueues() error {
	lqs := map[string]bool{}
	for _, lq := range sc.Config.LocalQueues {
		lqs[lq.Namespace+"/"+lq.Name] = true
	}
	sel, err := metav1.LabelSelectorAsSelector(queueconfig.ManagedNamespaces(sc.Config.ManagedJobsNamespaceSelector))
	if err != nil {
		return fmt.Errorf("%w: managedJobsNamespaceSelector: %v", ErrInvalid, err)
	}
	for i := range sc.Workloads {
		w := &sc.Workloads[i]
		if w.Spec.QueueName != "" {
			continue
		}
		set := labels.Set{"kubernetes.io/metadata.name": w.Namespace}
		maps.Copy(set, sc.Config.Namespaces[w.Namespace])
		managed := sel.Matches(set)
		switch {
		case managed && lqs[w.Namespace+"/default"]:
			w.Spec.QueueName = "default"
		case managed && sc.Config.ManageJobsWithoutQueueName:
			w.held = true
		default:
			why := fmt.Sprintf("namespace %s has no LocalQueue named default, and jobs without a queue are not held there (manageJobsWithoutQueueName): it would run outside Sluice", w.Namespace)
			if !managed {
				why = fmt.Sprintf("namespace %s is not one managedJobsNamespaceSelector picks: it would run outside Sluice", w.Namespace)
			}
			return fieldErrors(sc.where[w.Namespace+"/"+w.Name], field.ErrorList{field.Required(field.NewPath("spec", "queueName"), why)})
		}
	}
	return nil
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' || bytes.Equal(t, []byte("---")) {
			continue
		}
		out = append(out, line...)
	}
	return out
}

func (sc *Scenario) add(base string, doc []byte, seen map[string]string, sawConfig *string) error {
	h, js, err := readHeader(doc)
	if err != nil {
		return docError(base, err.Error())
	}
	loc := base + h.describe()
	sluice := v1beta1.GroupVersion.String()
	key := func(kind, ns, name string) error {
		k := kind + "/" + ns + "/" + name
		if prev, ok := seen[k]; ok {
			return docError(loc, fmt.Sprintf("metadata.name: Duplicate value: %q: %s %s is already defined in %s", name, kind, h.id(), prev))
		}
		seen[k] = loc
		return nil
	}
	if h.Kind == "" {
		return docError(loc, "kind: Required value")
	}
	switch {
	case h.APIVersion == "v1" && h.Kind == "Namespace":
		var ns namespace
		if err := decode(loc, doc, js, &ns); err != nil {
			return err
		}
		if ns.Name == "" {
			return docError(loc, "metadata.name: Required value")
		}
		if err := key("Namespace", "", ns.Name); err != nil {
			return err
		}
		sc.Config.Namespaces[ns.Name] = ns.Labels
		return nil
	case h.APIVersion == "v1" && h.Kind == "Node":
		var n corev1.Node
		if err := decode(loc, doc, js, &n); err != nil {
			return err
		}
		en, err := simNode(loc, &n)
		if err != nil {
			return err
		}
		if err := key("Node", "", n.Name); err != nil {
			return err
		}
		sc.Nodes = append(sc.Nodes, en)
		return nil
	case h.APIVersion == "resource.k8s.io/v1" && h.Kind == "ResourceClaimTemplate":
		var t resourcev1.ResourceClaimTemplate
		if err := decode(loc, doc, js, &t); err != nil {
			return err
		}
		if t.Name == "" {
			return docError(loc, "metadata.name: Required value")
		}
		if t.Namespace == "" {
			t.Namespace = "default"
		}
		if err := key("ResourceClaimTemplate", t.Namespace, t.Name); err != nil {
			return err
		}
		sc.claimTemplates[t.Namespace+"/"+t.Name] = t.Spec.Spec
		return nil
	case h.APIVersion != sluice:
		return docError(loc, fmt.Sprintf("apiVersion: Unsupported value: %q: supported values: %q (and \"v1\" for Namespace and Node, \"resource.k8s.io/v1\" for ResourceClaimTemplate)", h.APIVersion, sluice))
	}
	switch h.Kind {
	case "ResourceFlavor":
		var o v1beta1.ResourceFlavor
		if err := decode(loc, doc, js, &o); err != nil {
			return err
		}
		if err := fieldErrors(loc, queueconfig.ValidateResourceFlavor(&o)); err != nil {
			return err
		}
		if err := key(h.Kind, "", o.Name); err != nil {
			return err
		}
		// A kind with a space is no namespace: it cannot clash with a
		// workload's namespace/name.
		sc.where["ResourceFlavor "+o.Name] = loc
		sc.Config.Flavors = append(sc.Config.Flavors, o)
	case "Topology":
		var o v1beta1.Topology
		if err := decode(loc, doc, js, &o); err != nil {
			return err
		}
		if err := fieldErrors(loc, queueconfig.ValidateTopology(&o)); err != nil {
			return err
		}
		if err := key(h.Kind, "", o.Name); err != nil {
			return err
		}
		sc.Config.Topologies = append(sc.Config.Topologies, o)
	case "ClusterQueue":
		var o v1beta1.ClusterQueue
		if err := decode(loc, doc, js, &o); err != nil {
			return err
		}
		if err := fieldErrors(loc, queueconfig.ValidateClusterQueue(&o)); err != nil {
			return err
		}
		if err := key(h.Kind, "", o.Name); err != nil {
			return err
		}
		sc.Config.ClusterQueues = append(sc.Config.ClusterQueues, o)
	case "Cohort":
		var o v1beta1.Cohort
		if err := decode(loc, doc, js, &o); err != nil {
			return err
		}
		if err := fieldErrors(loc, queueconfig.ValidateCohort(&o)); err != nil {
			return err
		}
		if err := key(h.Kind, "", o.Name); err != nil {
			return err
		}
		sc.Config.Cohorts = append(sc.Config.Cohorts, o)
	case "LocalQueue":
		var o v1beta1.LocalQueue
		if err := decode(loc, doc, js, &o); err != nil {
			return err
		}
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		if err := fieldErrors(loc, queueconfig.ValidateLocalQueue(&o)); err != nil {
			return err
		}
		if err := key(h.Kind, o.Namespace, o.Name); err != nil {
			return err
		}
		sc.Config.LocalQueues = append(sc.Config.LocalQueues, o)
	case "WorkloadPriorityClass":
		var o v1beta1.WorkloadPriorityClass
		if err := decode(loc, doc, js, &o); err != nil {
			return err
		}
		if err := fieldErrors(loc, queueconfig.ValidateWorkloadPriorityClass(&o)); err != nil {
			return err
		}
		if err := key(h.Kind, "", o.Name); err != nil {
			return err
		}
		sc.Config.PriorityClasses = append(sc.Config.PriorityClasses, o)
	case "AdmissionCheck":
		var o v1beta1.AdmissionCheck
		if err := decode(loc, doc, js, &o); err != nil {
			return err
		}
		if err := fieldErrors(loc, queueconfig.ValidateAdmissionCheck(&o)); err != nil {
			return err
		}
		if err := key(h.Kind, "", o.Name); err != nil {
			return err
		}
		// The simulator plays every check's controller: all are active.
		meta.SetStatusCondition(&o.Status.Conditions, metav1.Condition{Type: v1beta1.AdmissionCheckActive, Status: metav1.ConditionTrue, Reason: "Simulated"})
		sc.Config.AdmissionChecks = append(sc.Config.AdmissionChecks, o)
	case "Configuration":
		var o Configuration
		if err := decode(loc, doc, js, &o); err != nil {
			return err
		}
		if *sawConfig != "" {
			return docError(loc, "only one Configuration document is allowed (the first is "+*sawConfig+")")
		}
		*sawConfig = loc
		if err := fieldErrors(loc, o.WaitForPodsReady.Validate(field.NewPath("waitForPodsReady"))); err != nil {
			return err
		}
		sc.Config.FairSharing = o.FairSharing != nil && (o.FairSharing.Enable == nil || *o.FairSharing.Enable)
		if o.FairSharing != nil {
			if err := fieldErrors(loc, queueconfig.ValidateFairStrategies(field.NewPath("fairSharing", "preemptionStrategies"), o.FairSharing.PreemptionStrategies)); err != nil {
				return err
			}
			sc.Config.FairStrategies = o.FairSharing.PreemptionStrategies
		}
		sc.Config.WaitForPodsReady = o.WaitForPodsReady.Engine()
		if err := fieldErrors(loc, o.Resources.Validate(field.NewPath("resources"))); err != nil {
			return err
		}
		sc.Config.Resources = o.Resources
		if err := fieldErrors(loc, queueconfig.ValidateNamespaceSelector(field.NewPath("managedJobsNamespaceSelector"), o.ManagedJobsNamespaceSelector)); err != nil {
			return err
		}
		sc.Config.ManageJobsWithoutQueueName = o.ManageJobsWithoutQueueName
		sc.Config.ManagedJobsNamespaceSelector = o.ManagedJobsNamespaceSelector
		if err := fieldErrors(loc, o.AdmissionFairSharing.Validate(field.NewPath("admissionFairSharing"))); err != nil {
			return err
		}
		sc.Config.AdmissionFairSharing = o.AdmissionFairSharing.Engine()
	case "SimulatedWorkload":
		var o SimulatedWorkload
		if err := decode(loc, doc, js, &o); err != nil {
			return err
		}
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		if err := fieldErrors(loc, validateWorkload(&o)); err != nil {
			return err
		}
		if err := key(h.Kind, o.Namespace, o.Name); err != nil {
			return err
		}
		sc.where[o.Namespace+"/"+o.Name] = loc
		sc.Workloads = append(sc.Workloads, o)
	default:
		return docError(loc, fmt.Sprintf("kind: Unsupported value: %q: supported values: ResourceFlavor, Topology, ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, AdmissionCheck, Configuration, SimulatedWorkload, Namespace (v1), Node (v1)", h.Kind))
	}
	return nil
}

func validateWorkload(w *SimulatedWorkload) field.ErrorList {
	var errs field.ErrorList
	if w.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), "every workload needs a name"))
	}
	sp := field.NewPath("spec")
	s := &w.Spec
	if s.SubmitAt.Duration < 0 {
		errs = append(errs, field.Invalid(sp.Child("submitAt"), s.SubmitAt.String(), "must not be negative"))
	}
	for i, c := range s.PriorityChanges {
		cp := sp.Child("priorityChanges").Index(i)
		if c.At.Duration < 0 {
			errs = append(errs, field.Invalid(cp.Child("at"), c.At.String(), "must not be negative"))
		}
		if (c.PriorityClassName == "") == (c.Priority == nil) {
			errs = append(errs, field.Required(cp, "exactly one of priorityClassName and priority"))
		}
	}
	if len(s.Resizes) > 0 && !s.Elastic {
		errs = append(errs, field.Invalid(sp.Child("resizes"), len(s.Resizes), "only an elastic workload (elastic: true) changes its pod counts while it runs"))
	}
	if s.Elastic {
		for i, ps := range s.PodSets {
			if ps.MinCount != nil && *ps.MinCount != ps.Count {
				errs = append(errs, field.Invalid(sp.Child("podSets").Index(i).Child("minCount"), *ps.MinCount, "an elastic workload has no partial admission"))
			}
		}
	}
	for i, r := range s.Resizes {
		rp := sp.Child("resizes").Index(i)
		if r.At.Duration < 0 {
			errs = append(errs, field.Invalid(rp.Child("at"), r.At.String(), "must not be negative"))
		}
		if len(r.PodSets) == 0 {
			errs = append(errs, field.Required(rp.Child("podSets"), "the new count of at least one pod set"))
		}
		for _, name := range slices.Sorted(maps.Keys(r.PodSets)) {
			if !slices.ContainsFunc(s.PodSets, func(ps SimPodSet) bool { return ps.Name == name }) {
				errs = append(errs, field.NotFound(rp.Child("podSets").Key(name), name))
			} else if r.PodSets[name] < 0 {
				errs = append(errs, field.Invalid(rp.Child("podSets").Key(name), r.PodSets[name], "must not be negative"))
			}
		}
	}
	if r := s.PodsReadyAfter; r != nil && !r.Never && r.After < 0 {
		errs = append(errs, field.Invalid(sp.Child("podsReadyAfter"), r.After.String(), "must not be negative"))
	}
	seenChecks := map[string]bool{}
	for i, c := range s.AdmissionChecks {
		cp := sp.Child("admissionChecks").Index(i)
		switch {
		case c.Name == "":
			errs = append(errs, field.Required(cp.Child("name"), "the AdmissionCheck that answers"))
		case seenChecks[c.Name]:
			errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
		}
		seenChecks[c.Name] = true
		if len(c.Answers) == 0 {
			errs = append(errs, field.Required(cp.Child("answers"), "at least one answer"))
		}
		for j, a := range c.Answers {
			ap := cp.Child("answers").Index(j)
			switch engine.CheckState(a.State) {
			case engine.CheckReady, engine.CheckRetry, engine.CheckRejected:
			default:
				errs = append(errs, field.NotSupported(ap.Child("state"), a.State, []string{"Ready", "Retry", "Rejected"}))
			}
			if a.After.Duration < 0 {
				errs = append(errs, field.Invalid(ap.Child("after"), a.After.String(), "must not be negative"))
			}
			if a.RequeueAfter != nil && (a.RequeueAfter.Duration < 0 || engine.CheckState(a.State) != engine.CheckRetry) {
				errs = append(errs, field.Invalid(ap.Child("requeueAfter"), a.RequeueAfter.String(), "only a Retry answer has one, and it must not be negative"))
			}
		}
	}
	if s.Runtime != nil && s.Runtime.Duration <= 0 {
		errs = append(errs, field.Invalid(sp.Child("runtime"), s.Runtime.String(), "must be positive (leave it out for a workload that never finishes)"))
	}
	if m := s.MaximumExecutionTimeSeconds; m != nil && *m <= 0 {
		errs = append(errs, field.Invalid(sp.Child("maximumExecutionTimeSeconds"), *m, "must be a whole number of seconds above 0 (leave it out for no maximum)"))
	}
	if len(s.PodSets) == 0 {
		errs = append(errs, field.Required(sp.Child("podSets"), "at least one pod set"))
	}
	names := map[string]bool{}
	for i, ps := range s.PodSets {
		pp := sp.Child("podSets").Index(i)
		if ps.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), "pod set name"))
		}
		if names[ps.Name] {
			errs = append(errs, field.Duplicate(pp.Child("name"), ps.Name))
		}
		names[ps.Name] = true
		if ps.Count < 1 {
			errs = append(errs, field.Invalid(pp.Child("count"), ps.Count, "must be at least 1"))
		}
		if ps.MinCount != nil && (*ps.MinCount < 1 || *ps.MinCount > ps.Count) {
			errs = append(errs, field.Invalid(pp.Child("minCount"), *ps.MinCount, "must be between 1 and count"))
		}
		t, err := queueconfig.TopologyRequest(ps.Annotations, true)
		if err != nil {
			errs = append(errs, field.Invalid(pp.Child("annotations"), "", err.Error()))
		}
		s.PodSets[i].topology = t
		for _, r := range sortedResources(ps.Requests) {
			if q := ps.Requests[r]; q.Sign() < 0 {
				errs = append(errs, field.Invalid(pp.Child("requests").Key(string(r)), q.String(), "must not be negative"))
			}
		}
	}
	if a := s.Admitted; a != nil {
		ap := sp.Child("admitted")
		if a.ClusterQueue == "" {
			errs = append(errs, field.Required(ap.Child("clusterQueue"), "the ClusterQueue the workload was admitted to"))
		}
		if a.At.Duration > 0 {
			errs = append(errs, field.Invalid(ap.Child("at"), a.At.String(), "must not be after the start (0s); a pre-admitted workload is running at time 0"))
		}
		if len(a.PodSets) == 0 {
			errs = append(errs, field.Required(ap.Child("podSets"), "the admitted pod sets"))
		}
		for i, pa := range a.PodSets {
			pp := ap.Child("podSets").Index(i)
			var ps *SimPodSet
			for j := range s.PodSets {
				if s.PodSets[j].Name == pa.Name {
					ps = &s.PodSets[j]
				}
			}
			if ps == nil {
				errs = append(errs, field.NotFound(pp.Child("name"), pa.Name))
				continue
			}
			min := ps.Count
			if ps.MinCount != nil {
				min = *ps.MinCount
			}
			if pa.Count < min || pa.Count > ps.Count {
				errs = append(errs, field.Invalid(pp.Child("count"), pa.Count, fmt.Sprintf("must be between %d and %d", min, ps.Count)))
			}
			for _, r := range sortedResources(ps.Requests) {
				if _, ok := pa.Flavors[string(r)]; !ok {
					errs = append(errs, field.Required(pp.Child("flavors").Key(string(r)), "the flavor of every requested resource"))
				}
			}
		}
	}
	return errs
}

// crossCheck checks references the engine cannot turn into a pending
// reason: priority classes and the admissions of pre-admitted workloads.
func (sc *Scenario) crossCheck() error {
	classes := map[string]bool{}
	for _, c := range sc.Config.PriorityClasses {
		classes[c.Name] = true
	}
	cqs := map[string]*v1beta1.ClusterQueue{}
	for i := range sc.Config.ClusterQueues {
		cqs[sc.Config.ClusterQueues[i].Name] = &sc.Config.ClusterQueues[i]
	}
	checks := map[string]bool{}
	for _, ac := range sc.Config.AdmissionChecks {
		checks[ac.Name] = true
	}
	lqs := map[string]string{}
	for _, lq := range sc.Config.LocalQueues {
		lqs[lq.Namespace+"/"+lq.Name] = lq.Spec.ClusterQueue
	}
	topos := map[string]bool{}
	for _, t := range sc.Config.Topologies {
		topos[t.Name] = true
	}
	for _, f := range sc.Config.Flavors {
		if n := f.Spec.TopologyName; n != "" && !topos[n] {
			return docError(sc.where["ResourceFlavor "+f.Name]+": ResourceFlavor "+f.Name,
				fmt.Sprintf("spec.topologyName: Not found: %q: no Topology document defines it", n))
		}
	}
	for _, w := range sc.Workloads {
		loc := sc.where[w.Namespace+"/"+w.Name]
		sp := field.NewPath("spec")
		var errs field.ErrorList
		if n := w.Spec.PriorityClassName; n != "" && !classes[n] {
			errs = append(errs, field.NotFound(sp.Child("priorityClassName"), n))
		}
		for i, c := range w.Spec.PriorityChanges {
			if n := c.PriorityClassName; n != "" && !classes[n] {
				errs = append(errs, field.NotFound(sp.Child("priorityChanges").Index(i).Child("priorityClassName"), n))
			}
		}
		if a := w.Spec.Admitted; a != nil {
			errs = append(errs, checkAdmission(sp.Child("admitted"), &w, cqs, lqs)...)
		}
		for i, c := range w.Spec.AdmissionChecks {
			if !checks[c.Name] {
				errs = append(errs, field.NotFound(sp.Child("admissionChecks").Index(i).Child("name"), c.Name))
			}
		}
		if err := fieldErrors(loc, errs); err != nil {
			return err
		}
	}
	return nil
}

// checkAdmission checks a pre-admitted workload's admission against the
// configuration: the LocalQueue's ClusterQueue, and flavors it offers.
func checkAdmission(p *field.Path, w *SimulatedWorkload, cqs map[string]*v1beta1.ClusterQueue, lqs map[string]string) field.ErrorList {
	a := w.Spec.Admitted
	cq, ok := cqs[a.ClusterQueue]
	if !ok {
		return field.ErrorList{field.NotFound(p.Child("clusterQueue"), a.ClusterQueue)}
	}
	if want, ok := lqs[w.Namespace+"/"+w.Spec.QueueName]; ok && want != a.ClusterQueue {
		return field.ErrorList{field.Invalid(p.Child("clusterQueue"), a.ClusterQueue,
			fmt.Sprintf("LocalQueue %s/%s submits to ClusterQueue %s", w.Namespace, w.Spec.QueueName, want))}
	}
	var errs field.ErrorList
	for i, pa := range a.PodSets {
		var ps *SimPodSet
		for j := range w.Spec.PodSets {
			if w.Spec.PodSets[j].Name == pa.Name {
				ps = &w.Spec.PodSets[j]
			}
		}
		if ps == nil {
			continue // reported by validateWorkload
		}
		for _, r := range sortedResources(ps.Requests) {
			f, ok := pa.Flavors[string(r)]
			if !ok {
				continue
			}
			if !offers(cq, f, r) {
				errs = append(errs, field.Invalid(p.Child("podSets").Index(i).Child("flavors").Key(string(r)), f,
					fmt.Sprintf("ClusterQueue %s has no flavor %s for %s", cq.Name, f, r)))
			}
		}
	}
	return errs
}

func offers(cq *v1beta1.ClusterQueue, flavor string, r corev1.ResourceName) bool {
	for _, g := range cq.Spec.ResourceGroups {
		for _, f := range g.Flavors {
			if f.Name != flavor {
				continue
			}
			for _, q := range f.Resources {
				if q.Name == r {
					return true
				}
			}
		}
	}
	return false
}

func sortedResources(l corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(l))
	for r := range l {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// simNode reads what topology-aware scheduling counts of a v1 Node: its
// labels, allocatable, taints, and whether it takes pods (not cordoned,
// and Ready unless its conditions say otherwise).
func simNode(loc string, n *corev1.Node) (engine.Node, error) {
	if n.Name == "" {
		return engine.Node{}, docError(loc, "metadata.name: Required value")
	}
	en := engine.Node{Name: n.Name, Labels: n.Labels, Taints: n.Spec.Taints, Unschedulable: n.Spec.Unschedulable, Allocatable: map[string]int64{}}
	for _, r := range sortedResources(n.Status.Allocatable) {
		q := n.Status.Allocatable[r]
		if q.Sign() < 0 {
			return engine.Node{}, docError(loc, fmt.Sprintf("status.allocatable[%s]: Invalid value: %q: must not be negative", r, q.String()))
		}
		en.Allocatable[string(r)] = engine.Canonical(string(r), q)
	}
	if len(en.Allocatable) == 0 {
		return engine.Node{}, docError(loc, "status.allocatable: Required value: what the node offers (cpu, memory, nvidia.com/gpu, pods, ...)")
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			en.NotReady = true
		}
	}
	return en, nil
}
