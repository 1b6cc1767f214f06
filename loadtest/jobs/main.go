// Command jobs measures admission on a live cluster: it creates N Jobs (or
// JobSets, --kind jobset) for a LocalQueue with room for all of them and
// reports how fast Sluice unsuspends them (admitted per second) and the
// time from each object's creation to its unsuspension (p50, p99), as seen
// by a watch.
//
//	go run ./loadtest/jobs --kubeconfig KUBECONFIG --count 2000 [--kind jobset]
//
// It creates its own ResourceFlavor, ClusterQueue, namespace and
// LocalQueue (names from --prefix) and deletes its Jobs at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"time"

	jobsetv1 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/services/integration/jobset"
)

type config struct {
	kubeconfig string
	count      int
	workers    int
	prefix     string
	timeout    time.Duration
	kind       string
}

func main() {
	var c config
	flag.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	flag.IntVar(&c.count, "count", 2000, "Jobs to create")
	flag.IntVar(&c.workers, "workers", 16, "concurrent creators")
	flag.StringVar(&c.prefix, "prefix", "load", "name of the namespace, queues and flavor")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up after this long")
	flag.StringVar(&c.kind, "kind", "job", "what to create: job (batch/v1 Job) or jobset (a JobSet of one one-pod Job)")
	flag.Parse()
	if c.count < 1 || c.workers < 1 || c.kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "jobs: --count and --workers must be positive and --kubeconfig (or KUBECONFIG) set")
		os.Exit(2)
	}
	if c.kind != "job" && c.kind != "jobset" {
		fmt.Fprintf(os.Stderr, "jobs: --kind %q: must be job or jobset\n", c.kind)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "jobs:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 2000, 4000
	kube := kubernetes.NewForConfigOrDie(rc)
	dyn := dynamic.NewForConfigOrDie(rc)
	ns := c.prefix
	if err := setup(ctx, kube, dyn, ns, c.count); err != nil {
		return err
	}

	var mu sync.Mutex
	created := map[string]time.Time{}
	started := map[string]time.Time{}
	gvr := batchv1.SchemeGroupVersion.WithResource("jobs")
	if c.kind == "jobset" {
		gvr = jobset.Kind.GVR()
	}
	ri := dyn.Resource(gvr).Namespace(ns)
	w, err := ri.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		lastRV := ""
		for {
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok || ev.Type == watch.Deleted {
					continue
				}
				lastRV = u.GetResourceVersion()
				if suspended, found, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); !found || !suspended {
					mu.Lock()
					if _, seen := started[u.GetName()]; !seen {
						started[u.GetName()] = time.Now()
					}
					n := len(started)
					mu.Unlock()
					if n == c.count {
						w.Stop()
						return
					}
				}
			}
			// The API server closes a watch that falls behind; resume it
			// from the last version seen, so no transition is missed.
			if ctx.Err() != nil {
				return
			}
			next, werr := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: lastRV})
			if werr != nil {
				fmt.Fprintln(os.Stderr, "jobs: watch again:", werr)
				return
			}
			w = next
		}
	}()

	begin := time.Now()
	names := make(chan string)
	var wg sync.WaitGroup
	errc := make(chan error, c.workers)
	for range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				t := time.Now()
				obj, err := object(c.kind, ns, name)
				if err == nil {
					_, err = ri.Create(ctx, obj, metav1.CreateOptions{})
				}
				if err != nil {
					errc <- fmt.Errorf("create %s: %w", name, err)
					return
				}
				mu.Lock()
				created[name] = t
				mu.Unlock()
			}
		}()
	}
	for i := range c.count {
		select {
		case names <- fmt.Sprintf("job-%05d", i):
		case err := <-errc:
			close(names)
			return err
		}
	}
	close(names)
	wg.Wait()
	createdIn := time.Since(begin)
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("only %d of %d jobs started before the timeout", len(started), c.count)
	}
	total := time.Since(begin)

	mu.Lock()
	if len(started) < c.count {
		mu.Unlock()
		return fmt.Errorf("the watch ended after %d of %d %ss started", len(started), c.count, c.kind)
	}
	var lat []time.Duration
	var last time.Time
	for name, s := range started {
		lat = append(lat, s.Sub(created[name]))
		if s.After(last) {
			last = s
		}
	}
	mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	fmt.Printf("%ss: %d created in %.2fs (%.0f/s); all unsuspended after %.2fs: %.0f admitted/s\n",
		c.kind, c.count, createdIn.Seconds(), float64(c.count)/createdIn.Seconds(), total.Seconds(), float64(c.count)/total.Seconds())
	fmt.Printf("creation → unsuspend: p50 %s, p90 %s, p99 %s, max %s\n",
		pct(0.5).Round(time.Millisecond), pct(0.9).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))

	policy := metav1.DeletePropagationBackground
	return ri.DeleteCollection(context.Background(), metav1.DeleteOptions{PropagationPolicy: &policy}, metav1.ListOptions{})
}

// object returns the object to create: a one-pod Job, or a JobSet of one
// such Job.
func object(kind, ns, name string) (*unstructured.Unstructured, error) {
	j := job(ns, name)
	var obj any = j
	if kind == "jobset" {
		obj = &jobsetv1.JobSet{
			TypeMeta:   metav1.TypeMeta{APIVersion: jobsetv1.GroupVersion.String(), Kind: "JobSet"},
			ObjectMeta: j.ObjectMeta,
			Spec: jobsetv1.JobSetSpec{ReplicatedJobs: []jobsetv1.ReplicatedJob{{
				Name: "main", Replicas: 1, Template: batchv1.JobTemplateSpec{Spec: j.Spec}}}},
		}
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func job(ns, name string) *batchv1.Job {
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{v1beta1.QueueNameLabel: "q"}},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To[int32](1),
			Completions: ptr.To[int32](1),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"sluice.dev/run-for": "1s"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}},
				},
			},
		},
	}
}

// setup creates the flavor, a ClusterQueue with room for every Job, the
// namespace and its LocalQueue.
func setup(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, ns string, count int) error {
	gv := v1beta1.GroupVersion
	objs := []struct {
		resource string
		obj      map[string]any
	}{
		{"resourceflavors", map[string]any{"apiVersion": gv.String(), "kind": "ResourceFlavor", "metadata": map[string]any{"name": ns}}},
		{"clusterqueues", map[string]any{"apiVersion": gv.String(), "kind": "ClusterQueue", "metadata": map[string]any{"name": ns},
			"spec": map[string]any{"namespaceSelector": map[string]any{}, "resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu"},
				"flavors": []any{map[string]any{"name": ns, "resources": []any{map[string]any{
					"name": "cpu", "nominalQuota": fmt.Sprint(count)}}}}}}}}},
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o.obj}
		if _, err := dyn.Resource(gv.WithResource(o.resource)).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", o.resource, err)
		}
	}
	lq := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gv.String(), "kind": "LocalQueue",
		"metadata": map[string]any{"name": "q", "namespace": ns}, "spec": map[string]any{"clusterQueue": ns}}}
	if _, err := dyn.Resource(gv.WithResource("localqueues")).Namespace(ns).Create(ctx, lq, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// Let the watcher mirror the queue before the first Job arrives.
	time.Sleep(2 * time.Second)
	return nil
}
