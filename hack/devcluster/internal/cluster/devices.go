package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// GPUDeviceClass is the DeviceClass of the fake nodes' GPUs offered
// through Dynamic Resource Allocation: a stand-in for a DRA driver, whose
// ResourceSlices list each node's nvidia.com/gpu as devices, for
// kube-scheduler to allocate claims from. It is also the driver's name.
const GPUDeviceClass = "gpu.devcluster.sluice.dev"

// syncDevices publishes, as a DRA driver would, one ResourceSlice per fake
// node with GPUs (one device per unit of its nvidia.com/gpu capacity) and
// the DeviceClass selecting them, and deletes the slices of nodes that
// are gone.
func syncDevices(ctx context.Context, cs kubernetes.Interface, want []*corev1.Node) error {
	rs := cs.ResourceV1()
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: GPUDeviceClass}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", GPUDeviceClass)}}},
	}}
	if _, err := rs.DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create DeviceClass %s: %w", GPUDeviceClass, err)
	}
	slices := map[string]*resourcev1.ResourceSlice{}
	for _, n := range want {
		q := n.Status.Capacity["nvidia.com/gpu"]
		if q.Value() <= 0 {
			continue
		}
		name := n.Name
		s := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-gpus"},
			Spec: resourcev1.ResourceSliceSpec{Driver: GPUDeviceClass, NodeName: &name,
				Pool: resourcev1.ResourcePool{Name: n.Name, ResourceSliceCount: 1}},
		}
		for i := range q.Value() {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i)})
		}
		slices[s.Name] = s
	}
	have, err := rs.ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list ResourceSlices: %w", err)
	}
	for _, s := range have.Items {
		if s.Spec.Driver != GPUDeviceClass {
			continue
		}
		if _, ok := slices[s.Name]; ok {
			continue
		}
		if err := rs.ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete ResourceSlice %s of a node that is gone: %w", s.Name, err)
		}
	}
	for _, s := range slices {
		cur, err := rs.ResourceSlices().Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := rs.ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create ResourceSlice %s: %w", s.Name, err)
			}
		case err != nil:
			return fmt.Errorf("get ResourceSlice %s: %w", s.Name, err)
		case len(cur.Spec.Devices) != len(s.Spec.Devices):
			gen := cur.Spec.Pool.Generation + 1
			cur.Spec = s.Spec
			cur.Spec.Pool.Generation = gen
			if _, err := rs.ResourceSlices().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("update ResourceSlice %s: %w", s.Name, err)
			}
		}
	}
	return nil
}
