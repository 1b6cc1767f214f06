package visibility

import (
	"encoding/json"
	"net/http"
	"strings"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Group and Version of the API, as an APIService names them.
const (
	Group   = "visibility.sluice.dev"
	Version = "v1beta1"
)

// RegisterDiscovery adds the API's discovery document, which the API
// server's aggregator reads (and checks the API is available by) when the
// API is served behind an APIService.
func RegisterDiscovery(mux *http.ServeMux) {
	list := metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: APIVersion,
		APIResources: []metav1.APIResource{
			{Name: "clusterqueues", Kind: "ClusterQueue", Namespaced: false, Verbs: []string{}},
			{Name: "clusterqueues/pendingworkloads", Kind: "PendingWorkloadsSummary", Namespaced: false, Verbs: []string{"get"}},
			{Name: "localqueues", Kind: "LocalQueue", Namespaced: true, Verbs: []string{}},
			{Name: "localqueues/pendingworkloads", Kind: "PendingWorkloadsSummary", Namespaced: true, Verbs: []string{"get"}},
			{Name: WorkloadResource, SingularName: "workload", Kind: WorkloadKind, Namespaced: true, Verbs: []string{"get", "list", "watch"},
				ShortNames: []string{"wl"}},
		},
	}
	mux.HandleFunc("GET "+Prefix+"/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(list)
	})
	mux.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(list)
	})
}

// Attributes is what a request to the API asks to do, as RBAC sees it:
// get on a queue's pendingworkloads subresource, the ClusterQueue's at the
// cluster scope, the LocalQueue's in its namespace, as Kueue's visibility
// API is authorized. Discovery needs no grant (nil). Any other path is
// asked about as what it would name, which no role grants. Workloads are
// read with get (one), list and watch, as RBAC names them.
func Attributes(r *http.Request) *authzv1.ResourceAttributes {
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, Prefix), "/")
	if rest == "" {
		return nil
	}
	a := &authzv1.ResourceAttributes{Verb: strings.ToLower(r.Method), Group: Group, Version: Version}
	if a.Verb == "head" {
		a.Verb = "get"
	}
	parts := strings.Split(rest, "/")
	if len(parts) >= 2 && parts[0] == "namespaces" {
		a.Namespace, parts = parts[1], parts[2:]
	}
	if len(parts) > 0 {
		a.Resource = parts[0]
	}
	if len(parts) > 1 {
		a.Name = parts[1]
	}
	if len(parts) > 2 {
		a.Subresource = strings.Join(parts[2:], "/")
	}
	if a.Verb == "get" && a.Resource == WorkloadResource {
		// As the API server names reads of a collection and watches.
		switch w := r.URL.Query().Get("watch"); {
		case w == "true" || w == "1":
			a.Verb = "watch"
		case a.Name == "":
			a.Verb = "list"
		}
	}
	return a
}
