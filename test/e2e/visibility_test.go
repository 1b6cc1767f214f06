package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/internal/visibility"
	"github.com/sluice-dev/sluice/internal/webview"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// registerVisibility waits until the API server serves the visibility
// API: the APIService v1beta1.visibility.sluice.dev that the suite's
// `sluice dev --visibility-apiservice` registered, backed by it.
func registerVisibility(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 60*time.Second, "APIService available", func() (bool, string) {
		got, err := env.dyn.Resource(apiServices).Get(ctx, visibility.Version+"."+visibility.Group, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				return m["status"] == "True", fmt.Sprintf("%v: %v", m["reason"], m["message"])
			}
		}
		return false, "no Available condition"
	})
}

// oneWaiting makes a ClusterQueue and LocalQueue q of one GPU in ns and
// in other, runs a Job in ns and leaves a second one, "waiting", pending
// there.
func oneWaiting(t *testing.T, ns, other string) {
	t.Helper()
	for _, n := range []string{ns, other} {
		queues(t, n, 1, "Never")
	}
	createJob(t, jobSpec{ns: ns, name: "running", queue: "q", pods: 1, gpus: 1, runFor: "60s"})
	waitRunning(t, ns, "running", 30*time.Second)
	createJob(t, jobSpec{ns: ns, name: "waiting", queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	waitEvent(t, ns, "waiting", "Pending", "insufficient unused quota", 45*time.Second)
}

// tenant is a service account of ns allowed to read the pending
// workloads of its namespace's LocalQueues, and nothing else; its token.
func tenant(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}}
	if _, err := env.kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pending-viewer", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{visibility.Group}, Resources: []string{"localqueues/pendingworkloads"}, Verbs: []string{"get"}}}}
	if _, err := env.kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-pending-viewer", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pending-viewer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: ns}}}
	if _, err := env.kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := env.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "tenant", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// asTenant is a client of the API server authenticated by token only.
func asTenant(t *testing.T, token string) *kubernetes.Clientset {
	t.Helper()
	cfg := rest.AnonymousClientConfig(env.cfg)
	cfg.BearerToken = token
	return kubernetes.NewForConfigOrDie(cfg)
}

// getRaw is `kubectl get --raw path` with client c: the status code and
// the body.
func getRaw(c *kubernetes.Clientset, path string) (int, []byte) {
	var code int
	body, err := c.CoreV1().RESTClient().Get().AbsPath(path).Do(context.Background()).StatusCode(&code).Raw()
	if err != nil && code == 0 {
		return 0, []byte(err.Error())
	}
	return code, body
}

// TestPendingAPIThroughTheAPIServer: the pending API is an aggregated API
// of the cluster's API server. A user reads what RBAC grants it (a tenant
// its own namespace's LocalQueues), is refused the rest, and the backend
// itself answers no one the cluster does not vouch for.
func TestPendingAPIThroughTheAPIServer(t *testing.T) {
	registerVisibility(t)
	ns, other := "e2e-vis-a", "e2e-vis-b"
	oneWaiting(t, ns, other)

	lqPath := func(n string) string {
		return visibility.Prefix + "/namespaces/" + n + "/localqueues/q/pendingworkloads"
	}
	cqPath := visibility.Prefix + "/clusterqueues/" + ns + "/pendingworkloads"
	names := func(body []byte) []string {
		var sum visibility.PendingWorkloadsSummary
		if err := json.Unmarshal(body, &sum); err != nil {
			return []string{"undecodable: " + string(body)}
		}
		var out []string
		for _, it := range sum.Items {
			out = append(out, it.Metadata.Namespace+"/"+it.Metadata.Name)
		}
		return out
	}
	// The cluster's admin, through the API server (kubectl get --raw).
	for _, path := range []string{cqPath, lqPath(ns)} {
		eventually(t, 20*time.Second, "admin reads "+path, func() (bool, string) {
			code, body := getRaw(env.kube, path)
			return code == http.StatusOK && strings.Join(names(body), ",") == ns+"/waiting", fmt.Sprintf("%d %s", code, body)
		})
	}
	if code, body := getRaw(env.kube, visibility.Prefix); code != http.StatusOK || !bytes.Contains(body, []byte("localqueues/pendingworkloads")) {
		t.Errorf("discovery: %d %s", code, body)
	}

	// A tenant of ns: its namespace's LocalQueue, nothing else.
	token := tenant(t, ns)
	tc := asTenant(t, token)
	if code, body := getRaw(tc, lqPath(ns)); code != http.StatusOK || strings.Join(names(body), ",") != ns+"/waiting" {
		t.Errorf("tenant reads its own LocalQueue: %d %s", code, body)
	}
	for _, path := range []string{lqPath(other), cqPath} {
		if code, body := getRaw(tc, path); code != http.StatusForbidden {
			t.Errorf("tenant of %s reads %s: %d %s, want 403", ns, path, code, body)
		}
	}

	// The backend itself, reached directly: the same grants, and nothing
	// for whom the cluster does not vouch (no token, a made-up token, a
	// user named in a header without the front proxy's certificate).
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.visCA)
	direct := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	get := func(path string, header map[string]string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "https://"+env.visAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := direct.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	cases := []struct {
		name   string
		path   string
		header map[string]string
		want   int
	}{
		{"the tenant's token, its namespace", lqPath(ns), map[string]string{"Authorization": "Bearer " + token}, http.StatusOK},
		{"the tenant's token, another namespace", lqPath(other), map[string]string{"Authorization": "Bearer " + token}, http.StatusForbidden},
		{"the tenant's token, a ClusterQueue", cqPath, map[string]string{"Authorization": "Bearer " + token}, http.StatusForbidden},
		{"no credentials", lqPath(ns), nil, http.StatusUnauthorized},
		{"a made-up token", lqPath(ns), map[string]string{"Authorization": "Bearer not-a-token"}, http.StatusUnauthorized},
		{"a user named in a header, without the front proxy's certificate", cqPath,
			map[string]string{"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}, http.StatusUnauthorized},
	}
	for _, tc := range cases {
		if code, body := get(tc.path, tc.header); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
}

// TestWebViewThroughTheAPIServer: the web view is served through the API
// server too (kubectl proxy, then /apis/visibility.sluice.dev/v1beta1/ui).
// A user needs the chart's web-viewer grants for it, and its live feed
// shows only the namespaces whose pending workloads the user may read.
func TestWebViewThroughTheAPIServer(t *testing.T) {
	registerVisibility(t)
	ns, other := "e2e-web-a", "e2e-web-b"
	// One ClusterQueue, a LocalQueue in each namespace (the quota checker
	// knows the ClusterQueues there were when it started).
	queues(t, ns, 2, "Never")
	apply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: %[1]s}
spec: {clusterQueue: %[2]s}
`, other, ns))
	page, queuesPath, feed := visibility.Prefix+"/ui", visibility.Prefix+webview.QueuesPath, visibility.Prefix+webview.EventsPath
	eventually(t, 20*time.Second, "admin reads the page", func() (bool, string) {
		code, body := getRaw(env.kube, page)
		return code == http.StatusOK && bytes.Contains(body, []byte("<title>Sluice</title>")), fmt.Sprintf("%d %.200s", code, body)
	})
	if code, body := getRaw(env.kube, queuesPath); code != http.StatusOK || !bytes.Contains(body, []byte(`"name":"`+ns+`"`)) {
		t.Errorf("admin reads the queues: %d %.300s", code, body)
	}

	// A tenant of ns with the web-viewer grants; one of other without.
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-web-viewer"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{visibility.Group}, Resources: []string{"ui"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{visibility.Group}, Resources: []string{"ui/queues", "ui/events"}, Verbs: []string{"get"}}}}
	if _, err := env.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-web-viewer-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "tenant", Namespace: ns}}}
	if _, err := env.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	viewer, outsider := asTenant(t, tenant(t, ns)), asTenant(t, tenant(t, other))
	eventually(t, 20*time.Second, "the tenant with the grants reads the queues", func() (bool, string) {
		code, body := getRaw(viewer, queuesPath)
		return code == http.StatusOK, fmt.Sprintf("%d %.200s", code, body)
	})
	for _, path := range []string{page, queuesPath, feed} {
		if code, body := getRaw(outsider, path); code != http.StatusForbidden {
			t.Errorf("tenant without the grants reads %s: %d %.200s, want 403", path, code, body)
		}
	}

	// The viewer's feed: events of ns, none of other.
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	stream, err := viewer.CoreV1().RESTClient().Get().AbsPath(feed).Stream(sctx)
	if err != nil {
		t.Fatalf("the viewer's live feed: %v", err)
	}
	defer stream.Close()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		r := bufio.NewReader(stream)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- line
		}
	}()
	// The comment line says the feed follows: create the Jobs only then.
	select {
	case <-lines:
	case <-sctx.Done():
		t.Fatal("the live feed did not open")
	}
	createJob(t, jobSpec{ns: other, name: "hidden", queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	createJob(t, jobSpec{ns: ns, name: "shown", queue: "q", pods: 1, gpus: 1, runFor: "1s"})
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the live feed ended before the Job of " + ns + " showed")
			}
			if strings.Contains(line, other+"/") {
				t.Fatalf("the viewer of %s was shown %s", ns, line)
			}
			if strings.Contains(line, `"`+ns+`/shown"`) {
				// Both run a second: let them end before their queues go.
				waitComplete(t, ns, "shown", 60*time.Second)
				waitComplete(t, other, "hidden", 60*time.Second)
				return
			}
		case <-sctx.Done():
			t.Fatal("no event of " + ns + "/shown within 60 s")
		}
	}
}
