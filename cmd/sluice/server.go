package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// admissionServiceSelector finds the admission Service the chart installs.
const admissionServiceSelector = "app.kubernetes.io/name=sluice,app.kubernetes.io/component=admission"

// adminAPI reaches the admission service's HTTP API: at --server or
// $SLUICE_SERVER when given; otherwise at sluice dev's address and, when
// nothing listens there, through the API server's service proxy to the
// admission Service the chart installed (found by its labels), so the CLI
// works against a cluster with nothing but a kubeconfig.
type adminAPI struct {
	server string
	common common // its kubeconfig
	// namespace is where the chart's admission Service is looked for:
	// only there, so that a Service labelled like it in a namespace a
	// tenant controls is never asked.
	namespace string
}

// defaultSluiceNamespace is the namespace the README installs the chart in.
const defaultSluiceNamespace = "sluice-system"

// maxAnswerBytes bounds an answer of the admission service: a page of the
// pending API is far smaller.
const maxAnswerBytes = 32 << 20

func (a adminAPI) sluiceNamespace() string {
	if a.namespace != "" {
		return a.namespace
	}
	if ns := os.Getenv("SLUICE_NAMESPACE"); ns != "" {
		return ns
	}
	return defaultSluiceNamespace
}

func (a adminAPI) explicit() string {
	if a.server != "" {
		return strings.TrimSuffix(a.server, "/")
	}
	return strings.TrimSuffix(os.Getenv("SLUICE_SERVER"), "/")
}

// get fetches path (with query) and decodes the JSON answer into v.
func (a adminAPI) get(ctx context.Context, path string, query url.Values, v any) error {
	if u := a.explicit(); u != "" {
		return getJSON(ctx, u+path+"?"+query.Encode(), v)
	}
	err := getJSON(ctx, defaultServer+path+"?"+query.Encode(), v)
	var op *net.OpError
	if err == nil || !errors.As(err, &op) || op.Op != "dial" {
		return err
	}
	perr := a.viaProxy(ctx, path, query, v)
	if perr == nil {
		return nil
	}
	var usage usageError
	if errors.As(perr, &usage) {
		return perr // the service answered: the request was wrong
	}
	return fmt.Errorf("reach the admission service: nothing at %s (sluice dev), and %w; give --server or $SLUICE_SERVER", defaultServer, perr)
}

// viaProxy asks the API server to proxy the request to the admission
// Service's http port.
func (a adminAPI) viaProxy(ctx context.Context, path string, query url.Values, v any) error {
	cfg, err := a.common.kube()
	if err != nil {
		return fmt.Errorf("no kubeconfig to reach it through the API server (%v)", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	home := a.sluiceNamespace()
	svcs, err := kube.CoreV1().Services(home).List(ctx, metav1.ListOptions{LabelSelector: admissionServiceSelector})
	if err != nil {
		return fmt.Errorf("cannot list Services (%s) in namespace %s through the API server at %s: %w", admissionServiceSelector, home, cfg.Host, err)
	}
	if len(svcs.Items) == 0 {
		return fmt.Errorf("no Service labelled %s in namespace %s of the cluster at %s (is the chart installed there? --sluice-namespace names another)",
			admissionServiceSelector, home, cfg.Host)
	}
	names := make([]string, 0, len(svcs.Items))
	for _, s := range svcs.Items {
		names = append(names, s.Namespace+"/"+s.Name)
	}
	sort.Strings(names)
	ns, name, _ := strings.Cut(names[0], "/")
	params := map[string]string{}
	for k, vs := range query {
		if len(vs) > 0 {
			params[k] = vs[0]
		}
	}
	body, err := kube.CoreV1().Services(ns).ProxyGet("http", name, "http", path, params).DoRaw(ctx)
	if err == nil && len(body) > maxAnswerBytes {
		return fmt.Errorf("service %s/%s answered %d bytes, more than the %d an answer may have", ns, name, len(body), maxAnswerBytes)
	}
	if err != nil {
		// The service's own error answer comes back as the body.
		msg := statusMessage(body)
		if msg == "" {
			msg = err.Error()
		}
		perr := fmt.Errorf("service %s/%s through the API server's proxy: %s", ns, name, msg)
		// A queue that does not exist, or a bad parameter: the request
		// is wrong, not the path to the service.
		var se apierrors.APIStatus
		if errors.As(err, &se) && (se.Status().Code == 404 || se.Status().Code == 400) {
			return usageError{perr}
		}
		return perr
	}
	return json.Unmarshal(body, v)
}

// statusMessage is the message of a Status answer, or "".
func statusMessage(body []byte) string {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) != nil {
		return ""
	}
	return st.Message
}
