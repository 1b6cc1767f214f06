package admission

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
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluice-dev/sluice/internal/certfile"
	"github.com/sluice-dev/sluice/internal/component"
	"github.com/sluice-dev/sluice/internal/kubeauth"
	"github.com/sluice-dev/sluice/internal/supervise"
	"github.com/sluice-dev/sluice/internal/visibility"
	"github.com/sluice-dev/sluice/internal/webview"
)

// openAdmission is the admission service serving the pending API and the
// web view on the plain HTTP port.
type openAdmission struct{ *Service }

func (a openAdmission) Routes(mux *http.ServeMux) {
	a.VisibilityRoutes(mux)
	a.WebViewRoutes(mux)
}

// guardedVisibility runs the admission service and, beside it, the
// pending API over TLS, each request authenticated and authorized by the
// cluster (package kubeauth).
type guardedVisibility struct {
	component.Runnable
	addr  string
	cert  *certfile.Pair
	guard *kubeauth.Guard
	api   http.Handler
	log   zerolog.Logger
}

func newGuardedVisibility(svc *Service, inner component.Runnable, v VisibilityOptions, kc *rest.Config, log zerolog.Logger) (*guardedVisibility, error) {
	if kc == nil {
		return nil, component.Usage(errors.New("--visibility-address needs Kubernetes access (--kubeconfig, or the pod's service account)"))
	}
	kube, err := kubernetes.NewForConfig(kc)
	if err != nil {
		return nil, err
	}
	cert, err := certfile.Load(filepath.Join(v.CertDir, "tls.crt"), filepath.Join(v.CertDir, "tls.key"), time.Now, func(err error) {
		log.Warn().Err(err).Msg("pending API certificate changed but does not load; serving the previous one")
	})
	if err != nil {
		return nil, component.Usage(fmt.Errorf("--visibility-cert-dir: %w", err))
	}
	guard := kubeauth.New(kube, kubeauth.WithLogger(log))
	mux := http.NewServeMux()
	visibility.RegisterDiscovery(mux)
	svc.VisibilityRoutes(mux)
	svc.WebViewRoutes(mux, webview.WithPrefix(visibility.Prefix), webview.WithEventFilter(feedFilter(guard)))
	return &guardedVisibility{Runnable: inner, addr: v.Addr, cert: cert, guard: guard, api: guard.Protect(visibility.Attributes, mux), log: log}, nil
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
	if c, ok := g.Runnable.(component.Metrics); ok {
		return c.Collectors()
	}
	return nil
}

// Routes are the wrapped service's routes on the plain HTTP port.
func (g *guardedVisibility) Routes(mux *http.ServeMux) {
	if r, ok := g.Runnable.(component.Router); ok {
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
	// Stopped in reverse: the server first, then the guard's caches, then
	// the service it reads.
	sup := supervise.New(ctx, supervise.WithLogger(g.log))
	sup.Go("admission", g.Runnable.Run)
	sup.Go("authorization cache", func(ctx context.Context) error {
		_ = g.guard.Run(ctx) // its failures are logged and retried inside
		return nil
	})
	sup.Go("pending API", func(ctx context.Context) error {
		stop := context.AfterFunc(ctx, func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		})
		defer stop()
		if err := srv.ServeTLS(l, "", ""); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.log.Info().Str("address", l.Addr().String()).Msg("pending API served to authorized users")
	return sup.Wait()
}
