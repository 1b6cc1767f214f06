package invariant

import (
	"encoding/json"
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// jobBuilder makes a labelled, running batch/v1 Job in namespace default
// with one container; the admission is written as the job integration writes
// it.
type jobBuilder struct {
	j         batchv1.Job
	admission *jobframework.Assignment
	raw       *string
}

func newJob(name string) *jobBuilder {
	return &jobBuilder{j: batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default",
			Name:      name,
			UID:       types.UID(name + "-uid"),
			Labels:    map[string]string{v1beta1.QueueNameLabel: "lq"},
		},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To[int32](1),
			Suspend:     ptr.To(false),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}},
			}},
		},
	}}
}

func (b *jobBuilder) namespace(ns string) *jobBuilder { b.j.Namespace = ns; return b }
func (b *jobBuilder) uid(u string) *jobBuilder        { b.j.UID = types.UID(u); return b }

// request sets a per-pod request of the container.
func (b *jobBuilder) request(res, q string) *jobBuilder {
	b.j.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceName(res)] = resource.MustParse(q)
	return b
}

func (b *jobBuilder) parallelism(n int32) *jobBuilder { b.j.Spec.Parallelism = ptr.To(n); return b }

// admit records an admission of count pods to cq, every requested resource
// on flavor.
func (b *jobBuilder) admit(cq string, count int32, flavor string) *jobBuilder {
	b.admission = &jobframework.Assignment{ClusterQueue: cq, PodSets: []jobframework.PodSetAssignment{{
		Name: "main", Count: count, Flavors: map[string]string{},
	}}}
	for _, r := range slices.Sorted(maps.Keys(b.j.Spec.Template.Spec.Containers[0].Resources.Requests)) {
		b.admission.PodSets[0].Flavors[string(r)] = flavor
	}
	return b
}

// flavorOf changes the flavor one resource was admitted on; "" removes it.
func (b *jobBuilder) flavorOf(res, flavor string) *jobBuilder {
	if flavor == "" {
		delete(b.admission.PodSets[0].Flavors, res)
	} else {
		b.admission.PodSets[0].Flavors[res] = flavor
	}
	return b
}

func (b *jobBuilder) rawAdmission(s string) *jobBuilder { b.raw = &s; return b }
func (b *jobBuilder) suspended() *jobBuilder            { b.j.Spec.Suspend = ptr.To(true); return b }
func (b *jobBuilder) unlabelled() *jobBuilder           { delete(b.j.Labels, v1beta1.QueueNameLabel); return b }

func (b *jobBuilder) condition(t batchv1.JobConditionType, s corev1.ConditionStatus) *jobBuilder {
	b.j.Status.Conditions = append(b.j.Status.Conditions, batchv1.JobCondition{Type: t, Status: s})
	return b
}

func (b *jobBuilder) obj() *batchv1.Job {
	j := b.j.DeepCopy()
	switch {
	case b.raw != nil:
		j.Annotations = map[string]string{jobframework.AdmissionAnnotation: *b.raw}
	case b.admission != nil:
		data, err := json.Marshal(b.admission)
		if err != nil {
			panic(err)
		}
		j.Annotations = map[string]string{jobframework.AdmissionAnnotation: string(data)}
	}
	return j
}

// quotaOpt sets a limit on one resource's quota.
type quotaOpt func(*v1beta1.ResourceQuota)

func borrowing(q string) quotaOpt {
	return func(r *v1beta1.ResourceQuota) { r.BorrowingLimit = ptr.To(resource.MustParse(q)) }
}

func lending(q string) quotaOpt {
	return func(r *v1beta1.ResourceQuota) { r.LendingLimit = ptr.To(resource.MustParse(q)) }
}

// addQuota puts the quota into one resource group, one entry per flavor.
func addQuota(groups *[]v1beta1.ResourceGroup, flavor, res, nominal string, opts []quotaOpt) {
	if len(*groups) == 0 {
		*groups = []v1beta1.ResourceGroup{{}}
	}
	g := &(*groups)[0]
	if !slices.Contains(g.CoveredResources, corev1.ResourceName(res)) {
		g.CoveredResources = append(g.CoveredResources, corev1.ResourceName(res))
	}
	i := slices.IndexFunc(g.Flavors, func(f v1beta1.FlavorQuotas) bool { return f.Name == flavor })
	if i < 0 {
		g.Flavors = append(g.Flavors, v1beta1.FlavorQuotas{Name: flavor})
		i = len(g.Flavors) - 1
	}
	rq := v1beta1.ResourceQuota{Name: corev1.ResourceName(res), NominalQuota: resource.MustParse(nominal)}
	for _, o := range opts {
		o(&rq)
	}
	g.Flavors[i].Resources = append(g.Flavors[i].Resources, rq)
}

type cqBuilder struct{ cq v1beta1.ClusterQueue }

func newCQ(name string) *cqBuilder {
	return &cqBuilder{cq: v1beta1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

func (b *cqBuilder) cohort(c string) *cqBuilder { b.cq.Spec.Cohort = c; return b }

func (b *cqBuilder) quota(flavor, res, nominal string, opts ...quotaOpt) *cqBuilder {
	addQuota(&b.cq.Spec.ResourceGroups, flavor, res, nominal, opts)
	return b
}

func (b *cqBuilder) obj() v1beta1.ClusterQueue { return *b.cq.DeepCopy() }

type cohortBuilder struct{ c v1beta1.Cohort }

func newCohort(name string) *cohortBuilder {
	return &cohortBuilder{c: v1beta1.Cohort{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

func (b *cohortBuilder) parent(p string) *cohortBuilder { b.c.Spec.Parent = p; return b }

func (b *cohortBuilder) quota(flavor, res, nominal string, opts ...quotaOpt) *cohortBuilder {
	addQuota(&b.c.Spec.ResourceGroups, flavor, res, nominal, opts)
	return b
}

func (b *cohortBuilder) obj() v1beta1.Cohort { return *b.c.DeepCopy() }

// queueObject is a builder of a queue object of a Config.
type queueObject interface{ addTo(*Config) }

func (b *cqBuilder) addTo(c *Config)     { c.ClusterQueues = append(c.ClusterQueues, b.obj()) }
func (b *cohortBuilder) addTo(c *Config) { c.Cohorts = append(c.Cohorts, b.obj()) }

// config assembles a Config from builders.
func config(parts ...queueObject) Config {
	var cfg Config
	for _, p := range parts {
		p.addTo(&cfg)
	}
	return cfg
}
