package v1beta1_test

// Helpers that load the generated CRD manifests and validate objects against
// them with the API server's own code (k8s.io/apiextensions-apiserver), wired
// the way kube-apiserver wires it for a served CRD version.

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// crdDir holds the manifests that `make generate` writes.
const crdDir = "../../config/crd"

// crdFiles names the generated manifest of each kind.
var crdFiles = map[string]string{
	"ClusterQueue":              "sluice.dev_clusterqueues.yaml",
	"Cohort":                    "sluice.dev_cohorts.yaml",
	"LocalQueue":                "sluice.dev_localqueues.yaml",
	"ResourceFlavor":            "sluice.dev_resourceflavors.yaml",
	"WorkloadPriorityClass":     "sluice.dev_workloadpriorityclasses.yaml",
	"AdmissionCheck":            "sluice.dev_admissionchecks.yaml",
	"ProvisioningRequestConfig": "sluice.dev_provisioningrequestconfigs.yaml",
	"MultiClusterConfig":        "sluice.dev_multiclusterconfigs.yaml",
	"Topology":                  "sluice.dev_topologies.yaml",
}

// readCRD decodes a generated manifest strictly (an unknown field in it is a
// generator or marker bug) and applies the defaults the API server applies to
// a CRD before validating it.
func readCRD(t testing.TB, data []byte) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatalf("decoding CRD: %v", err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&crd)
	return &crd
}

func loadCRD(t testing.TB, kind string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(crdDir, crdFiles[kind]))
	if err != nil {
		t.Fatalf("reading the %s CRD (run `make generate`): %v", kind, err)
	}
	return readCRD(t, data)
}

// toInternal converts a CRD to the internal version that the API server's
// CRD validation works on.
func toInternal(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) *apiextensions.CustomResourceDefinition {
	t.Helper()
	var out apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, &out, nil); err != nil {
		t.Fatalf("converting CRD %s: %v", crd.Name, err)
	}
	return &out
}

// crStrategy is the part of the API server's custom resource strategy that
// create and update go through.
type crStrategy interface {
	PrepareForCreate(ctx context.Context, obj runtime.Object)
	PrepareForUpdate(ctx context.Context, obj, old runtime.Object)
	Validate(ctx context.Context, obj runtime.Object) field.ErrorList
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
}

// apiServer validates custom resources of one kind as kube-apiserver does:
// prune unknown fields, apply schema defaults, then run the registry
// strategy (metadata, OpenAPI schema, list types, CEL rules with their
// runtime cost budget, and transition rules on update).
type apiServer struct {
	structural *structuralschema.Structural
	strategy   crStrategy
}

// newAPIServer builds the validation stack for the only version of crd, the
// same way the apiextensions-apiserver's CRD handler does for a served
// version.
func newAPIServer(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) *apiServer {
	t.Helper()
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("CRD %s: want one version, got %d", crd.Name, len(crd.Spec.Versions))
	}
	version := crd.Spec.Versions[0]

	var validation apiextensions.CustomResourceValidation
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(version.Schema, &validation, nil); err != nil {
		t.Fatalf("CRD %s: converting schema: %v", crd.Name, err)
	}
	structural, err := structuralschema.NewStructural(validation.OpenAPIV3Schema)
	if err != nil {
		t.Fatalf("CRD %s: schema is not structural: %v", crd.Name, err)
	}
	structural = structural.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(structural); err != nil {
		t.Fatalf("CRD %s: pruning defaults: %v", crd.Name, err)
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(validation.OpenAPIV3Schema)
	if err != nil {
		t.Fatalf("CRD %s: schema validator: %v", crd.Name, err)
	}

	var status *apiextensions.CustomResourceSubresourceStatus
	var statusValidator apiservervalidation.SchemaValidator
	if version.Subresources != nil && version.Subresources.Status != nil {
		status = &apiextensions.CustomResourceSubresourceStatus{}
		if statusSchema, ok := validation.OpenAPIV3Schema.Properties["status"]; ok {
			statusValidator, _, err = apiservervalidation.NewSchemaValidator(&statusSchema)
			if err != nil {
				t.Fatalf("CRD %s: status schema validator: %v", crd.Name, err)
			}
		}
	}

	kind := schema.GroupVersionKind{Group: crd.Spec.Group, Version: version.Name, Kind: crd.Spec.Names.Kind}
	strategy := customresource.NewStrategy(
		nil, // the object typer is not used by validation
		crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		kind,
		validator,
		statusValidator,
		structural,
		status,
		nil, // no scale subresource
		version.SelectableFields,
	)
	return &apiServer{structural: structural, strategy: strategy}
}

// decode turns a YAML manifest into the object the strategy sees: numbers
// that are integers stay int64 (as in the API server's JSON decoding),
// unknown fields are pruned and defaults applied.
func (a *apiServer) decode(t testing.TB, manifest string) *unstructured.Unstructured {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatalf("manifest is not YAML: %v\n%s", err, manifest)
	}
	var content map[string]interface{}
	if err := utiljson.Unmarshal(data, &content); err != nil {
		t.Fatalf("manifest is not an object: %v\n%s", err, manifest)
	}
	structuralpruning.Prune(content, a.structural, true)
	structuraldefaulting.Default(content, a.structural)
	return &unstructured.Unstructured{Object: content}
}

// create validates manifest as a create request and returns the object as
// it would be stored, and the validation errors.
func (a *apiServer) create(t testing.TB, manifest string) (*unstructured.Unstructured, field.ErrorList) {
	t.Helper()
	ctx := context.Background()
	obj := a.decode(t, manifest)
	a.strategy.PrepareForCreate(ctx, obj)
	return obj, a.strategy.Validate(ctx, obj)
}

// update validates newManifest as an update of oldManifest, which must itself
// be valid.
func (a *apiServer) update(t testing.TB, oldManifest, newManifest string) field.ErrorList {
	t.Helper()
	ctx := context.Background()
	old, errs := a.create(t, oldManifest)
	if len(errs) > 0 {
		t.Fatalf("the old object is invalid: %v", errs.ToAggregate())
	}
	old.SetResourceVersion("1")
	obj := a.decode(t, newManifest)
	obj.SetResourceVersion("1") // updates must carry the resourceVersion
	a.strategy.PrepareForUpdate(ctx, obj, old)
	return a.strategy.ValidateUpdate(ctx, obj, old)
}

var (
	apiServersOnce sync.Once
	apiServers     map[string]*apiServer
)

// apiServerFor returns the validation stack of kind, built once per test
// binary (compiling the CEL rules is the slow part).
func apiServerFor(t testing.TB, kind string) *apiServer {
	t.Helper()
	apiServersOnce.Do(func() {
		apiServers = map[string]*apiServer{}
		for k := range crdFiles {
			apiServers[k] = newAPIServer(t, loadCRD(t, k))
		}
	})
	a, ok := apiServers[kind]
	if !ok {
		t.Fatalf("no CRD for kind %q", kind)
	}
	return a
}

// fieldError is a validation error as kubectl shows it: the field path, and
// the rest of the message ("Invalid value: ...: <message>").
type fieldError struct {
	Field string
	Error string
}

// fieldErrors returns errs sorted by field, or nil if there are none.
func fieldErrors(errs field.ErrorList) []fieldError {
	var out []fieldError
	for _, e := range errs {
		out = append(out, fieldError{Field: e.Field, Error: e.ErrorBody()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Field != out[j].Field {
			return out[i].Field < out[j].Field
		}
		return out[i].Error < out[j].Error
	})
	return out
}
