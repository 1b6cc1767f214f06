package invariant

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// opened is one watch Watch asked for: the fake watcher the test drives and
// the resourceVersion it was asked to start from.
type opened struct {
	w  *watch.FakeWatcher
	rv string
}

// cluster is a fake API server whose Job watches the test drives by hand,
// so that it decides when a watch closes or expires.
type cluster struct {
	t       *testing.T
	kube    *fake.Clientset
	watches chan opened

	mu sync.Mutex
	at []string
}

// openedAt lists the resourceVersions the watches were opened at.
func (c *cluster) openedAt() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.at)
}

// next waits for Watch to open its next watch.
func (c *cluster) next() opened {
	c.t.Helper()
	select {
	case o := <-c.watches:
		return o
	case <-time.After(10 * time.Second):
		c.t.Fatal("Watch opened no watch")
		return opened{}
	}
}

// store puts a Job into the fake API server, where the next list finds it.
func (c *cluster) store(b *jobBuilder, rv string) {
	c.t.Helper()
	j := b.obj()
	j.ResourceVersion = rv
	if err := c.kube.Tracker().Add(j); err != nil {
		c.t.Fatal(err)
	}
}

func at(b *jobBuilder, rv string) *batchv1.Job {
	j := b.obj()
	j.ResourceVersion = rv
	return j
}

var (
	clusterQueueGVK = v1beta1GVK("ClusterQueue")
	cohortGVK       = v1beta1GVK("Cohort")
)

func v1beta1GVK(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "sluice.dev", Version: "v1beta1", Kind: kind}
}

// asUnstructured turns queue builders into what the dynamic client serves.
func asUnstructured(t *testing.T, parts ...any) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, p := range parts {
		var obj any
		var gvk schema.GroupVersionKind
		switch p := p.(type) {
		case *cqBuilder:
			cq := p.obj()
			obj, gvk = &cq, clusterQueueGVK
		case *cohortBuilder:
			co := p.obj()
			obj, gvk = &co, cohortGVK
		case *unstructured.Unstructured:
			out = append(out, p)
			continue
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetGroupVersionKind(gvk)
		out = append(out, u)
	}
	return out
}

func newCluster(t *testing.T, config []runtime.Object, noCohortCRD bool) (*cluster, *dynamicfake.FakeDynamicClient) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		clusterQueuesGVR: "ClusterQueueList",
		cohortsGVR:       "CohortList",
	}, config...)
	if noCohortCRD {
		dyn.PrependReactor("list", "cohorts", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "sluice.dev", Resource: "cohorts"}, "")
		})
	}
	c := &cluster{t: t, kube: fake.NewClientset(), watches: make(chan opened, 10)}
	c.kube.PrependWatchReactor("jobs", func(a clienttesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake()
		rv := a.(clienttesting.WatchActionImpl).WatchRestrictions.ResourceVersion
		c.mu.Lock()
		c.at = append(c.at, rv)
		c.mu.Unlock()
		c.watches <- opened{w: w, rv: rv}
		return true, w, nil
	})
	return c, dyn
}

func TestWatch(t *testing.T) {
	q := resource.MustParse
	// A ClusterQueue as a user writes it, with an integer quantity.
	intQuota := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sluice.dev/v1beta1",
		"kind":       "ClusterQueue",
		"metadata":   map[string]any{"name": "a"},
		"spec": map[string]any{
			"cohort": "c",
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu"},
				"flavors": []any{map[string]any{
					"name":      "default",
					"resources": []any{map[string]any{"name": "cpu", "nominalQuota": int64(4)}},
				}},
			}},
		},
	}}
	cpu := func(name, perPod string) *jobBuilder {
		return newJob(name).request("cpu", perPod).admit("a", 1, "default")
	}

	tests := []struct {
		name        string
		config      []any
		noCohortCRD bool
		// listed are in the API server before Watch starts.
		listed []*jobBuilder
		// script drives the cluster once Watch is ready; Watch ends when it
		// returns.
		script      func(c *cluster)
		wantReport  Report
		wantWatchAt []string
	}{
		{
			name:   "a Job over quota after the watch opens is reported with the listed ones",
			config: []any{newCQ("a").quota("default", "cpu", "4")},
			listed: []*jobBuilder{cpu("j0", "2")},
			script: func(c *cluster) {
				w := c.next().w
				w.Add(at(cpu("j1", "3"), "11"))
			},
			wantReport: Report{
				Events:     1,
				Violations: []Violation{withRV("11", over("ClusterQueue/a", "default/cpu", "5", "4", "default/j0", "default/j1"))},
				Max:        map[string]map[string]resource.Quantity{"ClusterQueue/a": {"default/cpu": q("5")}},
			},
			wantWatchAt: []string{""},
		},
		{
			name:   "cohorts and integer quantities are read from the dynamic client",
			config: []any{intQuota, newCohort("c").quota("default", "cpu", "2")},
			script: func(c *cluster) {
				w := c.next().w
				w.Add(at(cpu("j1", "6"), "11"))
				w.Add(at(cpu("j2", "1"), "12"))
			},
			wantReport: Report{
				Events:     2,
				Violations: []Violation{withRV("12", over("Cohort/c", "default/cpu", "7", "6", "default/j1", "default/j2"))},
				Max: map[string]map[string]resource.Quantity{
					"ClusterQueue/a": {"default/cpu": q("7")},
					"Cohort/c":       {"default/cpu": q("7")},
				},
			},
			wantWatchAt: []string{""},
		},
		{
			name:        "without the Cohort CRD every cohort is implicit",
			config:      []any{intQuota},
			noCohortCRD: true,
			script: func(c *cluster) {
				w := c.next().w
				w.Add(at(cpu("j1", "5"), "11"))
			},
			wantReport: Report{
				Events:     1,
				Violations: []Violation{withRV("11", over("Cohort/c", "default/cpu", "5", "4", "default/j1"))},
				Max: map[string]map[string]resource.Quantity{
					"ClusterQueue/a": {"default/cpu": q("5")},
					"Cohort/c":       {"default/cpu": q("5")},
				},
			},
			wantWatchAt: []string{""},
		},
		{
			name:   "a deletion event frees the Job's usage",
			config: []any{newCQ("a").quota("default", "cpu", "4")},
			script: func(c *cluster) {
				w := c.next().w
				w.Add(at(cpu("j1", "4"), "11"))
				w.Delete(at(cpu("j1", "4"), "12"))
				w.Add(at(cpu("j2", "4"), "13"))
			},
			wantReport: Report{
				Events: 3,
				Max:    map[string]map[string]resource.Quantity{"ClusterQueue/a": {"default/cpu": q("4")}},
			},
			wantWatchAt: []string{""},
		},
		{
			name:   "a closed watch is resumed from the last resourceVersion without a re-list",
			config: []any{newCQ("a").quota("default", "cpu", "4")},
			listed: []*jobBuilder{cpu("j0", "2")},
			script: func(c *cluster) {
				w := c.next().w
				w.Modify(at(cpu("j0", "3"), "12"))
				w.Stop()
				w = c.next().w
				w.Add(at(cpu("j1", "2"), "13"))
			},
			wantReport: Report{
				Events:     2,
				Violations: []Violation{withRV("13", over("ClusterQueue/a", "default/cpu", "5", "4", "default/j0", "default/j1"))},
				Max:        map[string]map[string]resource.Quantity{"ClusterQueue/a": {"default/cpu": q("5")}},
			},
			wantWatchAt: []string{"", "12"},
		},
		{
			name:   "a bookmark moves the point a closed watch resumes from",
			config: []any{newCQ("a").quota("default", "cpu", "4")},
			script: func(c *cluster) {
				w := c.next().w
				bookmark := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "20"}}
				w.Action(watch.Bookmark, bookmark)
				w.Stop()
				c.next()
			},
			wantReport:  Report{Max: map[string]map[string]resource.Quantity{}},
			wantWatchAt: []string{"", "20"},
		},
		{
			name:   "an expired watch re-lists, checks the list as one state and notes the gap",
			config: []any{newCQ("a").quota("default", "cpu", "4")},
			listed: []*jobBuilder{cpu("j0", "2")},
			script: func(c *cluster) {
				w := c.next().w
				c.store(cpu("j1", "1"), "11")
				w.Add(at(cpu("j1", "1"), "11"))
				// Unseen by the watch: j2 starts and j0 grows, then the
				// watch expires.
				c.store(cpu("j2", "1"), "12")
				if err := c.kube.Tracker().Update(batchv1.SchemeGroupVersion.WithResource("jobs"), at(cpu("j0", "3"), "13"), "default"); err != nil {
					c.t.Fatal(err)
				}
				w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 11"})
				c.next()
			},
			wantReport: Report{
				Events:     1,
				Violations: []Violation{withRV("", over("ClusterQueue/a", "default/cpu", "5", "4", "default/j0", "default/j1", "default/j2"))},
				Max:        map[string]map[string]resource.Quantity{"ClusterQueue/a": {"default/cpu": q("5")}},
				Relists:    1,
				Gaps:       []Gap{{From: "11", To: "", Cause: "resourceVersion expired: too old resource version: 11"}},
			},
			wantWatchAt: []string{"", ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, dyn := newCluster(t, asUnstructured(t, tt.config...), tt.noCohortCRD)
			for _, b := range tt.listed {
				c.store(b, "1")
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			ready := make(chan struct{}, 2)
			type result struct {
				rep *Report
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := Watch(ctx, c.kube, dyn, WithReady(func() { ready <- struct{}{} }), withRetry(time.Millisecond))
				done <- result{rep, err}
			}()
			select {
			case <-ready:
			case r := <-done:
				t.Fatalf("Watch ended before it was ready: %v", r.err)
			case <-time.After(10 * time.Second):
				t.Fatal("Watch was never ready")
			}
			tt.script(c)
			cancel()
			r := <-done
			if r.err != nil {
				t.Fatalf("Watch: %v", r.err)
			}
			if len(ready) != 0 {
				t.Error("WithReady was called more than once")
			}
			if diff := cmp.Diff(&tt.wantReport, r.rep, ignoreMessage, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Report (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantWatchAt, c.openedAt(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("watches opened at resourceVersions (-want +got):\n%s", diff)
			}
		})
	}
}

func withRV(rv string, v Violation) Violation {
	v.ResourceVersion = rv
	return v
}

func TestWatchFailsToStart(t *testing.T) {
	tests := []struct {
		name    string
		config  []any
		listErr error
		wantErr string
	}{
		{
			name:    "a cohort cycle in the configuration",
			config:  []any{newCohort("x").parent("y"), newCohort("y").parent("x")},
			wantErr: "queue configuration: Cohort/x: the parent chain loops: x → y → x",
		},
		{
			name:    "Jobs cannot be listed",
			config:  []any{newCQ("a").quota("default", "cpu", "4")},
			listErr: errors.New("connection refused"),
			wantErr: "list Jobs: connection refused",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, dyn := newCluster(t, asUnstructured(t, tt.config...), false)
			if tt.listErr != nil {
				c.kube.PrependReactor("list", "jobs", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.listErr
				})
			}
			// A Watch that starts anyway must not hang the test.
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			ready := false
			rep, err := Watch(ctx, c.kube, dyn, WithReady(func() { ready = true }))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Watch error = %v, want one containing %q", err, tt.wantErr)
			}
			if rep != nil || ready {
				t.Errorf("Watch returned a report (%v) or was ready (%v) although it could not start", rep != nil, ready)
			}
		})
	}
}
