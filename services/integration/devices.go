package integration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/internal/queueconfig"
)

// claimSpecs reads ResourceClaimTemplates and ResourceClaims from the API
// server, once per workload built: only jobs that claim devices ask.
type claimSpecs struct {
	ctx  context.Context
	kube kubernetes.Interface
}

func (c claimSpecs) Template(namespace, name string) (*resourcev1.ResourceClaimSpec, error) {
	ctx, cancel := bus.Bounded(c.ctx)
	defer cancel()
	t, err := c.kube.ResourceV1().ResourceClaimTemplates(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ResourceClaimTemplate %s/%s: %w", namespace, name, err)
	}
	return &t.Spec.Spec, nil
}

func (c claimSpecs) Claim(namespace, name string) (*resourcev1.ResourceClaimSpec, error) {
	ctx, cancel := bus.Bounded(c.ctx)
	defer cancel()
	rc, err := c.kube.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ResourceClaim %s/%s: %w", namespace, name, err)
	}
	return &rc.Spec, nil
}

// deviceCounter counts pods' device claims by the mappings of r, reading
// the claims with kube while ctx lasts.
func deviceCounter(ctx context.Context, kube kubernetes.Interface, r *queueconfig.Resources) jobframework.DeviceCounter {
	specs := claimSpecs{ctx: ctx, kube: kube}
	return func(namespace string, claims []corev1.PodResourceClaim) (corev1.ResourceList, error) {
		return r.DeviceRequests(namespace, claims, specs)
	}
}
