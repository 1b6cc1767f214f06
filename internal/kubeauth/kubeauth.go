package kubeauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Errors of authentication.
var (
	// ErrUnauthenticated: the request carries no identity the cluster
	// vouches for.
	ErrUnauthenticated = errors.New("unauthenticated")
)

// User is an authenticated identity.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Guard authenticates and authorizes requests with the cluster.
type Guard struct {
	kube kubernetes.Interface
	log  zerolog.Logger
	now  func() time.Time
	ttl  time.Duration

	mu    sync.RWMutex
	front frontProxy

	cacheMu sync.Mutex
	tokens  map[string]cachedUser
	grants  map[string]cachedGrant
}

// frontProxy is how the API server vouches for the users of the requests
// it forwards: a client certificate signed by ca, with one of names as
// its common name (any, when names is empty), naming the user in headers.
type frontProxy struct {
	ca                        *x509.CertPool
	names                     []string
	userHeaders, groupHeaders []string
	extraPrefixes             []string
	loaded                    bool
}

type cachedUser struct {
	user User
	ok   bool
	at   time.Time
}

type cachedGrant struct {
	allowed bool
	reason  string
	at      time.Time
}

// Option tunes a Guard.
type Option func(*Guard)

// WithLogger sets the logger.
func WithLogger(l zerolog.Logger) Option { return func(g *Guard) { g.log = l } }

// WithCacheTTL sets how long a token review and an authorization decision
// are reused (default 10 s): a revoked grant takes up to that long to bite.
func WithCacheTTL(d time.Duration) Option { return func(g *Guard) { g.ttl = d } }

// New returns a Guard asking the cluster kube.
func New(kube kubernetes.Interface, opts ...Option) *Guard {
	g := &Guard{kube: kube, log: zerolog.Nop(), now: time.Now, ttl: 10 * time.Second,
		tokens: map[string]cachedUser{}, grants: map[string]cachedGrant{}}
	for _, o := range opts {
		o(g)
	}
	return g
}

// authConfigMap is where the API server publishes its front proxy's
// settings.
const (
	authConfigNamespace = "kube-system"
	authConfigName      = "extension-apiserver-authentication"
)

// Load reads the front proxy's settings once. Without them (the API
// server runs no front proxy) only bearer tokens authenticate.
func (g *Guard) Load(ctx context.Context) error {
	cm, err := g.kube.CoreV1().ConfigMaps(authConfigNamespace).Get(ctx, authConfigName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kubeauth: read ConfigMap %s/%s: %w", authConfigNamespace, authConfigName, err)
	}
	fp := frontProxy{loaded: true}
	if pem := cm.Data["requestheader-client-ca-file"]; pem != "" {
		fp.ca = x509.NewCertPool()
		if !fp.ca.AppendCertsFromPEM([]byte(pem)) {
			return fmt.Errorf("kubeauth: ConfigMap %s/%s: requestheader-client-ca-file holds no certificate", authConfigNamespace, authConfigName)
		}
	}
	for key, into := range map[string]*[]string{
		"requestheader-allowed-names": &fp.names, "requestheader-username-headers": &fp.userHeaders,
		"requestheader-group-headers": &fp.groupHeaders, "requestheader-extra-headers-prefix": &fp.extraPrefixes,
	} {
		if v := cm.Data[key]; v != "" {
			if err := json.Unmarshal([]byte(v), into); err != nil {
				return fmt.Errorf("kubeauth: ConfigMap %s/%s: %s: %w", authConfigNamespace, authConfigName, key, err)
			}
		}
	}
	g.mu.Lock()
	g.front = fp
	g.mu.Unlock()
	return nil
}

// Run re-reads the front proxy's settings every minute until ctx ends.
func (g *Guard) Run(ctx context.Context) error {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := g.Load(ctx); err != nil && ctx.Err() == nil {
				g.log.Warn().Err(err).Msg("front proxy settings not refreshed")
			}
		}
	}
}

// TLSConfig is the server's TLS configuration: cert serves, and a client
// certificate, when one is given, is verified against the front proxy's
// CA as it stands at each handshake.
func (g *Guard) TLSConfig(cert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		g.mu.RLock()
		ca := g.front.ca
		g.mu.RUnlock()
		if ca != nil {
			c.ClientAuth, c.ClientCAs = tls.VerifyClientCertIfGiven, ca
		}
		return c, nil
	}
	return base
}

// Authenticate names the request's user: the one the front proxy vouches
// for, else the one its bearer token belongs to.
func (g *Guard) Authenticate(r *http.Request) (User, error) {
	if u, ok := g.fromFrontProxy(r); ok {
		return u, nil
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return User{}, fmt.Errorf("%w: no bearer token and no front proxy certificate", ErrUnauthenticated)
	}
	return g.review(r.Context(), strings.TrimSpace(token))
}

func (g *Guard) fromFrontProxy(r *http.Request) (User, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return User{}, false
	}
	g.mu.RLock()
	fp := g.front
	g.mu.RUnlock()
	if fp.ca == nil {
		return User{}, false
	}
	// A certificate the CA signed for someone else (the same CA may sign
	// users' certificates) does not speak for others.
	if len(fp.names) > 0 && !slices.Contains(fp.names, r.TLS.VerifiedChains[0][0].Subject.CommonName) {
		return User{}, false
	}
	var u User
	for _, h := range fp.userHeaders {
		if v := r.Header.Get(h); v != "" {
			u.Name = v
			break
		}
	}
	if u.Name == "" {
		return User{}, false
	}
	for _, h := range fp.groupHeaders {
		u.Groups = append(u.Groups, r.Header.Values(h)...)
	}
	for name, vs := range r.Header {
		for _, p := range fp.extraPrefixes {
			if key, ok := strings.CutPrefix(strings.ToLower(name), strings.ToLower(p)); ok && key != "" {
				if u.Extra == nil {
					u.Extra = map[string][]string{}
				}
				u.Extra[key] = append(u.Extra[key], vs...)
			}
		}
	}
	return u, true
}

// review asks the API server whose token this is, and remembers it for
// the cache's lifetime.
func (g *Guard) review(ctx context.Context, token string) (User, error) {
	now := g.now()
	g.cacheMu.Lock()
	c, hit := g.tokens[token]
	g.cacheMu.Unlock()
	if hit && now.Sub(c.at) < g.ttl {
		if !c.ok {
			return User{}, fmt.Errorf("%w: token not accepted", ErrUnauthenticated)
		}
		return c.user, nil
	}
	tr, err := g.kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return User{}, fmt.Errorf("kubeauth: token review: %w", err)
	}
	c = cachedUser{ok: tr.Status.Authenticated, at: now}
	if c.ok {
		ui := tr.Status.User
		c.user = User{Name: ui.Username, UID: ui.UID, Groups: ui.Groups}
		for k, v := range ui.Extra {
			if c.user.Extra == nil {
				c.user.Extra = map[string][]string{}
			}
			c.user.Extra[k] = v
		}
	}
	g.remember(func() { g.tokens[token] = c })
	if !c.ok {
		return User{}, fmt.Errorf("%w: token not accepted: %s", ErrUnauthenticated, tr.Status.Error)
	}
	return c.user, nil
}

// maxCached bounds each cache; past it the cache starts afresh.
const maxCached = 10000

func (g *Guard) remember(put func()) {
	g.cacheMu.Lock()
	defer g.cacheMu.Unlock()
	if len(g.tokens) >= maxCached {
		g.tokens = map[string]cachedUser{}
	}
	if len(g.grants) >= maxCached {
		g.grants = map[string]cachedGrant{}
	}
	put()
}

// Allowed asks whether u may act as attrs say.
func (g *Guard) Allowed(ctx context.Context, u User, attrs authzv1.ResourceAttributes) (bool, string, error) {
	keyBytes, _ := json.Marshal(struct {
		U User
		A authzv1.ResourceAttributes
	}{u, attrs})
	key := string(keyBytes)
	now := g.now()
	g.cacheMu.Lock()
	c, hit := g.grants[key]
	g.cacheMu.Unlock()
	if hit && now.Sub(c.at) < g.ttl {
		return c.allowed, c.reason, nil
	}
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = v
	}
	sar, err := g.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Name, UID: u.UID, Groups: u.Groups, Extra: extra, ResourceAttributes: &attrs,
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("kubeauth: subject access review: %w", err)
	}
	c = cachedGrant{allowed: sar.Status.Allowed && !sar.Status.Denied, reason: sar.Status.Reason, at: now}
	g.remember(func() { g.grants[key] = c })
	return c.allowed, c.reason, nil
}

// Protect lets through to next only authenticated requests whose user may
// act as attrs says for the request; attrs nil means any authenticated
// user may (discovery). Refusals are answered as the API server answers
// them: a Status with 401 or 403.
func (g *Guard) Protect(attrs func(*http.Request) *authzv1.ResourceAttributes, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, err := g.Authenticate(r)
		if errors.Is(err, ErrUnauthenticated) {
			refuse(w, http.StatusUnauthorized, "Unauthorized", err.Error())
			return
		}
		if err != nil {
			g.log.Warn().Err(err).Msg("authentication failed")
			refuse(w, http.StatusServiceUnavailable, "ServiceUnavailable", "cannot authenticate now: "+err.Error())
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
		a := attrs(r)
		if a == nil {
			next.ServeHTTP(w, r)
			return
		}
		ok, reason, err := g.Allowed(r.Context(), u, *a)
		if err != nil {
			g.log.Warn().Err(err).Msg("authorization failed")
			refuse(w, http.StatusServiceUnavailable, "ServiceUnavailable", "cannot authorize now: "+err.Error())
			return
		}
		if !ok {
			msg := fmt.Sprintf("user %q cannot %s %s", u.Name, a.Verb, describe(*a))
			if reason != "" {
				msg += ": " + reason
			}
			refuse(w, http.StatusForbidden, "Forbidden", msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type userKey struct{}

// UserFrom is the user Protect authenticated for the request ctx belongs
// to.
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(userKey{}).(User)
	return u, ok
}

// describe renders attributes as the API server's refusals do.
func describe(a authzv1.ResourceAttributes) string {
	res := a.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	s := fmt.Sprintf("resource %q in API group %q", res, a.Group)
	if a.Namespace != "" {
		s += fmt.Sprintf(" in the namespace %q", a.Namespace)
	} else {
		s += " at the cluster scope"
	}
	return s
}

func refuse(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Message: msg, Reason: metav1.StatusReason(reason), Code: int32(code)})
}
