package chart_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/kinds"
	"github.com/sluice-dev/sluice/services/integration/pytorchjob"
	chart "github.com/sluice-dev/sluice/test/chart"
)

// exampleJob is a kind Sluice does not have, its adapter in this package (a PyTorchJob's
// under another name and API) and the declarations a new kind makes.
type exampleJob struct{ pytorchjob.Adapter }

func (exampleJob) Kind() jobframework.Kind {
	return jobframework.Kind{Name: "examplejob", GVK: schema.GroupVersionKind{Group: "example.dev", Version: "v1", Kind: "ExampleJob"},
		Resource: "examplejobs", SuspendField: []string{"spec", "suspend"}, Module: "example.dev/operator",
		CRD: "config/crd/example.dev_examplejobs.yaml", Title: "ExampleJob (example operator)"}
}

// A new kind is its adapter plus its line in kinds.All: from the tables
// made of the adapters alone, the chart runs its integration with its
// webhook and its RBAC, the docs list it, and the devcluster installs its
// CRD. Nothing else names it.
func TestANewKindNeedsNothingElse(t *testing.T) {
	ads := append(slices.Clone(kinds.All), exampleJob{})

	table, err := jobframework.ChartKinds(ads)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(chart.Dir())); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "templates", "_kinds.tpl"), table, 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := chart.RenderDir(dir, release, namespace, "integrations.examplejob.enabled=true")
	if err != nil {
		t.Fatalf("render with the new kind enabled: %v", err)
	}
	var d appsv1.Deployment
	if !find(t, objs, "Deployment", release+"-sluice-integration-examplejob", &d) {
		t.Fatalf("no Deployment for the new kind; deployments: %v", names(objs, "Deployment"))
	}
	if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "examplejob") || !slices.Contains(args, "--workers=128") {
		t.Errorf("its integration's args %v; want the kind and integrationDefaults' workers", args)
	}
	var role rbacv1.ClusterRole
	if !find(t, objs, "ClusterRole", release+"-sluice-integration-examplejob", &role) {
		t.Fatalf("no ClusterRole for the new kind; roles: %v", names(objs, "ClusterRole"))
	}
	grants := false
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "example.dev") && slices.Contains(r.Resources, "examplejobs") && slices.Contains(r.Verbs, "patch") {
			grants = true
		}
	}
	if !grants {
		t.Errorf("its ClusterRole does not let it patch examplejobs.example.dev: %+v", role.Rules)
	}
	var wh admissionregistrationv1.MutatingWebhookConfiguration
	if !find(t, objs, "MutatingWebhookConfiguration", release+"-sluice-examplejob", &wh) {
		t.Fatalf("no webhook configuration for the new kind; have %v", names(objs, "MutatingWebhookConfiguration"))
	}
	if len(wh.Webhooks) == 0 || wh.Webhooks[0].Name != jobframework.WebhookName(exampleJob{}.Kind()) ||
		!slices.Contains(wh.Webhooks[0].Rules[0].Resources, "examplejobs") {
		t.Errorf("its webhook %+v; want %s on examplejobs", wh.Webhooks, jobframework.WebhookName(exampleJob{}.Kind()))
	}
	// Off unless enabled, like every kind but job.
	if objs := mustRender(t); slices.Contains(names(objs, "Deployment"), release+"-sluice-integration-examplejob") {
		t.Error("the shipped chart runs a kind it does not know")
	}

	if docs := jobframework.DocsKinds(ads, "github.com/sluice-dev/sluice"); !strings.Contains(docs,
		"| `examplejob` | `example.dev/v1` ExampleJob (example operator) | `test/chart_test` |") {
		t.Errorf("the docs' table has no row for the new kind:\n%s", docs)
	}
	want := jobframework.CRDSource{Module: "example.dev/operator", Path: "config/crd/example.dev_examplejobs.yaml"}
	if !slices.Contains(jobframework.CRDSources(ads), want) {
		t.Errorf("the devcluster's CRDs %v miss the new kind's %v", jobframework.CRDSources(ads), want)
	}
}
