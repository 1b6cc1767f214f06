package job

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/queueconfig"
)

func TestPodRequests(t *testing.T) {
	cases := []struct {
		name string
		job  *jobBuilder
		want corev1.ResourceList
	}{
		{
			name: "no resources gives an empty list",
			job:  makeJob("j"),
			want: corev1.ResourceList{},
		},
		{
			name: "one container's requests",
			job:  makeJob("j").containers(ctr("a").req("cpu", "500m", "memory", "1Gi")),
			want: rl("cpu", "500m", "memory", "1Gi"),
		},
		{
			name: "app containers add up",
			job: makeJob("j").containers(
				ctr("a").req("cpu", "1", "memory", "1Gi"),
				ctr("b").req("cpu", "250m", "memory", "512Mi"),
			),
			want: rl("cpu", "1250m", "memory", "1536Mi"),
		},
		{
			name: "limits stand in for missing requests",
			job:  makeJob("j").containers(ctr("a").req("memory", "1Gi").lim("cpu", "2", "memory", "4Gi", "nvidia.com/gpu", "1")),
			want: rl("cpu", "2", "memory", "1Gi", "nvidia.com/gpu", "1"),
		},
		{
			name: "a request wins over its limit",
			job:  makeJob("j").containers(ctr("a").req("cpu", "1").lim("cpu", "3")),
			want: rl("cpu", "1"),
		},
		{
			name: "an init container bigger than the app containers dominates",
			job: makeJob("j").
				initContainers(ctr("fetch").req("cpu", "4", "memory", "512Mi")).
				containers(ctr("a").req("cpu", "1", "memory", "2Gi")),
			want: rl("cpu", "4", "memory", "2Gi"),
		},
		{
			name: "init containers run one at a time: the largest counts, not the sum",
			job: makeJob("j").
				initContainers(ctr("one").req("cpu", "3"), ctr("two").req("cpu", "2")).
				containers(ctr("a").req("cpu", "1")),
			want: rl("cpu", "3"),
		},
		{
			name: "an init container's limit stands in for its request",
			job: makeJob("j").
				initContainers(ctr("fetch").lim("memory", "8Gi")).
				containers(ctr("a").req("memory", "1Gi")),
			want: rl("memory", "8Gi"),
		},
		{
			name: "a sidecar adds to the running sum",
			job: makeJob("j").
				initContainers(sidecar("proxy").req("cpu", "200m", "memory", "128Mi")).
				containers(ctr("a").req("cpu", "1", "memory", "1Gi")),
			want: rl("cpu", "1200m", "memory", "1152Mi"),
		},
		{
			name: "an init container after a sidecar runs alongside it",
			job: makeJob("j").
				initContainers(sidecar("proxy").req("cpu", "1"), ctr("migrate").req("cpu", "3")).
				containers(ctr("a").req("cpu", "1")),
			want: rl("cpu", "4"), // init phase 1+3 beats running 1+1
		},
		{
			name: "an init container before a sidecar does not count it",
			job: makeJob("j").
				initContainers(ctr("migrate").req("cpu", "3"), sidecar("proxy").req("cpu", "1")).
				containers(ctr("a").req("cpu", "1")),
			want: rl("cpu", "3"), // init phase 3 beats running 1+1
		},
		{
			name: "sidecars accumulate across init containers",
			job: makeJob("j").
				initContainers(
					sidecar("s1").req("memory", "1Gi"),
					ctr("i1").req("memory", "1Gi"),
					sidecar("s2").req("memory", "1Gi"),
					ctr("i2").req("memory", "2Gi"),
				).
				containers(ctr("a").req("memory", "1Gi")),
			want: rl("memory", "4Gi"), // i2 runs with s1 and s2: 1+1+2; running is 1+1+1
		},
		{
			name: "pod overhead is added on top",
			job: makeJob("j").
				initContainers(ctr("fetch").req("cpu", "2")).
				containers(ctr("a").req("cpu", "1", "memory", "1Gi")).
				overhead(rl("cpu", "100m", "memory", "64Mi")),
			want: rl("cpu", "2100m", "memory", "1088Mi"),
		},
		{
			name: "pod-level requests replace the container sum for cpu and memory only",
			job: makeJob("j").
				containers(
					ctr("a").req("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "1"),
					ctr("b").req("cpu", "1", "memory", "1Gi"),
				).
				podResources(rl("cpu", "1500m", "memory", "3Gi"), nil),
			want: rl("cpu", "1500m", "memory", "3Gi", "nvidia.com/gpu", "1"),
		},
		{
			name: "a pod-level limit stands in when no container requests the resource",
			job: makeJob("j").
				containers(ctr("a").req("cpu", "1")).
				podResources(nil, rl("cpu", "4", "memory", "2Gi")),
			want: rl("cpu", "1", "memory", "2Gi"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := tc.job.obj()
			got := jobframework.PodRequests(&job.Spec.Template.Spec)
			if diff := cmp.Diff(tc.want, got, quantityCmp); diff != "" {
				t.Errorf("jobframework.PodRequests() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodRequestsNilSpec(t *testing.T) {
	if got := jobframework.PodRequests(nil); len(got) != 0 {
		t.Errorf("jobframework.PodRequests(nil) = %v, want empty", got)
	}
}

func TestPodRequestsDoesNotMutateTheJob(t *testing.T) {
	job := makeJob("j").
		initContainers(sidecar("proxy").req("cpu", "1")).
		containers(ctr("a").req("cpu", "1"), ctr("b").req("cpu", "1")).
		overhead(rl("cpu", "1")).obj()
	before := job.DeepCopy()
	_ = jobframework.PodRequests(&job.Spec.Template.Spec)
	_ = jobframework.PodRequests(&job.Spec.Template.Spec)
	if diff := cmp.Diff(before, job, quantityCmp); diff != "" {
		t.Errorf("PodRequests changed its input (-before +after):\n%s", diff)
	}
}

func TestWorkloadFromJobCounts(t *testing.T) {
	cases := []struct {
		name         string
		job          *jobBuilder
		wantCount    int32
		wantMinCount int32
		wantErr      error
		wantErrText  string
	}{
		{
			name:         "parallelism unset defaults to one pod",
			job:          makeJob("j").noParallelism(),
			wantCount:    1,
			wantMinCount: 1,
		},
		{
			name:         "parallelism is the count",
			job:          makeJob("j").parallelism(4),
			wantCount:    4,
			wantMinCount: 4,
		},
		{
			name:         "completions below parallelism cap the count",
			job:          makeJob("j").parallelism(5).completions(3),
			wantCount:    3,
			wantMinCount: 3,
		},
		{
			name:         "completions above parallelism change nothing",
			job:          makeJob("j").parallelism(2).completions(10),
			wantCount:    2,
			wantMinCount: 2,
		},
		{
			name:         "min-parallelism allows partial admission",
			job:          makeJob("j").parallelism(4).annotation(MinParallelismAnnotation, "2"),
			wantCount:    4,
			wantMinCount: 2,
		},
		{
			name:         "Kueue's min-parallelism annotation is read too",
			job:          makeJob("j").parallelism(4).annotation(KueueMinParallelismAnnotation, "2"),
			wantCount:    4,
			wantMinCount: 2,
		},
		{
			name:         "Sluice's min-parallelism wins over Kueue's",
			job:          makeJob("j").parallelism(4).annotation(KueueMinParallelismAnnotation, "1").annotation(MinParallelismAnnotation, "3"),
			wantCount:    4,
			wantMinCount: 3,
		},
		{
			name:        "a bad Kueue min-parallelism is refused by its name",
			job:         makeJob("j").parallelism(4).annotation(KueueMinParallelismAnnotation, "9"),
			wantErr:     ErrBadAnnotation,
			wantErrText: KueueMinParallelismAnnotation,
		},
		{
			name:         "min-parallelism may equal parallelism",
			job:          makeJob("j").parallelism(4).annotation(MinParallelismAnnotation, "4"),
			wantCount:    4,
			wantMinCount: 4,
		},
		{
			name:         "min-parallelism is capped by the completions-capped count",
			job:          makeJob("j").parallelism(4).completions(2).annotation(MinParallelismAnnotation, "3"),
			wantCount:    2,
			wantMinCount: 2,
		},
		{
			name:         "a partially admitted job still asks for its original parallelism",
			job:          makeJob("j").parallelism(2).suspend(false).annotation(OriginalAnnotation, `{"parallelism":4}`).annotation(MinParallelismAnnotation, "2"),
			wantCount:    4,
			wantMinCount: 2,
		},
		{
			name:        "min-parallelism that is not a number is refused",
			job:         makeJob("j").parallelism(4).annotation(MinParallelismAnnotation, "two"),
			wantErr:     ErrBadAnnotation,
			wantErrText: MinParallelismAnnotation,
		},
		{
			name:        "min-parallelism of zero is refused",
			job:         makeJob("j").parallelism(4).annotation(MinParallelismAnnotation, "0"),
			wantErr:     ErrBadAnnotation,
			wantErrText: MinParallelismAnnotation,
		},
		{
			name:        "min-parallelism above parallelism is refused",
			job:         makeJob("j").parallelism(4).annotation(MinParallelismAnnotation, "5"),
			wantErr:     ErrBadAnnotation,
			wantErrText: MinParallelismAnnotation,
		},
		{
			name:        "negative min-parallelism is refused",
			job:         makeJob("j").parallelism(4).annotation(MinParallelismAnnotation, "-1"),
			wantErr:     ErrBadAnnotation,
			wantErrText: MinParallelismAnnotation,
		},
		{
			name:        "min-parallelism beyond int32 is refused",
			job:         makeJob("j").parallelism(4).annotation(MinParallelismAnnotation, "99999999999"),
			wantErr:     ErrBadAnnotation,
			wantErrText: MinParallelismAnnotation,
		},
		{
			name:        "a garbled original annotation is refused",
			job:         makeJob("j").annotation(OriginalAnnotation, "{not json"),
			wantErr:     ErrBadAnnotation,
			wantErrText: OriginalAnnotation,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wl, err := workloadFromJob(tc.job.obj(), nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("workloadFromJob() error = %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErrText) {
					t.Errorf("workloadFromJob() error %q does not name %q", err, tc.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatalf("workloadFromJob() unexpected error: %v", err)
			}
			got := [2]int32{wl.PodSets[0].Count, wl.PodSets[0].MinCount}
			if diff := cmp.Diff([2]int32{tc.wantCount, tc.wantMinCount}, got); diff != "" {
				t.Errorf("[Count, MinCount] mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkloadFromJobPriority(t *testing.T) {
	resolver := jobframework.StaticPriorityResolver{
		WorkloadPriorityClasses: map[string]int32{"urgent": 1000, "batch": 10},
		PriorityClasses:         map[string]int32{"system-high": 5000, "low": -5},
	}
	withDefault := resolver
	withDefault.DefaultPriorityClass = "low"
	cases := []struct {
		name         string
		job          *jobBuilder
		resolver     jobframework.PriorityResolver
		wantClass    string
		wantPriority int32
		wantErr      error
		wantErrText  string
	}{
		{
			name:     "no class means priority zero",
			job:      makeJob("j"),
			resolver: resolver,
		},
		{
			name:         "the WorkloadPriorityClass label sets the priority",
			job:          makeJob("j").workloadPriorityClass("urgent"),
			resolver:     resolver,
			wantClass:    "urgent",
			wantPriority: 1000,
		},
		{
			name:         "the WorkloadPriorityClass label wins over the pod's PriorityClass",
			job:          makeJob("j").workloadPriorityClass("batch").podPriorityClass("system-high"),
			resolver:     resolver,
			wantClass:    "batch",
			wantPriority: 10,
		},
		{
			name:         "the pod template's priorityClassName is used without the label",
			job:          makeJob("j").podPriorityClass("low"),
			resolver:     resolver,
			wantClass:    "low",
			wantPriority: -5,
		},
		{
			name:        "a missing WorkloadPriorityClass is an error naming the label",
			job:         makeJob("j").workloadPriorityClass("nope"),
			resolver:    resolver,
			wantErr:     ErrPriorityClassNotFound,
			wantErrText: "sluice.dev/priority-class",
		},
		{
			name:        "a missing PriorityClass is an error naming the field",
			job:         makeJob("j").podPriorityClass("nope"),
			resolver:    resolver,
			wantErr:     ErrPriorityClassNotFound,
			wantErrText: "priorityClassName",
		},
		{
			name:        "a named class without a resolver is an error",
			job:         makeJob("j").workloadPriorityClass("urgent"),
			wantErr:     ErrNoPriorityResolver,
			wantErrText: "urgent",
		},
		{
			name: "no class needs no resolver",
			job:  makeJob("j"),
		},
		{
			name:         "no class: the globalDefault PriorityClass, as in Kueue",
			job:          makeJob("j"),
			resolver:     withDefault,
			wantClass:    "low",
			wantPriority: -5,
		},
		{
			name:         "a named class wins over the globalDefault",
			job:          makeJob("j").podPriorityClass("system-high"),
			resolver:     withDefault,
			wantClass:    "system-high",
			wantPriority: 5000,
		},
		{
			name:         "a globalDefault that is gone counts as none",
			job:          makeJob("j"),
			resolver:     jobframework.StaticPriorityResolver{PriorityClasses: map[string]int32{}, DefaultPriorityClass: "gone"},
			wantPriority: 0,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wl, err := workloadFromJob(tc.job.obj(), tc.resolver)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("workloadFromJob() error = %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErrText) {
					t.Errorf("workloadFromJob() error %q does not mention %q", err, tc.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatalf("workloadFromJob() unexpected error: %v", err)
			}
			got := struct {
				Class    string
				Priority int32
			}{wl.PriorityClass, wl.Priority}
			want := struct {
				Class    string
				Priority int32
			}{tc.wantClass, tc.wantPriority}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("priority mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkloadFromJob(t *testing.T) {
	cases := []struct {
		name string
		job  *jobBuilder
		want jobframework.Workload
	}{
		{
			name: "a plain job",
			job: makeJob("train").
				parallelism(3).
				containers(ctr("a").req("cpu", "1").lim("nvidia.com/gpu", "2")).
				nodeSelector("disk", "ssd").
				toleration(userToleration),
			want: jobframework.Workload{
				Namespace:    "team-a",
				Name:         "train",
				UID:          "uid-train",
				LocalQueue:   "lq",
				CreationTime: created,
				PodSets: []jobframework.WorkloadPodSet{{
					Name:         MainPodSet,
					Count:        3,
					MinCount:     3,
					Requests:     rl("cpu", "1", "nvidia.com/gpu", "2"),
					NodeSelector: map[string]string{"disk": "ssd"},
					Tolerations:  []corev1.Toleration{userToleration},
				}},
			},
		},
		{
			name: "an admitted job reports its own selector and tolerations, not the flavor's",
			job: makeJob("train").
				suspend(false).
				containers(ctr("a").req("cpu", "1")).
				nodeSelector("disk", "ssd").
				nodeSelector("sluice.dev/capacity", "spot").
				toleration(spotToleration).
				annotation(OriginalAnnotation, `{"parallelism":1,"nodeSelector":{"disk":"ssd"}}`).
				annotation(AdmissionAnnotation, `{"clusterQueue":"cq","podSets":[{"name":"main","count":1,"flavors":{"cpu":"spot"}}]}`),
			want: jobframework.Workload{
				Namespace:    "team-a",
				Name:         "train",
				UID:          "uid-train",
				LocalQueue:   "lq",
				CreationTime: created,
				PodSets: []jobframework.WorkloadPodSet{{
					Name:         MainPodSet,
					Count:        1,
					MinCount:     1,
					Requests:     rl("cpu", "1"),
					NodeSelector: map[string]string{"disk": "ssd"},
				}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := workloadFromJob(tc.job.obj(), jobframework.StaticPriorityResolver{})
			if err != nil {
				t.Fatalf("workloadFromJob() unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, quantityCmp); diff != "" {
				t.Errorf("workloadFromJob() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkloadFromJobNotManaged(t *testing.T) {
	cases := []struct {
		name string
		job  *jobBuilder
	}{
		{name: "no queue label", job: makeJob("j").noQueue()},
		{name: "empty queue label", job: makeJob("j").queue("")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := workloadFromJob(tc.job.obj(), nil)
			if !errors.Is(err, ErrNotManaged) {
				t.Errorf("workloadFromJob() error = %v, want ErrNotManaged", err)
			}
		})
	}
}

func TestWorkloadFromJobNil(t *testing.T) {
	if _, err := workloadFromJob(nil, nil); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("workloadFromJob(nil) error = %v, want ErrInvalidJob", err)
	}
}

// TestWorkloadWithRequests: the service's resources block changes what a
// Job is queued with (here: a resource excluded, one transformed), and
// never the Job's pods.
func TestWorkloadWithRequests(t *testing.T) {
	r := &queueconfig.Resources{
		ExcludeResourcePrefixes: []string{"example.com/nic"},
		Transformations: []queueconfig.ResourceTransformation{
			{Input: "nvidia.com/mig-1g.5gb", Strategy: queueconfig.Replace, Outputs: rl("example.com/accelerator-memory", "5Gi")},
		},
	}
	job := makeJob("j").parallelism(2).containers(ctr("a").req("cpu", "1", "example.com/nic", "1").lim("nvidia.com/mig-1g.5gb", "2")).obj()
	before := job.DeepCopy()
	w, err := jobframework.WorkloadOf("job", &Job{job}, nil, jobframework.WithRequests(r.Apply))
	if err != nil {
		t.Fatal(err)
	}
	want := rl("cpu", "1", "example.com/accelerator-memory", "10Gi")
	if diff := cmp.Diff(want, w.PodSets[0].Requests, quantityCmp); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if w.PodSets[0].Count != 2 {
		t.Errorf("count = %d, want 2", w.PodSets[0].Count)
	}
	if diff := cmp.Diff(before, job, quantityCmp); diff != "" {
		t.Errorf("the Job changed (-before +after):\n%s", diff)
	}
}

// TestWorkloadWithDevices: a Job's pods' device claims count as the
// mapped resources; a claim that can never be counted makes the Job
// invalid, and one whose template cannot be read yet is tried again.
func TestWorkloadWithDevices(t *testing.T) {
	tmpl := "gpus"
	job := makeJob("j").parallelism(2).containers(ctr("a").req("cpu", "1")).obj()
	job.Spec.Template.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	cases := []struct {
		name         string
		counter      jobframework.DeviceCounter
		wantRequests corev1.ResourceList
		wantErr      error
	}{
		{
			name: "counted",
			counter: func(ns string, claims []corev1.PodResourceClaim) (corev1.ResourceList, error) {
				if ns != job.Namespace || len(claims) != 1 || *claims[0].ResourceClaimTemplateName != tmpl {
					return nil, fmt.Errorf("asked about %s %v", ns, claims)
				}
				return rl("example.com/gpu", "2"), nil
			},
			wantRequests: rl("cpu", "1", "example.com/gpu", "2"),
		},
		{
			name: "unmapped class: invalid",
			counter: func(string, []corev1.PodResourceClaim) (corev1.ResourceList, error) {
				return nil, fmt.Errorf("class x: %w", queueconfig.ErrUnmappedDeviceClass)
			},
			wantErr: jobframework.ErrInvalidJob,
		},
		{
			name: "template not readable: later",
			counter: func(string, []corev1.PodResourceClaim) (corev1.ResourceList, error) {
				return nil, errors.New("not found")
			},
			wantErr: jobframework.ErrNotYet,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := jobframework.WorkloadOf("job", &Job{job.DeepCopy()}, nil, jobframework.WithDevices(tc.counter))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.wantRequests, w.PodSets[0].Requests, quantityCmp); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestElasticJobs: the elastic annotation (Sluice's or Kueue's) makes the
// workload elastic; partial admission and topology requests make such a
// job invalid, with the reason.
func TestElasticJobs(t *testing.T) {
	cases := []struct {
		name        string
		job         *jobBuilder
		wantElastic bool
		wantErr     string
	}{
		{name: "no annotation", job: makeJob("j").parallelism(3)},
		{name: "sluice's annotation", job: makeJob("j").parallelism(3).annotation("sluice.dev/elastic-job", "true"), wantElastic: true},
		{name: "kueue's annotation", job: makeJob("j").parallelism(3).annotation("kueue.x-k8s.io/elastic-job", "true"), wantElastic: true},
		{name: "a value other than true", job: makeJob("j").parallelism(3).annotation("sluice.dev/elastic-job", "yes")},
		{
			name:    "partial admission cannot be elastic",
			job:     makeJob("j").parallelism(3).annotation("kueue.x-k8s.io/elastic-job", "true").annotation(MinParallelismAnnotation, "1"),
			wantErr: `pod set "main" allows partial admission`,
		},
		{
			name:    "a topology request cannot be elastic",
			job:     makeJob("j").parallelism(3).annotation("sluice.dev/elastic-job", "true").templateAnnotation("sluice.dev/podset-required-topology", "rack"),
			wantErr: "asks for a topology",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := jobframework.WorkloadOf("job", &Job{tc.job.obj()}, nil)
			if tc.wantErr != "" {
				if !errors.Is(err, jobframework.ErrInvalidJob) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrInvalidJob saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.Elastic != tc.wantElastic {
				t.Errorf("Elastic = %t, want %t", w.Elastic, tc.wantElastic)
			}
		})
	}
}
