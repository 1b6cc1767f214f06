// Package configstore keeps the queue configuration that the watcher mirrors
// into the sluice-config KV bucket, and turns it into the engine's
// configuration. Values are the Kubernetes objects as JSON.
package configstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/queueconfig"
)

// Bucket is the KV bucket of the mirrored configuration.
const Bucket = "sluice-config"

// Kinds mirrored, as used in keys.
const (
	KindResourceFlavor        = "resourceflavor"
	KindClusterQueue          = "clusterqueue"
	KindCohort                = "cohort"
	KindLocalQueue            = "localqueue"
	KindWorkloadPriorityClass = "workloadpriorityclass"
	KindAdmissionCheck        = "admissioncheck"
	KindPriorityClass         = "priorityclass"
	KindNamespace             = "namespace"
	KindTopology              = "topology"
)

// ErrBadKey marks a key that names no known kind.
var ErrBadKey = errors.New("not a configuration key")

// Key is the KV key of an object: kind.name, or kind.namespace.name.
func Key(kind, namespace, name string) string {
	if namespace != "" {
		return kind + "." + namespace + "." + name
	}
	return kind + "." + name
}

// Store holds the latest JSON of every mirrored object by key.
type Store struct {
	objs map[string][]byte
}

// New returns an empty store.
func New() *Store { return &Store{objs: map[string][]byte{}} }

// Apply records a put (value) or a delete (nil value).
func (s *Store) Apply(key string, value []byte) {
	if value == nil {
		delete(s.objs, key)
		return
	}
	s.objs[key] = value
}

// Snapshot is the configuration decoded from the store.
type Snapshot struct {
	Objects queueconfig.Objects
	// Flavors by name, for applying admissions.
	Flavors map[string]*v1beta1.ResourceFlavor
	// WorkloadPriorityClasses and PriorityClasses by name.
	WorkloadPriorityClasses map[string]int32
	PriorityClasses         map[string]int32
	// DefaultPriorityClass is the PriorityClass marked globalDefault ("" if
	// none; the first by name if, against the API server's rule, several).
	DefaultPriorityClass string
}

// Snapshot decodes every object. Objects that do not decode are returned
// as errors beside the snapshot, which leaves them out: the API server
// validated them, so this only happens with a foreign writer.
func (s *Store) Snapshot() (Snapshot, []error) {
	snap := Snapshot{
		Flavors:                 map[string]*v1beta1.ResourceFlavor{},
		WorkloadPriorityClasses: map[string]int32{},
		PriorityClasses:         map[string]int32{},
	}
	snap.Objects.Namespaces = map[string]map[string]string{}
	keys := make([]string, 0, len(s.objs))
	for k := range s.objs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	bad := func(k string, err error) { errs = append(errs, fmt.Errorf("config %s: %w", k, err)) }
	for _, k := range keys {
		b := s.objs[k]
		kind, _, _ := strings.Cut(k, ".")
		switch kind {
		case KindResourceFlavor:
			var o v1beta1.ResourceFlavor
			if err := json.Unmarshal(b, &o); err != nil {
				bad(k, err)
				continue
			}
			snap.Objects.Flavors = append(snap.Objects.Flavors, o)
			snap.Flavors[o.Name] = &snap.Objects.Flavors[len(snap.Objects.Flavors)-1]
		case KindClusterQueue:
			var o v1beta1.ClusterQueue
			if err := json.Unmarshal(b, &o); err != nil {
				bad(k, err)
				continue
			}
			snap.Objects.ClusterQueues = append(snap.Objects.ClusterQueues, o)
		case KindCohort:
			var o v1beta1.Cohort
			if err := json.Unmarshal(b, &o); err != nil {
				bad(k, err)
				continue
			}
			snap.Objects.Cohorts = append(snap.Objects.Cohorts, o)
		case KindLocalQueue:
			var o v1beta1.LocalQueue
			if err := json.Unmarshal(b, &o); err != nil {
				bad(k, err)
				continue
			}
			snap.Objects.LocalQueues = append(snap.Objects.LocalQueues, o)
		case KindWorkloadPriorityClass:
			var o v1beta1.WorkloadPriorityClass
			if err := json.Unmarshal(b, &o); err != nil {
				bad(k, err)
				continue
			}
			snap.Objects.PriorityClasses = append(snap.Objects.PriorityClasses, o)
			snap.WorkloadPriorityClasses[o.Name] = o.Value
		case KindAdmissionCheck:
			var o v1beta1.AdmissionCheck
			if err := json.Unmarshal(b, &o); err != nil {
				bad(k, err)
				continue
			}
			snap.Objects.AdmissionChecks = append(snap.Objects.AdmissionChecks, o)
		case KindTopology:
			var o v1beta1.Topology
			if err := json.Unmarshal(b, &o); err != nil {
				bad(k, err)
				continue
			}
			snap.Objects.Topologies = append(snap.Objects.Topologies, o)
		case KindPriorityClass:
			var o schedulingv1.PriorityClass
			if err := json.Unmarshal(b, &o); err != nil {
				bad(k, err)
				continue
			}
			snap.PriorityClasses[o.Name] = o.Value
			if o.GlobalDefault && (snap.DefaultPriorityClass == "" || o.Name < snap.DefaultPriorityClass) {
				snap.DefaultPriorityClass = o.Name
			}
		case KindNamespace:
			var o metav1.PartialObjectMetadata
			if err := json.Unmarshal(b, &o); err != nil {
				bad(k, err)
				continue
			}
			snap.Objects.Namespaces[o.Name] = o.Labels
		default:
			bad(k, ErrBadKey)
		}
	}
	// Flavors may have moved while the slice grew: point again.
	for i := range snap.Objects.Flavors {
		snap.Flavors[snap.Objects.Flavors[i].Name] = &snap.Objects.Flavors[i]
	}
	return snap, errs
}
