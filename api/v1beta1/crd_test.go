package v1beta1_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	celschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"
)

// TestCRDManifests checks that config/crd holds one manifest per kind and
// nothing else, so a renamed or removed kind leaves no stale CRD behind.
func TestCRDManifests(t *testing.T) {
	entries, err := os.ReadDir(crdDir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	var want []string
	for _, f := range crdFiles {
		want = append(want, f)
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files in %s (-want +got):\n%s", crdDir, diff)
	}
}

// TestCRDsAreAcceptedByTheAPIServer runs the API server's own CRD validation
// on each generated manifest: structural schema, defaults, list types, and the
// static CEL checks (every rule compiles, and the estimated cost of each rule
// and of all rules together is within the budget; a CRD over budget is
// refused at create time).
func TestCRDsAreAcceptedByTheAPIServer(t *testing.T) {
	for kind := range crdFiles {
		t.Run(kind, func(t *testing.T) {
			crd := toInternal(t, loadCRD(t, kind))
			if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
				for _, e := range errs {
					t.Error(e)
				}
			}
		})
	}
}

// TestCRDCostCheckIsLive guards the test above against passing vacuously: the
// quantity fields carry a maxLength only to bound the estimated cost of
// parsing them in CEL, and without it the API server must refuse the
// ClusterQueue CRD (about 4,096 quota entries, each parsed as if it could be
// as large as a whole request).
func TestCRDCostCheckIsLive(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(crdDir, crdFiles["ClusterQueue"]))
	if err != nil {
		t.Fatal(err)
	}
	unbounded := regexp.MustCompile(`(?m)^\s*maxLength: 64\n`).ReplaceAll(data, nil)
	if len(unbounded) == len(data) {
		t.Fatal("the ClusterQueue CRD has no quantity with maxLength 64; update this test")
	}
	var got []string
	for _, e := range crdvalidation.ValidateCustomResourceDefinition(context.Background(), toInternal(t, readCRD(t, unbounded))) {
		if strings.HasPrefix(e.Detail, "estimated rule cost exceeds budget") {
			got = append(got, e.Field)
		}
	}
	// The four quantity rules of ResourceQuota (nominalQuota, borrowingLimit,
	// lendingLimit not negative; lendingLimit not above nominalQuota) each
	// run up to 16×16×16 times.
	quota := "spec.validation.openAPIV3Schema.properties[spec].properties[resourceGroups].items" +
		".properties[flavors].items.properties[resources].items.x-kubernetes-validations"
	want := []string{quota + "[0].rule", quota + "[1].rule", quota + "[2].rule", quota + "[3].rule"}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("rules over the per-rule cost budget without maxLength (-want +got):\n%s", diff)
	}
}

// TestCELCostReport logs the estimated cost of every CEL rule, computed as the
// API server does (worst-case cost of one evaluation times the most times the
// rule can run in one object), so the headroom is visible when rules or
// limits change. TestCRDsAreAcceptedByTheAPIServer is the authority on the
// limits; this test only repeats the check of the total.
func TestCELCostReport(t *testing.T) {
	envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true)
	for kind := range crdFiles {
		t.Run(kind, func(t *testing.T) {
			crd := loadCRD(t, kind)
			var validation apiextensions.CustomResourceValidation
			if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(crd.Spec.Versions[0].Schema, &validation, nil); err != nil {
				t.Fatal(err)
			}
			root, err := structuralschema.NewStructural(validation.OpenAPIV3Schema)
			if err != nil {
				t.Fatal(err)
			}
			var total uint64
			walkRules(root, "(root)", ptr.To[uint64](1), func(s *structuralschema.Structural, path string, cardinality *uint64) {
				results, err := celschema.Compile(s, model.SchemaDeclType(s, s == root), celconfig.PerCallLimit, envSet, celschema.NewExpressionsEnvLoader())
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				for i, r := range results {
					if r.Error != nil {
						t.Fatalf("%s rule %d: %v", path, i, r.Error)
					}
					runs := r.MaxCardinality
					if cardinality != nil {
						runs = *cardinality
					}
					// The API server's CRD validation counts a
					// messageExpression's cost once, not once per run.
					cost := r.MaxCost*runs + r.MessageExpressionMaxCost
					total += cost
					t.Logf("%s rule %d: %d per run × %d runs + %d for the message = %d",
						path, i, r.MaxCost, runs, r.MessageExpressionMaxCost, cost)
				}
			})
			t.Logf("total %d of %d", total, uint64(crdvalidation.StaticEstimatedCRDCostLimit))
			if total > crdvalidation.StaticEstimatedCRDCostLimit {
				t.Errorf("estimated CEL cost %d exceeds the CRD limit %d", total, uint64(crdvalidation.StaticEstimatedCRDCostLimit))
			}
		})
	}
}

// walkRules calls visit on every schema node that has CEL rules, with the
// most times the node can occur in one object: the product of the maxItems
// and maxProperties above it, or nil when a list or map above it is
// unbounded.
func walkRules(s *structuralschema.Structural, path string, cardinality *uint64, visit func(*structuralschema.Structural, string, *uint64)) {
	if len(s.XValidations) > 0 {
		visit(s, path, cardinality)
	}
	for name, p := range s.Properties {
		walkRules(&p, strings.TrimPrefix(path, "(root)")+"."+name, cardinality, visit)
	}
	if s.Items != nil {
		walkRules(s.Items, path+"[*]", times(cardinality, s.ValueValidation, true), visit)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
		walkRules(s.AdditionalProperties.Structural, path+"[*]", times(cardinality, s.ValueValidation, false), visit)
	}
}

// times multiplies a cardinality by the bound of a list (maxItems) or a map
// (maxProperties); nil means unbounded.
func times(cardinality *uint64, v *structuralschema.ValueValidation, list bool) *uint64 {
	if cardinality == nil || v == nil {
		return nil
	}
	bound := v.MaxProperties
	if list {
		bound = v.MaxItems
	}
	if bound == nil {
		return nil
	}
	return ptr.To(*cardinality * uint64(*bound))
}
