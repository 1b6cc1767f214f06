package baseline

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestTrackerCompletes drives the tracker with Job states by hand (no
// watch) against a fake clientset: a Job is completed its runtime after it
// was unsuspended, and a suspension before then cancels the run, which
// starts over at the next unsuspension.
func TestTrackerCompletes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := names{prefix: "bl", namespace: "ns", p: MustProfile("baseline")}
	job := n.jobObject("j", "q", 0, 1000)
	job.UID = "uid-1"
	kube := fake.NewClientset(job)
	tr := newTracker(kube, kube, "ns", "", t.Logf)
	tr.stop = ctx.Done()
	go tr.completer(ctx)
	const runtime = 100 * time.Millisecond
	tr.register(&jobState{name: "j", class: 0, runtime: runtime, created: time.Now()})

	set := func(suspend bool) {
		j, err := kube.BatchV1().Jobs("ns").Get(ctx, "j", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		j.Spec.Suspend = ptr.To(suspend)
		if j, err = kube.BatchV1().Jobs("ns").Update(ctx, j, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr.observe(j, false)
	}
	get := func() *batchv1.Job {
		j, err := kube.BatchV1().Jobs("ns").Get(ctx, "j", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	tr.observe(get(), false) // created, suspended
	set(false)
	time.Sleep(runtime / 2)
	set(true) // preempted half way
	time.Sleep(runtime)
	if f, _ := finishedCond(get()); f {
		t.Fatal("a Job suspended before its runtime was over was completed")
	}
	start := time.Now()
	set(false)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	for {
		if f, _ := finishedCond(get()); f {
			break
		}
		if wctx.Err() != nil {
			t.Fatal("the Job was not completed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(start); d < runtime {
		t.Errorf("completed %s after its second unsuspension, before its runtime %s", d, runtime)
	}
	j := get()
	tr.observe(j, false)
	var types []batchv1.JobConditionType
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			types = append(types, c.Type)
		}
	}
	if len(types) != 2 || types[0] != batchv1.JobSuccessCriteriaMet || types[1] != batchv1.JobComplete {
		t.Errorf("conditions %v, want SuccessCriteriaMet then Complete", types)
	}
	if j.Status.StartTime == nil || j.Status.CompletionTime == nil || j.Status.Succeeded != 1 {
		t.Errorf("status %+v: want startTime, completionTime and succeeded 1", j.Status)
	}
	if err := tr.waitDone(wctx); err != nil {
		t.Fatal(err)
	}
	// The write is counted right after the API server accepted it.
	for {
		tr.mu.Lock()
		st, writes := *tr.jobs["j"], tr.writes
		tr.mu.Unlock()
		if writes == 0 && wctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if st.unsuspend != 2 || st.suspends != 1 || !st.done || st.admitted.IsZero() || writes != 1 {
			t.Errorf("unsuspensions %d, suspensions %d, done %v, writes %d: want 2, 1, true, 1", st.unsuspend, st.suspends, st.done, writes)
		}
		break
	}
	cancel()
}
