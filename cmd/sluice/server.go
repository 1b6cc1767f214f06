package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
)

// adminAPI reaches the pending API: at --server or $SLUICE_SERVER when
// given; otherwise at sluice dev's address and, when nothing listens
// there, through the cluster's API server, which serves it as an
// aggregated API to the kubeconfig's user (what RBAC grants it), so the
// CLI works against a cluster with nothing but a kubeconfig.
type adminAPI struct {
	server string
	common common // its kubeconfig
	// namespace is --sluice-namespace, no longer needed (the API server
	// finds the pending API itself); kept so that scripts still run.
	namespace string
}

// maxAnswerBytes bounds an answer of the admission service: a page of the
// pending API is far smaller.
const maxAnswerBytes = 32 << 20

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
	perr := a.viaAPIServer(ctx, path, query, v)
	if perr == nil {
		return nil
	}
	var usage usageError
	if errors.As(perr, &usage) {
		return perr // the service answered: the request was wrong
	}
	return fmt.Errorf("reach the admission service: nothing at %s (sluice dev), and %w; give --server or $SLUICE_SERVER", defaultServer, perr)
}

// viaAPIServer asks the cluster's API server, as the kubeconfig's user:
// it serves the pending API as an aggregated API (the chart's APIService
// v1beta1.visibility.sluice.dev), and RBAC decides what that user reads.
func (a adminAPI) viaAPIServer(ctx context.Context, path string, query url.Values, v any) error {
	cfg, err := a.common.kube()
	if err != nil {
		return fmt.Errorf("no kubeconfig to reach it through the API server (%v)", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	req := kube.CoreV1().RESTClient().Get().AbsPath(path)
	for k, vs := range query {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	body, err := req.DoRaw(ctx)
	if err == nil && len(body) > maxAnswerBytes {
		return fmt.Errorf("the API server at %s answered %d bytes, more than the %d an answer may have", cfg.Host, len(body), maxAnswerBytes)
	}
	if err != nil {
		msg := statusMessage(body)
		if msg == "" {
			msg = err.Error()
		}
		perr := fmt.Errorf("the pending API through the API server at %s: %s", cfg.Host, msg)
		var se apierrors.APIStatus
		if errors.As(err, &se) {
			switch code := se.Status().Code; {
			case code == 404 && strings.Contains(msg, "the server could not find the requested resource"):
				return fmt.Errorf("%w (is the chart installed, with admission.visibility.enabled?)", perr)
			case code == 404 || code == 400 || code == 403 || code == 401:
				// The queue does not exist, a bad parameter, or a
				// grant the user lacks: the request is wrong, not the
				// path to the service.
				return usageError{Err: perr}
			}
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
