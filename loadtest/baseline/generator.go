package baseline

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/loadtest/profiles"
)

// Generator is a Kueue scheduler performance generator file, field for
// field: cohort sets of queue sets of workload sets. Sluice reads Kueue's
// files as they are, so a configuration Kueue measures itself with can be
// replayed here unchanged.
type Generator struct {
	Topology       *GenTopology   `json:"topology,omitempty"`
	ResourceFlavor *GenFlavor     `json:"resourceFlavor,omitempty"`
	Cohorts        []GenCohortSet `json:"cohorts"`
}

// GenTopology is the data center of a topology-aware run: one node per
// combination of level values, the last level's capacity each.
type GenTopology struct {
	Name   string     `json:"name"`
	Levels []GenLevel `json:"levels"`
}

// GenLevel is one level of GenTopology.
type GenLevel struct {
	Name      string `json:"name"`
	Count     int    `json:"count"`
	NodeLabel string `json:"nodeLabel"`
	Capacity  struct {
		CPU    string `json:"cpu,omitempty"`
		Memory string `json:"memory,omitempty"`
	} `json:"capacity,omitempty"`
}

// GenFlavor is the run's one ResourceFlavor.
type GenFlavor struct {
	Name         string `json:"name"`
	NodeLabel    string `json:"nodeLabel,omitempty"`
	TopologyName string `json:"topologyName,omitempty"`
}

// GenCohortSet is Count cohorts alike.
type GenCohortSet struct {
	ClassName  string         `json:"className"`
	Count      int            `json:"count"`
	QueuesSets []GenQueuesSet `json:"queuesSets"`
}

// GenQueuesSet is Count ClusterQueues alike in each cohort of its set.
type GenQueuesSet struct {
	ClassName           string             `json:"className"`
	Count               int                `json:"count"`
	NominalQuota        resource.Quantity  `json:"nominalQuota"`
	BorrowingLimit      *resource.Quantity `json:"borrowingLimit,omitempty"`
	ReclaimWithinCohort string             `json:"reclaimWithinCohort,omitempty"`
	WithinClusterQueue  string             `json:"withinClusterQueue,omitempty"`
	WorkloadsSets       []GenWorkloadsSet  `json:"workloadsSets"`
}

// GenWorkloadsSet is created in each queue of its set: Count rounds, each
// creating every workload of the list in turn, one every
// CreationIntervalMs (the first after one interval).
type GenWorkloadsSet struct {
	Count              int           `json:"count"`
	CreationIntervalMs int64         `json:"creationIntervalMs"`
	Workloads          []GenWorkload `json:"workloads"`
}

// GenWorkload is one workload template: PodCount pods (default 1) asking
// for Request CPU each, running RuntimeMs once admitted.
type GenWorkload struct {
	ClassName     string            `json:"className"`
	RuntimeMs     int64             `json:"runtimeMs"`
	Priority      int32             `json:"priority"`
	Request       resource.Quantity `json:"request"`
	PodCount      int32             `json:"podCount,omitempty"`
	TASConstraint string            `json:"tasConstraint,omitempty"`
	TASLevel      string            `json:"tasLevel,omitempty"`
	SliceSize     int32             `json:"sliceSize,omitempty"`
}

// Profile is a generator file made ready to replay: every ClusterQueue and
// every workload class.
type Profile struct {
	// Name is the built-in profile's name or the file's path.
	Name    string
	Queues  []Queue
	Classes []Class
	// Cohorts is the number of cohorts.
	Cohorts int
	// Topology and Flavor are the file's, if any.
	Topology *GenTopology
	Flavor   GenFlavor
}

// Queue is one ClusterQueue of a profile.
type Queue struct {
	Cohort int
	// Index is the queue's place in its cohort (across its queue sets).
	Index int
	// Class is its queue set's className.
	Class        string
	NominalMilli int64
	// BorrowingMilli is its borrowing limit, -1 for none.
	BorrowingMilli                    int64
	ReclaimWithinCohort, WithinCQueue string
	Sets                              []WorkloadSet
}

// WorkloadSet is one workload set of a queue: Classes index
// Profile.Classes.
type WorkloadSet struct {
	Count   int
	Every   time.Duration
	Classes []int
}

// BuiltinProfiles are the profiles shipped in loadtest/profiles, by name.
func BuiltinProfiles() []string {
	entries, _ := fs.Glob(profiles.Files, "*.yaml")
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = strings.TrimSuffix(e, ".yaml")
	}
	return out
}

// LoadProfile reads a built-in profile by name (baseline, large-scale,
// tas) or a generator file by path.
func LoadProfile(nameOrPath string) (*Profile, error) {
	b, err := fs.ReadFile(profiles.Files, nameOrPath+".yaml")
	if err != nil {
		if strings.ContainsRune(nameOrPath, filepath.Separator) || strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml") {
			b, err = os.ReadFile(nameOrPath)
		} else {
			err = fmt.Errorf("profile %q: no such built-in profile (%s) and not a file path", nameOrPath, strings.Join(BuiltinProfiles(), ", "))
		}
	}
	if err != nil {
		return nil, err
	}
	return ParseProfile(nameOrPath, b)
}

// MustProfile is LoadProfile of a built-in profile; it panics if it is
// missing or broken, which a test of this package would have caught.
func MustProfile(name string) *Profile {
	p, err := LoadProfile(name)
	if err != nil {
		panic(err)
	}
	return p
}

// ParseProfile reads a generator file's text; name says where it came
// from in errors. Unknown fields are refused by name, as are counts,
// intervals and quotas that would make no run.
func ParseProfile(name string, text []byte) (*Profile, error) {
	js, err := yaml.YAMLToJSON(bytes.TrimSpace(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var g Generator
	strict, err := sigsjson.UnmarshalStrict(js, &g)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", name, errors.Join(strict...))
	}
	p, err := g.profile()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.Name = name
	return p, nil
}

// maxProfileJobs bounds a profile's Jobs at scale 1.
const maxProfileJobs = 1_000_000

var policies = map[string]bool{"": true, "Never": true, "LowerPriority": true, "LowerOrNewerEqualPriority": true, "Any": true}

func (g *Generator) profile() (*Profile, error) {
	p := &Profile{Topology: g.Topology, Flavor: GenFlavor{Name: "rf"}}
	if g.ResourceFlavor != nil {
		p.Flavor = *g.ResourceFlavor
	}
	if len(g.Cohorts) == 0 {
		return nil, errors.New("cohorts: at least one cohort set is needed")
	}
	if err := g.checkTopology(); err != nil {
		return nil, err
	}
	classIdx := map[string]int{}
	jobs := 0
	for ci, cs := range g.Cohorts {
		at := fmt.Sprintf("cohorts[%d]", ci)
		if cs.Count < 1 || len(cs.QueuesSets) == 0 {
			return nil, fmt.Errorf("%s: count %d and %d queue sets: want at least one of each", at, cs.Count, len(cs.QueuesSets))
		}
		first := p.Cohorts
		p.Cohorts += cs.Count
		for c := first; c < p.Cohorts; c++ {
			index := 0
			for qi, qs := range cs.QueuesSets {
				at := fmt.Sprintf("%s.queuesSets[%d]", at, qi)
				if qs.Count < 1 {
					return nil, fmt.Errorf("%s.count %d: want at least 1", at, qs.Count)
				}
				if qs.NominalQuota.Sign() <= 0 {
					return nil, fmt.Errorf("%s.nominalQuota %s: want a positive CPU quantity", at, qs.NominalQuota.String())
				}
				if !policies[qs.ReclaimWithinCohort] || !policies[qs.WithinClusterQueue] {
					return nil, fmt.Errorf("%s: preemption policies %q, %q: want Never, LowerPriority, LowerOrNewerEqualPriority or Any", at, qs.ReclaimWithinCohort, qs.WithinClusterQueue)
				}
				borrow := int64(-1)
				if qs.BorrowingLimit != nil {
					if qs.BorrowingLimit.Sign() < 0 {
						return nil, fmt.Errorf("%s.borrowingLimit %s: must not be negative", at, qs.BorrowingLimit.String())
					}
					borrow = qs.BorrowingLimit.MilliValue()
				}
				var sets []WorkloadSet
				for wi, ws := range qs.WorkloadsSets {
					at := fmt.Sprintf("%s.workloadsSets[%d]", at, wi)
					if ws.Count < 0 || ws.CreationIntervalMs < 0 || len(ws.Workloads) == 0 {
						return nil, fmt.Errorf("%s: count %d, creationIntervalMs %d, %d workloads: want counts not negative and at least one workload", at, ws.Count, ws.CreationIntervalMs, len(ws.Workloads))
					}
					set := WorkloadSet{Count: ws.Count, Every: time.Duration(ws.CreationIntervalMs) * time.Millisecond}
					for i, w := range ws.Workloads {
						k, err := p.class(classIdx, w, fmt.Sprintf("%s.workloads[%d]", at, i))
						if err != nil {
							return nil, err
						}
						set.Classes = append(set.Classes, k)
					}
					jobs += ws.Count * len(ws.Workloads) * qs.Count
					sets = append(sets, set)
				}
				for range qs.Count {
					p.Queues = append(p.Queues, Queue{Cohort: c, Index: index, Class: qs.ClassName, NominalMilli: qs.NominalQuota.MilliValue(),
						BorrowingMilli: borrow, ReclaimWithinCohort: qs.ReclaimWithinCohort, WithinCQueue: qs.WithinClusterQueue, Sets: sets})
					index++
				}
			}
		}
		if jobs > maxProfileJobs {
			return nil, fmt.Errorf("%s: more than %d Jobs in all", at, maxProfileJobs)
		}
	}
	return p, nil
}

// class files a workload template as a class, once per className: two
// templates of one name must be alike.
func (p *Profile) class(idx map[string]int, w GenWorkload, at string) (int, error) {
	pods := max(1, w.PodCount)
	switch {
	case w.ClassName == "":
		return 0, fmt.Errorf("%s.className: required", at)
	case w.Request.Sign() <= 0:
		return 0, fmt.Errorf("%s.request %s: want a positive CPU quantity", at, w.Request.String())
	case w.RuntimeMs < 0 || w.PodCount < 0 || w.SliceSize < 0:
		return 0, fmt.Errorf("%s: runtimeMs, podCount and sliceSize must not be negative", at)
	case w.TASLevel != "" && p.Topology == nil:
		return 0, fmt.Errorf("%s.tasLevel %s: the file has no topology", at, w.TASLevel)
	}
	cl := Class{Name: w.ClassName, Runtime: time.Duration(w.RuntimeMs) * time.Millisecond, Priority: w.Priority,
		PodMilliCPU: w.Request.MilliValue(), Pods: pods}
	if w.TASLevel != "" {
		switch w.TASConstraint {
		case "required":
			cl.Annotations = map[string]string{"sluice.dev/podset-required-topology": w.TASLevel}
		case "preferred":
			cl.Annotations = map[string]string{"sluice.dev/podset-preferred-topology": w.TASLevel}
		case "balanced":
			cl.Annotations = map[string]string{"sluice.dev/podset-slice-required-topology": w.TASLevel}
			if w.SliceSize > 0 {
				cl.Annotations["sluice.dev/podset-slice-size"] = fmt.Sprint(w.SliceSize)
			}
		default:
			return 0, fmt.Errorf("%s.tasConstraint %q: want required, preferred or balanced", at, w.TASConstraint)
		}
	}
	if k, ok := idx[w.ClassName]; ok {
		if !p.Classes[k].same(cl) {
			return 0, fmt.Errorf("%s: class %s is defined twice, differently", at, w.ClassName)
		}
		return k, nil
	}
	idx[w.ClassName] = len(p.Classes)
	p.Classes = append(p.Classes, cl)
	return len(p.Classes) - 1, nil
}

func (g *Generator) checkTopology() error {
	t := g.Topology
	if t == nil {
		return nil
	}
	if len(t.Levels) < 2 {
		return fmt.Errorf("topology.levels: %d levels, want at least 2", len(t.Levels))
	}
	nodes := 1
	for i, l := range t.Levels {
		if l.Count < 1 || l.NodeLabel == "" || l.Name == "" {
			return fmt.Errorf("topology.levels[%d]: want a name, a nodeLabel and a count of at least 1", i)
		}
		nodes *= l.Count
		if nodes > 10_000 {
			return errors.New("topology: more than 10,000 nodes")
		}
	}
	last := t.Levels[len(t.Levels)-1].Capacity
	for what, v := range map[string]string{"cpu": last.CPU, "memory": last.Memory} {
		if v == "" {
			continue
		}
		if _, err := resource.ParseQuantity(v); err != nil {
			return fmt.Errorf("topology.levels[%d].capacity.%s %q: %w", len(t.Levels)-1, what, v, err)
		}
	}
	if f := g.ResourceFlavor; f == nil || f.NodeLabel == "" {
		return errors.New("resourceFlavor.nodeLabel: required with a topology (it marks the run's nodes)")
	}
	return nil
}
