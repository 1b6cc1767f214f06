package queueconfig

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/sluice-dev/sluice/api/v1beta1"
)

func nonNegative(p *field.Path, q *resource.Quantity) field.ErrorList {
	if q != nil && q.Sign() < 0 {
		return field.ErrorList{field.Invalid(p, q.String(), "must not be negative")}
	}
	return nil
}

func oneOf[T ~string](p *field.Path, v *T, allowed ...T) field.ErrorList {
	if v == nil || *v == "" {
		return nil
	}
	for _, a := range allowed {
		if *v == a {
			return nil
		}
	}
	s := make([]string, len(allowed))
	for i, a := range allowed {
		s[i] = string(a)
	}
	return field.ErrorList{field.NotSupported(p, string(*v), s)}
}

func validateGroups(p *field.Path, groups []v1beta1.ResourceGroup, hasCohort bool) field.ErrorList {
	var errs field.ErrorList
	seenRes := map[corev1.ResourceName]bool{}
	seenFlavor := map[string]bool{}
	for gi, g := range groups {
		gp := p.Index(gi)
		if len(g.CoveredResources) == 0 {
			errs = append(errs, field.Required(gp.Child("coveredResources"), "a resource group covers at least one resource"))
		}
		covered := map[corev1.ResourceName]bool{}
		for ri, r := range g.CoveredResources {
			if seenRes[r] {
				errs = append(errs, field.Duplicate(gp.Child("coveredResources").Index(ri), string(r)))
			}
			seenRes[r], covered[r] = true, true
		}
		if len(g.Flavors) == 0 {
			errs = append(errs, field.Required(gp.Child("flavors"), "a resource group has at least one flavor"))
		}
		for fi, f := range g.Flavors {
			fp := gp.Child("flavors").Index(fi)
			if f.Name == "" {
				errs = append(errs, field.Required(fp.Child("name"), "flavor name"))
			}
			if seenFlavor[f.Name] {
				errs = append(errs, field.Duplicate(fp.Child("name"), f.Name))
			}
			seenFlavor[f.Name] = true
			listed := map[corev1.ResourceName]bool{}
			for qi, q := range f.Resources {
				qp := fp.Child("resources").Index(qi)
				if !covered[q.Name] {
					errs = append(errs, field.Invalid(qp.Child("name"), string(q.Name), "not in the coveredResources of this resource group"))
				}
				if listed[q.Name] {
					errs = append(errs, field.Duplicate(qp.Child("name"), string(q.Name)))
				}
				listed[q.Name] = true
				errs = append(errs, nonNegative(qp.Child("nominalQuota"), &q.NominalQuota)...)
				errs = append(errs, nonNegative(qp.Child("borrowingLimit"), q.BorrowingLimit)...)
				errs = append(errs, nonNegative(qp.Child("lendingLimit"), q.LendingLimit)...)
				if q.LendingLimit != nil && q.LendingLimit.Cmp(q.NominalQuota) > 0 {
					errs = append(errs, field.Invalid(qp.Child("lendingLimit"), q.LendingLimit.String(), "must not be more than nominalQuota"))
				}
				if !hasCohort && q.BorrowingLimit != nil {
					errs = append(errs, field.Forbidden(qp.Child("borrowingLimit"), "needs a cohort"))
				}
				if !hasCohort && q.LendingLimit != nil {
					errs = append(errs, field.Forbidden(qp.Child("lendingLimit"), "needs a cohort"))
				}
			}
			for _, r := range g.CoveredResources {
				if !listed[r] {
					errs = append(errs, field.Required(fp.Child("resources"), fmt.Sprintf("flavor %s must give quota for covered resource %s", f.Name, r)))
				}
			}
		}
	}
	return errs
}

func validateFairSharing(p *field.Path, fs *v1beta1.FairSharing) field.ErrorList {
	if fs == nil {
		return nil
	}
	return nonNegative(p.Child("weight"), fs.Weight)
}

func validateName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "every object needs a name")}
	}
	return nil
}

// ValidateClusterQueue checks a ClusterQueue as its CRD schema does.
func ValidateClusterQueue(cq *v1beta1.ClusterQueue) field.ErrorList {
	errs := validateName(field.NewPath("metadata", "name"), cq.Name)
	sp := field.NewPath("spec")
	s := &cq.Spec
	errs = append(errs, validateGroups(sp.Child("resourceGroups"), s.ResourceGroups, s.Cohort != "")...)
	errs = append(errs, oneOf(sp.Child("queueingStrategy"), &s.QueueingStrategy, v1beta1.StrictFIFO, v1beta1.BestEffortFIFO)...)
	errs = append(errs, oneOf(sp.Child("stopPolicy"), s.StopPolicy, v1beta1.None, v1beta1.Hold, v1beta1.HoldAndDrain)...)
	if s.NamespaceSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(s.NamespaceSelector); err != nil {
			errs = append(errs, field.Invalid(sp.Child("namespaceSelector"), s.NamespaceSelector, err.Error()))
		}
	}
	if f := s.FlavorFungibility; f != nil {
		fp := sp.Child("flavorFungibility")
		errs = append(errs, oneOf(fp.Child("whenCanBorrow"), &f.WhenCanBorrow, v1beta1.Borrow, v1beta1.MayStopSearch, v1beta1.TryNextFlavor)...)
		errs = append(errs, oneOf(fp.Child("whenCanPreempt"), &f.WhenCanPreempt, v1beta1.Preempt, v1beta1.MayStopSearch, v1beta1.TryNextFlavor)...)
		if f.Preference != nil {
			errs = append(errs, oneOf(fp.Child("preference"), f.Preference, v1beta1.BorrowingOverPreemption, v1beta1.PreemptionOverBorrowing)...)
			if f.WhenCanBorrow != v1beta1.TryNextFlavor || f.WhenCanPreempt != v1beta1.TryNextFlavor {
				errs = append(errs, field.Invalid(fp.Child("preference"), *f.Preference,
					"preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor"))
			}
		}
	}
	if pr := s.Preemption; pr != nil {
		pp := sp.Child("preemption")
		errs = append(errs, oneOf(pp.Child("withinClusterQueue"), &pr.WithinClusterQueue,
			v1beta1.PreemptionNever, v1beta1.PreemptionLowerPriority, v1beta1.PreemptionLowerOrNewerEqualPriority)...)
		errs = append(errs, oneOf(pp.Child("reclaimWithinCohort"), &pr.ReclaimWithinCohort,
			v1beta1.PreemptionNever, v1beta1.PreemptionLowerPriority, v1beta1.PreemptionAny)...)
		if b := pr.BorrowWithinCohort; b != nil {
			errs = append(errs, oneOf(pp.Child("borrowWithinCohort", "policy"), &b.Policy,
				v1beta1.PreemptionNever, v1beta1.PreemptionLowerPriority)...)
			if b.Policy != "" && b.Policy != v1beta1.PreemptionNever &&
				(pr.ReclaimWithinCohort == "" || pr.ReclaimWithinCohort == v1beta1.PreemptionNever) {
				errs = append(errs, field.Invalid(pp.Child("borrowWithinCohort"), b.Policy, "borrowWithinCohort needs reclaimWithinCohort other than Never"))
			}
		}
	}
	errs = append(errs, validateFairSharing(sp.Child("fairSharing"), s.FairSharing)...)
	errs = append(errs, validateCheckRules(sp, s)...)
	if s.AdmissionScope != nil && s.AdmissionScope.AdmissionMode == "" {
		errs = append(errs, field.Required(sp.Child("admissionScope", "admissionMode"), "UsageBasedAdmissionFairSharing or NoAdmissionFairSharing"))
	} else if s.AdmissionScope != nil {
		errs = append(errs, oneOf(sp.Child("admissionScope", "admissionMode"), &s.AdmissionScope.AdmissionMode,
			v1beta1.UsageBasedAdmissionFairSharing, v1beta1.NoAdmissionFairSharing)...)
	}
	return errs
}

// ValidateCohort checks a Cohort as its CRD schema does.
func ValidateCohort(c *v1beta1.Cohort) field.ErrorList {
	errs := validateName(field.NewPath("metadata", "name"), c.Name)
	sp := field.NewPath("spec")
	if c.Spec.Parent != "" && c.Spec.ParentName != "" && c.Spec.Parent != c.Spec.ParentName {
		errs = append(errs, field.Invalid(sp.Child("parentName"), c.Spec.ParentName, "parent and parentName name the same field: give one, or the same value"))
	}
	if p := c.Spec.ParentOf(); p != "" && p == c.Name {
		errs = append(errs, field.Invalid(sp.Child("parent"), p, "a cohort cannot be its own parent"))
	}
	errs = append(errs, validateGroups(sp.Child("resourceGroups"), c.Spec.ResourceGroups, c.Spec.ParentOf() != "")...)
	errs = append(errs, validateFairSharing(sp.Child("fairSharing"), c.Spec.FairSharing)...)
	return errs
}

// ValidateLocalQueue checks a LocalQueue as its CRD schema does.
func ValidateLocalQueue(lq *v1beta1.LocalQueue) field.ErrorList {
	errs := validateName(field.NewPath("metadata", "name"), lq.Name)
	sp := field.NewPath("spec")
	if lq.Spec.ClusterQueue == "" {
		errs = append(errs, field.Required(sp.Child("clusterQueue"), "the ClusterQueue this queue submits to"))
	}
	errs = append(errs, oneOf(sp.Child("stopPolicy"), lq.Spec.StopPolicy, v1beta1.None, v1beta1.Hold, v1beta1.HoldAndDrain)...)
	errs = append(errs, validateFairSharing(sp.Child("fairSharing"), lq.Spec.FairSharing)...)
	return errs
}

// ValidateResourceFlavor checks a ResourceFlavor.
func ValidateResourceFlavor(f *v1beta1.ResourceFlavor) field.ErrorList {
	errs := validateName(field.NewPath("metadata", "name"), f.Name)
	for i, t := range f.Spec.NodeTaints {
		tp := field.NewPath("spec", "nodeTaints").Index(i)
		if t.Key == "" {
			errs = append(errs, field.Required(tp.Child("key"), "taint key"))
		}
		e := t.Effect
		if e == "" {
			errs = append(errs, field.Required(tp.Child("effect"), "NoSchedule, PreferNoSchedule or NoExecute"))
		}
		errs = append(errs, oneOf(tp.Child("effect"), &e, corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute)...)
	}
	if f.Spec.TopologyName != "" && len(f.Spec.NodeLabels) == 0 {
		errs = append(errs, field.Required(field.NewPath("spec", "nodeLabels"), "a flavor with topologyName needs nodeLabels to say which nodes are its own"))
	}
	return errs
}

// ValidateTopology checks a Topology as its CRD schema does: at least one
// level, each with its own node label, the hostname label only last.
func ValidateTopology(t *v1beta1.Topology) field.ErrorList {
	errs := validateName(field.NewPath("metadata", "name"), t.Name)
	p := field.NewPath("spec", "levels")
	if len(t.Spec.Levels) == 0 {
		errs = append(errs, field.Required(p, "a topology needs at least one level"))
	}
	seen := map[string]bool{}
	for i, l := range t.Spec.Levels {
		lp := p.Index(i).Child("nodeLabel")
		switch {
		case l.NodeLabel == "":
			errs = append(errs, field.Required(lp, "the node label of the level"))
		case seen[l.NodeLabel]:
			errs = append(errs, field.Duplicate(lp, l.NodeLabel))
		case l.NodeLabel == corev1.LabelHostname && i != len(t.Spec.Levels)-1:
			errs = append(errs, field.Invalid(lp, l.NodeLabel, "kubernetes.io/hostname can only be the last level"))
		}
		for _, msg := range validation.IsQualifiedName(l.NodeLabel) {
			if l.NodeLabel != "" {
				errs = append(errs, field.Invalid(lp, l.NodeLabel, msg))
			}
		}
		seen[l.NodeLabel] = true
	}
	return errs
}

// ValidateWorkloadPriorityClass checks a WorkloadPriorityClass.
func ValidateWorkloadPriorityClass(c *v1beta1.WorkloadPriorityClass) field.ErrorList {
	return validateName(field.NewPath("metadata", "name"), c.Name)
}

// validateCheckRules checks a ClusterQueue's admission checks: one of the
// two fields, named checks, each once.
func validateCheckRules(sp *field.Path, s *v1beta1.ClusterQueueSpec) field.ErrorList {
	var errs field.ErrorList
	if s.AdmissionChecks != nil && s.AdmissionChecksStrategy != nil {
		errs = append(errs, field.Forbidden(sp.Child("admissionChecksStrategy"), "either admissionChecks or admissionChecksStrategy can be set, not both"))
	}
	p := sp.Child("admissionChecks")
	if s.AdmissionChecksStrategy != nil {
		p = sp.Child("admissionChecksStrategy", "admissionChecks")
	}
	seen := map[string]bool{}
	for i, r := range s.CheckRules() {
		ip := p.Index(i)
		if s.AdmissionChecksStrategy != nil {
			ip = ip.Child("name")
		}
		switch {
		case r.Name == "":
			errs = append(errs, field.Required(ip, "the name of an AdmissionCheck"))
		case seen[r.Name]:
			errs = append(errs, field.Duplicate(ip, r.Name))
		}
		seen[r.Name] = true
	}
	return errs
}

// ValidateAdmissionCheck checks an AdmissionCheck.
func ValidateAdmissionCheck(ac *v1beta1.AdmissionCheck) field.ErrorList {
	errs := validateName(field.NewPath("metadata", "name"), ac.Name)
	if ac.Spec.ControllerName == "" {
		errs = append(errs, field.Required(field.NewPath("spec", "controllerName"), "the controller that decides the check, e.g. sluice.dev/provisioning-request"))
	}
	if p := ac.Spec.Parameters; p != nil {
		pp := field.NewPath("spec", "parameters")
		if p.Kind == "" {
			errs = append(errs, field.Required(pp.Child("kind"), "the kind of the parameters object"))
		}
		if p.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), "the name of the parameters object"))
		}
	}
	return errs
}
