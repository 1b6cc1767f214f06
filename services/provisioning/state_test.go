package provisioning

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	autoscaling "k8s.io/autoscaler/cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/events"
)

// requestBuilder makes ProvisioningRequests for tests.
type requestBuilder struct {
	pr autoscaling.ProvisioningRequest
}

func makeRequest(name string, attempt int) *requestBuilder {
	b := &requestBuilder{}
	b.pr.Name = name
	b.pr.Annotations = map[string]string{AttemptAnnotation: strconv.Itoa(attempt), PodSetsAnnotation: "main"}
	b.pr.Spec.ProvisioningClassName = "check-capacity.autoscaling.x-k8s.io"
	return b
}

func (b *requestBuilder) condition(t string, msg string) *requestBuilder {
	b.pr.Status.Conditions = append(b.pr.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: t, Message: msg})
	return b
}

func (b *requestBuilder) podSets(names string) *requestBuilder {
	b.pr.Annotations[PodSetsAnnotation] = names
	return b
}

func (b *requestBuilder) detail(k, v string) *requestBuilder {
	if b.pr.Status.ProvisioningClassDetails == nil {
		b.pr.Status.ProvisioningClassDetails = map[string]autoscaling.Detail{}
	}
	b.pr.Status.ProvisioningClassDetails[k] = autoscaling.Detail(v)
	return b
}

func (b *requestBuilder) obj() *autoscaling.ProvisioningRequest { return b.pr.DeepCopy() }

func ptr[T any](v T) *T { return &v }

func consume(name string) map[string]string {
	return map[string]string{autoscaling.ProvisioningRequestPodAnnotationKey: name,
		autoscaling.ProvisioningClassPodAnnotationKey: "check-capacity.autoscaling.x-k8s.io"}
}

func TestAnswerOf(t *testing.T) {
	twoRetries := v1beta1.ProvisioningRequestConfigSpec{RetryStrategy: &v1beta1.ProvisioningRequestRetryStrategy{
		BackoffLimitCount: ptr[int32](2), BackoffBaseSeconds: ptr[int32](10), BackoffMaxSeconds: ptr[int32](25)}}
	withSelector := v1beta1.ProvisioningRequestConfigSpec{PodSetUpdates: &v1beta1.ProvisioningRequestPodSetUpdates{
		NodeSelector: []v1beta1.ProvisioningRequestPodSetUpdatesNodeSelector{
			{Key: "cloud.example/pool", ValueFromProvisioningClassDetail: "RequestKey"},
			{Key: "cloud.example/zone", ValueFromProvisioningClassDetail: "Missing"},
		}}}
	cases := []struct {
		name    string
		pr      *requestBuilder
		spec    v1beta1.ProvisioningRequestConfigSpec
		started bool
		want    checks.Answer
	}{
		{
			name: "no condition yet: pending",
			pr:   makeRequest("r-1", 1),
			want: checks.Answer{},
		},
		{
			name: "accepted, not provisioned yet: pending",
			pr:   makeRequest("r-1", 1).condition(autoscaling.Accepted, "queued"),
			want: checks.Answer{},
		},
		{
			name: "provisioned: ready, and the pods consume the request",
			pr:   makeRequest("r-1", 1).condition(autoscaling.Provisioned, "capacity is there"),
			want: checks.Answer{State: events.CheckReady, Message: "capacity is there",
				PodSetUpdates: []events.PodSetUpdateV1{{Name: "main", Annotations: consume("r-1")}}},
		},
		{
			name: "provisioned for two pod sets: both get the annotations and the class's node selector",
			pr:   makeRequest("r-1", 1).podSets("driver,workers").condition(autoscaling.Provisioned, "ok").detail("RequestKey", "pool-7"),
			spec: withSelector,
			want: checks.Answer{State: events.CheckReady, Message: "ok", PodSetUpdates: []events.PodSetUpdateV1{
				{Name: "driver", Annotations: consume("r-1"), NodeSelector: map[string]string{"cloud.example/pool": "pool-7"}},
				{Name: "workers", Annotations: consume("r-1"), NodeSelector: map[string]string{"cloud.example/pool": "pool-7"}},
			}},
		},
		{
			name: "the first failure is retried after the base delay (defaults: 60 s)",
			pr:   makeRequest("r-1", 1).condition(autoscaling.Failed, "no capacity"),
			want: checks.Answer{State: events.CheckRetry, Message: "Retrying after failure: no capacity", RequeueAfter: time.Minute},
		},
		{
			name: "the second failure waits twice as long",
			pr:   makeRequest("r-2", 2).condition(autoscaling.Failed, "no capacity"),
			spec: twoRetries,
			want: checks.Answer{State: events.CheckRetry, Message: "Retrying after failure: no capacity", RequeueAfter: 20 * time.Second},
		},
		{
			name: "a failure once every retry is spent rejects",
			pr:   makeRequest("r-3", 3).condition(autoscaling.Failed, "no capacity"),
			spec: twoRetries,
			want: checks.Answer{State: events.CheckRejected, Message: "no capacity"},
		},
		{
			name: "no retries at all: the first failure rejects",
			pr:   makeRequest("r-1", 1).condition(autoscaling.Failed, "no capacity"),
			spec: v1beta1.ProvisioningRequestConfigSpec{RetryStrategy: &v1beta1.ProvisioningRequestRetryStrategy{BackoffLimitCount: ptr[int32](0)}},
			want: checks.Answer{State: events.CheckRejected, Message: "no capacity"},
		},
		{
			name: "a failure wins over provisioned",
			pr:   makeRequest("r-1", 1).condition(autoscaling.Provisioned, "ok").condition(autoscaling.Failed, "lost it"),
			want: checks.Answer{State: events.CheckRetry, Message: "Retrying after failure: lost it", RequeueAfter: time.Minute},
		},
		{
			name: "a booking that expires before the workload starts is retried",
			pr:   makeRequest("r-1", 1).condition(autoscaling.Provisioned, "ok").condition(autoscaling.BookingExpired, "not used in time"),
			want: checks.Answer{State: events.CheckRetry, Message: "Retrying after booking expired: not used in time", RequeueAfter: time.Minute},
		},
		{
			name:    "a booking that expires once the workload runs changes nothing",
			pr:      makeRequest("r-1", 1).condition(autoscaling.Provisioned, "ok").condition(autoscaling.BookingExpired, "not used in time"),
			started: true,
			want:    checks.Answer{},
		},
		{
			name:    "revoked capacity rejects, started or not",
			pr:      makeRequest("r-1", 1).condition(autoscaling.Provisioned, "ok").condition(autoscaling.CapacityRevoked, "nodes gone"),
			started: true,
			want:    checks.Answer{State: events.CheckRejected, Message: "nodes gone"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := answerOf(tc.pr.obj(), tc.spec, tc.started)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answerOf() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	cases := []struct {
		n, base, max int32
		want         time.Duration
	}{
		{1, 60, 1800, time.Minute},
		{2, 60, 1800, 2 * time.Minute},
		{3, 60, 1800, 4 * time.Minute},
		{6, 60, 1800, 30 * time.Minute},
		{40, 60, 1800, 30 * time.Minute},
		{1, 0, 1800, 0},
	}
	for _, tc := range cases {
		if got := Backoff(tc.n, tc.base, tc.max); got != tc.want {
			t.Errorf("Backoff(%d, %d, %d) = %v, want %v", tc.n, tc.base, tc.max, got, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	w := events.WorkloadRef{Kind: "job", Namespace: "ns", Name: "train", UID: "u"}
	if got, want := RequestName(w, "prov", 2), "job-train-prov-2"; got != want {
		t.Errorf("RequestName() = %q, want %q", got, want)
	}
	long := events.WorkloadRef{Kind: "job", Namespace: "ns", Name: strings.Repeat("a", 250), UID: "u"}
	a, b := RequestName(long, "prov", 1), RequestName(long, "prov", 2)
	if len(a) > maxName || len(b) > maxName || a == b {
		t.Errorf("long names %q and %q: want distinct, at most %d characters", a, b, maxName)
	}
	if got := TemplateName("job-train-prov-2", "main"); got != "ppt-job-train-prov-2-main" {
		t.Errorf("TemplateName() = %q", got)
	}
}

func TestParameters(t *testing.T) {
	spec := v1beta1.ProvisioningRequestConfigSpec{Parameters: map[string]string{"ValidUntilSeconds": "600", "Zone": "a"}}
	got := parameters(spec, map[string]string{
		"provreq.kueue.x-k8s.io/ValidUntilSeconds": "60",
		"provreq.sluice.dev/Extra":                 "x",
		"other.example/ignored":                    "y",
	})
	want := map[string]autoscaling.Parameter{"ValidUntilSeconds": "60", "Zone": "a", "Extra": "x"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parameters() mismatch (-want +got):\n%s", diff)
	}
	if got := parameters(v1beta1.ProvisioningRequestConfigSpec{}, nil); got != nil {
		t.Errorf("parameters() of nothing = %v, want nil", got)
	}
}

func pod(gpus string, selector map[string]string) corev1.PodTemplateSpec {
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}
	if gpus != "" {
		c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus)}
	}
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}, NodeSelector: selector}}
}

func TestManagedAndMerged(t *testing.T) {
	sets := []podSet{
		{names: []string{"launcher"}, count: 1, template: pod("", nil)},
		{names: []string{"a"}, count: 2, template: pod("1", nil)},
		{names: []string{"b"}, count: 3, template: pod("1", nil)},
		{names: []string{"c"}, count: 0, template: pod("1", nil)},
		{names: []string{"d"}, count: 1, template: pod("1", map[string]string{"zone": "z"})},
	}
	got := managed(sets, []corev1.ResourceName{"nvidia.com/gpu"})
	if diff := cmp.Diff("a,b,d", names(got)); diff != "" {
		t.Errorf("managed() pod sets mismatch (-want +got):\n%s", diff)
	}
	if n := names(managed(sets, nil)); n != "launcher,a,b,d" {
		t.Errorf("managed() with no resources named = %q, want every pod set with pods", n)
	}
	merged := merge(got, v1beta1.IdenticalWorkloadSchedulingRequirements)
	var counts []int32
	var groups []string
	for _, ps := range merged {
		counts = append(counts, ps.count)
		groups = append(groups, strings.Join(ps.names, "+"))
	}
	if diff := cmp.Diff([]string{"a+b", "d"}, groups); diff != "" {
		t.Errorf("merge() groups mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int32{5, 1}, counts); diff != "" {
		t.Errorf("merge() counts mismatch (-want +got):\n%s", diff)
	}
	if n := len(merge(got, "")); n != 3 {
		t.Errorf("merge() with no policy = %d templates, want 3", n)
	}
}

func TestLimitsAsRequests(t *testing.T) {
	spec := pod("2", nil).Spec
	limitsAsRequests(&spec)
	got := spec.Containers[0].Resources.Requests["nvidia.com/gpu"]
	if got.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("request of a limited-only resource = %s, want 2", got.String())
	}
}
