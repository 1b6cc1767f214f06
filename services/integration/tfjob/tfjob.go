// Package tfjob is Sluice's adapter for Kubeflow TFJobs (TensorFlow,
// kubeflow.org/v1, training-operator): one pod set per replica type,
// "chief", "master", "ps", "worker", then "evaluator" (the order Kueue
// gives them), of its replicas (default 1). It is suspended through
// spec.runPolicy.suspend (the webhook adds runPolicy when the manifest has
// none) and finishes with its Succeeded or Failed condition (package
// kubeflow).
package tfjob

import (
	kftov1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/kubeflow"
)

// Kind is the TFJob's kind.
var Kind = jobframework.Kind{Name: "tfjob", GVK: kftov1.GroupVersion.WithKind("TFJob"), Resource: "tfjobs", SuspendField: kubeflow.SuspendField,
	ManagedBy: kubeflow.ManagedByField, ManagedByValue: v1beta1.KueueMultiKueueManagedBy,
	Module: kubeflow.Module, CRD: kubeflow.CRD("tfjobs"), Title: "TFJob (training-operator)"}

var shape = &kubeflow.Shape{Kind: Kind.Name, Field: "spec.tfReplicaSpecs", Order: []kftov1.ReplicaType{kftov1.TFJobReplicaTypeChief, kftov1.TFJobReplicaTypeMaster, kftov1.TFJobReplicaTypePS, kftov1.TFJobReplicaTypeWorker, kftov1.TFJobReplicaTypeEval}}

// Adapter is the TFJob adapter.
type Adapter struct{}

// Kind implements jobframework.Adapter.
func (Adapter) Kind() jobframework.Kind { return Kind }

// Decode implements jobframework.Adapter.
func (Adapter) Decode(obj runtime.Object) (jobframework.Job, error) {
	o, err := jobframework.DecodeAs[kftov1.TFJob](obj, "TFJob")
	if err != nil {
		return nil, err
	}
	return kubeflow.New(o, o.Spec.TFReplicaSpecs, &o.Spec.RunPolicy, &o.Status, shape), nil
}
