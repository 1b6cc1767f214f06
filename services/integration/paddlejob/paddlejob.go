// Package paddlejob is Sluice's adapter for Kubeflow PaddleJobs (PaddlePaddle,
// kubeflow.org/v1, training-operator): one pod set per replica type,
// "master" then "worker", of its replicas (default 1). It is
// suspended through spec.runPolicy.suspend (the webhook adds runPolicy
// when the manifest has none) and finishes with its Succeeded or Failed
// condition (package kubeflow).
package paddlejob

import (
	kftov1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/kubeflow"
)

// Kind is the PaddleJob's kind.
var Kind = jobframework.Kind{Name: "paddlejob", GVK: kftov1.GroupVersion.WithKind("PaddleJob"), Resource: "paddlejobs", SuspendField: kubeflow.SuspendField,
	ManagedBy: kubeflow.ManagedByField, ManagedByValue: v1beta1.KueueMultiKueueManagedBy,
	Module: kubeflow.Module, CRD: kubeflow.CRD("paddlejobs"), Title: "PaddleJob (training-operator)"}

var shape = &kubeflow.Shape{Kind: Kind.Name, Field: "spec.paddleReplicaSpecs", Order: []kftov1.ReplicaType{kftov1.PaddleJobReplicaTypeMaster, kftov1.PaddleJobReplicaTypeWorker}}

// Adapter is the PaddleJob adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[kftov1.PaddleJob](obj, "PaddleJob")
	if err != nil {
		return nil, err
	}
	return kubeflow.New(o, o.Spec.PaddleReplicaSpecs, &o.Spec.RunPolicy, &o.Status, shape), nil
}
