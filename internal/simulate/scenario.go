package simulate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/api/v1beta1"
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

// SimulatedWorkload is a simulator-only stand-in for a job.
type SimulatedWorkload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SimulatedWorkloadSpec `json:"spec"`
}

// SimulatedWorkloadSpec describes the job and, optionally, its admission at
// the start.
type SimulatedWorkloadSpec struct {
	QueueName         string        `json:"queueName"`
	PriorityClassName string        `json:"priorityClassName,omitempty"`
	Priority          *int32        `json:"priority,omitempty"`
	SubmitAt          Duration      `json:"submitAt,omitempty"`
	Runtime           *Duration     `json:"runtime,omitempty"`
	PodSets           []SimPodSet   `json:"podSets"`
	Admitted          *SimAdmission `json:"admitted,omitempty"`
}

// SimPodSet is a group of identical pods.
type SimPodSet struct {
	Name         string              `json:"name"`
	Count        int32               `json:"count"`
	MinCount     *int32              `json:"minCount,omitempty"`
	Requests     corev1.ResourceList `json:"requests"`
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
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
}

// Configuration holds the cluster-wide settings of the services.
type Configuration struct {
	metav1.TypeMeta `json:",inline"`
	FairSharing     *struct {
		Enable bool `json:"enable"`
	} `json:"fairSharing,omitempty"`
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
	// where records each workload's document, for error messages.
	where map[string]string
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
	sc := &Scenario{where: map[string]string{}}
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
	return sc, nil
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

// decode turns one YAML document into obj, refusing unknown and duplicate
// fields and naming the path of any bad value.
func decode(loc string, doc []byte, obj any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return docError(loc, err.Error())
	}
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return docError(loc, err.Error())
	}
	if errs := checkQuantities(field.NewPath(""), generic); len(errs) > 0 {
		return fieldErrors(loc, errs)
	}
	strict, err := sigsjson.UnmarshalStrict(js, obj)
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return docError(loc, fmt.Sprintf("%s: expected %s, got a %s", te.Field, te.Type, te.Value))
		}
		return docError(loc, err.Error())
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return docError(loc, strings.Join(msgs, "; "))
	}
	return nil
}

// quantityKeys are the fields whose values are Kubernetes quantities;
// requests and nodeLabels-like maps are handled by their parent key.
var quantityKeys = map[string]bool{"nominalQuota": true, "borrowingLimit": true, "lendingLimit": true, "weight": true}

// checkQuantities walks a decoded document and reports every quantity that
// does not parse, with its path, before typed decoding loses the path.
func checkQuantities(p *field.Path, v any) field.ErrorList {
	var errs field.ErrorList
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			cp := p.Child(k)
			if p.String() == "" {
				cp = field.NewPath(k)
			}
			switch {
			case quantityKeys[k]:
				errs = append(errs, checkQuantity(cp, c)...)
			case k == "requests":
				if m, ok := c.(map[string]any); ok {
					for r, q := range m {
						errs = append(errs, checkQuantity(cp.Key(r), q)...)
					}
				}
			default:
				errs = append(errs, checkQuantities(cp, c)...)
			}
		}
	case []any:
		for i, c := range t {
			errs = append(errs, checkQuantities(p.Index(i), c)...)
		}
	}
	return errs
}

func checkQuantity(p *field.Path, v any) field.ErrorList {
	var s string
	switch t := v.(type) {
	case string:
		s = t
	case float64:
		s = strconv.FormatFloat(t, 'f', -1, 64)
	default:
		return field.ErrorList{field.Invalid(p, v, "must be a quantity such as 4, 500m or 16Gi")}
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return field.ErrorList{field.Invalid(p, s, "must be a quantity such as 4, 500m or 16Gi")}
	}
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(p, s, "must not be negative")}
	}
	return nil
}

func (sc *Scenario) add(loc string, doc []byte, seen map[string]string, sawConfig *string) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return docError(loc, err.Error())
	}
	sluice := v1beta1.GroupVersion.String()
	key := func(kind, ns, name string) error {
		k := kind + "/" + ns + "/" + name
		if prev, ok := seen[k]; ok {
			id := name
			if ns != "" {
				id = ns + "/" + name
			}
			return docError(loc, fmt.Sprintf("%s %s is defined twice (first in %s)", kind, id, prev))
		}
		seen[k] = loc
		return nil
	}
	named := func(kind, name string) string { return fmt.Sprintf("%s (%s %s)", loc, kind, name) }
	switch {
	case tm.APIVersion == "v1" && tm.Kind == "Namespace":
		var ns namespace
		if err := decode(loc+" (Namespace)", doc, &ns); err != nil {
			return err
		}
		if ns.Name == "" {
			return docError(loc+" (Namespace)", "metadata.name: Required value")
		}
		if err := key("Namespace", "", ns.Name); err != nil {
			return err
		}
		sc.Config.Namespaces[ns.Name] = ns.Labels
		return nil
	case tm.APIVersion != sluice:
		return docError(loc, fmt.Sprintf("apiVersion: Unsupported value: %q: supported values: %q (and v1 for Namespace)", tm.APIVersion, sluice))
	}
	switch tm.Kind {
	case "ResourceFlavor":
		var o v1beta1.ResourceFlavor
		if err := decode(loc+" (ResourceFlavor)", doc, &o); err != nil {
			return err
		}
		l := named(tm.Kind, o.Name)
		if err := fieldErrors(l, queueconfig.ValidateResourceFlavor(&o)); err != nil {
			return err
		}
		if err := key(tm.Kind, "", o.Name); err != nil {
			return err
		}
		sc.Config.Flavors = append(sc.Config.Flavors, o)
	case "ClusterQueue":
		var o v1beta1.ClusterQueue
		if err := decode(loc+" (ClusterQueue)", doc, &o); err != nil {
			return err
		}
		l := named(tm.Kind, o.Name)
		if err := fieldErrors(l, queueconfig.ValidateClusterQueue(&o)); err != nil {
			return err
		}
		if err := key(tm.Kind, "", o.Name); err != nil {
			return err
		}
		sc.Config.ClusterQueues = append(sc.Config.ClusterQueues, o)
	case "Cohort":
		var o v1beta1.Cohort
		if err := decode(loc+" (Cohort)", doc, &o); err != nil {
			return err
		}
		l := named(tm.Kind, o.Name)
		if err := fieldErrors(l, queueconfig.ValidateCohort(&o)); err != nil {
			return err
		}
		if err := key(tm.Kind, "", o.Name); err != nil {
			return err
		}
		sc.Config.Cohorts = append(sc.Config.Cohorts, o)
	case "LocalQueue":
		var o v1beta1.LocalQueue
		if err := decode(loc+" (LocalQueue)", doc, &o); err != nil {
			return err
		}
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		l := named(tm.Kind, o.Namespace+"/"+o.Name)
		if err := fieldErrors(l, queueconfig.ValidateLocalQueue(&o)); err != nil {
			return err
		}
		if err := key(tm.Kind, o.Namespace, o.Name); err != nil {
			return err
		}
		sc.Config.LocalQueues = append(sc.Config.LocalQueues, o)
	case "WorkloadPriorityClass":
		var o v1beta1.WorkloadPriorityClass
		if err := decode(loc+" (WorkloadPriorityClass)", doc, &o); err != nil {
			return err
		}
		l := named(tm.Kind, o.Name)
		if err := fieldErrors(l, queueconfig.ValidateWorkloadPriorityClass(&o)); err != nil {
			return err
		}
		if err := key(tm.Kind, "", o.Name); err != nil {
			return err
		}
		sc.Config.PriorityClasses = append(sc.Config.PriorityClasses, o)
	case "Configuration":
		var o Configuration
		if err := decode(loc+" (Configuration)", doc, &o); err != nil {
			return err
		}
		if *sawConfig != "" {
			return docError(loc+" (Configuration)", "only one Configuration document is allowed (first in "+*sawConfig+")")
		}
		*sawConfig = loc
		sc.Config.FairSharing = o.FairSharing != nil && o.FairSharing.Enable
	case "SimulatedWorkload":
		var o SimulatedWorkload
		if err := decode(loc+" (SimulatedWorkload)", doc, &o); err != nil {
			return err
		}
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		l := named(tm.Kind, o.Namespace+"/"+o.Name)
		if err := fieldErrors(l, validateWorkload(&o)); err != nil {
			return err
		}
		if err := key(tm.Kind, o.Namespace, o.Name); err != nil {
			return err
		}
		sc.where[o.Namespace+"/"+o.Name] = l
		sc.Workloads = append(sc.Workloads, o)
	case "":
		return docError(loc, "kind: Required value")
	default:
		return docError(loc, fmt.Sprintf("kind: Unsupported value: %q: supported values: ResourceFlavor, ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass, Configuration, SimulatedWorkload, Namespace (v1)", tm.Kind))
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
	if s.QueueName == "" {
		errs = append(errs, field.Required(sp.Child("queueName"), "the LocalQueue in the workload's namespace"))
	}
	if s.SubmitAt.Duration < 0 {
		errs = append(errs, field.Invalid(sp.Child("submitAt"), s.SubmitAt.String(), "must not be negative"))
	}
	if s.Runtime != nil && s.Runtime.Duration <= 0 {
		errs = append(errs, field.Invalid(sp.Child("runtime"), s.Runtime.String(), "must be positive (leave it out for a workload that never finishes)"))
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
			for r := range ps.Requests {
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
	for _, w := range sc.Workloads {
		loc := sc.where[w.Namespace+"/"+w.Name]
		if n := w.Spec.PriorityClassName; n != "" && !classes[n] {
			return docError(loc, fmt.Sprintf("spec.priorityClassName: Not found: %q: no WorkloadPriorityClass has that name", n))
		}
	}
	return nil
}
