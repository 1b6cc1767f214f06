package visibility_test

import (
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	authzv1 "k8s.io/api/authorization/v1"

	"github.com/sluice-dev/sluice/internal/visibility"
)

func TestAttributes(t *testing.T) {
	cases := []struct {
		name, method, path string
		want               *authzv1.ResourceAttributes
	}{
		{name: "discovery needs no grant", method: "GET", path: visibility.Prefix},
		{name: "discovery with a slash", method: "GET", path: visibility.Prefix + "/"},
		{name: "a ClusterQueue's pending workloads, at the cluster scope", method: "GET", path: visibility.Prefix + "/clusterqueues/cq/pendingworkloads",
			want: &authzv1.ResourceAttributes{Verb: "get", Group: "visibility.sluice.dev", Version: "v1beta1", Resource: "clusterqueues", Name: "cq", Subresource: "pendingworkloads"}},
		{name: "a LocalQueue's, in its namespace", method: "GET", path: visibility.Prefix + "/namespaces/team-a/localqueues/lq/pendingworkloads",
			want: &authzv1.ResourceAttributes{Verb: "get", Group: "visibility.sluice.dev", Version: "v1beta1", Namespace: "team-a", Resource: "localqueues", Name: "lq", Subresource: "pendingworkloads"}},
		{name: "every namespace's workloads are a list at the cluster scope", method: "GET", path: visibility.Prefix + "/workloads",
			want: &authzv1.ResourceAttributes{Verb: "list", Group: "visibility.sluice.dev", Version: "v1beta1", Resource: "workloads"}},
		{name: "a namespace's workloads are a list there", method: "GET", path: visibility.Prefix + "/namespaces/team-a/workloads",
			want: &authzv1.ResourceAttributes{Verb: "list", Group: "visibility.sluice.dev", Version: "v1beta1", Namespace: "team-a", Resource: "workloads"}},
		{name: "a watch of them is a watch", method: "GET", path: visibility.Prefix + "/namespaces/team-a/workloads?watch=true&resourceVersion=7",
			want: &authzv1.ResourceAttributes{Verb: "watch", Group: "visibility.sluice.dev", Version: "v1beta1", Namespace: "team-a", Resource: "workloads"}},
		{name: "one workload is a get", method: "GET", path: visibility.Prefix + "/namespaces/team-a/workloads/job.train",
			want: &authzv1.ResourceAttributes{Verb: "get", Group: "visibility.sluice.dev", Version: "v1beta1", Namespace: "team-a", Resource: "workloads", Name: "job.train"}},
		{name: "another path is asked about as what it names", method: "POST", path: visibility.Prefix + "/namespaces/team-a/secrets",
			want: &authzv1.ResourceAttributes{Verb: "post", Group: "visibility.sluice.dev", Version: "v1beta1", Namespace: "team-a", Resource: "secrets"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := visibility.Attributes(httptest.NewRequest(tc.method, tc.path, nil))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("attributes (-want +got):\n%s", d)
			}
		})
	}
}
