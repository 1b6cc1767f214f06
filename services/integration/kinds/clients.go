package kinds

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Clients selects the named kinds' adapters (an unknown name is a usage
// error) and makes the clients that read and write their objects: typed,
// speaking protobuf, and dynamic.
func Clients(kc *rest.Config, names []string) ([]jobframework.Adapter, kubernetes.Interface, dynamic.Interface, error) {
	ads, err := Select(names)
	if err != nil {
		return nil, nil, nil, component.Usage(err)
	}
	if kc == nil {
		return nil, nil, nil, component.Usage(fmt.Errorf("the job kinds need Kubernetes access (--kubeconfig, or the pod's service account)"))
	}
	kube, err := kubernetes.NewForConfig(protobuf(kc))
	if err != nil {
		return nil, nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(kc)
	if err != nil {
		return nil, nil, nil, err
	}
	for i, ad := range ads {
		if b, ok := ad.(jobframework.Binder); ok {
			ads[i] = b.Bind(dyn)
		}
	}
	return ads, kube, dyn, nil
}

// protobuf is kc speaking protobuf, for clients of built-in kinds only
// (custom resources have no protobuf encoding): the API server encodes
// each watch event once per encoding its watchers ask for, and the
// cluster's own controllers ask for protobuf, so JSON would be a second
// encoding of every Job and Pod change, and a slower one.
func protobuf(kc *rest.Config) *rest.Config {
	out := rest.CopyConfig(kc)
	out.ContentType = runtime.ContentTypeProtobuf
	out.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return out
}

// Selection is the kinds a service handles: every kind unless
// --integrations says otherwise.
type Selection struct {
	Kinds []string
}

// Every selects every kind.
func Every() Selection { return Selection{Kinds: Names()} }

// BindFlags binds --integrations; what says what the kinds are for.
func (s *Selection) BindFlags(fs *pflag.FlagSet, what string) {
	fs.StringSliceVar(&s.Kinds, "integrations", s.Kinds, what+" ("+strings.Join(Names(), ", ")+")")
}

// Validate refuses an unknown kind, naming the known ones.
func (s Selection) Validate() error {
	_, err := Select(s.Kinds)
	return component.Usage(err)
}
