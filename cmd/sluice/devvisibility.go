package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/internal/certfile"
	"github.com/sluice-dev/sluice/internal/visibility"
)

// Where `sluice dev --visibility-apiservice` registers the visibility API:
// a Service of type ExternalName to this host, which the API server's
// aggregator reaches the backend by, and the certificate's name.
const (
	DevVisibilityNamespace = "sluice-dev"
	DevVisibilityService   = "sluice-visibility"
	// devVisibilityAddress is the backend's address when none is given.
	devVisibilityAddress = "127.0.0.1:8443"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// devVisibilityHost is the name the API server checks the backend's
// certificate for.
func devVisibilityHost() string { return DevVisibilityService + "." + DevVisibilityNamespace + ".svc" }

// devVisibilityCert makes sure dir holds a serving certificate for the
// Service (tls.crt, tls.key) and the CA that signed it (ca.crt), making a
// self-signed one when it holds none, and returns the CA.
func devVisibilityCert(dir string, now time.Time) ([]byte, error) {
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err == nil {
		if _, err := os.Stat(filepath.Join(dir, "tls.crt")); err == nil {
			return ca, nil
		}
	}
	g, err := certfile.SelfSigned([]string{devVisibilityHost(), "localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, 365*24*time.Hour, now)
	if err != nil {
		return nil, err
	}
	if err := g.Write(dir); err != nil {
		return nil, fmt.Errorf("--visibility-cert-dir %s: %w", dir, err)
	}
	return g.CAPEM, nil
}

// registerDevVisibility makes the cluster's API server serve the
// visibility API (kubectl get workloads, the pending API, the web view at
// /apis/visibility.sluice.dev/v1beta1/ui) from this process at addr: the
// Service DevVisibilityService (ExternalName localhost: the devcluster's
// API server runs on this host) and the APIService, trusting ca. What an
// earlier run registered is updated.
func registerDevVisibility(ctx context.Context, kc *rest.Config, addr string, ca []byte) error {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--visibility-address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("--visibility-address %q: a port from 1 to 65535 is needed", addr)
	}
	kube, err := kubernetes.NewForConfig(kc)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(kc)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DevVisibilityNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", DevVisibilityNamespace, err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: DevVisibilityService, Namespace: DevVisibilityNamespace}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
		Ports: []corev1.ServicePort{{Name: "https", Port: int32(port), TargetPort: intstr.FromInt32(int32(port))}}}}
	services := kube.CoreV1().Services(DevVisibilityNamespace)
	if _, err := services.Create(ctx, svc, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		cur, gerr := services.Get(ctx, DevVisibilityService, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("service %s: %w", DevVisibilityService, gerr)
		}
		cur.Spec.Type, cur.Spec.ExternalName, cur.Spec.Ports = svc.Spec.Type, svc.Spec.ExternalName, svc.Spec.Ports
		_, err = services.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("service %s: %w", DevVisibilityService, err)
	}
	name := visibility.Version + "." + visibility.Group
	spec := map[string]any{
		"group": visibility.Group, "version": visibility.Version, "groupPriorityMinimum": int64(100), "versionPriority": int64(100),
		"service":  map[string]any{"namespace": DevVisibilityNamespace, "name": DevVisibilityService, "port": int64(port)},
		"caBundle": base64.StdEncoding.EncodeToString(ca),
	}
	as := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app.kubernetes.io/managed-by": "sluice-dev"}}, "spec": spec}}
	if _, err := dyn.Resource(apiServices).Create(ctx, as, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		cur, gerr := dyn.Resource(apiServices).Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("APIService %s: %w", name, gerr)
		}
		cur.Object["spec"] = spec
		_, err = dyn.Resource(apiServices).Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("APIService %s: %w", name, err)
	}
	return nil
}

var errNoKube = errors.New("--visibility-apiservice needs Kubernetes access (--kubeconfig)")
