package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/test/chart"
)

// chartNamespace and chartRelease name the test's install of the chart.
const (
	chartNamespace = "sluice-system"
	chartRelease   = "rbac"
	chartFullname  = "rbac-sluice"
)

// renderChart renders charts/sluice as the test's release.
func renderChart(t *testing.T, set ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := chart.Render(chartRelease, chartNamespace, set...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return objs
}

// chartClient creates the rendered objects through the API server: dryRun
// only validates them (as kubectl apply --dry-run=server does).
type chartClient struct {
	t      *testing.T
	mapper meta.RESTMapper
}

func newChartClient(t *testing.T) *chartClient {
	dc := discovery.NewDiscoveryClientForConfigOrDie(env.cfg)
	return &chartClient{t: t, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

func (c *chartClient) create(u *unstructured.Unstructured, dryRun bool) error {
	gvk := u.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
	}
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ri := env.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		_, err = ri.Namespace(u.GetNamespace()).Create(context.Background(), u, opts)
	} else {
		_, err = ri.Create(context.Background(), u, opts)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
	}
	return nil
}

func (c *chartClient) delete(u *unstructured.Unstructured) {
	gvk := u.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		c.t.Errorf("delete %s %s: %v", gvk.Kind, u.GetName(), err)
		return
	}
	ri := env.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		err = ri.Namespace(u.GetNamespace()).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
	} else {
		err = ri.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		c.t.Errorf("delete %s %s: %v", gvk.Kind, u.GetName(), err)
	}
}

// tokenKubeconfig writes a kubeconfig that authenticates as a
// ServiceAccount, by a token the API server mints for it (kubectl create
// token), and nothing else: no client certificate.
func tokenKubeconfig(t *testing.T, dir, sa string) string {
	t.Helper()
	tr, err := env.kube.CoreV1().ServiceAccounts(chartNamespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s: %v", sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["devcluster"] = &clientcmdapi.Cluster{Server: env.cfg.Host, CertificateAuthorityData: env.cfg.CAData, CertificateAuthority: env.cfg.CAFile}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[sa] = &clientcmdapi.Context{Cluster: "devcluster", AuthInfo: sa}
	cfg.CurrentContext = sa
	path := filepath.Join(dir, sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func ptrTo[T any](v T) *T { return &v }

// canI asks the API server, as kubectl auth can-i --as does: a
// SelfSubjectAccessReview sent while impersonating the ServiceAccount.
func canI(t *testing.T, sa, verb, group, resource, sub string) bool {
	t.Helper()
	cfg := rest.CopyConfig(env.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + chartNamespace + ":" + sa}
	kc := kubernetes.NewForConfigOrDie(cfg)
	r, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: "default", Verb: verb, Group: group, Resource: resource, Subresource: sub}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("can-i %s %s %s/%s as %s: %v", verb, group, resource, sub, sa, err)
	}
	return r.Status.Allowed
}

// TestChartLeastPrivilege installs the chart's ServiceAccounts and RBAC,
// runs each service on the host with the arguments the chart gives its
// pod and a kubeconfig holding only its ServiceAccount's token, drives Jobs
// through admission, preemption and completion, and asks the API server
// what each ServiceAccount may do.
func TestChartLeastPrivilege(t *testing.T) {
	srv, dir, logf := withoutSluiceDev(t)
	var procs []*exec.Cmd
	client := newChartClient(t)
	var created []*unstructured.Unstructured
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Signal(os.Interrupt)
			_ = p.Wait()
		}
		for _, u := range created {
			client.delete(u)
		}
	})

	objs := renderChart(t, "nats.install.enabled=false", "nats.auth.mode=none", "nats.url="+srv.ClientURL(), "watcher.statusInterval=1s", "quota.reconcile=5s", "kueueLabels=true")
	if _, err := env.kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Everything the chart renders is valid to the API server.
	for _, u := range objs {
		if err := client.create(u, true); err != nil {
			t.Errorf("server-side dry run: %v", err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The RBAC for real; the webhook configuration with the test's
	// certificate and address in place of the Service (no cluster network
	// here), everything else as rendered. `sluice dev`'s own configuration
	// goes away while it is stopped (it writes it again at start).
	certDir := filepath.Join(dir, "webhook")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca := servingCert(t, certDir)
	hookAddr := fmt.Sprintf("127.0.0.1:%d", freePort())
	if err := env.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), "sluice-job", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	var deployments []appsv1.Deployment
	for _, u := range objs {
		switch u.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		case "MutatingWebhookConfiguration":
			var mwc admissionregistrationv1.MutatingWebhookConfiguration
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &mwc); err != nil {
				t.Fatal(err)
			}
			for i := range mwc.Webhooks {
				cc := &mwc.Webhooks[i].ClientConfig
				url := "https://" + hookAddr + *cc.Service.Path
				cc.Service, cc.URL, cc.CABundle = nil, &url, ca
			}
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&mwc)
			if err != nil {
				t.Fatal(err)
			}
			u = &unstructured.Unstructured{Object: m}
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
				t.Fatal(err)
			}
			deployments = append(deployments, d)
			continue
		default:
			continue
		}
		if err := client.create(u, false); err != nil {
			t.Fatal(err)
		}
		created = append(created, u)
	}

	// The streams and buckets, as the chart's setup hook makes them.
	if out, err := exec.Command(env.sluiceBin, "setup", "--nats", srv.ClientURL()).CombinedOutput(); err != nil {
		t.Fatalf("sluice setup: %v\n%s", err, out)
	}
	var ready []string
	for _, d := range deployments {
		pod := d.Spec.Template.Spec
		component := d.Spec.Template.Labels["app.kubernetes.io/component"]
		httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort())
		var args []string
		for _, a := range pod.Containers[0].Args {
			switch {
			case strings.HasPrefix(a, "--http-address="):
				a = "--http-address=" + httpAddr
			case strings.HasPrefix(a, "--webhook-address="):
				a = "--webhook-address=" + hookAddr
			case strings.HasPrefix(a, "--webhook-cert-dir="):
				a = "--webhook-cert-dir=" + certDir
			case strings.HasPrefix(a, "--visibility-address="):
				a = fmt.Sprintf("--visibility-address=127.0.0.1:%d", freePort())
			case strings.HasPrefix(a, "--visibility-cert-dir="):
				a = "--visibility-cert-dir=" + certDir
			case a == "--replica=$(POD_NAME)":
				a = "--replica=" + component + "-0"
			}
			args = append(args, a)
		}
		cmd := exec.Command(env.sluiceBin, args...)
		// No kubeconfig but the ServiceAccount's, and only for the pods
		// the chart gives a token.
		cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dir, "none"), "HOME="+dir)
		if pod.AutomountServiceAccountToken != nil && *pod.AutomountServiceAccountToken {
			cmd.Env = append(cmd.Env, "KUBECONFIG="+tokenKubeconfig(t, dir, pod.ServiceAccountName))
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", component, err)
		}
		procs = append(procs, cmd)
		ready = append(ready, component+"="+httpAddr)
	}
	if len(deployments) != 7 {
		t.Fatalf("%d Deployments rendered, want watcher, admission, preemption, quota, provisioning, multicluster and the Job integration", len(deployments))
	}
	eventually(t, 60*time.Second, "every service ready", func() (bool, string) {
		for _, r := range ready {
			name, addr, _ := strings.Cut(r, "=")
			code, body, err := httpGet("http://" + addr + "/readyz")
			if err != nil || code != http.StatusOK {
				return false, fmt.Sprintf("%s: %d %s %v", name, code, body, err)
			}
		}
		return true, ""
	})
	if err := waitWebhook(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// A Job is admitted, preempted by a higher-priority one, and resumes
	// once that one finished.
	ns := "e2e-rbac"
	queues(t, ns, 4, "LowerPriority")

	// With kueueLabels, a Job labelled the Kueue way is queued too.
	kj := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "from-kueue", Namespace: ns,
			Labels: map[string]string{v1beta1.KueueQueueNameLabel: "q", v1beta1.KueuePriorityClassLabel: "high"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"sluice.dev/run-for": "1s"}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
					Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
		}},
	}
	got, err := env.kube.BatchV1().Jobs(ns).Create(context.Background(), kj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a Job with Kueue's labels: %v", err)
	}
	if !suspended(got) || got.Labels[v1beta1.QueueNameLabel] != "q" || got.Labels[v1beta1.PriorityClassLabel] != "high" {
		t.Fatalf("a Job with Kueue's labels: suspended %v, labels %v; want suspended with Sluice's labels", suspended(got), got.Labels)
	}
	waitEvent(t, ns, "from-kueue", "Admitted", "ClusterQueue "+ns, 30*time.Second)
	waitComplete(t, ns, "from-kueue", 60*time.Second)
	createJob(t, jobSpec{ns: ns, name: "low", queue: "q", pods: 4, gpus: 1, runFor: "600s"})
	waitRunning(t, ns, "low", 30*time.Second)
	waitEvent(t, ns, "low", "Admitted", "ClusterQueue "+ns, 10*time.Second)
	createJob(t, jobSpec{ns: ns, name: "high", queue: "q", priorityClass: "high", pods: 4, gpus: 1, runFor: "3s"})
	waitEvent(t, ns, "low", "Preempted", "InClusterQueue", 30*time.Second)
	waitRunning(t, ns, "high", 30*time.Second)
	if !suspended(getJob(t, ns, "low")) {
		t.Fatal("low runs beside high")
	}
	waitComplete(t, ns, "high", 60*time.Second)
	waitRunning(t, ns, "low", 30*time.Second)
	// The watcher writes queue status through its status-only permission.
	eventually(t, 20*time.Second, "ClusterQueue status written", func() (bool, string) {
		cq, err := env.dyn.Resource(v1beta1.GroupVersion.WithResource("clusterqueues")).Get(context.Background(), ns, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		n, _, _ := unstructured.NestedInt64(cq.Object, "status", "admittedWorkloads")
		return n == 1, fmt.Sprintf("status %v", cq.Object["status"])
	})
	b, err := os.ReadFile(logf.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "forbidden") {
			t.Errorf("a service was refused by the API server: %s", line)
		}
	}

	// What each ServiceAccount may and may not do.
	sa := func(component string) string { return chartFullname + "-" + component }
	for _, c := range []struct {
		sa, verb, group, resource, sub string
		want                           bool
	}{
		{sa("integration-job"), "patch", "batch", "jobs", "", true},
		{sa("integration-job"), "patch", "batch", "jobs", "status", true},
		{sa("integration-job"), "create", "", "events", "", true},
		{sa("integration-job"), "delete", "batch", "jobs", "", false},
		{sa("integration-job"), "create", "batch", "jobs", "", false},
		{sa("integration-job"), "patch", "jobset.x-k8s.io", "jobsets", "", false},
		// Its topology-aware pods get their domain: list and patch, never
		// delete or create.
		{sa("integration-job"), "list", "", "pods", "", true},
		{sa("integration-job"), "patch", "", "pods", "", true},
		{sa("integration-job"), "delete", "", "pods", "", false},
		{sa("integration-job"), "create", "", "pods", "", false},
		{sa("integration-job"), "get", "", "secrets", "", false},
		{sa("integration-job"), "create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", false},
		{sa("integration-job"), "patch", "sluice.dev", "clusterqueues", "status", false},
		{sa("watcher"), "watch", "sluice.dev", "clusterqueues", "", true},
		{sa("watcher"), "patch", "sluice.dev", "clusterqueues", "status", true},
		{sa("watcher"), "patch", "sluice.dev", "localqueues", "status", true},
		{sa("watcher"), "update", "sluice.dev", "clusterqueues", "", false},
		{sa("watcher"), "delete", "sluice.dev", "localqueues", "", false},
		{sa("watcher"), "patch", "batch", "jobs", "", false},
		{sa("watcher"), "get", "", "secrets", "", false},
		{sa("watcher"), "patch", "", "namespaces", "", false},
		{sa("admission"), "patch", "batch", "jobs", "", false},
		{sa("admission"), "list", "batch", "jobs", "", false},
		{sa("admission"), "list", "sluice.dev", "clusterqueues", "", false},
		{sa("admission"), "get", "", "secrets", "", false},
		{sa("admission"), "create", "authentication.k8s.io", "tokenreviews", "", true},
		{sa("admission"), "create", "authorization.k8s.io", "subjectaccessreviews", "", true},
		{sa("admission"), "list", "", "configmaps", "", false},
		{sa("preemption"), "patch", "batch", "jobs", "", false},
		{sa("preemption"), "get", "", "secrets", "", false},
		{sa("quota"), "patch", "batch", "jobs", "", false},
		{sa("quota"), "get", "", "secrets", "", false},
		{sa("provisioning"), "create", "autoscaling.x-k8s.io", "provisioningrequests", "", true},
		{sa("provisioning"), "delete", "autoscaling.x-k8s.io", "provisioningrequests", "", true},
		{sa("provisioning"), "update", "autoscaling.x-k8s.io", "provisioningrequests", "status", false},
		{sa("provisioning"), "create", "", "podtemplates", "", true},
		{sa("provisioning"), "get", "batch", "jobs", "", true},
		{sa("provisioning"), "patch", "batch", "jobs", "", false},
		{sa("provisioning"), "update", "sluice.dev", "admissionchecks", "status", true},
		{sa("provisioning"), "update", "sluice.dev", "clusterqueues", "", false},
		{sa("provisioning"), "get", "", "secrets", "", false},
		{sa("provisioning"), "list", "", "pods", "", false},
		{sa("multicluster"), "get", "batch", "jobs", "", true},
		{sa("multicluster"), "update", "batch", "jobs", "status", true},
		{sa("multicluster"), "patch", "batch", "jobs", "", false},
		{sa("multicluster"), "create", "batch", "jobs", "", false},
		{sa("multicluster"), "list", "sluice.dev", "multiclusterconfigs", "", true},
		{sa("multicluster"), "update", "sluice.dev", "admissionchecks", "status", true},
		{sa("multicluster"), "get", "", "secrets", "", false},
	} {
		if got := canI(t, c.sa, c.verb, c.group, c.resource, c.sub); got != c.want {
			res := c.resource
			if c.group != "" {
				res += "." + c.group
			}
			if c.sub != "" {
				res += "/" + c.sub
			}
			t.Errorf("can %s %s %s: %v, want %v", c.sa, c.verb, res, got, c.want)
		}
	}
}
