package job

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
)

// scheme is client-go's scheme, which knows batch/v1 for event references.
func scheme() *runtime.Scheme { return clientscheme.Scheme }

func everything() labels.Selector { return labels.Everything() }
