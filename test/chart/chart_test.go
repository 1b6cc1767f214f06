package chart_test

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/queueconfig"
	"github.com/sluice-dev/sluice/internal/simulate"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/test/chart"
)

const (
	release   = "t"
	namespace = "sluice-system"
	fullname  = "t-sluice"
)

// helm is the helm binary.
func helm(t *testing.T) string {
	t.Helper()
	bin, err := chart.Helm()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// externalNATS points the release at a NATS of its own, without
// credentials (a worker cluster's is a leaf node of the manager's).
var externalNATS = []string{"nats.install.enabled=false", "nats.url=nats://nats:4222", "nats.auth.mode=none"}

// allKinds sets every kind enabled.
func allKinds() []string {
	var out []string
	for _, n := range kinds.Names() {
		out = append(out, "integrations."+n+".enabled=true")
	}
	return out
}

// render renders the chart with the --set values given: the objects, or
// helm's refusal.
func render(t *testing.T, set ...string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	objs, err := chart.Render(release, namespace, set...)
	var refused *chart.RenderError
	if err != nil && !errors.As(err, &refused) {
		t.Fatal(err)
	}
	return objs, err
}

func mustRender(t *testing.T, set ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(t, set...)
	if err != nil {
		t.Fatalf("helm template %v: %s", set, err)
	}
	return objs
}

// find decodes the object of a kind and name into out; false if absent.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) bool {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return true
		}
	}
	return false
}

// setupJob is the setup Job, whatever its name (one per revision with the
// bundled NATS).
func setupJob(t *testing.T, objs []*unstructured.Unstructured) batchv1.Job {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Job" && o.GetLabels()["app.kubernetes.io/component"] == "setup" {
			var job batchv1.Job
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &job); err != nil {
				t.Fatal(err)
			}
			return job
		}
	}
	t.Fatalf("no setup Job; Jobs: %v", names(objs, "Job"))
	return batchv1.Job{}
}

func names(objs []*unstructured.Unstructured, kind string) []string {
	var out []string
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o.GetName())
		}
	}
	slices.Sort(out)
	return out
}

func TestChartLints(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		file string
	}{
		{name: "defaults"},
		{name: "every kind, NATS users with passwords over TLS, two replicas each",
			set: append(allKinds(), "nats.auth.mode=password", "nats.auth.secretName=nats-users", "nats.tls.caSecret=nats-ca",
				"nats.tls.clientSecret=nats-client", "nats.replicas=3", "admission.replicas=2", "integrations.job.replicas=2")},
		{name: "cert-manager", set: []string{"webhook.certManager.enabled=true"}},
		{name: "the three-node JetStream example", file: "../../charts/examples/three-node-jetstream.yaml"},
		{name: "the devcluster example", file: "../../charts/examples/devcluster.yaml"},
		{name: "a bundled three-node cluster, cert-manager", set: []string{"nats.replicas=3", "webhook.certManager.enabled=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chart.Dir(), "--namespace", namespace, "--kube-version", chart.KubeVersion}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			if tc.file != "" {
				args = append(args, "--values", tc.file)
			}
			out, err := exec.Command(helm(t), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

func TestChartRefusesBadValuesNamingThem(t *testing.T) {
	for _, tc := range []struct {
		name    string
		set     []string
		wantErr []string
	}{
		{name: "an unknown key", set: []string{"admission.bogus=1"}, wantErr: []string{"/admission", "bogus"}},
		{name: "stream replicas a cluster cannot have", set: []string{"nats.replicas=2"}, wantErr: []string{"/nats/replicas"}},
		{name: "a URL that is not NATS", set: []string{"nats.url=http://nats:4222"}, wantErr: []string{"/nats/url"}},
		{name: "credentials without their Secret", set: []string{"nats.auth.mode=creds"}, wantErr: []string{"/nats/auth/secretName"}},
		{name: "an unknown auth mode", set: []string{"nats.auth.mode=token"}, wantErr: []string{"/nats/auth/mode"}},
		{name: "a duration that is not one", set: []string{"admission.pendingInterval=30"}, wantErr: []string{"/admission/pendingInterval"}},
		{name: "an unknown log level", set: []string{"logLevel=trace"}, wantErr: []string{"/logLevel"}},
		{name: "a memory limit the Go runtime cannot read", set: []string{"goMemLimit=400MB"}, wantErr: []string{"/goMemLimit"}},
		{name: "a size bound that is not a size", set: []string{"nats.limits.kvMaxBytes=1GB"}, wantErr: []string{"/nats/limits/kvMaxBytes"}},
		{name: "negative replicas", set: []string{"quota.replicas=-1"}, wantErr: []string{"/quota/replicas"}},
		{name: "a worker without its name", set: append([]string{"worker.enabled=true"}, externalNATS...), wantErr: []string{"worker.name is required"}},
		{name: "a worker name NATS and Kubernetes cannot carry", set: []string{"worker.enabled=true", "worker.name=GPU_east"}, wantErr: []string{"/worker/name"}},
		{name: "a kind Sluice does not integrate", set: []string{"integrations.mxjob.enabled=true"},
			wantErr: []string{"integrations.mxjob: not a kind Sluice integrates", "pytorchjob"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.set...)
			if err == nil {
				t.Fatalf("helm template %v: rendered, want an error naming %q", tc.set, tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%s", w, err)
				}
			}
		})
	}
}

// Each kind's MutatingWebhookConfiguration is the one the integration
// would write itself, with the chart's Service in place of a URL.
func TestChartWebhooksAreTheIntegrationsOwn(t *testing.T) {
	for _, kueueLabels := range []bool{false, true} {
		for _, multicluster := range []bool{true, false} {
			t.Run(fmt.Sprintf("kueueLabels=%t,multicluster=%t", kueueLabels, multicluster), func(t *testing.T) {
				webhooksAreTheIntegrationsOwn(t, kueueLabels, multicluster, "")
			})
		}
	}
	// Jobs without a queue label: held (in the namespaces a selector
	// picks), or not looked at.
	t.Run("manageJobsWithoutQueueName", func(t *testing.T) {
		webhooksAreTheIntegrationsOwn(t, true, false, "hold")
	})
}

// A multi-cluster manager's chart calls the webhooks of kinds with a
// managedBy field for every create that leaves it empty, since it cannot
// know which queues dispatch to workers.
//
// unqueued is "" for the chart's default (LocalQueue defaulting in every
// namespace but the system's, the webhook called for any create without a
// queue label there), "hold" for manageJobsWithoutQueueName in the
// namespaces labelled team=batch.
func webhooksAreTheIntegrationsOwn(t *testing.T, kueueLabels, multicluster bool, unqueued string) {
	values := append(allKinds(), fmt.Sprintf("kueueLabels=%t", kueueLabels), fmt.Sprintf("multicluster.enabled=%t", multicluster))
	entry := &jobframework.UnqueuedEntry{Selector: queueconfig.DefaultManagedNamespaces()}
	switch unqueued {
	case "hold":
		values = append(values, "manageJobsWithoutQueueName=true", "managedJobsNamespaceSelector.matchLabels.team=batch")
		entry = &jobframework.UnqueuedEntry{Hold: true, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "batch"}}}
	}
	objs := mustRender(t, values...)
	var secret corev1.Secret
	if !find(t, objs, "Secret", fullname+"-webhook-cert", &secret) {
		t.Fatalf("no webhook certificate Secret; Secrets: %v", names(objs, "Secret"))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		t.Fatal("ca.crt of the webhook Secret holds no certificate")
	}
	block, _ := pem.Decode(secret.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt of the webhook Secret holds no PEM block")
	}
	serving, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	for _, ad := range kinds.All {
		k := ad.Kind()
		t.Run(k.Name, func(t *testing.T) {
			var got admissionregistrationv1.MutatingWebhookConfiguration
			if !find(t, objs, "MutatingWebhookConfiguration", fullname+"-"+k.Name, &got) {
				t.Fatalf("no MutatingWebhookConfiguration for %s; have %v", k.Name, names(objs, "MutatingWebhookConfiguration"))
			}
			var opts []jobframework.ConfigurationOption
			if multicluster {
				opts = append(opts, jobframework.WithAnyMultiClusterQueue())
			}
			opts = append(opts, jobframework.WithUnqueuedEntry(*entry))
			want := jobframework.WebhookConfiguration(k, "https://unused", nil, kueueLabels, opts...).Webhooks
			if len(got.Webhooks) != len(want) {
				t.Fatalf("%d webhooks, want %d", len(got.Webhooks), len(want))
			}
			svc := fullname + "-" + k.Name + "-webhook"
			for i := range got.Webhooks {
				cc := got.Webhooks[i].ClientConfig
				if cc.Service == nil || cc.Service.Name != svc || cc.Service.Namespace != namespace ||
					cc.Service.Path == nil || *cc.Service.Path != jobframework.MutatePath(k) {
					t.Errorf("webhook %d: clientConfig.service = %+v, want %s/%s path %s", i, cc.Service, namespace, svc, jobframework.MutatePath(k))
				}
				if !bytes.Equal(cc.CABundle, secret.Data["ca.crt"]) {
					t.Errorf("webhook %d: caBundle is not the CA of the webhook Secret", i)
				}
				got.Webhooks[i].ClientConfig, want[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{}, admissionregistrationv1.WebhookClientConfig{}
			}
			// The serving certificate is valid for the Service's name.
			if _, err := serving.Verify(x509.VerifyOptions{DNSName: svc + "." + namespace + ".svc", Roots: roots}); err != nil {
				t.Errorf("serving certificate for %s: %v", svc, err)
			}
			// Everything else as the integration writes it (the chart's
			// namespaceSelector default is the integration's: all).
			if diff := cmp.Diff(want, got.Webhooks); diff != "" {
				t.Errorf("webhook differs from the integration's (-want +got):\n%s", diff)
			}

			var dep appsv1.Deployment
			if !find(t, objs, "Deployment", fullname+"-integration-"+k.Name, &dep) {
				t.Fatalf("no Deployment for %s", k.Name)
			}
			args := dep.Spec.Template.Spec.Containers[0].Args
			if len(args) < 2 || args[0] != "integration" || args[1] != k.Name {
				t.Errorf("args %q, want integration %s …", args, k.Name)
			}
			for _, want := range []string{"--webhook-configuration-external", "--webhook-cert-dir=/etc/sluice/webhook", "--setup=false",
				fmt.Sprintf("--kueue-labels=%t", kueueLabels)} {
				if !slices.Contains(args, want) {
					t.Errorf("args %q lack %s", args, want)
				}
			}
		})
	}
}

// The kind each integration's ClusterRole names, with the verbs the
// integration uses on it, and the pods it ungates: nothing on any other
// kind.
func TestChartIntegrationRBACIsItsKindOnly(t *testing.T) {
	objs := mustRender(t, allKinds()...)
	for _, ad := range kinds.All {
		k := ad.Kind()
		t.Run(k.Name, func(t *testing.T) {
			var role rbacv1.ClusterRole
			if k.IsParent() {
				// Its integration is its webhook: it reads and writes nothing.
				if find(t, objs, "ClusterRole", fullname+"-integration-"+k.Name, &role) {
					t.Errorf("a parent kind's integration has a ClusterRole: %+v", role.Rules)
				}
				return
			}
			if !find(t, objs, "ClusterRole", fullname+"-integration-"+k.Name, &role) {
				t.Fatalf("no ClusterRole; have %v", names(objs, "ClusterRole"))
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(k.GVK)
			j, err := ad.Decode(u)
			if err != nil {
				t.Fatal(err)
			}
			verbs := []string{"get", "list", "watch", "patch"}
			if _, ok := j.(jobframework.Deleter); ok {
				verbs = append(verbs, "delete")
			}
			want := []rbacv1.PolicyRule{{APIGroups: []string{k.GVK.Group}, Resources: []string{k.Resource}, Verbs: verbs}}
			if _, ok := j.(jobframework.Unlocker); ok {
				want = append(want, rbacv1.PolicyRule{APIGroups: []string{k.GVK.Group}, Resources: []string{k.Resource + "/status"}, Verbs: []string{"patch"}})
			}
			if k.Resource != "pods" {
				// Its topology-aware pods: gated until given their domain.
				want = append(want, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch", "patch"}})
			}
			for _, r := range k.References {
				// What its jobs' pod sets are read from (a TrainJob's runtimes).
				want = append(want, rbacv1.PolicyRule{APIGroups: []string{r.GVR.Group}, Resources: []string{r.GVR.Resource}, Verbs: []string{"get"}})
			}
			want = append(want, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}})
			if diff := cmp.Diff(want, role.Rules); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
			var binding rbacv1.ClusterRoleBinding
			if !find(t, objs, "ClusterRoleBinding", role.Name, &binding) {
				t.Fatal("no ClusterRoleBinding")
			}
			wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: role.Name, Namespace: namespace}}
			if diff := cmp.Diff(wantSubjects, binding.Subjects); diff != "" || binding.RoleRef.Name != role.Name {
				t.Errorf("binding to %s, subjects (-want +got):\n%s", binding.RoleRef.Name, diff)
			}
		})
	}
}

// TestChartParentKindsBringTheirChildrensIntegration: a Deployment's or a
// StatefulSet's Pods are queued by the pod integration, so enabling either
// kind runs it too.
func TestChartParentKindsBringTheirChildrensIntegration(t *testing.T) {
	for _, ad := range kinds.All {
		k := ad.Kind()
		if !k.IsParent() {
			continue
		}
		t.Run(k.Name, func(t *testing.T) {
			objs := mustRender(t, "integrations."+k.Name+".enabled=true")
			deps := names(objs, "Deployment")
			for _, want := range []string{fullname + "-integration-" + k.Name, fullname + "-integration-" + k.QueuedBy} {
				if !slices.Contains(deps, want) {
					t.Errorf("Deployments %v lack %s", deps, want)
				}
			}
		})
	}
	if deps := names(mustRender(t), "Deployment"); slices.Contains(deps, fullname+"-integration-pod") {
		t.Errorf("the pod integration runs by default: %v", deps)
	}
}

// Admission, preemption and quota never talk to the API server: no token
// is mounted and nothing is bound to their ServiceAccounts. No rule
// anywhere reads Secrets or uses a wildcard.
func TestChartGivesNoKubernetesAccessWhereNoneIsUsed(t *testing.T) {
	objs := mustRender(t, allKinds()...)
	// bound: the roles each ServiceAccount is bound to.
	bound := func(objs []*unstructured.Unstructured) map[string][]string {
		out := map[string][]string{}
		for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
			for _, n := range names(objs, kind) {
				var b rbacv1.ClusterRoleBinding
				find(t, objs, kind, n, &b)
				for _, s := range b.Subjects {
					out[s.Name] = append(out[s.Name], b.RoleRef.Name)
				}
			}
		}
		return out
	}
	// Admission reads the cluster only to authenticate and authorize the
	// pending API's users (TokenReview, SubjectAccessReview, the front
	// proxy's ConfigMap); with the API off, not at all.
	for _, tc := range []struct {
		objs      []*unstructured.Unstructured
		svc       string
		wantRoles []string
	}{
		{objs, "admission", []string{"system:auth-delegator", "extension-apiserver-authentication-reader"}},
		{mustRender(t, "admission.visibility.enabled=false"), "admission", nil},
		{objs, "preemption", nil},
		{objs, "quota", nil},
	} {
		var dep appsv1.Deployment
		if !find(t, tc.objs, "Deployment", fullname+"-"+tc.svc, &dep) {
			t.Fatalf("no Deployment for %s", tc.svc)
		}
		spec := dep.Spec.Template.Spec
		if mounted := spec.AutomountServiceAccountToken != nil && *spec.AutomountServiceAccountToken; mounted != (tc.wantRoles != nil) {
			t.Errorf("%s: service account token mounted %t, want %t", tc.svc, mounted, tc.wantRoles != nil)
		}
		got := bound(tc.objs)[spec.ServiceAccountName]
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.wantRoles))
		if !slices.Equal(got, want) {
			t.Errorf("%s: its ServiceAccount %s is bound to %v, want %v", tc.svc, spec.ServiceAccountName, got, want)
		}
	}
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, n := range names(objs, kind) {
			var r rbacv1.ClusterRole
			find(t, objs, kind, n, &r)
			for _, rule := range r.Rules {
				if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") ||
					slices.Contains(rule.Verbs, "*") || slices.Contains(rule.APIGroups, "*") {
					t.Errorf("%s %s: rule %+v is too broad", kind, n, rule)
				}
			}
		}
	}
	// Every Deployment's pod runs as non-root on a read-only file system.
	for _, n := range names(objs, "Deployment") {
		var dep appsv1.Deployment
		find(t, objs, "Deployment", n, &dep)
		sc := dep.Spec.Template.Spec.SecurityContext
		c := dep.Spec.Template.Spec.Containers[0]
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || c.SecurityContext == nil ||
			c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
			t.Errorf("Deployment %s: not non-root with a read-only root file system", n)
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
			c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("Deployment %s: probes are not /readyz and /healthz", n)
		}
	}
}

// NATS credentials reach each service as its own user, and only its own
// file of the shared Secret is mounted.
func TestChartNATSCredentialsPerService(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		wantArg  func(user string) string
		wantFile func(user string) string
	}{
		{mode: "password", wantArg: func(u string) string { return "--nats-user=" + u }},
		{mode: "creds", wantArg: func(u string) string { return "--nats-creds=/etc/sluice/nats-auth/" + u + ".creds" },
			wantFile: func(u string) string { return u + ".creds" }},
		{mode: "nkey", wantArg: func(u string) string { return "--nats-nkey=/etc/sluice/nats-auth/" + u + ".nk" },
			wantFile: func(u string) string { return u + ".nk" }},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			objs := mustRender(t, "nats.install.enabled=false", "nats.url=nats://nats:4222",
				"nats.auth.mode="+tc.mode, "nats.auth.secretName=nats-users", "nats.auth.users.quota=q-user")
			for _, c := range []struct{ dep, user string }{
				{"watcher", "watcher"}, {"admission", "admission"}, {"preemption", "preemption"}, {"quota", "q-user"}, {"integration-job", "integration"},
			} {
				var dep appsv1.Deployment
				if !find(t, objs, "Deployment", fullname+"-"+c.dep, &dep) {
					t.Fatalf("no Deployment %s", c.dep)
				}
				pod := dep.Spec.Template.Spec
				if !slices.Contains(pod.Containers[0].Args, tc.wantArg(c.user)) {
					t.Errorf("%s: args %q lack %s", c.dep, pod.Containers[0].Args, tc.wantArg(c.user))
				}
				var env *corev1.EnvVar
				for i := range pod.Containers[0].Env {
					if pod.Containers[0].Env[i].Name == "SLUICE_NATS_PASSWORD" {
						env = &pod.Containers[0].Env[i]
					}
				}
				if tc.mode == "password" {
					if env == nil || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil ||
						env.ValueFrom.SecretKeyRef.Name != "nats-users" || env.ValueFrom.SecretKeyRef.Key != c.user {
						t.Errorf("%s: password env %+v, want key %s of Secret nats-users", c.dep, env, c.user)
					}
				} else if env != nil {
					t.Errorf("%s: a password env with mode %s", c.dep, tc.mode)
				}
				if tc.wantFile == nil {
					continue
				}
				var items []string
				for _, v := range pod.Volumes {
					if v.Name == "nats-auth" && v.Secret != nil {
						for _, it := range v.Secret.Items {
							items = append(items, it.Key)
						}
					}
				}
				if diff := cmp.Diff([]string{tc.wantFile(c.user)}, items); diff != "" {
					t.Errorf("%s: mounted keys of the NATS Secret (-want +got):\n%s", c.dep, diff)
				}
			}
		})
	}
}

func TestChartCertManagerIssuesTheWebhookCertificate(t *testing.T) {
	objs := mustRender(t, "webhook.certManager.enabled=true", "integrations.pod.enabled=true")
	if got := names(objs, "Secret"); slices.Contains(got, fullname+"-webhook-cert") {
		t.Errorf("Secrets %v rendered; cert-manager writes the webhooks' certificate", got)
	}
	var cert unstructured.Unstructured
	if !find(t, objs, "Certificate", fullname+"-webhook-cert", &cert.Object) {
		t.Fatal("no Certificate")
	}
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	wantDNS := []string{
		fullname + "-job-webhook." + namespace + ".svc", fullname + "-job-webhook." + namespace + ".svc.cluster.local",
		fullname + "-pod-webhook." + namespace + ".svc", fullname + "-pod-webhook." + namespace + ".svc.cluster.local",
	}
	if diff := cmp.Diff(wantDNS, dns); diff != "" {
		t.Errorf("dnsNames (-want +got):\n%s", diff)
	}
	for _, k := range []string{"job", "pod"} {
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		if !find(t, objs, "MutatingWebhookConfiguration", fullname+"-"+k, &mwc) {
			t.Fatalf("no MutatingWebhookConfiguration for %s", k)
		}
		if got, want := mwc.Annotations["cert-manager.io/inject-ca-from"], namespace+"/"+fullname+"-webhook-cert"; got != want {
			t.Errorf("%s: inject-ca-from %q, want %q", k, got, want)
		}
		if len(mwc.Webhooks[0].ClientConfig.CABundle) != 0 {
			t.Errorf("%s: a caBundle rendered; cert-manager injects it", k)
		}
	}
}

func TestChartCRDsAreTheGeneratedOnes(t *testing.T) {
	want, _ := filepath.Glob("../../config/crd/*.yaml")
	if len(want) == 0 {
		t.Fatal("no CRDs in config/crd")
	}
	for _, p := range want {
		a, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(chart.Dir(), "crds", filepath.Base(p)))
		if err != nil {
			t.Fatalf("chart lacks %s (make generate): %v", filepath.Base(p), err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("charts/sluice/crds/%s differs from config/crd (make generate)", filepath.Base(p))
		}
	}
}

// TestChartWaitForPodsReady: the value becomes a Configuration document
// that `sluice` itself accepts, mounted into admission and the
// integrations (which report readiness) and nowhere else.
func TestChartWaitForPodsReady(t *testing.T) {
	if objs := mustRender(t); slices.Contains(names(objs, "ConfigMap"), fullname+"-config") {
		t.Errorf("ConfigMap %s-config without waitForPodsReady", fullname)
	}
	objs := mustRender(t, "waitForPodsReady.timeout=10m", "waitForPodsReady.requeuingStrategy.backoffLimitCount=3")
	var cm corev1.ConfigMap
	if !find(t, objs, "ConfigMap", fullname+"-config", &cm) {
		t.Fatalf("no ConfigMap %s-config: %v", fullname, names(objs, "ConfigMap"))
	}
	sc, err := simulate.Load([]simulate.Source{{Name: "config.yaml", R: strings.NewReader(cm.Data["config.yaml"])}})
	if err != nil {
		t.Fatalf("the rendered Configuration is refused: %v\n%s", err, cm.Data["config.yaml"])
	}
	w := sc.Config.WaitForPodsReady
	if w == nil || w.Timeout != 10*time.Minute || w.BackoffLimitCount == nil || *w.BackoffLimitCount != 3 {
		t.Errorf("waitForPodsReady read back as %+v", w)
	}
	for _, c := range []struct {
		dep  string
		want bool
	}{{"admission", true}, {"integration-job", true}, {"watcher", false}, {"preemption", false}, {"quota", false}} {
		var dep appsv1.Deployment
		if !find(t, objs, "Deployment", fullname+"-"+c.dep, &dep) {
			t.Fatalf("no Deployment %s", c.dep)
		}
		pod := dep.Spec.Template.Spec
		hasArg := slices.Contains(pod.Containers[0].Args, "--config=/etc/sluice/config/config.yaml")
		mounted := false
		for _, v := range pod.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == fullname+"-config" {
				mounted = true
			}
		}
		if hasArg != c.want || mounted != c.want {
			t.Errorf("%s: --config %v, ConfigMap mounted %v; want %v", c.dep, hasArg, mounted, c.want)
		}
	}
	if _, err := render(t, "waitForPodsReady.timeout=soon"); err == nil || !strings.Contains(err.Error(), "waitForPodsReady/timeout") {
		t.Errorf("a bad timeout is not refused by name: %v", err)
	}
}

// TestChartAdmissionServiceAndScraping: admission's HTTP address (metrics,
// pending API) is behind a Service that selects admission's pods only, and
// every pod is annotated for Prometheus unless told otherwise.
func TestChartAdmissionServiceAndScraping(t *testing.T) {
	objs := mustRender(t)
	var svc corev1.Service
	if !find(t, objs, "Service", fullname+"-admission", &svc) {
		t.Fatalf("no Service %s-admission: %v", fullname, names(objs, "Service"))
	}
	var dep appsv1.Deployment
	if !find(t, objs, "Deployment", fullname+"-admission", &dep) {
		t.Fatal("no admission Deployment")
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not select admission's pods (labels %v)", k, v, dep.Spec.Template.Labels)
		}
	}
	if svc.Spec.Selector["app.kubernetes.io/component"] != "admission" {
		t.Errorf("Service selector %v is not admission's alone", svc.Spec.Selector)
	}
	if len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].TargetPort.String() != "http" || svc.Spec.Ports[1].TargetPort.String() != "visibility" {
		t.Errorf("Service ports %+v, want the pods' http port and the pending API's", svc.Spec.Ports)
	}
	if a := dep.Spec.Template.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("admission pod annotations %v lack Prometheus's", a)
	}
	var quiet appsv1.Deployment
	if !find(t, mustRender(t, "prometheusAnnotations=false"), "Deployment", fullname+"-admission", &quiet) {
		t.Fatal("no admission Deployment")
	}
	if _, ok := quiet.Spec.Template.Annotations["prometheus.io/scrape"]; ok {
		t.Errorf("prometheusAnnotations=false still annotates: %v", quiet.Spec.Template.Annotations)
	}
}

// TestChartFairSharingStrategies: the strategies reach admission's
// Configuration as Kueue names them, and an order Kueue refuses is refused
// by sluice itself when it reads the file.
func TestChartFairSharingStrategies(t *testing.T) {
	objs := mustRender(t, "admission.fairSharing=true", "admission.fairSharingPreemptionStrategies={LessThanInitialShare}")
	var cm corev1.ConfigMap
	if !find(t, objs, "ConfigMap", fullname+"-config", &cm) {
		t.Fatal("no ConfigMap with the Configuration")
	}
	sc, err := simulate.Load([]simulate.Source{{Name: "config.yaml", R: strings.NewReader(cm.Data["config.yaml"])}})
	if err != nil {
		t.Fatalf("the rendered Configuration is refused: %v\n%s", err, cm.Data["config.yaml"])
	}
	if !sc.Config.FairSharing || !slices.Equal(sc.Config.FairStrategies, []string{"LessThanInitialShare"}) {
		t.Errorf("read back fair sharing %v with strategies %v", sc.Config.FairSharing, sc.Config.FairStrategies)
	}
}

// TestChartTracing: an OTLP endpoint reaches every service as the standard
// OTEL_* variables; without one, none is set (tracing off).
func TestChartTracing(t *testing.T) {
	otel := func(objs []*unstructured.Unstructured) map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, name := range names(objs, "Deployment") {
			var dep appsv1.Deployment
			find(t, objs, "Deployment", name, &dep)
			env := map[string]string{}
			for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
				if strings.HasPrefix(e.Name, "OTEL_") {
					env[e.Name] = e.Value
				}
			}
			out[name] = env
		}
		return out
	}
	for name, env := range otel(mustRender(t)) {
		if len(env) != 0 {
			t.Errorf("%s: OTEL variables %v without an endpoint", name, env)
		}
	}
	on := otel(mustRender(t, "tracing.endpoint=http://collector.obs:4318", "tracing.sampler=parentbased_traceidratio", "tracing.samplerArg=0.25"))
	want := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.obs:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}
	if len(on) < 5 {
		t.Fatalf("only %d Deployments: %v", len(on), on)
	}
	for name, env := range on {
		if d := cmp.Diff(want, env); d != "" {
			t.Errorf("%s: OTEL variables (-want +got):\n%s", name, d)
		}
		// What the chart sets, the services accept.
		if _, err := tracing.ConfigFromEnv(func(k string) string { return env[k] }); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := render(t, "tracing.sampler=sometimes"); err == nil || !strings.Contains(err.Error(), "sampler") {
		t.Errorf("a bad sampler: %v, want it refused by name", err)
	}
}

// goMemLimit reaches every Deployment as GOMEMLIMIT, and nothing is set
// without it.
func TestChartGoMemLimit(t *testing.T) {
	limits := func(objs []*unstructured.Unstructured) map[string]string {
		out := map[string]string{}
		for _, name := range names(objs, "Deployment") {
			var dep appsv1.Deployment
			find(t, objs, "Deployment", name, &dep)
			for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "GOMEMLIMIT" {
					out[name] = e.Value
				}
			}
		}
		return out
	}
	if got := limits(mustRender(t)); len(got) != 0 {
		t.Errorf("GOMEMLIMIT set without goMemLimit: %v", got)
	}
	objs := mustRender(t, "goMemLimit=400MiB")
	got := limits(objs)
	deps := names(objs, "Deployment")
	if len(deps) < 5 || len(got) != len(deps) {
		t.Fatalf("GOMEMLIMIT in %d of %d Deployments: %v", len(got), len(deps), got)
	}
	for name, v := range got {
		if v != "400MiB" {
			t.Errorf("%s: GOMEMLIMIT %q, want 400MiB", name, v)
		}
	}
}

// The multicluster dispatcher reads the kinds' objects (Pods included) and
// writes only their status; a worker's agent reads, creates and deletes
// them. Neither touches a parent kind or anything else.
func TestChartMulticlusterRBAC(t *testing.T) {
	objs := mustRender(t, append(append(allKinds(), externalNATS...), "worker.enabled=true", "worker.name=gpu-east", "worker.managerDomain=manager")...)
	var dispatcher, worker rbacv1.ClusterRole
	if !find(t, objs, "ClusterRole", fullname+"-multicluster", &dispatcher) || !find(t, objs, "ClusterRole", fullname+"-worker", &worker) {
		t.Fatalf("no multicluster or worker ClusterRole; have %v", names(objs, "ClusterRole"))
	}
	wantDispatcher := []rbacv1.PolicyRule{
		{APIGroups: []string{"sluice.dev"}, Resources: []string{"admissionchecks", "multiclusterconfigs"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"sluice.dev"}, Resources: []string{"admissionchecks/status"}, Verbs: []string{"update"}},
	}
	var wantWorker []rbacv1.PolicyRule
	for _, ad := range kinds.All {
		k := ad.Kind()
		if k.IsParent() {
			continue
		}
		wantDispatcher = append(wantDispatcher,
			rbacv1.PolicyRule{APIGroups: []string{k.GVK.Group}, Resources: []string{k.Resource}, Verbs: []string{"get"}},
			rbacv1.PolicyRule{APIGroups: []string{k.GVK.Group}, Resources: []string{k.Resource + "/status"}, Verbs: []string{"update"}})
		wantWorker = append(wantWorker, rbacv1.PolicyRule{APIGroups: []string{k.GVK.Group}, Resources: []string{k.Resource},
			Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}})
	}
	if diff := cmp.Diff(wantDispatcher, dispatcher.Rules); diff != "" {
		t.Errorf("dispatcher rules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantWorker, worker.Rules); diff != "" {
		t.Errorf("worker rules (-want +got):\n%s", diff)
	}
	var dep appsv1.Deployment
	if !find(t, objs, "Deployment", fullname+"-worker", &dep) {
		t.Fatal("no worker Deployment")
	}
	// A worker cluster's NATS has no multicluster stream of its own.
	var setup batchv1.Job
	if !find(t, objs, "Job", fullname+"-setup", &setup) || len(setup.Spec.Template.Spec.Containers) == 0 {
		t.Fatal("no setup Job")
	}
	if args := setup.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--worker-cluster") {
		t.Errorf("the setup Job of a worker cluster lacks --worker-cluster: %v", args)
	}
	args := dep.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"worker", "--name=gpu-east", "--manager-domain=manager", "--setup=false"} {
		if !slices.Contains(args, want) {
			t.Errorf("worker args %v lack %s", args, want)
		}
	}
	if objs := mustRender(t); len(names(objs, "Deployment")) != 7 || slices.Contains(names(objs, "Deployment"), fullname+"-worker") {
		t.Errorf("default Deployments %v: want the dispatcher and no worker", names(objs, "Deployment"))
	}
}

// TestChartQuotaResources: Kueue's resources block becomes the
// Configuration's resources, which `sluice` accepts and the integrations
// read; a strategy Kueue lacks is refused by its path.
func TestChartQuotaResources(t *testing.T) {
	objs := mustRender(t, "quotaResources.excludeResourcePrefixes[0]=example.com/nic",
		"quotaResources.transformations[0].input=nvidia.com/mig-1g.5gb", "quotaResources.transformations[0].strategy=Replace",
		"quotaResources.transformations[0].outputs.example\\.com/accelerator-memory=5Gi")
	var cm corev1.ConfigMap
	if !find(t, objs, "ConfigMap", fullname+"-config", &cm) {
		t.Fatalf("no ConfigMap %s-config: %v", fullname, names(objs, "ConfigMap"))
	}
	sc, err := simulate.Load([]simulate.Source{{Name: "config.yaml", R: strings.NewReader(cm.Data["config.yaml"])}})
	if err != nil {
		t.Fatalf("the rendered Configuration is refused: %v\n%s", err, cm.Data["config.yaml"])
	}
	r := sc.Config.Resources
	if r == nil || len(r.ExcludeResourcePrefixes) != 1 || len(r.Transformations) != 1 || r.Transformations[0].Strategy != "Replace" {
		t.Fatalf("resources read back as %+v", r)
	}
	got := r.Apply(corev1.ResourceList{"nvidia.com/mig-1g.5gb": resource.MustParse("2"), "example.com/nic": resource.MustParse("1")})
	if q := got["example.com/accelerator-memory"]; len(got) != 1 || q.Cmp(resource.MustParse("10Gi")) != 0 {
		t.Errorf("two slices are queued as %v, want example.com/accelerator-memory: 10Gi only", got)
	}
	var dep appsv1.Deployment
	if !find(t, objs, "Deployment", fullname+"-integration-job", &dep) {
		t.Fatal("no Deployment integration-job")
	}
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--config=/etc/sluice/config/config.yaml") {
		t.Errorf("integration-job is not given the Configuration: %v", dep.Spec.Template.Spec.Containers[0].Args)
	}
	if _, err := render(t, "quotaResources.transformations[0].input=cpu", "quotaResources.transformations[0].strategy=Keep"); err == nil ||
		!strings.Contains(err.Error(), "quotaResources/transformations/0/strategy") {
		t.Errorf("an unknown strategy is not refused by name: %v", err)
	}
}

// The setup Job bounds the streams and buckets with nats.limits; the
// PrometheusRule with the alerts on them is rendered only when asked for.
func TestChartStorageBounds(t *testing.T) {
	setupArgs := func(objs []*unstructured.Unstructured) []string {
		return setupJob(t, objs).Spec.Template.Spec.Containers[0].Args
	}
	objs := mustRender(t)
	for _, want := range []string{"--max-bytes=2Gi", "--dlq-max-bytes=512Mi", "--kv-max-bytes=1Gi"} {
		if !slices.Contains(setupArgs(objs), want) {
			t.Errorf("setup Job args %v lack %s", setupArgs(objs), want)
		}
	}
	if len(names(objs, "PrometheusRule")) != 0 {
		t.Error("a PrometheusRule rendered without prometheusRule.enabled")
	}
	objs = mustRender(t, "nats.limits.maxBytes=-1", "prometheusRule.enabled=true")
	if !slices.Contains(setupArgs(objs), "--max-bytes=-1") {
		t.Errorf("setup Job args %v lack --max-bytes=-1", setupArgs(objs))
	}
	if got := names(objs, "PrometheusRule"); len(got) != 1 {
		t.Errorf("PrometheusRules %v, want one", got)
	}
}

// A worker's agent creates copies only in worker.namespaces, when set.
func TestChartWorkerNamespaces(t *testing.T) {
	args := func(set ...string) []string {
		var dep appsv1.Deployment
		find(t, mustRender(t, append(append([]string{"worker.enabled=true", "worker.name=w1"}, externalNATS...), set...)...), "Deployment", release+"-sluice-worker", &dep)
		return dep.Spec.Template.Spec.Containers[0].Args
	}
	for _, a := range args() {
		if strings.HasPrefix(a, "--namespaces") {
			t.Errorf("worker args %v name namespaces without worker.namespaces", args())
		}
	}
	if got := args("worker.namespaces={team-a,team-b}"); !slices.Contains(got, "--namespaces=team-a,team-b") {
		t.Errorf("worker args %v lack --namespaces=team-a,team-b", got)
	}
}

// The pending API is an aggregated API: an APIService for admission's
// Service, whose CA signed the certificate admission serves, which names
// that Service.
func TestChartPendingAPIService(t *testing.T) {
	objs := mustRender(t)
	var as unstructured.Unstructured
	if !find(t, objs, "APIService", "v1beta1.visibility.sluice.dev", &as.Object) {
		t.Fatalf("no APIService: %v", names(objs, "APIService"))
	}
	svcName, _, _ := unstructured.NestedString(as.Object, "spec", "service", "name")
	port, _, _ := unstructured.NestedFieldNoCopy(as.Object, "spec", "service", "port")
	caB64, _, _ := unstructured.NestedString(as.Object, "spec", "caBundle")
	if svcName != fullname+"-admission" || fmt.Sprint(port) != "8443" {
		t.Errorf("APIService backed by %s:%v, want %s-admission:8443", svcName, port, fullname)
	}
	var sec corev1.Secret
	if !find(t, objs, "Secret", fullname+"-visibility-cert", &sec) {
		t.Fatal("no visibility certificate Secret")
	}
	ca, err := base64.StdEncoding.DecodeString(caB64)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("caBundle holds no certificate")
	}
	block, _ := pem.Decode(sec.Data["tls.crt"])
	if block == nil {
		t.Fatalf("tls.crt: %q", sec.Data["tls.crt"])
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	host := fullname + "-admission." + namespace + ".svc"
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
		t.Errorf("the served certificate does not verify for %s with the APIService's caBundle: %v", host, err)
	}
	var dep appsv1.Deployment
	find(t, objs, "Deployment", fullname+"-admission", &dep)
	args := dep.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--visibility-address=:8443", "--visibility-cert-dir=/etc/sluice/visibility", "--visibility-insecure=false"} {
		if !slices.Contains(args, want) {
			t.Errorf("admission args %v lack %s", args, want)
		}
	}
	if off := mustRender(t, "admission.visibility.enabled=false"); len(names(off, "APIService")) != 0 {
		t.Error("an APIService with admission.visibility.enabled=false")
	}
	// With cert-manager, it issues the certificate and injects its CA,
	// with or without a kind's webhook beside it.
	for _, set := range [][]string{{"webhook.certManager.enabled=true"}, {"webhook.certManager.enabled=true", "integrations.job.enabled=false"}} {
		objs := mustRender(t, set...)
		var cert, svc unstructured.Unstructured
		if !find(t, objs, "Certificate", fullname+"-visibility-cert", &cert.Object) {
			t.Fatalf("%v: no Certificate for the pending API", set)
		}
		dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		if !slices.Contains(dns, host) {
			t.Errorf("%v: Certificate names %v, want %s", set, dns, host)
		}
		find(t, objs, "APIService", "v1beta1.visibility.sluice.dev", &svc.Object)
		if svc.GetAnnotations()["cert-manager.io/inject-ca-from"] != namespace+"/"+fullname+"-visibility-cert" {
			t.Errorf("%v: APIService annotations %v", set, svc.GetAnnotations())
		}
		if issuers := names(objs, "Issuer"); len(issuers) != 1 {
			t.Errorf("%v: Issuers %v, want the one self-signed Issuer", set, issuers)
		}
		if slices.Contains(names(objs, "Secret"), fullname+"-visibility-cert") {
			t.Errorf("%v: the chart made the certificate cert-manager issues", set)
		}
	}
}

// Every kind's integration takes integrationDefaults; its own entry
// overrides a setting, a zero one included, and merges into a map.
func TestChartIntegrationDefaults(t *testing.T) {
	objs := mustRender(t, "integrationDefaults.workers=64", "integrationDefaults.resources.requests.cpu=300m",
		"integrations.jobset.enabled=true", "integrations.jobset.workers=8", "integrations.jobset.resources.limits.memory=1Gi",
		"integrations.job.replicas=0")
	type want struct {
		replicas int32
		workers  string
		cpu      string
		limit    string
	}
	for kind, w := range map[string]want{
		"job":    {replicas: 0, workers: "--workers=64", cpu: "300m"},
		"jobset": {replicas: 1, workers: "--workers=8", cpu: "300m", limit: "1Gi"},
	} {
		var d appsv1.Deployment
		if !find(t, objs, "Deployment", release+"-sluice-integration-"+kind, &d) {
			t.Fatalf("no Deployment for kind %s", kind)
		}
		if got := *d.Spec.Replicas; got != w.replicas {
			t.Errorf("%s: replicas %d; want %d", kind, got, w.replicas)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if !slices.Contains(c.Args, w.workers) {
			t.Errorf("%s: args %v; want %s", kind, c.Args, w.workers)
		}
		if got := c.Resources.Requests.Cpu().String(); got != w.cpu {
			t.Errorf("%s: cpu request %s; want %s", kind, got, w.cpu)
		}
		if got := c.Resources.Requests.Memory().String(); got != "128Mi" {
			t.Errorf("%s: memory request %s; want the default's 128Mi", kind, got)
		}
		got := ""
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			got = q.String()
		}
		if got != w.limit {
			t.Errorf("%s: memory limit %q; want %q", kind, got, w.limit)
		}
	}
	if names := names(objs, "Deployment"); slices.Contains(names, release+"-sluice-integration-pod") {
		t.Errorf("the pod integration runs though no value enables it: %v", names)
	}
}
