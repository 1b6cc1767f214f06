package jobframework

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeAs(t *testing.T) {
	typed := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Labels: map[string]string{"a": "b"}}}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		in       runtime.Object
		wantName string
		wantErr  string
	}{
		{name: "a typed object is copied", in: typed, wantName: "j"},
		{name: "an unstructured object is converted", in: &unstructured.Unstructured{Object: u}, wantName: "j"},
		{name: "another type is refused with its type", in: &corev1.Pod{}, wantErr: "not a batch/v1 Job: *v1.Pod"},
		{name: "a typed nil is refused, not a panic", in: (*batchv1.Job)(nil), wantErr: "not a batch/v1 Job: nil"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeAs[batchv1.Job](tc.in, "batch/v1 Job")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("DecodeAs = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.wantName {
				t.Errorf("name %q, want %q", got.Name, tc.wantName)
			}
			got.Labels["a"] = "changed"
			if typed.Labels["a"] != "b" {
				t.Error("the decoded object shares its labels with the input")
			}
		})
	}
}
