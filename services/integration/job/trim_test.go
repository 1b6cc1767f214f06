package job

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// fullJob is a Job as the API server stores it: generated selector and
// template labels, containers with images, commands, environment and
// mounts, volumes and a security context.
func fullJob() *batchv1.Job {
	main := ctr("main").req("cpu", "2", "memory", "1Gi").lim("nvidia.com/gpu", "1")
	main.c.Command = []string{"python", "train.py"}
	main.c.Env = []corev1.EnvVar{{Name: "EPOCHS", Value: "10"}}
	main.c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	j := makeJob("j").parallelism(2).nodeSelector("disk", "ssd").toleration(userToleration).
		containers(main).initContainers(sidecar("proxy").req("cpu", "100m"), ctr("fetch").req("memory", "2Gi")).
		templateLabel("app", "train").obj()
	uid := string(j.UID)
	j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{batchv1.ControllerUidLabel: uid}}
	for _, k := range generatedLabels {
		j.Spec.Template.Labels[k] = uid
	}
	j.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	j.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true)}
	return j
}

// trimmed is the informer's copy of job.
func trimmed(job *batchv1.Job) *batchv1.Job {
	c := job.DeepCopy()
	Adapter{}.TrimForCache(c)
	return c
}

func TestTrimForCache(t *testing.T) {
	full := fullJob()
	got := trimmed(full)

	if got.Spec.Selector != nil {
		t.Errorf("selector kept: %v", got.Spec.Selector)
	}
	if d := cmp.Diff(map[string]string{"app": "train"}, got.Spec.Template.Labels); d != "" {
		t.Errorf("template labels (-want +got):\n%s", d)
	}
	spec := got.Spec.Template.Spec
	if spec.Volumes != nil || spec.SecurityContext != nil {
		t.Errorf("volumes or security context kept: %v, %v", spec.Volumes, spec.SecurityContext)
	}
	wantMain := corev1.Container{Name: "main", Resources: full.Spec.Template.Spec.Containers[0].Resources}
	if d := cmp.Diff(wantMain, spec.Containers[0], quantityCmp); d != "" {
		t.Errorf("container (-want +got):\n%s", d)
	}
	if spec.InitContainers[0].RestartPolicy == nil {
		t.Error("the sidecar lost its restart policy")
	}
	if d := cmp.Diff(full.Spec.Template.Spec.NodeSelector, spec.NodeSelector); d != "" {
		t.Errorf("node selector (-want +got):\n%s", d)
	}
	if d := cmp.Diff(full.Spec.Template.Spec.Tolerations, spec.Tolerations); d != "" {
		t.Errorf("tolerations (-want +got):\n%s", d)
	}
	// What a decision reads is the same for the full and the trimmed Job.
	fullSets, err := (&Job{full}).PodSets()
	if err != nil {
		t.Fatal(err)
	}
	trimSets, err := (&Job{got}).PodSets()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(jobframework.PodRequests(fullSets[0].Spec), jobframework.PodRequests(trimSets[0].Spec), quantityCmp); d != "" {
		t.Errorf("requests of the trimmed Job differ (-full +trimmed):\n%s", d)
	}
	// A finished Job keeps what its end is read from, not its template.
	done := full.DeepCopy()
	done.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Message: "all done"}}
	doneTrim := trimmed(done)
	if d := cmp.Diff(corev1.PodTemplateSpec{}, doneTrim.Spec.Template); d != "" {
		t.Errorf("a finished Job's template kept (-want +got):\n%s", d)
	}
	if fin, ok, msg := (&Job{doneTrim}).Finished(); !fin || !ok || msg != "all done" {
		t.Errorf("the trimmed finished Job reads as finished %v, succeeded %v, %q", fin, ok, msg)
	}
	if doneTrim.Name != full.Name || doneTrim.UID != full.UID || !cmp.Equal(doneTrim.Labels, full.Labels) {
		t.Errorf("a finished Job's identity or labels changed: %v", doneTrim.ObjectMeta)
	}
	// Another kind passes untouched.
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	Adapter{}.TrimForCache(pod)
	if pod.Spec.Containers[0].Image != "busybox" {
		t.Error("a Pod was trimmed by the Job adapter")
	}
}

// TestTrimmedCacheWritesNothingBack admits, starts and evicts a Job twice
// with every patch computed from the trimmed copy an informer holds, and
// applied to the Job as stored: the stored Job keeps everything trimming
// dropped.
func TestTrimmedCacheWritesNothingBack(t *testing.T) {
	original := fullJob()
	stored := original.DeepCopy()
	for round, a := range []Assignment{admit(2, "cpu", "spot", "nvidia.com/gpu", "a100"), admit(2, "cpu", "on-demand")} {
		patch, err := admissionPatch(trimmed(stored), a, testFlavors)
		if err != nil {
			t.Fatalf("round %d: admission patch: %v", round, err)
		}
		if stored, err = apiServerWrite(t, stored, "", patch); err != nil {
			t.Fatalf("round %d: API server refused %s: %v", round, patch, err)
		}
		stored.Status.StartTime = ptrTo(metav1.NewTime(created.Add(time.Minute)))
		for range 5 {
			st, err := nextStopStep(trimmed(stored))
			if err != nil {
				t.Fatalf("round %d: stop: %v", round, err)
			}
			sub := ""
			if st.Status {
				sub = "status"
			}
			if stored, err = apiServerWrite(t, stored, sub, st.Patch); err != nil {
				t.Fatalf("round %d: API server refused step %q %s: %v", round, st.Name, st.Patch, err)
			}
			if st.Last {
				break
			}
		}
	}
	if d := cmp.Diff(original.Spec, stored.Spec, quantityCmp); d != "" {
		t.Errorf("the stored Job's spec after two admissions and evictions (-before +after):\n%s", d)
	}
}
