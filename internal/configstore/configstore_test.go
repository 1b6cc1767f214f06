package configstore

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func priorityClass(t *testing.T, name string, value int32, globalDefault bool) []byte {
	t.Helper()
	b, err := json.Marshal(schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value, GlobalDefault: globalDefault})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSnapshotKnowsTheGlobalDefaultPriorityClass(t *testing.T) {
	cases := []struct {
		name        string
		classes     map[string]bool // name → globalDefault
		wantDefault string
	}{
		{name: "none marked", classes: map[string]bool{"low": false, "high": false}},
		{name: "one marked", classes: map[string]bool{"low": true, "high": false}, wantDefault: "low"},
		{name: "two marked (the API server forbids it): the first by name", classes: map[string]bool{"b": true, "a": true}, wantDefault: "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			for n, d := range tc.classes {
				s.Apply(Key(KindPriorityClass, "", n), priorityClass(t, n, 7, d))
			}
			snap, errs := s.Snapshot()
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if diff := cmp.Diff(tc.wantDefault, snap.DefaultPriorityClass); diff != "" {
				t.Errorf("default (-want +got):\n%s", diff)
			}
		})
	}
}
