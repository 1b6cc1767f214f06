// Package jaxjob is Sluice's adapter for Kubeflow JAXJobs (JAX,
// kubeflow.org/v1, training-operator): one pod set, "worker", of its
// replicas (default 1); JAX has no master or coordinator replica type, its
// first worker coordinates. A JAXJob is suspended through
// spec.runPolicy.suspend (the webhook adds runPolicy when the manifest has
// none) and finishes with its Succeeded or Failed condition (package
// kubeflow).
package jaxjob

import (
	kftov1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/kubeflow"
)

// Kind is the JAXJob's kind.
var Kind = jobframework.Kind{Name: "jaxjob", GVK: kftov1.GroupVersion.WithKind(kftov1.JAXJobKind), Resource: kftov1.JAXJobPlural, SuspendField: kubeflow.SuspendField,
	ManagedBy: kubeflow.ManagedByField, ManagedByValue: v1beta1.KueueMultiKueueManagedBy,
	Module: kubeflow.Module, CRD: kubeflow.CRD(kftov1.JAXJobPlural), Title: "JAXJob (training-operator)"}

var shape = &kubeflow.Shape{Kind: Kind.Name, Field: "spec.jaxReplicaSpecs",
	Order: []kftov1.ReplicaType{kftov1.JAXJobReplicaTypeWorker}}

// Adapter is the JAXJob adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[kftov1.JAXJob](obj, "JAXJob")
	if err != nil {
		return nil, err
	}
	return kubeflow.New(o, o.Spec.JAXReplicaSpecs, &o.Spec.RunPolicy, &o.Status, shape), nil
}
