package integration

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestTrimForCache(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	typed := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", ManagedFields: managed,
		Annotations: map[string]string{lastApplied: `{"big":"manifest"}`, "sluice.dev/admission": "{}"}}}
	u := &unstructured.Unstructured{}
	u.SetName("u")
	u.SetManagedFields(managed)
	u.SetAnnotations(map[string]string{lastApplied: "{}"})

	for _, tc := range []struct {
		name            string
		obj             runtime.Object
		wantAnnotations map[string]string
	}{
		{name: "a typed object keeps every other annotation", obj: typed, wantAnnotations: map[string]string{"sluice.dev/admission": "{}"}},
		{name: "an unstructured object is trimmed the same way", obj: u, wantAnnotations: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trimForCache(tc.obj)
			m := tc.obj.(metav1.Object)
			if len(m.GetManagedFields()) != 0 {
				t.Errorf("managed fields kept: %v", m.GetManagedFields())
			}
			if d := cmp.Diff(tc.wantAnnotations, m.GetAnnotations()); d != "" {
				t.Errorf("annotations (-want +got):\n%s", d)
			}
		})
	}
}
