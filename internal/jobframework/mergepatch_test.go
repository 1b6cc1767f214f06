package jobframework_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"

	"github.com/sluice-dev/sluice/internal/jobframework"
)

// TestMergePatchRemovesTemplateKeysOneByOne: restoring a template whose
// labels Sluice added removes those keys, not the whole map, which holds
// labels the API server generated and the cache does not show.
func TestMergePatchRemovesTemplateKeysOneByOne(t *testing.T) {
	before := &batchv1.Job{}
	before.Annotations = map[string]string{"sluice.dev/admission": "{}"}
	before.Spec.Template.Labels = map[string]string{"sluice.dev/tas": "job"}
	before.Spec.Template.Annotations = map[string]string{"sluice.dev/topology-podset": "main"}
	after := before.DeepCopy()
	after.Annotations = nil
	after.Spec.Template.Labels, after.Spec.Template.Annotations = nil, nil
	patch, err := jobframework.MergePatch(before, after, "uid-1", "")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(patch, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		// The object's own annotations go key by key too: a null would
		// also remove what the cache trimmed (kubectl's last-applied
		// manifest) and what was written since the read (a stop's mark).
		"metadata": map[string]any{"uid": "uid-1", "annotations": map[string]any{"sluice.dev/admission": nil}},
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
			"labels":      map[string]any{"sluice.dev/tas": nil},
			"annotations": map[string]any{"sluice.dev/topology-podset": nil},
		}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
}
