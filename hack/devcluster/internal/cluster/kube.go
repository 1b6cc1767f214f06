package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/nodes"
)

// syncNodes makes the fake nodes in the cluster match want: it creates or
// updates each one and deletes fake nodes that want does not have.
func syncNodes(ctx context.Context, cs kubernetes.Interface, want []*corev1.Node) error {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	wanted := make(map[string]bool, len(want))
	for _, n := range want {
		wanted[n.Name] = true
	}
	for _, n := range list.Items {
		if n.Annotations[nodes.KwokAnnotation] == nodes.KwokAnnotationValue && !wanted[n.Name] {
			if err := cs.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete node %s that the nodes file no longer has: %w", n.Name, err)
			}
		}
	}

	const workers = 8
	work := make(chan *corev1.Node)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				if err := applyNode(ctx, cs, n); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, n := range want {
		work <- n
	}
	close(work)
	wg.Wait()
	return firstErr
}

func applyNode(ctx context.Context, cs kubernetes.Interface, want *corev1.Node) error {
	api := cs.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cur, err = api.Create(ctx, want.DeepCopy(), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create node %s: %w", want.Name, err)
			}
		} else if err != nil {
			return fmt.Errorf("get node %s: %w", want.Name, err)
		} else {
			upd := cur.DeepCopy()
			if upd.Labels == nil {
				upd.Labels = map[string]string{}
			}
			if upd.Annotations == nil {
				upd.Annotations = map[string]string{}
			}
			for k, v := range want.Labels {
				upd.Labels[k] = v
			}
			for k, v := range want.Annotations {
				upd.Annotations[k] = v
			}
			upd.Spec.Taints = want.Spec.Taints
			upd.Spec.Unschedulable = false
			if !apiequality.Semantic.DeepEqual(upd.ObjectMeta, cur.ObjectMeta) || !apiequality.Semantic.DeepEqual(upd.Spec, cur.Spec) {
				if cur, err = api.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
					return fmt.Errorf("update node %s: %w", want.Name, err)
				}
			}
		}
		if apiequality.Semantic.DeepEqual(cur.Status.Capacity, want.Status.Capacity) &&
			apiequality.Semantic.DeepEqual(cur.Status.Allocatable, want.Status.Allocatable) {
			return nil
		}
		upd := cur.DeepCopy()
		upd.Status.Capacity = want.Status.Capacity.DeepCopy()
		upd.Status.Allocatable = want.Status.Allocatable.DeepCopy()
		if _, err := api.UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("set capacity of node %s: %w", want.Name, err)
		}
		return nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitNodesReady waits until every named node is Ready.
func waitNodesReady(ctx context.Context, cs kubernetes.Interface, names []string, exited <-chan error) error {
	return poll(ctx, 300*time.Millisecond, exited, func(ctx context.Context) error {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		ready := map[string]bool{}
		for i := range list.Items {
			if nodeReady(&list.Items[i]) {
				ready[list.Items[i].Name] = true
			}
		}
		n := 0
		for _, name := range names {
			if ready[name] {
				n++
			}
		}
		if n < len(names) {
			return fmt.Errorf("%d of %d nodes Ready", n, len(names))
		}
		return nil
	})
}

// waitServiceAccount waits for the default service account of the default
// namespace: the sign that kube-controller-manager does its work, and that
// pods can be created.
func waitServiceAccount(ctx context.Context, cs kubernetes.Interface, exited <-chan error) error {
	return poll(ctx, 300*time.Millisecond, exited, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("service account default/default: %w", err)
		}
		return nil
	})
}

// countNodes returns how many nodes there are and how many are Ready.
func countNodes(ctx context.Context, cs kubernetes.Interface) (total, ready int, err error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("list nodes: %w", err)
	}
	for i := range list.Items {
		if nodeReady(&list.Items[i]) {
			ready++
		}
	}
	return len(list.Items), ready, nil
}
