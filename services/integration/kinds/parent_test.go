package kinds

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/deployment"
	"github.com/sluice-dev/sluice/services/integration/leaderworkerset"
	podkind "github.com/sluice-dev/sluice/services/integration/pod"
	"github.com/sluice-dev/sluice/services/integration/statefulset"
)

// parentObject is a Deployment or StatefulSet: labels on the object,
// replicas, the template's labels, the pods' GPUs and ready replicas.
type parentObject struct {
	kind     string
	labels   map[string]string
	replicas int
	tpl      map[string]string
	gpus     int
	ready    int
}

func (o parentObject) json() string {
	labels, _ := json.Marshal(o.labels)
	tpl, _ := json.Marshal(o.tpl)
	return fmt.Sprintf(`{"apiVersion":"apps/v1","kind":%q,"metadata":{"name":"web","namespace":"team-a","labels":%s},`+
		`"spec":{"replicas":%d,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":%s},`+
		`"spec":{"containers":[{"name":"c","resources":{"requests":{"nvidia.com/gpu":"%d"}}}]}}},"status":{"replicas":%d,"readyReplicas":%d}}`,
		o.kind, labels, o.replicas, tpl, o.gpus, o.ready, o.ready)
}

// TestParentWebhook: the webhook of a parent kind labels the pod template
// so the pod integration queues the Pods, and refuses the updates that
// would leave running Pods outside their quota.
func TestParentWebhook(t *testing.T) {
	queued := map[string]string{"sluice.dev/queue-name": "lq"}
	app := map[string]string{"app": "web"}
	dep := func(labels map[string]string, replicas, ready int) parentObject {
		return parentObject{kind: "Deployment", labels: labels, replicas: replicas, tpl: app, gpus: 1, ready: ready}
	}
	sts := func(labels map[string]string, replicas, ready int) parentObject {
		return parentObject{kind: "StatefulSet", labels: labels, replicas: replicas, tpl: app, gpus: 1, ready: ready}
	}
	wantSTS := func(total string) (map[string]string, map[string]string) {
		a := map[string]string{"sluice.dev/pod-group-serving": "true", "sluice.dev/pod-group-fast-admission": "true"}
		if total != "" {
			a["sluice.dev/pod-group-total-count"] = total
		}
		return map[string]string{"app": "web", "sluice.dev/queue-name": "lq", "sluice.dev/pod-group-name": "statefulset-web"}, a
	}
	stsLabels, stsAnnotations := wantSTS("3")
	cases := []struct {
		name  string
		ad    jobframework.Adapter
		obj   parentObject
		old   *parentObject
		kueue bool
		// unqueued: team-a has a LocalQueue named default ("default"), or
		// none while jobs without a queue are held ("hold").
		unqueued        string
		wantErr         string
		wantLabels      map[string]string
		wantAnnotations map[string]string
	}{
		{name: "a Deployment's template gets its queue", ad: deployment.Adapter{}, obj: dep(queued, 2, 0),
			wantLabels: map[string]string{"app": "web", "sluice.dev/queue-name": "lq"}},
		{name: "and its priority class", ad: deployment.Adapter{}, obj: dep(map[string]string{"sluice.dev/queue-name": "lq", "sluice.dev/priority-class": "high"}, 2, 0),
			wantLabels: map[string]string{"app": "web", "sluice.dev/queue-name": "lq", "sluice.dev/priority-class": "high"}},
		{name: "Kueue's labels are Sluice's with --kueue-labels", ad: deployment.Adapter{}, obj: dep(map[string]string{"kueue.x-k8s.io/queue-name": "lq"}, 2, 0), kueue: true,
			wantLabels: map[string]string{"app": "web", "sluice.dev/queue-name": "lq"}},
		{name: "a Deployment created without a queue goes to the namespace's LocalQueue default, its template too", ad: deployment.Adapter{}, obj: dep(nil, 2, 0), unqueued: "default",
			wantLabels: map[string]string{"app": "web", "sluice.dev/queue-name": "default"}},
		{name: "a Deployment without a queue is never held", ad: deployment.Adapter{}, obj: dep(map[string]string{"team": "a"}, 2, 0), unqueued: "hold",
			wantLabels: app},
		{name: "a queue name no LocalQueue can have is refused", ad: deployment.Adapter{}, obj: dep(map[string]string{"sluice.dev/queue-name": "Bad_Q"}, 2, 0),
			wantErr: "sluice.dev/queue-name"},
		{name: "a Deployment scaled while ready keeps its labels", ad: deployment.Adapter{}, obj: dep(queued, 9, 2), old: &parentObject{kind: "Deployment", labels: queued, replicas: 2, tpl: map[string]string{"app": "web", "sluice.dev/queue-name": "lq"}, gpus: 1, ready: 2},
			wantLabels: map[string]string{"app": "web", "sluice.dev/queue-name": "lq"}},
		{name: "the queue of a Deployment with ready pods may not change", ad: deployment.Adapter{}, obj: dep(map[string]string{"sluice.dev/queue-name": "other"}, 2, 2), old: ptr(dep(queued, 2, 2)),
			wantErr: `may not be changed from "lq" to "other"`},
		{name: "nor be removed", ad: deployment.Adapter{}, obj: dep(map[string]string{}, 2, 2), old: ptr(dep(queued, 2, 2)),
			wantErr: `may not be removed`},
		{name: "a Deployment with no ready pod leaves its queue: the template's label goes", ad: deployment.Adapter{}, obj: parentObject{kind: "Deployment", labels: map[string]string{}, replicas: 2, tpl: map[string]string{"app": "web", "sluice.dev/queue-name": "lq"}, gpus: 1},
			old: ptr(dep(queued, 2, 0)), wantLabels: map[string]string{"app": "web"}},
		{name: "a StatefulSet's pods are one serving group queued on its first pod", ad: statefulset.Adapter{}, obj: sts(queued, 3, 0),
			wantLabels: stsLabels, wantAnnotations: stsAnnotations},
		{name: "a StatefulSet's replicas may not change between two non-zero counts", ad: statefulset.Adapter{}, obj: sts(queued, 2, 3), old: ptr(sts(queued, 3, 3)),
			wantErr: "spec.replicas: may not change from 3 to 2"},
		{name: "a StatefulSet may scale to 0; the template's total count is left as it is (here none)", ad: statefulset.Adapter{}, obj: sts(queued, 0, 3), old: ptr(sts(queued, 3, 3)),
			wantLabels: stsLabels, wantAnnotations: func() map[string]string { _, a := wantSTS(""); return a }()},
		{name: "a StatefulSet may not grow from 0 before its pods are gone", ad: statefulset.Adapter{}, obj: sts(queued, 4, 1), old: ptr(sts(queued, 0, 1)),
			wantErr: "may grow from 0 only once the pods of the scale-down are gone"},
		{name: "a StatefulSet grows from 0 to a group of the new count", ad: statefulset.Adapter{}, obj: sts(queued, 4, 0), old: ptr(sts(queued, 0, 0)),
			wantLabels: stsLabels, wantAnnotations: func() map[string]string { _, a := wantSTS("4"); return a }()},
		{name: "a StatefulSet's pods may not change shape while it has replicas", ad: statefulset.Adapter{},
			obj: parentObject{kind: "StatefulSet", labels: queued, replicas: 3, tpl: app, gpus: 2, ready: 3}, old: ptr(sts(queued, 3, 3)),
			wantErr: "spec.template.spec: the pods' requests"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []jobframework.WebhookOption
			if tc.kueue {
				opts = append(opts, jobframework.WithKueueLabels())
			}
			if tc.unqueued != "" {
				opts = append(opts, jobframework.WithUnqueued(jobframework.Unqueued{
					DefaultQueue: func(ns string) bool { return tc.unqueued == "default" && ns == "team-a" }, Hold: tc.unqueued == "hold"}))
			}
			old := "null"
			if tc.old != nil {
				old = tc.old.json()
			}
			obj := tc.obj.json()
			r := review(t, tc.ad.Kind(), obj, old, opts...)
			if tc.wantErr != "" {
				if r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, tc.wantErr) {
					t.Fatalf("allowed %v, result %+v: want refused with %q", r.Allowed, r.Result, tc.wantErr)
				}
				return
			}
			if !r.Allowed {
				t.Fatalf("refused: %s", r.Result.Message)
			}
			out := patched(t, obj, r)
			var after struct {
				Spec struct {
					Template struct {
						Metadata struct {
							Labels      map[string]string `json:"labels"`
							Annotations map[string]string `json:"annotations"`
						} `json:"metadata"`
					} `json:"template"`
				} `json:"spec"`
			}
			if err := json.Unmarshal(out, &after); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantLabels, after.Spec.Template.Metadata.Labels); diff != "" {
				t.Errorf("template labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAnnotations, after.Spec.Template.Metadata.Annotations); diff != "" {
				t.Errorf("template annotations (-want +got):\n%s", diff)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// review sends the webhook of kind k, built with opts, a create of obj
// (old "null") or an update from old, and returns its response.
func review(t *testing.T, k jobframework.Kind, obj, old string, opts ...jobframework.WebhookOption) *admissionv1.AdmissionResponse {
	t.Helper()
	w, err := jobframework.NewWebhook(All, append(opts, jobframework.WithAddress("127.0.0.1:0"), jobframework.WithLogger(zerolog.New(io.Discard)))...)
	if err != nil {
		t.Fatal(err)
	}
	op := "CREATE"
	if old != "null" {
		op = "UPDATE"
	}
	body := fmt.Sprintf(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u1","kind":{"group":%q,"version":%q,"kind":%q},`+
		`"resource":{"group":%q,"version":%q,"resource":%q},"namespace":"team-a","name":"web","operation":%q,"object":%s,"oldObject":%s}}`,
		k.GVK.Group, k.GVK.Version, k.GVK.Kind, k.GVK.Group, k.GVK.Version, k.Resource, op, obj, old)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, jobframework.MutatePath(k), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w.Handler().ServeHTTP(rec, req)
	var got admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Response == nil {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	return got.Response
}

// patched is obj with the response's JSON patch applied.
func patched(t *testing.T, obj string, r *admissionv1.AdmissionResponse) []byte {
	t.Helper()
	out := []byte(obj)
	if len(r.Patch) > 0 {
		p, err := jsonpatch.DecodePatch(r.Patch)
		if err != nil {
			t.Fatal(err)
		}
		if out, err = p.Apply(out); err != nil {
			t.Fatalf("patch %s does not apply: %v", r.Patch, err)
		}
	}
	return out
}

func TestStatefulSetGroupNameFitsALabel(t *testing.T) {
	long := strings.Repeat("a", 100)
	for _, name := range []string{"web", long, strings.Repeat("a", 50) + "-b.c"} {
		g := statefulset.GroupName(name)
		if len(g) > 63 || strings.ContainsAny(g[len(g)-1:], ".-") {
			t.Errorf("GroupName(%q) = %q: not a label value", name, g)
		}
	}
	if statefulset.GroupName(long) == statefulset.GroupName(long+"b") {
		t.Errorf("two long names share a group")
	}
}

// lwsObject is a LeaderWorkerSet with queue labels, its startup policy,
// its object annotations and whether it has a leader template (asking for
// leaderCPU, when given, where the workers ask for one CPU).
func lwsObject(labels map[string]string, policy string, annotations map[string]string, leader bool, leaderCPU ...string) string {
	l, _ := json.Marshal(labels)
	a, _ := json.Marshal(annotations)
	tplOf := func(cpu string) string {
		return `{"metadata":{"labels":{"app":"llm"}},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"` + cpu + `"}}}]}}`
	}
	tpl := tplOf("1")
	leaderTpl := ""
	if leader {
		cpu := "1"
		if len(leaderCPU) > 0 {
			cpu = leaderCPU[0]
		}
		leaderTpl = `"leaderTemplate":` + tplOf(cpu) + `,`
	}
	return fmt.Sprintf(`{"apiVersion":"leaderworkerset.x-k8s.io/v1","kind":"LeaderWorkerSet","metadata":{"name":"llm","namespace":"team-a","labels":%s,"annotations":%s},`+
		`"spec":{"replicas":2,"startupPolicy":%q,"leaderWorkerTemplate":{%s"workerTemplate":%s,"size":4}}}`, l, a, policy, leaderTpl, tpl)
}

// TestLeaderWorkerSetWebhook: both templates of a queued LeaderWorkerSet
// mark its pods as members of their leader-worker group, and the startup
// modes under which a group's workers wait for a running leader are
// refused.
func TestLeaderWorkerSetWebhook(t *testing.T) {
	queued := map[string]string{"sluice.dev/queue-name": "lq"}
	wantLabels := map[string]string{"app": "llm", "sluice.dev/queue-name": "lq"}
	wantAnnotations := map[string]string{"sluice.dev/pod-group-total-count": "4", "sluice.dev/pod-group-serving": "true", "sluice.dev/pod-group-leaderworkerset": "true"}
	k := leaderworkerset.Kind
	cases := []struct {
		name       string
		obj        string
		wantErr    string
		wantLeader bool
		wantFast   bool
	}{
		{name: "leader and worker templates", obj: lwsObject(queued, "LeaderCreated", nil, true), wantLeader: true},
		{name: "no leader template: the workers' only", obj: lwsObject(queued, "", nil, false)},
		{name: "LeaderReady: queued on the leader, shaped as the workers", obj: lwsObject(queued, "LeaderReady", nil, false), wantFast: true},
		{name: "LeaderReady with a leader template of the workers' shape", obj: lwsObject(queued, "LeaderReady", nil, true), wantFast: true, wantLeader: true},
		{name: "LeaderReady with a leader that asks for more is refused", obj: lwsObject(queued, "LeaderReady", nil, true, "2"),
			wantErr: "spec.startupPolicy LeaderReady: the workers are created only once the leader runs"},
		{name: "exclusive placement is refused", obj: lwsObject(queued, "LeaderCreated", map[string]string{"leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"}, false),
			wantErr: "leaderworkerset.sigs.k8s.io/exclusive-topology"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := review(t, k, tc.obj, "null")
			if tc.wantErr != "" {
				if r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, tc.wantErr) {
					t.Fatalf("allowed %v, result %+v: want refused with %q", r.Allowed, r.Result, tc.wantErr)
				}
				return
			}
			if !r.Allowed {
				t.Fatalf("refused: %s", r.Result.Message)
			}
			var after struct {
				Spec struct {
					LWT map[string]json.RawMessage `json:"leaderWorkerTemplate"`
				} `json:"spec"`
			}
			if err := json.Unmarshal(patched(t, tc.obj, r), &after); err != nil {
				t.Fatal(err)
			}
			templates := []string{"workerTemplate"}
			if tc.wantLeader {
				templates = append(templates, "leaderTemplate")
			} else if after.Spec.LWT["leaderTemplate"] != nil {
				t.Errorf("a leader template was made up: %s", after.Spec.LWT["leaderTemplate"])
			}
			for _, name := range templates {
				var tpl struct {
					Metadata struct {
						Labels      map[string]string `json:"labels"`
						Annotations map[string]string `json:"annotations"`
					} `json:"metadata"`
				}
				if err := json.Unmarshal(after.Spec.LWT[name], &tpl); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if diff := cmp.Diff(wantLabels, tpl.Metadata.Labels); diff != "" {
					t.Errorf("%s labels (-want +got):\n%s", name, diff)
				}
				want := maps.Clone(wantAnnotations)
				if tc.wantFast {
					want["sluice.dev/pod-group-fast-admission"] = "true"
				}
				if diff := cmp.Diff(want, tpl.Metadata.Annotations); diff != "" {
					t.Errorf("%s annotations (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}

// TestLeaderWorkerSetPodGroupLabel: the pod webhook names a marked Pod's
// group after its set and group index, reading a leader's index from its
// name when the LeaderWorkerSet's webhook has not labelled it yet.
func TestLeaderWorkerSetPodGroupLabel(t *testing.T) {
	pod := func(name string, labels map[string]string) string {
		all := map[string]string{"sluice.dev/queue-name": "lq"}
		maps.Copy(all, labels)
		l, _ := json.Marshal(all)
		return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":"team-a","labels":%s,`+
			`"annotations":{"sluice.dev/pod-group-leaderworkerset":"true","sluice.dev/pod-group-total-count":"4"}},"spec":{"containers":[{"name":"c"}]}}`, name, l)
	}
	cases := []struct {
		name      string
		obj       string
		wantGroup string
		wantErr   string
	}{
		{name: "a worker: its template's group index", obj: pod("llm-1-2", map[string]string{"leaderworkerset.sigs.k8s.io/name": "llm",
			"leaderworkerset.sigs.k8s.io/group-index": "1", "leaderworkerset.sigs.k8s.io/worker-index": "2"}), wantGroup: "leaderworkerset-llm-1"},
		{name: "a leader labelled by the LeaderWorkerSet's webhook", obj: pod("llm-3", map[string]string{"leaderworkerset.sigs.k8s.io/name": "llm",
			"leaderworkerset.sigs.k8s.io/group-index": "3", "leaderworkerset.sigs.k8s.io/worker-index": "0"}), wantGroup: "leaderworkerset-llm-3"},
		{name: "a leader not labelled yet: its ordinal", obj: pod("llm-7", map[string]string{"leaderworkerset.sigs.k8s.io/name": "llm",
			"leaderworkerset.sigs.k8s.io/worker-index": "0"}), wantGroup: "leaderworkerset-llm-7"},
		{name: "a worker with no group index is refused", obj: pod("llm-1-2", map[string]string{"leaderworkerset.sigs.k8s.io/name": "llm",
			"leaderworkerset.sigs.k8s.io/worker-index": "2"}), wantErr: "leaderworkerset.sigs.k8s.io/group-index"},
		{name: "a marked pod of no set is refused", obj: pod("x", nil), wantErr: "leaderworkerset.sigs.k8s.io/name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := review(t, podkind.Kind, tc.obj, "null")
			if tc.wantErr != "" {
				if r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, tc.wantErr) {
					t.Fatalf("allowed %v, result %+v: want refused with %q", r.Allowed, r.Result, tc.wantErr)
				}
				return
			}
			if !r.Allowed {
				t.Fatalf("refused: %s", r.Result.Message)
			}
			var after struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec struct {
					SchedulingGates []struct{ Name string } `json:"schedulingGates"`
				} `json:"spec"`
			}
			if err := json.Unmarshal(patched(t, tc.obj, r), &after); err != nil {
				t.Fatal(err)
			}
			if got := after.Metadata.Labels["sluice.dev/pod-group-name"]; got != tc.wantGroup {
				t.Errorf("group label %q, want %q", got, tc.wantGroup)
			}
			if len(after.Spec.SchedulingGates) != 1 {
				t.Errorf("scheduling gates %v: want Sluice's", after.Spec.SchedulingGates)
			}
		})
	}
}

func TestLeaderWorkerSetGroupNameFitsALabel(t *testing.T) {
	long := strings.Repeat("a", 70)
	for _, idx := range []string{"0", "12345"} {
		g := podkind.LeaderWorkerSetGroupName(long, idx)
		if len(g) > 63 || !strings.HasSuffix(g, "-"+idx) {
			t.Errorf("LeaderWorkerSetGroupName(long, %s) = %q: not a label value ending in its index", idx, g)
		}
	}
	if podkind.LeaderWorkerSetGroupName(long, "1") == podkind.LeaderWorkerSetGroupName(long+"b", "1") {
		t.Error("two long sets share a group")
	}
}
