package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/internal/certfile"
	"github.com/sluice-dev/sluice/internal/kubeauth"
	"github.com/sluice-dev/sluice/internal/visibility"
	"github.com/sluice-dev/sluice/internal/webview"
	"github.com/sluice-dev/sluice/services/admission"
)

// visibilityFlags say where the pending API is served, and to whom.
type visibilityFlags struct {
	// addr serves it over TLS to whom the cluster authenticates and
	// authorizes (the APIService's backend); "" for nowhere.
	addr string
	// certDir holds its serving certificate (tls.crt, tls.key).
	certDir string
	// open also serves it, and the web view, on the plain HTTP port to
	// anyone who reaches it (sluice dev, on loopback).
	open bool
}

func (v *visibilityFlags) bind(f *pflag.FlagSet, open bool) {
	f.StringVar(&v.addr, "visibility-address", "", "address serving the pending API over TLS to users the cluster authenticates and authorizes, "+
		"the backend of the APIService v1beta1.visibility.sluice.dev, e.g. :8443 (empty: none; needs Kubernetes access and --visibility-cert-dir)")
	f.StringVar(&v.certDir, "visibility-cert-dir", "", "directory with the pending API's serving certificate (tls.crt, tls.key)")
	f.BoolVar(&v.open, "visibility-insecure", open, "also serve the pending API and the web view on --http-address to anyone who reaches it")
}

func (v *visibilityFlags) validate() error {
	if v.addr != "" && v.certDir == "" {
		return usageError{errors.New("--visibility-address needs --visibility-cert-dir (tls.crt, tls.key)")}
	}
	return nil
}

// openAdmission is the admission service serving the pending API and the
// web view on the plain HTTP port.
type openAdmission struct{ *admission.Service }

func (a openAdmission) Routes(mux *http.ServeMux) {
	a.VisibilityRoutes(mux)
	a.WebViewRoutes(mux)
}

// guardedVisibility runs the admission service and, beside it, the
// pending API over TLS, each request authenticated and authorized by the
// cluster (package kubeauth).
type guardedVisibility struct {
	service
	addr  string
	cert  *certfile.Pair
	guard *kubeauth.Guard
	api   http.Handler
	log   zerolog.Logger
}

func newGuardedVisibility(svc *admission.Service, inner service, v visibilityFlags, kc *rest.Config, log zerolog.Logger) (*guardedVisibility, error) {
	if kc == nil {
		return nil, usageError{errors.New("--visibility-address needs Kubernetes access (--kubeconfig, or the pod's service account)")}
	}
	kube, err := kubernetes.NewForConfig(kc)
	if err != nil {
		return nil, err
	}
	cert, err := certfile.Load(filepath.Join(v.certDir, "tls.crt"), filepath.Join(v.certDir, "tls.key"), time.Now, func(err error) {
		log.Warn().Err(err).Msg("pending API certificate changed but does not load; serving the previous one")
	})
	if err != nil {
		return nil, usageError{fmt.Errorf("--visibility-cert-dir: %w", err)}
	}
	guard := kubeauth.New(kube, kubeauth.WithLogger(log))
	mux := http.NewServeMux()
	visibility.RegisterDiscovery(mux)
	svc.VisibilityRoutes(mux)
	svc.WebViewRoutes(mux, webview.WithPrefix(visibility.Prefix), webview.WithEventFilter(feedFilter(guard)))
	return &guardedVisibility{service: inner, addr: v.addr, cert: cert, guard: guard, api: guard.Protect(visibility.Attributes, mux), log: log}, nil
}

// feedFilter shows a user of the web view's live feed the events of the
// namespaces whose pending workloads it may read, as the cluster says
// (SubjectAccessReviews, cached by the guard).
func feedFilter(guard *kubeauth.Guard) func(*http.Request) func(webview.Event) bool {
	return func(r *http.Request) func(webview.Event) bool {
		u, ok := kubeauth.UserFrom(r.Context())
		if !ok {
			return func(webview.Event) bool { return false }
		}
		ctx := r.Context()
		return func(e webview.Event) bool {
			ns, _, _ := strings.Cut(e.Workload, "/")
			allowed, _, err := guard.Allowed(ctx, u, authzv1.ResourceAttributes{Verb: "get", Group: visibility.Group, Version: visibility.Version,
				Namespace: ns, Resource: "localqueues", Subresource: "pendingworkloads"})
			return err == nil && allowed
		}
	}
}

// Collectors are the wrapped service's metrics.
func (g *guardedVisibility) Collectors() []prometheus.Collector {
	if c, ok := g.service.(interface{ Collectors() []prometheus.Collector }); ok {
		return c.Collectors()
	}
	return nil
}

// Routes are the wrapped service's routes on the plain HTTP port.
func (g *guardedVisibility) Routes(mux *http.ServeMux) {
	if r, ok := g.service.(interface{ Routes(*http.ServeMux) }); ok {
		r.Routes(mux)
	}
}

// Run serves the pending API until ctx ends, and the service.
func (g *guardedVisibility) Run(ctx context.Context) error {
	if err := g.guard.Load(ctx); err != nil {
		// Without the front proxy's settings only bearer tokens pass;
		// requests through the API server are refused until they load.
		g.log.Warn().Err(err).Msg("front proxy settings not loaded; requests through the API server are refused until they are")
	}
	l, err := net.Listen("tcp", g.addr)
	if err != nil {
		return fmt.Errorf("--visibility-address: listen on %s: %w", g.addr, err)
	}
	srv := &http.Server{Handler: g.api, TLSConfig: g.guard.TLSConfig(g.cert.GetCertificate), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 2)
	go func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("pending API: %w", err)
		}
	}()
	go func() { _ = g.guard.Run(ctx) }()
	g.log.Info().Str("address", l.Addr().String()).Msg("pending API served to authorized users")
	go func() { errc <- g.service.Run(ctx) }()
	err = <-errc
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return err
}
