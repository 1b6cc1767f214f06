package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/jobframework"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// apiServerWrite applies a merge patch the way the API server would for the
// Job (subresource "") or its status subresource ("status"), enforcing the
// Job update rules this package relies on:
//
//   - KEP-2926: the pod template may change only in nodeSelector,
//     tolerations, schedulingGates, labels and annotations, and only while
//     the stored Job is suspended with no status.startTime;
//   - the uid in the patch must match;
//   - status.startTime may change only while the Job is suspended.
func apiServerWrite(t *testing.T, stored *batchv1.Job, subresource string, patch []byte) (*batchv1.Job, error) {
	t.Helper()
	var meta struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &meta); err != nil {
		t.Fatalf("patch is not JSON: %v", err)
	}
	if meta.Metadata.UID != "" && meta.Metadata.UID != string(stored.UID) {
		return nil, fmt.Errorf("uid mismatch: patch %q, stored %q", meta.Metadata.UID, stored.UID)
	}
	patched := applyMergePatch(t, stored, patch)

	if subresource == "status" {
		out := stored.DeepCopy()
		out.Status = patched.Status
		if !apiequality.Semantic.DeepEqual(stored.Status.StartTime, out.Status.StartTime) && !isSuspended(out) {
			return nil, errors.New("status.startTime: cannot be changed for an unsuspended job")
		}
		return out, nil
	}

	out := patched
	out.Status = stored.Status // the main resource ignores status changes
	oldTpl, newTpl := stored.Spec.Template.DeepCopy(), out.Spec.Template.DeepCopy()
	if apiequality.Semantic.DeepEqual(oldTpl, newTpl) {
		return out, nil
	}
	if !isSuspended(stored) || stored.Status.StartTime != nil {
		return nil, errors.New("spec.template: field is immutable (job is not suspended or has started)")
	}
	oldTpl.Spec.NodeSelector, oldTpl.Spec.Tolerations = newTpl.Spec.NodeSelector, newTpl.Spec.Tolerations
	oldTpl.Spec.SchedulingGates = newTpl.Spec.SchedulingGates
	oldTpl.Labels, oldTpl.Annotations = newTpl.Labels, newTpl.Annotations
	if !apiequality.Semantic.DeepEqual(oldTpl, newTpl) {
		return nil, errors.New("spec.template: field is immutable beyond scheduling directives")
	}
	return out, nil
}

// withoutSluiceAnnotations returns job minus Sluice's bookkeeping
// annotations, with a nil map if none is left.
func withoutSluiceAnnotations(job *batchv1.Job) *batchv1.Job {
	out := job.DeepCopy()
	delete(out.Annotations, OriginalAnnotation)
	delete(out.Annotations, AdmissionAnnotation)
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	return out
}

func TestAdmissionPatch(t *testing.T) {
	cases := []struct {
		name          string
		job           *jobBuilder
		assignment    Assignment
		wantJob       *jobBuilder // without the sluice.dev/original and /admission annotations
		wantOriginal  []jobframework.Original
		wantAdmission Assignment
	}{
		{
			name:          "a flavor's node labels join the template's own selector",
			job:           makeJob("j").nodeSelector("disk", "ssd"),
			assignment:    admit(1, "cpu", "on-demand"),
			wantJob:       makeJob("j").suspend(false).nodeSelector("disk", "ssd").nodeSelector("sluice.dev/capacity", "on-demand"),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](1), NodeSelector: map[string]string{"disk": "ssd"}}},
			wantAdmission: admit(1, "cpu", "on-demand"),
		},
		{
			name:       "a flavor's tolerations follow the template's own",
			job:        makeJob("j").toleration(userToleration),
			assignment: admit(1, "cpu", "spot"),
			wantJob: makeJob("j").suspend(false).
				nodeSelector("sluice.dev/capacity", "spot").
				toleration(userToleration).toleration(spotToleration),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](1), Tolerations: []corev1.Toleration{userToleration}}},
			wantAdmission: admit(1, "cpu", "spot"),
		},
		{
			name:       "two flavors for two resources both apply",
			job:        makeJob("j").parallelism(2),
			assignment: admit(2, "cpu", "spot", "nvidia.com/gpu", "a100"),
			wantJob: makeJob("j").suspend(false).parallelism(2).
				nodeSelector("sluice.dev/capacity", "spot").nodeSelector("gpu.model", "a100").
				toleration(gpuToleration).toleration(spotToleration), // flavors in name order
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](2)}},
			wantAdmission: admit(2, "cpu", "spot", "nvidia.com/gpu", "a100"),
		},
		{
			name:       "a toleration the template already has is not repeated",
			job:        makeJob("j").toleration(spotToleration),
			assignment: admit(1, "cpu", "spot"),
			wantJob: makeJob("j").suspend(false).
				nodeSelector("sluice.dev/capacity", "spot").toleration(spotToleration),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](1), Tolerations: []corev1.Toleration{spotToleration}}},
			wantAdmission: admit(1, "cpu", "spot"),
		},
		{
			name:          "a selector the template already has agrees with the flavor",
			job:           makeJob("j").nodeSelector("sluice.dev/capacity", "spot"),
			assignment:    admit(1, "cpu", "spot"),
			wantJob:       makeJob("j").suspend(false).nodeSelector("sluice.dev/capacity", "spot").toleration(spotToleration),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](1), NodeSelector: map[string]string{"sluice.dev/capacity": "spot"}}},
			wantAdmission: admit(1, "cpu", "spot"),
		},
		{
			name:          "a flavor without labels or tolerations only unsuspends",
			job:           makeJob("j").nodeSelector("disk", "ssd"),
			assignment:    admit(1, "cpu", "default"),
			wantJob:       makeJob("j").suspend(false).nodeSelector("disk", "ssd"),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](1), NodeSelector: map[string]string{"disk": "ssd"}}},
			wantAdmission: admit(1, "cpu", "default"),
		},
		{
			name:          "partial admission lowers parallelism",
			job:           makeJob("j").parallelism(8).annotation(MinParallelismAnnotation, "2"),
			assignment:    admit(3, "cpu", "default"),
			wantJob:       makeJob("j").suspend(false).parallelism(3).annotation(MinParallelismAnnotation, "2"),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](8)}},
			wantAdmission: admit(3, "cpu", "default"),
		},
		{
			name:          "full admission of a completions-capped job keeps parallelism",
			job:           makeJob("j").parallelism(5).completions(3),
			assignment:    admit(3, "cpu", "default"),
			wantJob:       makeJob("j").suspend(false).parallelism(5).completions(3),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](5)}},
			wantAdmission: admit(3, "cpu", "default"),
		},
		{
			name: "re-admission after an eviction that never restored starts from the original",
			job: makeJob("j").parallelism(2).
				nodeSelector("disk", "ssd").nodeSelector("sluice.dev/capacity", "spot").
				toleration(spotToleration).
				annotation(OriginalAnnotation, `[{"name":"main","scale":4,"nodeSelector":{"disk":"ssd"}}]`).
				annotation(AdmissionAnnotation, `{"clusterQueue":"cq","podSets":[{"name":"main","count":2,"flavors":{"cpu":"spot"}}]}`),
			assignment:    admit(4, "cpu", "on-demand"),
			wantJob:       makeJob("j").suspend(false).parallelism(4).nodeSelector("disk", "ssd").nodeSelector("sluice.dev/capacity", "on-demand"),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](4), NodeSelector: map[string]string{"disk": "ssd"}}},
			wantAdmission: admit(4, "cpu", "on-demand"),
		},
		{
			name: "an admission check's update joins the template and the flavor's",
			job:  makeJob("j").templateLabel("app", "train").nodeSelector("disk", "ssd"),
			assignment: withUpdate(admit(1, "cpu", "spot"), jobframework.PodSetUpdate{
				Labels:       map[string]string{"provisioned": "yes"},
				Annotations:  map[string]string{"autoscaling.x-k8s.io/consume-provisioning-request": "j-prov-1"},
				NodeSelector: map[string]string{"pool": "p1"},
				Tolerations:  []corev1.Toleration{userToleration, spotToleration},
			}),
			wantJob: makeJob("j").suspend(false).
				templateLabel("app", "train").templateLabel("provisioned", "yes").
				templateAnnotation("autoscaling.x-k8s.io/consume-provisioning-request", "j-prov-1").
				nodeSelector("disk", "ssd").nodeSelector("sluice.dev/capacity", "spot").nodeSelector("pool", "p1").
				toleration(spotToleration).toleration(userToleration),
			wantOriginal: []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](1), NodeSelector: map[string]string{"disk": "ssd"},
				Meta: true, Labels: map[string]string{"app": "train"}}},
			wantAdmission: withUpdate(admit(1, "cpu", "spot"), jobframework.PodSetUpdate{
				Labels:       map[string]string{"provisioned": "yes"},
				Annotations:  map[string]string{"autoscaling.x-k8s.io/consume-provisioning-request": "j-prov-1"},
				NodeSelector: map[string]string{"pool": "p1"},
				Tolerations:  []corev1.Toleration{userToleration, spotToleration},
			}),
		},
		{
			name:          "an update with only a node selector records no template metadata",
			job:           makeJob("j"),
			assignment:    withUpdate(admit(1, "cpu", "default"), jobframework.PodSetUpdate{NodeSelector: map[string]string{"pool": "p1"}}),
			wantJob:       makeJob("j").suspend(false).nodeSelector("pool", "p1"),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](1)}},
			wantAdmission: withUpdate(admit(1, "cpu", "default"), jobframework.PodSetUpdate{NodeSelector: map[string]string{"pool": "p1"}}),
		},
		{
			name:          "other annotations are kept",
			job:           makeJob("j").annotation("team.example/owner", "ana"),
			assignment:    admit(1, "cpu", "on-demand"),
			wantJob:       makeJob("j").suspend(false).annotation("team.example/owner", "ana").nodeSelector("sluice.dev/capacity", "on-demand"),
			wantOriginal:  []jobframework.Original{{Name: MainPodSet, Scale: ptrTo[int32](1)}},
			wantAdmission: admit(1, "cpu", "on-demand"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := tc.job.obj()
			patch, err := admissionPatch(job, tc.assignment, testFlavors)
			if err != nil {
				t.Fatalf("admissionPatch() unexpected error: %v", err)
			}
			got, err := apiServerWrite(t, job, "", patch)
			if err != nil {
				t.Fatalf("API server would refuse the admission patch %s: %v", patch, err)
			}
			if diff := cmp.Diff(tc.wantJob.obj(), withoutSluiceAnnotations(got), quantityCmp); diff != "" {
				t.Errorf("admitted job mismatch (-want +got):\n%s", diff)
			}
			gotOriginal, ok, err := originalOf(got)
			if err != nil || !ok {
				t.Fatalf("originalOf() = _, %v, %v; want a recorded original", ok, err)
			}
			if diff := cmp.Diff(tc.wantOriginal, gotOriginal); diff != "" {
				t.Errorf("%s mismatch (-want +got):\n%s", OriginalAnnotation, diff)
			}
			gotAdmission, ok, err := admissionOf(got)
			if err != nil || !ok {
				t.Fatalf("admissionOf() = _, %v, %v; want a recorded admission", ok, err)
			}
			if diff := cmp.Diff(tc.wantAdmission, gotAdmission); diff != "" {
				t.Errorf("%s mismatch (-want +got):\n%s", AdmissionAnnotation, diff)
			}
			if !isAdmitted(got) {
				t.Errorf("isAdmitted() = false after admission")
			}
		})
	}
}

// TestAdmissionPatchFormat pins the wire format: one JSON merge patch with
// the uid precondition, the annotations and the spec changes.
func TestAdmissionPatchFormat(t *testing.T) {
	job := makeJob("j").parallelism(4).nodeSelector("disk", "ssd").obj()
	patch, err := admissionPatch(job, admit(2, "cpu", "spot"), testFlavors)
	if err != nil {
		t.Fatalf("admissionPatch() unexpected error: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(patch, &got); err != nil {
		t.Fatalf("patch is not JSON: %v", err)
	}
	want := map[string]any{
		"metadata": map[string]any{
			"uid": "uid-j",
			"annotations": map[string]any{
				OriginalAnnotation:  `[{"name":"main","scale":4,"nodeSelector":{"disk":"ssd"}}]`,
				AdmissionAnnotation: `{"clusterQueue":"cq","podSets":[{"name":"main","count":2,"flavors":{"cpu":"spot"}}]}`,
			},
		},
		"spec": map[string]any{
			"suspend":     false,
			"parallelism": float64(2),
			"template": map[string]any{"spec": map[string]any{
				"nodeSelector": map[string]any{"sluice.dev/capacity": "spot"},
				"tolerations": []any{map[string]any{
					"key": "sluice.dev/spot", "operator": "Exists", "effect": "NoSchedule",
				}},
			}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("patch mismatch (-want +got):\n%s", diff)
	}
}

func TestAdmissionPatchErrors(t *testing.T) {
	cases := []struct {
		name        string
		job         *jobBuilder
		assignment  Assignment
		wantErr     error
		wantErrText string
	}{
		{
			name:        "a flavor label contradicting the template's selector",
			job:         makeJob("j").nodeSelector("sluice.dev/capacity", "on-demand"),
			assignment:  admit(1, "cpu", "spot"),
			wantErr:     ErrNodeSelectorConflict,
			wantErrText: `flavor "spot" needs node label sluice.dev/capacity="spot" but the pod template selects sluice.dev/capacity="on-demand"`,
		},
		{
			name:        "two flavors contradicting each other",
			job:         makeJob("j"),
			assignment:  admit(1, "cpu", "on-demand", "memory", "spot"),
			wantErr:     ErrNodeSelectorConflict,
			wantErrText: `flavors "on-demand" and "spot"`,
		},
		{
			name:        "an admission check's node selector contradicting the template's",
			job:         makeJob("j").nodeSelector("pool", "p0"),
			assignment:  withUpdate(admit(1, "cpu", "default"), jobframework.PodSetUpdate{NodeSelector: map[string]string{"pool": "p1"}}),
			wantErr:     jobframework.ErrPodSetUpdateConflict,
			wantErrText: `sets node selector pool="p1" but the pod template has "p0"`,
		},
		{
			name:        "an admission check's annotation contradicting the template's",
			job:         makeJob("j").templateAnnotation("note", "mine"),
			assignment:  withUpdate(admit(1, "cpu", "default"), jobframework.PodSetUpdate{Annotations: map[string]string{"note": "theirs"}}),
			wantErr:     jobframework.ErrPodSetUpdateConflict,
			wantErrText: `pod set "main": an admission check sets annotation note="theirs"`,
		},
		{
			name:        "an unknown flavor",
			job:         makeJob("j"),
			assignment:  admit(1, "cpu", "h100"),
			wantErr:     ErrInvalidAssignment,
			wantErrText: `"h100"`,
		},
		{
			name:        "a job that is not suspended",
			job:         makeJob("j").suspend(false),
			assignment:  admit(1, "cpu", "spot"),
			wantErr:     ErrNotSuspended,
			wantErrText: "team-a/j",
		},
		{
			name:        "zero pods",
			job:         makeJob("j").parallelism(3),
			assignment:  admit(0, "cpu", "spot"),
			wantErr:     ErrInvalidAssignment,
			wantErrText: "count 0 outside 1..3",
		},
		{
			name:        "more pods than the job runs",
			job:         makeJob("j").parallelism(5).completions(2),
			assignment:  admit(3, "cpu", "spot"),
			wantErr:     ErrInvalidAssignment,
			wantErrText: "count 3 outside 1..2",
		},
		{
			name:        "an unknown pod set",
			job:         makeJob("j"),
			assignment:  Assignment{ClusterQueue: "cq", PodSets: []PodSetAssignment{{Name: "worker", Count: 1}}},
			wantErr:     ErrInvalidAssignment,
			wantErrText: `"worker"`,
		},
		{
			name:        "no ClusterQueue",
			job:         makeJob("j"),
			assignment:  Assignment{PodSets: []PodSetAssignment{{Name: MainPodSet, Count: 1}}},
			wantErr:     ErrInvalidAssignment,
			wantErrText: "clusterQueue",
		},
		{
			name:        "a garbled original annotation",
			job:         makeJob("j").annotation(OriginalAnnotation, "[1,2"),
			assignment:  admit(1, "cpu", "spot"),
			wantErr:     ErrBadAnnotation,
			wantErrText: OriginalAnnotation,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			patch, err := admissionPatch(tc.job.obj(), tc.assignment, testFlavors)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("admissionPatch() = %s, %v; want error %v", patch, err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErrText) {
				t.Errorf("admissionPatch() error %q does not contain %q", err, tc.wantErrText)
			}
		})
	}
}

func TestAdmissionPatchNilJob(t *testing.T) {
	if _, err := admissionPatch(nil, admit(1), testFlavors); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("admissionPatch(nil) error = %v, want ErrInvalidJob", err)
	}
}

// TestAdmissionThenEviction admits a Job, lets it start, evicts it with
// the stop steps through the simulated API server, and expects the Job back
// exactly as it was created; then does it again on another flavor.
func TestAdmissionThenEviction(t *testing.T) {
	cases := []struct {
		name      string
		job       *jobBuilder
		first     Assignment
		second    Assignment
		wantSteps []string // for the first eviction
	}{
		{
			name:      "a bare job on a labelled flavor",
			job:       makeJob("j").noParallelism(),
			first:     admit(1, "cpu", "spot"),
			second:    admit(1, "cpu", "on-demand"),
			wantSteps: []string{"suspend", "unlock", "restore"},
		},
		{
			name: "a job with its own selector, tolerations and annotations",
			job: makeJob("j").parallelism(3).
				nodeSelector("disk", "ssd").toleration(userToleration).
				annotation("team.example/owner", "ana"),
			first:     admit(3, "cpu", "spot", "nvidia.com/gpu", "a100"),
			second:    admit(3, "cpu", "on-demand"),
			wantSteps: []string{"suspend", "unlock", "restore"},
		},
		{
			name:      "a partially admitted job gets its parallelism back",
			job:       makeJob("j").parallelism(6).completions(12).annotation(MinParallelismAnnotation, "2"),
			first:     admit(2, "cpu", "on-demand"),
			second:    admit(5, "cpu", "spot"),
			wantSteps: []string{"suspend", "unlock", "restore"},
		},
		{
			name: "what an admission check added is taken back",
			job:  makeJob("j").templateLabel("app", "train").templateAnnotation("note", "x"),
			first: withUpdate(admit(1, "cpu", "default"), jobframework.PodSetUpdate{
				Labels:      map[string]string{"provisioned": "yes"},
				Annotations: map[string]string{"autoscaling.x-k8s.io/consume-provisioning-request": "j-prov-1"},
			}),
			second: withUpdate(admit(1, "cpu", "default"), jobframework.PodSetUpdate{
				Annotations: map[string]string{"autoscaling.x-k8s.io/consume-provisioning-request": "j-prov-2"},
			}),
			wantSteps: []string{"suspend", "unlock", "restore"},
		},
		{
			name:      "a flavor that changes no template is evicted in one write",
			job:       makeJob("j").parallelism(4).annotation(MinParallelismAnnotation, "1"),
			first:     admit(1, "cpu", "default"),
			second:    admit(4, "cpu", "default"),
			wantSteps: []string{"restore"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			original := tc.job.obj()
			job := original
			for round, assignment := range []Assignment{tc.first, tc.second} {
				patch, err := admissionPatch(job, assignment, testFlavors)
				if err != nil {
					t.Fatalf("round %d: admissionPatch() unexpected error: %v", round, err)
				}
				job, err = apiServerWrite(t, job, "", patch)
				if err != nil {
					t.Fatalf("round %d: API server refused admission %s: %v", round, patch, err)
				}
				// The Job controller starts the Job.
				job = job.DeepCopy()
				job.Status.StartTime = ptrTo(metav1.NewTime(created.Add(time.Minute)))

				names, stopped, err := stopAll(t, job)
				if err != nil {
					t.Fatalf("round %d: stop: unexpected error: %v", round, err)
				}
				if round == 0 {
					if diff := cmp.Diff(tc.wantSteps, names); diff != "" {
						t.Errorf("eviction steps mismatch (-want +got):\n%s", diff)
					}
				}
				job = stopped
				// Whether or not the start time was cleared (a one-write
				// eviction leaves it), the spec and metadata must be
				// exactly as created.
				evicted := job.DeepCopy()
				evicted.Status.StartTime = nil
				if diff := cmp.Diff(original, evicted, quantityCmp); diff != "" {
					t.Fatalf("round %d: job after eviction differs from the created job (-want +got):\n%s", round, diff)
				}
				if isAdmitted(job) {
					t.Errorf("round %d: isAdmitted() = true after eviction", round)
				}
			}
		})
	}
}

// stopAll applies the framework's stop steps as the API server would,
// re-reading between them, and returns the step names and the result.
func stopAll(t *testing.T, job *batchv1.Job) ([]string, *batchv1.Job, error) {
	t.Helper()
	var names []string
	for range 5 {
		st, err := nextStopStep(job)
		if err != nil {
			return names, nil, err
		}
		names = append(names, st.Name)
		sub := ""
		if st.Status {
			sub = "status"
		}
		if job, err = apiServerWrite(t, job, sub, st.Patch); err != nil {
			t.Fatalf("API server refused step %q %s: %v", st.Name, st.Patch, err)
		}
		if st.Last {
			return names, job, nil
		}
	}
	t.Fatalf("no last step after %v", names)
	return nil, nil, nil
}

// admittedOnSpot is a running Job admitted on the spot flavor, its own
// node selector and its pod count recorded.
func admittedOnSpot() *jobBuilder {
	return makeJob("j").parallelism(2).suspend(false).
		nodeSelector("disk", "ssd").nodeSelector("sluice.dev/capacity", "spot").
		toleration(spotToleration).
		annotation(OriginalAnnotation, `[{"name":"main","scale":2,"nodeSelector":{"disk":"ssd"}}]`).
		annotation(AdmissionAnnotation, `{"clusterQueue":"cq","podSets":[{"name":"main","count":2,"flavors":{"cpu":"spot"}}]}`)
}

func TestStopSteps(t *testing.T) {
	cases := []struct {
		name      string
		job       *jobBuilder
		wantSteps []string
		wantJob   *jobBuilder
		wantErr   error
	}{
		{
			name:      "a suspended, never-started job is restored in one write",
			job:       admittedOnSpot().suspend(true),
			wantSteps: []string{"restore"},
			wantJob:   makeJob("j").parallelism(2).nodeSelector("disk", "ssd"),
		},
		{
			name:      "a running job is suspended, unlocked, then restored",
			job:       admittedOnSpot().started(),
			wantSteps: []string{"suspend", "unlock", "restore"},
			wantJob:   makeJob("j").parallelism(2).nodeSelector("disk", "ssd"),
		},
		{
			name:      "a suspended job that still has a start time is unlocked first",
			job:       admittedOnSpot().suspend(true).started(),
			wantSteps: []string{"unlock", "restore"},
			wantJob:   makeJob("j").parallelism(2).nodeSelector("disk", "ssd"),
		},
		{
			name:      "the annotation of a job admitted before pod sets is understood",
			job:       admittedOnSpot().suspend(true).annotation(OriginalAnnotation, `{"parallelism":2,"nodeSelector":{"disk":"ssd"}}`),
			wantSteps: []string{"restore"},
			wantJob:   makeJob("j").parallelism(2).nodeSelector("disk", "ssd"),
		},
		{
			name:      "a job Sluice never admitted is only suspended",
			job:       makeJob("j").suspend(false).nodeSelector("disk", "ssd").started(),
			wantSteps: []string{"restore"},
			wantJob:   makeJob("j").nodeSelector("disk", "ssd").started(),
		},
		{
			name:      "a stray admission annotation is dropped",
			job:       makeJob("j").suspend(false).annotation(AdmissionAnnotation, `{}`).annotation("keep", "me"),
			wantSteps: []string{"restore"},
			wantJob:   makeJob("j").annotation("keep", "me"),
		},
		{
			name:    "a garbled original annotation is an error",
			job:     makeJob("j").annotation(OriginalAnnotation, "nope"),
			wantErr: ErrBadAnnotation,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			steps, got, err := stopAll(t, tc.job.obj())
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("stop error = %v; want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("stop: unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.wantSteps, steps); diff != "" {
				t.Errorf("steps mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantJob.obj(), got, quantityCmp); diff != "" {
				t.Errorf("stopped job mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStopCarriesItsMark: the stopped mark (StoppedAnnotation) rides on a
// stop done in one write, and is written on its own first otherwise; the
// stopped Job is the same either way.
func TestStopCarriesItsMark(t *testing.T) {
	const admission = "2026-12-07T10:00:00Z"
	cases := []struct {
		name       string
		job        *jobBuilder
		wantWrites []string
		wantJob    *jobBuilder
	}{
		{
			name:       "a suspended, never-started job: one write, marked",
			job:        admittedOnSpot().suspend(true),
			wantWrites: []string{"restore+mark"},
			wantJob:    makeJob("j").parallelism(2).nodeSelector("disk", "ssd").annotation(jobframework.StoppedAnnotation, admission),
		},
		{
			name:       "a running job whose templates Sluice did not change: one write, marked",
			job:        makeJob("j").suspend(false).annotation("keep", "me").started(),
			wantWrites: []string{"restore+mark"},
			wantJob:    makeJob("j").annotation("keep", "me").annotation(jobframework.StoppedAnnotation, admission).started(),
		},
		{
			name:       "a running job on spot: the mark first, then three steps",
			job:        admittedOnSpot().started(),
			wantWrites: []string{"mark", "suspend", "unlock", "restore"},
			wantJob:    makeJob("j").parallelism(2).nodeSelector("disk", "ssd").annotation(jobframework.StoppedAnnotation, admission),
		},
		{
			name:       "a job whose only annotation is Sluice's",
			job:        makeJob("j").suspend(false).annotation(AdmissionAnnotation, `{}`),
			wantWrites: []string{"restore+mark"},
			wantJob:    makeJob("j").annotation(jobframework.StoppedAnnotation, admission),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := tc.job.obj()
			var writes []string
			write := func(name, sub string, patch []byte) {
				t.Helper()
				var err error
				if job, err = apiServerWrite(t, job, sub, patch); err != nil {
					t.Fatalf("API server refused %s %s: %v", name, patch, err)
				}
				writes = append(writes, name)
			}
			// As the integration's stop does it.
			step, err := nextStopStep(job)
			if err != nil {
				t.Fatal(err)
			}
			step, marked, err := jobframework.MarkStopped(step, admission)
			if err != nil {
				t.Fatal(err)
			}
			if !marked {
				mark, err := jobframework.MarkPatch(string(job.UID), admission)
				if err != nil {
					t.Fatal(err)
				}
				write("mark", "", mark)
			}
			for range 5 {
				name := step.Name
				if marked {
					name += "+mark"
				}
				write(name, strings.Join(step.Subresource(), ""), step.Patch)
				if step.Last {
					break
				}
				if step, err = nextStopStep(job); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.wantWrites, writes); diff != "" {
				t.Errorf("writes mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantJob.obj(), job, quantityCmp); diff != "" {
				t.Errorf("stopped job mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMarkStoppedLeavesOtherStepsAlone: a step that is not the last, or
// goes to the status, is not marked.
func TestMarkStoppedLeavesOtherStepsAlone(t *testing.T) {
	for _, step := range []jobframework.Step{
		{Name: "suspend", Patch: []byte(`{"metadata":{"uid":"u"},"spec":{"suspend":true}}`)},
		{Name: "unlock", Status: true, Last: true, Patch: []byte(`{"metadata":{"uid":"u"},"status":{"startTime":null}}`)},
		{Name: "restore", Last: true, Patch: []byte(`{"metadata":{"uid":"u","annotations":null},"spec":{"suspend":true}}`)},
	} {
		got, ok, err := jobframework.MarkStopped(step, "adm")
		if err != nil || ok || string(got.Patch) != string(step.Patch) {
			t.Errorf("MarkStopped(%s %s) = %s, %v, %v; want the step unchanged, false", step.Name, step.Patch, got.Patch, ok, err)
		}
	}
	if _, _, err := jobframework.MarkStopped(jobframework.Step{Name: "restore", Last: true, Patch: []byte("{")}, "adm"); err == nil {
		t.Error("MarkStopped of a patch that is not JSON: no error")
	}
}

// TestPatchesRefuseARecreatedJob checks the uid precondition: a patch built
// for one Job does not apply to a new Job with the same name.
func TestPatchesRefuseARecreatedJob(t *testing.T) {
	old := makeJob("j").obj()
	recreated := makeJob("j").obj()
	recreated.UID = "uid-new"

	admission, err := admissionPatch(old, admit(1, "cpu", "spot"), testFlavors)
	if err != nil {
		t.Fatalf("admissionPatch() unexpected error: %v", err)
	}
	admitted, err := apiServerWrite(t, old, "", admission)
	if err != nil {
		t.Fatal(err)
	}
	admitted.Status.StartTime = ptrTo(metav1.NewTime(created.Add(time.Minute)))
	stop, err := nextStopStep(admitted)
	if err != nil {
		t.Fatalf("nextStopStep() unexpected error: %v", err)
	}
	suspended, err := apiServerWrite(t, admitted, "", stop.Patch)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := nextStopStep(suspended)
	if err != nil || unlock.Name != "unlock" {
		t.Fatalf("nextStopStep() = %q, %v; want the unlock step", unlock.Name, err)
	}
	for name, p := range map[string][]byte{"admission": admission, "stop": stop.Patch, "unlock": unlock.Patch} {
		var doc struct {
			Metadata struct {
				UID string `json:"uid"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p, &doc); err != nil {
			t.Fatalf("%s patch is not JSON: %v", name, err)
		}
		if doc.Metadata.UID != "uid-j" {
			t.Errorf("%s patch carries uid %q, want %q", name, doc.Metadata.UID, "uid-j")
		}
		if _, err := apiServerWrite(t, recreated, "", p); err == nil {
			t.Errorf("%s patch applied to a recreated job", name)
		}
	}
}

func TestIsFinished(t *testing.T) {
	cases := []struct {
		name          string
		job           *jobBuilder
		wantFinished  bool
		wantSucceeded bool
		wantMessage   string
	}{
		{
			name: "no conditions",
			job:  makeJob("j"),
		},
		{
			name:          "complete",
			job:           makeJob("j").condition(batchv1.JobComplete, corev1.ConditionTrue, "CompletionsReached", "Reached expected number of succeeded pods"),
			wantFinished:  true,
			wantSucceeded: true,
			wantMessage:   "Reached expected number of succeeded pods",
		},
		{
			name:         "failed",
			job:          makeJob("j").condition(batchv1.JobFailed, corev1.ConditionTrue, "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
			wantFinished: true,
			wantMessage:  "Job has reached the specified backoff limit",
		},
		{
			name:         "failed without a message reports the reason",
			job:          makeJob("j").condition(batchv1.JobFailed, corev1.ConditionTrue, "DeadlineExceeded", ""),
			wantFinished: true,
			wantMessage:  "DeadlineExceeded",
		},
		{
			name: "a false Complete condition is not finished",
			job:  makeJob("j").condition(batchv1.JobComplete, corev1.ConditionFalse, "", ""),
		},
		{
			name: "suspended is not finished",
			job:  makeJob("j").condition(batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended"),
		},
		{
			name: "failure target alone is not yet finished",
			job:  makeJob("j").condition(batchv1.JobFailureTarget, corev1.ConditionTrue, "PodFailurePolicy", "pod failed"),
		},
		{
			name:          "success criteria met, then complete",
			job:           makeJob("j").condition(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, "SuccessPolicy", "").condition(batchv1.JobComplete, corev1.ConditionTrue, "SuccessPolicy", ""),
			wantFinished:  true,
			wantSucceeded: true,
			wantMessage:   "SuccessPolicy",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			finished, succeeded, message := isFinished(tc.job.obj())
			got := fmt.Sprintf("finished=%v succeeded=%v message=%q", finished, succeeded, message)
			want := fmt.Sprintf("finished=%v succeeded=%v message=%q", tc.wantFinished, tc.wantSucceeded, tc.wantMessage)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("isFinished() mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if finished, _, _ := isFinished(nil); finished {
		t.Errorf("isFinished(nil) = true")
	}
}

func TestIsAdmitted(t *testing.T) {
	cases := []struct {
		name string
		job  *batchv1.Job
		want bool
	}{
		{name: "suspended without admission", job: makeJob("j").obj()},
		{name: "running without admission", job: makeJob("j").suspend(false).obj()},
		{name: "admitted and running", job: makeJob("j").suspend(false).annotation(AdmissionAnnotation, "{}").obj(), want: true},
		{name: "suspend unset counts as running", job: func() *batchv1.Job {
			j := makeJob("j").annotation(AdmissionAnnotation, "{}").obj()
			j.Spec.Suspend = nil
			return j
		}(), want: true},
		{name: "admission annotation but suspended (mid-eviction)", job: makeJob("j").annotation(AdmissionAnnotation, "{}").obj()},
		{name: "nil job", job: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := isAdmitted(tc.job); got != tc.want {
				t.Errorf("isAdmitted() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNilJobsAreRefusedNotPanicked(t *testing.T) {
	if _, ok, err := admissionOf(nil); ok || err != nil {
		t.Errorf("admissionOf(nil) = _, %v, %v; want none", ok, err)
	}
	if _, ok, err := originalOf(nil); ok || err != nil {
		t.Errorf("originalOf(nil) = _, %v, %v; want none", ok, err)
	}
}

// TestTopologyGateComesAndGoes: an admission on a topology-aware flavor
// gates the template's pods (beside the user's own gate) and labels and
// annotates them; stopping the Job gives the user's template back.
func TestTopologyGateComesAndGoes(t *testing.T) {
	// As the API server stores it: with the labels it generates on the
	// template, which the integration's cache trims away.
	job := makeJob("j").templateAnnotation("team", "a").templateLabel(batchv1.JobNameLabel, "j").obj()
	job.Spec.Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/mine"}}
	cached := job.DeepCopy()
	Adapter{}.TrimForCache(cached)
	a := withUpdate(admit(1, "cpu", "default"), PodSetUpdate{
		Labels:          map[string]string{"sluice.dev/tas": "job"},
		Annotations:     map[string]string{"sluice.dev/topology-podset": MainPodSet},
		SchedulingGates: []string{"sluice.dev/topology"},
	})
	patch, err := admissionPatch(cached, a, testFlavors)
	if err != nil {
		t.Fatal(err)
	}
	got, err := apiServerWrite(t, job, "", patch)
	if err != nil {
		t.Fatalf("API server would refuse %s: %v", patch, err)
	}
	wantGates := []corev1.PodSchedulingGate{{Name: "example.com/mine"}, {Name: "sluice.dev/topology"}}
	if diff := cmp.Diff(wantGates, got.Spec.Template.Spec.SchedulingGates); diff != "" {
		t.Errorf("admitted gates (-want +got):\n%s", diff)
	}
	if got.Spec.Template.Labels["sluice.dev/tas"] != "job" || got.Spec.Template.Annotations["team"] != "a" {
		t.Errorf("admitted template metadata %v %v", got.Spec.Template.Labels, got.Spec.Template.Annotations)
	}
	admitted := got
	// The stop is computed from the cache's trimmed copy, or from the
	// object read afresh: the generated labels survive either way.
	for _, trimmed := range []bool{true, false} {
		got := admitted.DeepCopy()
		for {
			view := got.DeepCopy()
			if trimmed {
				Adapter{}.TrimForCache(view)
			}
			step, err := nextStopStep(view)
			if err != nil {
				t.Fatal(err)
			}
			sub := ""
			if step.Status {
				sub = "status"
			}
			if got, err = apiServerWrite(t, got, sub, step.Patch); err != nil {
				t.Fatalf("stop step refused: %v", err)
			}
			if step.Last {
				break
			}
		}
		if diff := cmp.Diff([]corev1.PodSchedulingGate{{Name: "example.com/mine"}}, got.Spec.Template.Spec.SchedulingGates); diff != "" {
			t.Errorf("trimmed %v: gates after the stop (-want +got):\n%s", trimmed, diff)
		}
		if diff := cmp.Diff(map[string]string{batchv1.JobNameLabel: "j"}, got.Spec.Template.Labels); diff != "" {
			t.Errorf("trimmed %v: template labels after the stop: the topology label goes, the generated one stays (-want +got):\n%s", trimmed, diff)
		}
	}
}
