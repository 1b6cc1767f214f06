package queueconfig

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/engine"
)

// Objects is a complete, validated set of queue configuration.
type Objects struct {
	Flavors         []v1beta1.ResourceFlavor
	ClusterQueues   []v1beta1.ClusterQueue
	Cohorts         []v1beta1.Cohort
	LocalQueues     []v1beta1.LocalQueue
	PriorityClasses []v1beta1.WorkloadPriorityClass
	// Namespaces maps a namespace to its labels, for namespaceSelectors.
	Namespaces  map[string]map[string]string
	FairSharing bool
	// WaitForPodsReady is nil when the feature is off.
	WaitForPodsReady *engine.WaitForPodsReady
	// FairStrategies are fair sharing's preemption strategies (empty:
	// Kueue's default).
	FairStrategies  []string
	AdmissionChecks []v1beta1.AdmissionCheck
	// Topologies are the Topology objects topology-aware flavors name.
	Topologies []v1beta1.Topology
	// Resources turns pods' requests into what workloads are queued
	// with; nil counts requests as they are.
	Resources *Resources
	// ManageJobsWithoutQueueName and ManagedJobsNamespaceSelector: what
	// the integrations do with jobs created without a queue label
	// (unqueued.go).
	ManageJobsWithoutQueueName   bool
	ManagedJobsNamespaceSelector *metav1.LabelSelector
	// AdmissionFairSharing is nil when Admission Fair Sharing is off.
	AdmissionFairSharing *engine.AdmissionFairSharing
}

// ToEngine converts validated objects into the engine's configuration.
func ToEngine(o Objects) (engine.Config, error) {
	cfg := engine.Config{NamespaceLabel: o.Namespaces, FairSharing: o.FairSharing, WaitForPodsReady: o.WaitForPodsReady,
		FairStrategies: o.FairStrategies, AdmissionFairSharing: o.AdmissionFairSharing}
	for _, f := range o.Flavors {
		cfg.Flavors = append(cfg.Flavors, engine.Flavor{
			Name:        f.Name,
			NodeLabels:  f.Spec.NodeLabels,
			NodeTaints:  f.Spec.NodeTaints,
			Tolerations: f.Spec.Tolerations,

			TopologyName: f.Spec.TopologyName,
		})
	}
	for _, t := range o.Topologies {
		et := engine.Topology{Name: t.Name}
		for _, l := range t.Spec.Levels {
			et.Levels = append(et.Levels, l.NodeLabel)
		}
		cfg.Topologies = append(cfg.Topologies, et)
	}
	for _, cq := range o.ClusterQueues {
		ecq, err := clusterQueue(&cq)
		if err != nil {
			return engine.Config{}, fmt.Errorf("ClusterQueue %s: %w", cq.Name, err)
		}
		cfg.ClusterQueues = append(cfg.ClusterQueues, ecq)
	}
	for _, c := range o.Cohorts {
		cfg.Cohorts = append(cfg.Cohorts, engine.Cohort{
			Name:           c.Name,
			Parent:         c.Spec.ParentOf(),
			ResourceGroups: groups(c.Spec.ResourceGroups),
			FairWeight:     weight(c.Spec.FairSharing),
		})
	}
	for _, ac := range o.AdmissionChecks {
		cfg.AdmissionChecks = append(cfg.AdmissionChecks, engine.AdmissionCheck{Name: ac.Name, Controller: ac.Spec.ControllerName, Active: ac.IsActive()})
	}
	for _, lq := range o.LocalQueues {
		elq := engine.LocalQueue{
			Namespace:    lq.Namespace,
			Name:         lq.Name,
			ClusterQueue: lq.Spec.ClusterQueue,
			StopPolicy:   stopPolicy(lq.Spec.StopPolicy),
		}
		if fs := lq.Spec.FairSharing; fs != nil && fs.Weight != nil {
			w := fs.Weight.AsApproximateFloat64()
			elq.FairWeight = &w
		}
		cfg.LocalQueues = append(cfg.LocalQueues, elq)
	}
	return cfg, nil
}

func clusterQueue(cq *v1beta1.ClusterQueue) (engine.ClusterQueue, error) {
	s := &cq.Spec
	out := engine.ClusterQueue{
		Name:                cq.Name,
		Cohort:              s.Cohort,
		ResourceGroups:      groups(s.ResourceGroups),
		QueueingStrategy:    engine.BestEffortFIFO,
		WhenCanBorrow:       engine.Borrow,
		WhenCanPreempt:      engine.TryNextFlavor,
		Preemption:          engine.Preemption{WithinClusterQueue: engine.Never, ReclaimWithinCohort: engine.Never, BorrowWithinCohort: engine.Never},
		StopPolicy:          stopPolicy(s.StopPolicy),
		FairWeight:          weight(s.FairSharing),
		UsageBasedAdmission: s.AdmissionScope != nil && s.AdmissionScope.AdmissionMode == v1beta1.UsageBasedAdmissionFairSharing,
	}
	for _, r := range s.CheckRules() {
		out.AdmissionChecks = append(out.AdmissionChecks, engine.AdmissionCheckRule{Name: r.Name, OnFlavors: r.OnFlavors})
	}
	if s.QueueingStrategy == v1beta1.StrictFIFO {
		out.QueueingStrategy = engine.StrictFIFO
	}
	if s.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.NamespaceSelector)
		if err != nil {
			return out, fmt.Errorf("spec.namespaceSelector: %w", err)
		}
		out.NamespaceSelector = sel
	}
	if f := s.FlavorFungibility; f != nil {
		if f.WhenCanBorrow == v1beta1.TryNextFlavor {
			out.WhenCanBorrow = engine.TryNextFlavor
		}
		if f.WhenCanPreempt == v1beta1.Preempt || f.WhenCanPreempt == v1beta1.MayStopSearch {
			out.WhenCanPreempt = engine.Preempt
		}
		if f.Preference != nil {
			out.FlavorPreference = engine.FlavorPreference(*f.Preference)
		}
	}
	if p := s.Preemption; p != nil {
		out.Preemption.WithinClusterQueue = policy(p.WithinClusterQueue)
		out.Preemption.ReclaimWithinCohort = policy(p.ReclaimWithinCohort)
		if b := p.BorrowWithinCohort; b != nil {
			out.Preemption.BorrowWithinCohort = policy(b.Policy)
			out.Preemption.MaxPriorityThreshold = b.MaxPriorityThreshold
		}
	}
	return out, nil
}

func policy(p v1beta1.PreemptionPolicy) engine.PreemptionPolicy {
	if p == "" {
		return engine.Never
	}
	return engine.PreemptionPolicy(p)
}

func stopPolicy(p *v1beta1.StopPolicy) engine.StopPolicy {
	if p == nil || *p == "" {
		return engine.StopNone
	}
	return engine.StopPolicy(*p)
}

func weight(fs *v1beta1.FairSharing) int64 {
	if fs == nil || fs.Weight == nil {
		return 1000
	}
	return fs.Weight.MilliValue()
}

func groups(in []v1beta1.ResourceGroup) []engine.ResourceGroup {
	var out []engine.ResourceGroup
	for _, g := range in {
		eg := engine.ResourceGroup{}
		for _, r := range g.CoveredResources {
			eg.CoveredResources = append(eg.CoveredResources, string(r))
		}
		for _, f := range g.Flavors {
			ef := engine.FlavorQuotas{Name: f.Name}
			for _, q := range f.Resources {
				res := string(q.Name)
				eq := engine.Quota{Resource: res, Nominal: engine.Canonical(res, q.NominalQuota)}
				if q.BorrowingLimit != nil {
					eq.BorrowingLimit = engine.Limited(engine.Canonical(res, *q.BorrowingLimit))
				}
				if q.LendingLimit != nil {
					eq.LendingLimit = engine.Limited(engine.Canonical(res, *q.LendingLimit))
				}
				ef.Resources = append(ef.Resources, eq)
			}
			eg.Flavors = append(eg.Flavors, ef)
		}
		out = append(out, eg)
	}
	return out
}
