package jobframework

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

// Served reports whether the API server serves a kind: false, with no
// error, when its group version or resource is unknown (its CRD is not
// installed).
func Served(disc discovery.DiscoveryInterface, k Kind) (bool, error) {
	list, err := disc.ServerResourcesForGroupVersion(k.GVK.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", k.GVK.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == k.Resource && r.Kind == k.GVK.Kind {
			return true, nil
		}
	}
	return false, nil
}
