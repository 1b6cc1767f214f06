package jobframework

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/certfile"
)

// MutatePath is where the webhook serves the admission of a kind's
// objects: "/mutate-batch-v1-job".
func MutatePath(k Kind) string {
	return "/mutate-" + strings.ReplaceAll(k.GVK.Group, ".", "-") + "-" + k.GVK.Version + "-" + k.Name
}

// WebhookName is the name of a kind's webhook entry inside its
// MutatingWebhookConfiguration: "suspend.job.sluice.dev".
func WebhookName(k Kind) string { return "suspend." + k.Name + ".sluice.dev" }

// ConfigurationName is the name of a kind's MutatingWebhookConfiguration.
func ConfigurationName(k Kind) string { return "sluice-" + k.Name }

const (
	// HealthzPath answers 200 while the server runs.
	HealthzPath = "/healthz"

	defaultWebhookAddr     = ":9443"
	defaultCertValidity    = 365 * 24 * time.Hour
	defaultShutdownTimeout = 10 * time.Second
	// maxReviewBytes bounds an AdmissionReview body. The API server caps a
	// request at 3 MiB and a review carries at most the object and the old
	// object.
	maxReviewBytes = 8 << 20
)

// Webhook is the mutating admission webhook that suspends labelled Jobs on
// create. Build it with NewWebhook, register it with
// EnsureWebhookConfiguration(…, w.URL(host), w.CABundle()), and serve it with
// Run.
type Webhook struct {
	addr string
	log  zerolog.Logger
	cert tls.Certificate
	// files serves the certificate of WithCertFiles, reloaded when the
	// files change; nil when the certificate was generated (cert).
	files           *certfile.Pair
	kueueLabels     bool
	multicluster    func(namespace, queue string) bool
	unqueued        *Unqueued
	caBundle        []byte
	shutdownTimeout time.Duration
	mux             *http.ServeMux

	mu      sync.Mutex
	ln      net.Listener
	running bool
}

// WebhookOption configures NewWebhook.
type WebhookOption func(*webhookConfig) error

type webhookConfig struct {
	addr            string
	dnsNames        []string
	ips             []net.IP
	certFile        string
	keyFile         string
	caBundle        []byte
	validity        time.Duration
	shutdownTimeout time.Duration
	log             *zerolog.Logger
	now             func() time.Time
	kueueLabels     bool
	multicluster    func(namespace, queue string) bool
	unqueued        *Unqueued
}

// WithMultiClusterQueues gives the webhook the test of whether a
// LocalQueue's ClusterQueue dispatches to worker clusters: a job created
// in such a queue, of a kind with a managedBy field (Kind.ManagedBy) left
// empty, gets the kind's multi-cluster manager there.
func WithMultiClusterQueues(dispatches func(namespace, queue string) bool) WebhookOption {
	return func(c *webhookConfig) error {
		c.multicluster = dispatches
		return nil
	}
}

// WithKueueLabels makes a create labelled with Kueue's queue label (and
// not Sluice's) Sluice's: the webhook copies Kueue's queue and priority
// labels to Sluice's, then suspends it like any other.
func WithKueueLabels() WebhookOption {
	return func(c *webhookConfig) error {
		c.kueueLabels = true
		return nil
	}
}

// WithAddress sets the listen address (default ":9443"; use
// "127.0.0.1:0" for an ephemeral port).
func WithAddress(addr string) WebhookOption {
	return func(c *webhookConfig) error {
		if addr == "" {
			return errors.New("webhook: empty listen address")
		}
		c.addr = addr
		return nil
	}
}

// WithHosts sets the DNS names and IP addresses the generated serving
// certificate is valid for (default "127.0.0.1" and "localhost"). Each host
// that parses as an IP is an IP SAN, any other is a DNS SAN.
func WithHosts(hosts ...string) WebhookOption {
	return func(c *webhookConfig) error {
		if len(hosts) == 0 {
			return errors.New("webhook: WithHosts needs at least one host")
		}
		c.dnsNames, c.ips = nil, nil
		for _, h := range hosts {
			h = strings.TrimSpace(h)
			if h == "" {
				return errors.New("webhook: empty host name")
			}
			if ip := net.ParseIP(h); ip != nil {
				c.ips = append(c.ips, ip)
			} else {
				c.dnsNames = append(c.dnsNames, h)
			}
		}
		return nil
	}
}

// WithCertFiles serves the given PEM certificate and key instead of a
// generated pair. Pair it with WithCABundle so CABundle can report the CA.
func WithCertFiles(certFile, keyFile string) WebhookOption {
	return func(c *webhookConfig) error {
		if certFile == "" || keyFile == "" {
			return errors.New("webhook: WithCertFiles needs both a certificate and a key file")
		}
		c.certFile, c.keyFile = certFile, keyFile
		return nil
	}
}

// WithCABundle sets the PEM CA bundle reported by CABundle when the serving
// certificate comes from WithCertFiles.
func WithCABundle(pemBundle []byte) WebhookOption {
	return func(c *webhookConfig) error {
		c.caBundle = append([]byte(nil), pemBundle...)
		return nil
	}
}

// WithCertValidity sets how long a generated certificate is valid (default
// one year).
func WithCertValidity(d time.Duration) WebhookOption {
	return func(c *webhookConfig) error {
		if d <= 0 {
			return fmt.Errorf("webhook: certificate validity %v must be positive", d)
		}
		c.validity = d
		return nil
	}
}

// WithShutdownTimeout bounds how long Run waits for in-flight requests once
// its context ends (default 10s).
func WithShutdownTimeout(d time.Duration) WebhookOption {
	return func(c *webhookConfig) error {
		if d <= 0 {
			return fmt.Errorf("webhook: shutdown timeout %v must be positive", d)
		}
		c.shutdownTimeout = d
		return nil
	}
}

// WithLogger sets the logger (default: zerolog's global logger).
func WithLogger(l zerolog.Logger) WebhookOption {
	return func(c *webhookConfig) error {
		c.log = &l
		return nil
	}
}

// NewWebhook builds the webhook server. Unless WithCertFiles is given it
// generates a fresh CA and a serving certificate signed by it; CABundle
// returns that CA for the webhook configuration.
func NewWebhook(adapters []Adapter, opts ...WebhookOption) (*Webhook, error) {
	cfg := webhookConfig{
		addr:            defaultWebhookAddr,
		dnsNames:        []string{"localhost"},
		ips:             []net.IP{net.ParseIP("127.0.0.1")},
		validity:        defaultCertValidity,
		shutdownTimeout: defaultShutdownTimeout,
		now:             time.Now,
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	logger := log.Logger
	if cfg.log != nil {
		logger = *cfg.log
	}
	w := &Webhook{
		addr:            cfg.addr,
		log:             logger.With().Str("component", "webhook").Logger(),
		shutdownTimeout: cfg.shutdownTimeout,
		kueueLabels:     cfg.kueueLabels,
		multicluster:    cfg.multicluster,
		unqueued:        cfg.unqueued,
	}

	if cfg.certFile != "" {
		fc, err := certfile.Load(cfg.certFile, cfg.keyFile, cfg.now, func(err error) {
			w.log.Warn().Err(err).Msg("serving certificate changed but does not load; serving the previous one")
		})
		if err != nil {
			return nil, fmt.Errorf("webhook: %w", err)
		}
		w.files, w.caBundle = fc, cfg.caBundle
	} else {
		sc, err := certfile.SelfSigned(cfg.dnsNames, cfg.ips, cfg.validity, cfg.now())
		if err != nil {
			return nil, fmt.Errorf("webhook: %w", err)
		}
		w.cert, w.caBundle = sc.Cert, sc.CAPEM
	}

	w.mux = http.NewServeMux()
	for _, ad := range adapters {
		w.mux.HandleFunc(MutatePath(ad.Kind()), func(rw http.ResponseWriter, r *http.Request) { w.serveMutate(ad, rw, r) })
	}
	w.mux.HandleFunc(HealthzPath, func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(rw, "ok\n")
	})
	return w, nil
}

// certificate is the serving certificate of a handshake.
func (w *Webhook) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if w.files != nil {
		return w.files.GetCertificate(hello)
	}
	return &w.cert, nil
}

// CABundle returns the PEM CA that verifies the serving certificate: the
// generated CA, or what WithCABundle gave (nil if nothing).
func (w *Webhook) CABundle() []byte {
	return append([]byte(nil), w.caBundle...)
}

// Handler returns the webhook's HTTP handler (MutatePath and HealthzPath),
// for tests or for mounting in another server.
func (w *Webhook) Handler() http.Handler {
	return w.mux
}

// Listen binds the listen address without serving yet, so callers learn the
// address (and the port, for ":0") before Run. Run calls it when needed.
func (w *Webhook) Listen() (net.Addr, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ln != nil {
		return w.ln.Addr(), nil
	}
	ln, err := net.Listen("tcp", w.addr)
	if err != nil {
		return nil, fmt.Errorf("webhook: listen on %s: %w", w.addr, err)
	}
	w.ln = ln
	return ln.Addr(), nil
}

// URL returns the webhook's URL for a kind at host (a name or IP in the
// certificate) and the bound port: "https://host:port/mutate-batch-v1-job".
// It binds the listener if Run or Listen has not yet.
func (w *Webhook) URL(host string, k Kind) (string, error) {
	addr, err := w.Listen()
	if err != nil {
		return "", err
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "", fmt.Errorf("webhook: listener address %v is not TCP", addr)
	}
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(host, fmt.Sprint(tcp.Port)), Path: MutatePath(k)}
	return u.String(), nil
}

// Run serves HTTPS until ctx ends, then shuts down gracefully: it stops
// accepting, lets in-flight reviews finish (up to the shutdown timeout) and
// returns nil. It returns an error if serving fails. Run may be called once.
func (w *Webhook) Run(ctx context.Context) error {
	if _, err := w.Listen(); err != nil {
		return err
	}
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("webhook: Run called twice")
	}
	w.running = true
	ln := w.ln
	w.mu.Unlock()

	srv := &http.Server{
		Handler:           w.mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: w.certificate,
		},
		ErrorLog: stdlog.New(w.log.With().Str("level", "warn").Logger(), "", 0),
		BaseContext: func(net.Listener) context.Context {
			return context.WithoutCancel(ctx)
		},
	}

	errc := make(chan error, 1)
	go func() {
		w.log.Info().Str("addr", ln.Addr().String()).Msg("job webhook serving")
		errc <- srv.ServeTLS(ln, "", "")
	}()

	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("webhook: serve: %w", err)
	case <-ctx.Done():
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.shutdownTimeout)
	defer cancel()
	w.log.Info().Msg("job webhook shutting down")
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("webhook: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("webhook: serve: %w", err)
	}
	return nil
}

// serveMutate is the HTTP side: it checks the request and the
// AdmissionReview envelope and answers 4xx with a plain message when they
// are unusable.
func (w *Webhook) serveMutate(ad Adapter, rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		http.Error(rw, "admission reviews must be POSTed", http.StatusMethodNotAllowed)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			http.Error(rw, fmt.Sprintf("unsupported content type %q: want application/json", ct), http.StatusUnsupportedMediaType)
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxReviewBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(rw, fmt.Sprintf("admission review larger than %d bytes", tooBig.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(rw, "reading admission review: "+err.Error(), http.StatusBadRequest)
		return
	}

	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		w.log.Warn().Err(err).Msg("malformed admission review")
		http.Error(rw, "malformed AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	want := admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
	if got := review.GroupVersionKind(); got != want {
		http.Error(rw, fmt.Sprintf("unsupported AdmissionReview %q %q: want apiVersion %q kind %q",
			review.APIVersion, review.Kind, want.GroupVersion().String(), want.Kind), http.StatusBadRequest)
		return
	}
	if review.Request == nil {
		http.Error(rw, "AdmissionReview has no request", http.StatusBadRequest)
		return
	}
	if review.Request.UID == "" {
		http.Error(rw, "AdmissionReview request has no uid", http.StatusBadRequest)
		return
	}

	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: want.GroupVersion().String(), Kind: want.Kind},
		Response: w.mutate(ad, review.Request),
	}
	b, err := json.Marshal(out)
	if err != nil {
		http.Error(rw, "encoding admission response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	_, _ = rw.Write(b)
}

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// mutate decides one admission request. Only CREATE of an object of the
// adapter's kind with the queue label is changed: it is suspended, and
// Sluice's own bookkeeping annotations, which a copied manifest may carry,
// are removed so that a new object never looks admitted.
func (w *Webhook) mutate(ad Adapter, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	k := ad.Kind()
	gvk := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	if gvk != k.GVK {
		return resp
	}
	if p, ok := ad.(Parent); ok && k.IsParent() {
		return w.mutateParent(ad, p, req, resp)
	}
	switch req.Operation {
	case admissionv1.Create:
	case admissionv1.Update:
		return w.reviewUpdate(ad, req, resp)
	default:
		return resp
	}
	if len(req.Object.Raw) == 0 {
		return deny(resp, k, "request has no object")
	}
	u, job, err := decodeRaw(ad, req.Object.Raw)
	if err != nil {
		return deny(resp, k, "request object is not a "+k.GVK.String()+": "+err.Error())
	}
	m := job.Meta()
	var ops []jsonPatchOp
	queue := m.GetLabels()[v1beta1.QueueNameLabel]
	if queue == "" && w.kueueLabels {
		// Kueue's labels, made Sluice's (the object has labels: Kueue's).
		queue = m.GetLabels()[v1beta1.KueueQueueNameLabel]
		if queue != "" {
			ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels/" + escapeJSONPointer(v1beta1.QueueNameLabel), Value: queue})
			_, own := m.GetLabels()[v1beta1.PriorityClassLabel]
			if pc := m.GetLabels()[v1beta1.KueuePriorityClassLabel]; pc != "" && !own {
				ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels/" + escapeJSONPointer(v1beta1.PriorityClassLabel), Value: pc})
			}
		}
	}
	if queue == "" {
		q, op, done := w.unqueuedCreate(ad, u, job, req, resp)
		if done != nil {
			return done
		}
		queue = q
		ops = append(ops, *op)
	}
	if ig, ok := job.(Ignorer); ok && ig.Ignored() {
		return resp
	}
	if err := CheckQueueName(queue); err != nil {
		return deny(resp, k, err.Error())
	}
	if l, ok := job.(Labeller); ok {
		add, err := l.CreateLabels()
		if err != nil {
			return deny(resp, k, err.Error())
		}
		for _, key := range slices.Sorted(maps.Keys(add)) {
			ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels/" + escapeJSONPointer(key), Value: add[key]})
			m.GetLabels()[key] = add[key] // for the checks below
		}
	}
	if _, err := MaxExecution(m.GetLabels()); err != nil {
		return deny(resp, k, err.Error())
	}
	if err := CheckTopology(job, w.kueueLabels); err != nil {
		return deny(resp, k, err.Error())
	}
	resp.Warnings = kueueOnly(job)

	managed := false // the kind's managedBy field to set
	if len(k.ManagedBy) > 1 && w.multicluster != nil && w.multicluster(m.GetNamespace(), queue) {
		v, _, _ := unstructured.NestedString(u.Object, k.ManagedBy...)
		managed = v == "" || v == k.ManagedByDefault
	}
	if !job.IsSuspended() || managed {
		var spec any = u.Object["spec"]
		if !job.IsSuspended() {
			suspended, err := ad.Decode(u.DeepCopy())
			if err != nil {
				return deny(resp, k, err.Error())
			}
			suspended.SetSuspended(true)
			if spec, err = suspendedSpec(req.Object.Raw, job, suspended); err != nil {
				return deny(resp, k, err.Error())
			}
		}
		if managed {
			var err error
			if spec, err = withManagedBy(spec, k); err != nil {
				return deny(resp, k, err.Error())
			}
		}
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec", Value: spec})
	}
	for _, key := range []string{OriginalAnnotation, AdmissionAnnotation, StoppedAnnotation} {
		if _, ok := m.GetAnnotations()[key]; ok {
			ops = append(ops, jsonPatchOp{Op: "remove", Path: "/metadata/annotations/" + escapeJSONPointer(key)})
		}
	}

	name := objectName(m)
	ev := w.log.Debug()
	if len(ops) > 0 {
		ev = w.log.Info()
	}
	ev.Str("workload", k.Name+"/"+req.Namespace+"/"+name).Str("queue", queue).Str("uid", string(req.UID)).
		Bool("dryRun", req.DryRun != nil && *req.DryRun).Int("ops", len(ops)).Msg("create: suspended for queueing")

	return withPatch(resp, k, ops)
}

// withPatch allows the request with the JSON patch ops (none: as it is).
func withPatch(resp *admissionv1.AdmissionResponse, k Kind, ops []jsonPatchOp) *admissionv1.AdmissionResponse {
	if len(ops) == 0 {
		return resp
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return deny(resp, k, "encoding patch: "+err.Error())
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch = patch
	resp.PatchType = &pt
	return resp
}

// withManagedBy returns spec (a map, or its JSON) with the kind's
// managedBy field set to its multi-cluster manager.
func withManagedBy(spec any, k Kind) (map[string]any, error) {
	var m map[string]any
	switch s := spec.(type) {
	case map[string]any:
		m = runtimeDeepCopy(s)
	case json.RawMessage:
		if err := json.Unmarshal(s, &m); err != nil {
			return nil, fmt.Errorf("spec: %w", err)
		}
	}
	if m == nil {
		m = map[string]any{}
	}
	if err := unstructured.SetNestedField(m, k.MultiClusterManagedBy(), k.ManagedBy[1:]...); err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(k.ManagedBy, "."), err)
	}
	return m, nil
}

// runtimeDeepCopy copies a JSON object as unstructured holds it.
func runtimeDeepCopy(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

// decodeRaw decodes an object of a review as the adapter's kind.
func decodeRaw(ad Adapter, raw []byte) (*unstructured.Unstructured, Job, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, nil, err
	}
	job, err := ad.Decode(u)
	return u, job, err
}

// reviewUpdate refuses a change of an object's queue, as Kueue does,
// unless the object is suspended (or finished): a running object holds
// quota in its queue, and one that left the queue, or moved to another,
// would keep running on quota nobody counts any more. A suspended object
// may leave the queue or move to another: its workload ends, and a new
// one queues in the other queue.
func (w *Webhook) reviewUpdate(ad Adapter, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) *admissionv1.AdmissionResponse {
	k := ad.Kind()
	if len(req.Object.Raw) == 0 || len(req.OldObject.Raw) == 0 {
		return deny(resp, k, "update request lacks the object or the old object")
	}
	_, job, err := decodeRaw(ad, req.Object.Raw)
	if err != nil {
		return deny(resp, k, "request object is not a "+k.GVK.String()+": "+err.Error())
	}
	_, old, err := decodeRaw(ad, req.OldObject.Raw)
	if err != nil {
		return deny(resp, k, "request old object is not a "+k.GVK.String()+": "+err.Error())
	}
	was, is := old.Meta().GetLabels()[v1beta1.QueueNameLabel], job.Meta().GetLabels()[v1beta1.QueueNameLabel]
	if msg, ok := reviewResize(k, old, job, was, is); !ok {
		return deny(resp, k, msg)
	}
	if was == "" && is == "" {
		if msg, ok := w.reviewUnqueuedUpdate(ad, job, old); !ok {
			return deny(resp, k, msg)
		}
		return resp
	}
	if was == is {
		return resp
	}
	if ig, ok := job.(Ignorer); ok && ig.Ignored() {
		return resp
	}
	if is != "" {
		if err := CheckQueueName(is); err != nil {
			return deny(resp, k, err.Error())
		}
	}
	done, _, _ := job.Finished()
	if !job.IsSuspended() && !done {
		return deny(resp, k, fmt.Sprintf("metadata.labels[%s]: may not be %s while the %s is not suspended: "+
			"a running job keeps the queue it was admitted by; suspend it first", v1beta1.QueueNameLabel, queueChange(was, is), k.Name))
	}
	w.log.Info().Str("workload", k.Name+"/"+req.Namespace+"/"+req.Name).Str("queue", is).Str("was", was).
		Msg("update: queue changed on a suspended object")
	return resp
}

// reviewResize refuses a change of the pod counts of a queued object that
// runs (it was admitted for the counts it had), unless it is elastic. A
// suspended object may change (it queues for what it asks for when it
// is admitted), and so may Sluice's own start and stop, which suspend or
// resume it in the same write.
func reviewResize(k Kind, old, job Job, was, is string) (string, bool) {
	if len(k.CountField) == 0 || was == "" || is == "" || old.IsSuspended() || job.IsSuspended() || IsElastic(job.Meta()) {
		return "", true
	}
	if done, _, _ := job.Finished(); done {
		return "", true
	}
	before, err1 := old.PodSets()
	after, err2 := job.PodSets()
	if err1 != nil || err2 != nil || len(before) != len(after) {
		return "", true // the object's own validation speaks for it
	}
	for i := range before {
		if before[i].Count != after[i].Count {
			return fmt.Sprintf("%s: may not change from %d to %d pods while the %s runs: it was admitted for %d; suspend it first, or make it elastic (annotation %s: \"true\")",
				strings.Join(k.CountField, "."), before[i].Count, after[i].Count, k.Name, before[i].Count, v1beta1.ElasticJobAnnotation), false
		}
	}
	return "", true
}

// queueChange says how a queue label changed, for a refusal.
func queueChange(was, is string) string {
	switch {
	case is == "":
		return fmt.Sprintf("removed (it was %q)", was)
	case was == "":
		return fmt.Sprintf("added (%q)", is)
	}
	return fmt.Sprintf("changed from %q to %q", was, is)
}

// suspendedSpec returns the request object's spec with the adapter's
// suspension applied: the difference between the decoded object and its
// suspended copy, merged into the raw spec, so fields the adapter's types
// do not know are kept.
func suspendedSpec(raw []byte, before, after Job) (any, error) {
	diff, err := MergePatch(before.Object(), after.Object(), "", "")
	if err != nil {
		return nil, err
	}
	patched, err := jsonpatch.MergePatch(raw, diff)
	if err != nil {
		return nil, fmt.Errorf("suspend: %w", err)
	}
	var obj struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(patched, &obj); err != nil {
		return nil, fmt.Errorf("suspend: %w", err)
	}
	return obj.Spec, nil
}

func deny(resp *admissionv1.AdmissionResponse, k Kind, msg string) *admissionv1.AdmissionResponse {
	resp.Allowed = false
	resp.Result = &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusBadRequest,
		Reason:  metav1.StatusReasonBadRequest,
		Message: "sluice " + k.Name + " webhook: " + msg,
	}
	return resp
}

// escapeJSONPointer escapes a key for an RFC 6901 JSON pointer.
func escapeJSONPointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// EnsureWebhookConfiguration creates or updates the cluster-scoped
// MutatingWebhookConfiguration called name so that the API server sends
// CREATE of labelled batch/v1 Jobs to url (an https URL, for example the
// host's address for a local API server), trusting caBundle (PEM). The URL
// is given as clientConfig.url, not a service reference, so a webhook
// running on the host is reachable from a local API server. It writes
// only when the stored configuration differs.
//
// The webhook entry uses:
//
//   - objectSelector "sluice.dev/queue-name exists": the API server calls
//     the webhook only for Jobs that opted in to queueing, so its outages
//     and latency never touch any other Job.
//   - failurePolicy Fail: if the webhook is unreachable, a labelled Job is
//     refused rather than created unsuspended. With Ignore it would start
//     at once, bypassing quota — an over-admission that no later suspend
//     fully undoes, because its pods may already have run. The user sees
//     the error and retries; unlabelled Jobs are unaffected.
//   - sideEffects None, admissionReviewVersions [v1], timeoutSeconds 10,
//     matchPolicy Equivalent, reinvocationPolicy Never.
func EnsureWebhookConfiguration(ctx context.Context, client kubernetes.Interface, k Kind, webhookURL string, caBundle []byte, kueueLabels bool, opts ...ConfigurationOption) error {
	name := ConfigurationName(k)
	if client == nil {
		return errors.New("ensure webhook configuration: nil client")
	}
	if k.Name == "" {
		return errors.New("ensure webhook configuration: empty kind")
	}
	if err := validateWebhookURL(webhookURL); err != nil {
		return fmt.Errorf("ensure webhook configuration %s: %w", name, err)
	}
	desired := WebhookConfiguration(k, webhookURL, caBundle, kueueLabels, opts...)
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	logger := zerolog.Ctx(ctx).With().Str("webhookConfiguration", name).Logger()

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, desired, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// Lost a race with another creator: go round again.
				return apierrors.NewConflict(admissionregistrationv1.Resource("mutatingwebhookconfigurations"), name, err)
			}
			if err == nil {
				logger.Info().Str("url", webhookURL).Msg("created mutating webhook configuration")
			}
			return err
		}
		if err != nil {
			return err
		}
		if apiequality.Semantic.DeepEqual(current.Webhooks, desired.Webhooks) &&
			current.Labels[managedByLabel] == managedByValue {
			return nil
		}
		updated := current.DeepCopy()
		updated.Webhooks = desired.Webhooks
		if updated.Labels == nil {
			updated.Labels = map[string]string{}
		}
		updated.Labels[managedByLabel] = managedByValue
		if _, err := api.Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
			return err
		}
		logger.Info().Str("url", webhookURL).Msg("updated mutating webhook configuration")
		return nil
	})
	if err != nil {
		return fmt.Errorf("ensure webhook configuration %s: %w", name, err)
	}
	return nil
}

const (
	managedByLabel = "app.kubernetes.io/managed-by"
	managedByValue = "sluice"
)

// ConfigurationOption configures WebhookConfiguration.
type ConfigurationOption func(*configurationOptions)

type configurationOptions struct {
	multicluster bool
	// queues are the multi-cluster LocalQueues; nil with multicluster:
	// any queue may be one.
	queues []string
	// unqueued is the entry for objects without a queue label; nil: none.
	unqueued *UnqueuedEntry
}

// WithMultiClusterQueueNames names the LocalQueues ("namespace/name")
// whose ClusterQueue dispatches to worker clusters: the webhook is also
// called for a create in one of them that leaves the kind's managedBy
// field empty (WithMultiClusterQueues sets it). None: no such call.
func WithMultiClusterQueueNames(queues []string) ConfigurationOption {
	return func(o *configurationOptions) { o.multicluster, o.queues = len(queues) > 0, queues }
}

// WithAnyMultiClusterQueue: the webhook is also called for every create
// that leaves the kind's managedBy field empty, whatever its queue (the
// chart of a multi-cluster manager, which cannot know its queues).
func WithAnyMultiClusterQueue() ConfigurationOption {
	return func(o *configurationOptions) { o.multicluster, o.queues = true, nil }
}

// WebhookConfiguration is the MutatingWebhookConfiguration that sends a
// kind's labelled objects to the webhook at webhookURL on create. The Helm
// chart renders the same rules with a Service in place of the URL.
func WebhookConfiguration(k Kind, webhookURL string, caBundle []byte, kueueLabels bool, opts ...ConfigurationOption) *admissionregistrationv1.MutatingWebhookConfiguration {
	var o configurationOptions
	for _, opt := range opts {
		opt(&o)
	}
	name := ConfigurationName(k)
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	never := admissionregistrationv1.NeverReinvocationPolicy
	namespaced := admissionregistrationv1.NamespacedScope
	timeout := int32(10)
	u := webhookURL
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{managedByLabel: managedByValue},
		},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: WebhookName(k),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      &u,
				CABundle: append([]byte(nil), caBundle...),
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				// UPDATE: a change of queue is refused while the object
				// runs (reviewUpdate); the match condition leaves out
				// every other update.
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{k.GVK.Group},
					APIVersions: []string{k.GVK.Version},
					Resources:   []string{k.Resource},
					Scope:       &namespaced,
				},
			}},
			FailurePolicy:     &fail,
			MatchPolicy:       &equivalent,
			NamespaceSelector: &metav1.LabelSelector{},
			ObjectSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key:      v1beta1.QueueNameLabel,
					Operator: metav1.LabelSelectorOpExists,
				}},
			},
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &never,
		}},
	}
	cond := WebhookMatchCondition(k)
	if o.multicluster {
		cond = MultiClusterMatchCondition(k, o.queues)
	}
	cfg.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: MatchConditionName, Expression: cond}}
	if kueueLabels {
		// Objects with Kueue's queue label and not Sluice's (an object
		// with both goes to the first webhook only).
		kw := *cfg.Webhooks[0].DeepCopy()
		kw.Name = kueueLabelsWebhookName(k)
		kw.MatchConditions = nil // it always has labels to add
		// Creates only: such an object is Sluice's from its create on
		// (the first entry sees its updates), or was never Sluice's.
		kw.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
		kw.ObjectSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: v1beta1.KueueQueueNameLabel, Operator: metav1.LabelSelectorOpExists},
			{Key: v1beta1.QueueNameLabel, Operator: metav1.LabelSelectorOpDoesNotExist},
		}}
		cfg.Webhooks = append(cfg.Webhooks, kw)
	}
	if o.unqueued != nil {
		e := *o.unqueued
		if k.IsParent() {
			// A parent kind's object is defaulted, never held: its pods
			// are what queue, and a held one's pods are held as Pods.
			e.Hold = false
		}
		if uw := unqueuedWebhook(k, cfg.Webhooks[0], kueueLabels, e); uw != nil {
			cfg.Webhooks = append(cfg.Webhooks, *uw)
		}
	}
	return cfg
}

// MatchConditionName names the webhook's match condition.
const MatchConditionName = "changes-something"

// WebhookMatchCondition is the CEL expression under which the API server
// calls a kind's webhook. On UPDATE: only when the queue label changes
// (added, removed or another value), which reviewUpdate judges. On
// CREATE: unless the object is created suspended (its kind's
// SuspendField true), carries none of the annotations the webhook
// removes, no maximum execution time label and a well-formed queue name,
// since for such an object it would change and refuse nothing; skipping
// the call saves a round trip per create, which a burst of submissions
// feels. A kind without a SuspendField is always called on CREATE.
func WebhookMatchCondition(k Kind) string { return matchCondition(k, "") }

// MultiClusterMatchCondition is WebhookMatchCondition that also calls the
// webhook for a create that leaves the kind's managedBy field empty in one
// of the LocalQueues ("namespace/name") whose ClusterQueue dispatches to
// worker clusters, or in any queue when queues is nil (the chart of a
// multi-cluster manager), so that the webhook sets it. A kind without a
// managedBy field has the plain condition.
func MultiClusterMatchCondition(k Kind, queues []string) string {
	if len(k.ManagedBy) < 2 {
		return WebhookMatchCondition(k)
	}
	path := "object"
	var has []string
	for _, f := range k.ManagedBy {
		path += "." + f
		has = append(has, "has("+path+")")
	}
	unset := "!(" + strings.Join(has, " && ") + ")"
	if k.ManagedByDefault != "" {
		unset = fmt.Sprintf("(%s || %s == %q)", unset, path, k.ManagedByDefault)
	}
	if queues != nil {
		quoted := make([]string, len(queues))
		for i, q := range queues {
			quoted[i] = fmt.Sprintf("%q", q)
		}
		unset += fmt.Sprintf(" && (request.namespace + \"/\" + %s) in [%s]", queueLabelCEL("object"), strings.Join(quoted, ", "))
	}
	return matchCondition(k, unset)
}

// fieldCEL is the CEL expression of an integer field of obj at path, -1
// when it is unset.
func fieldCEL(obj string, path []string) string {
	var has []string
	p := obj
	for _, f := range path {
		p += "." + f
		has = append(has, "has("+p+")")
	}
	return "(" + strings.Join(has, " && ") + " ? " + p + " : -1)"
}

// queueLabelCEL is the CEL expression of obj's queue label ("" if none).
func queueLabelCEL(obj string) string {
	return fmt.Sprintf("(has(%[1]s.metadata.labels) && %[2]q in %[1]s.metadata.labels ? %[1]s.metadata.labels[%[2]q] : \"\")", obj, v1beta1.QueueNameLabel)
}

// matchCondition is the kind's condition, with one more reason to call
// the webhook on create (CEL; "" for none).
func matchCondition(k Kind, createToo string) string {
	label := queueLabelCEL
	update := label("object") + " != " + label("oldObject")
	if len(k.CountField) > 0 {
		// A running object's count changed: refused unless elastic.
		update += " || " + fieldCEL("object", k.CountField) + " != " + fieldCEL("oldObject", k.CountField)
	}
	if k.IsParent() {
		// Every change of the object may change its pod templates.
		return "true"
	}
	if len(k.SuspendField) == 0 {
		return "request.operation != \"UPDATE\" || " + update
	}
	var suspended []string
	path := "object"
	for _, f := range k.SuspendField {
		suspended = append(suspended, "has("+path+"."+f+")")
		path += "." + f
	}
	suspended = append(suspended, path+" == true")
	var annotated []string
	for _, a := range []string{OriginalAnnotation, AdmissionAnnotation, StoppedAnnotation} {
		annotated = append(annotated, fmt.Sprintf("%q in object.metadata.annotations", a))
	}
	var labelled []string
	for _, l := range []string{v1beta1.MaxExecTimeLabel, v1beta1.KueueMaxExecTimeLabel} {
		labelled = append(labelled, fmt.Sprintf("%q in object.metadata.labels", l))
	}
	badQueue := fmt.Sprintf("!%s.matches(%q)", label("object"), queueNamePattern)
	create := "!(" + strings.Join(suspended, " && ") + ")" +
		" || (has(object.metadata.annotations) && (" + strings.Join(annotated, " || ") + "))" +
		" || (has(object.metadata.labels) && (" + strings.Join(labelled, " || ") + "))" +
		" || " + badQueue
	if createToo != "" {
		create += " || (" + createToo + ")"
	}
	return "request.operation == \"UPDATE\" ? " + update + " : (" + create + ")"
}

// kueueLabelsWebhookName names the webhook entry for objects labelled the
// Kueue way: "kueue-labels.suspend.job.sluice.dev".
func kueueLabelsWebhookName(k Kind) string { return "kueue-labels." + WebhookName(k) }

// validateWebhookURL applies the API server's rules for a webhook URL: https,
// a host, no user info, query or fragment.
func validateWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook url %q: %w", raw, err)
	}
	switch {
	case u.Scheme != "https":
		return fmt.Errorf("webhook url %q: scheme must be https", raw)
	case u.Host == "":
		return fmt.Errorf("webhook url %q: no host", raw)
	case u.User != nil:
		return fmt.Errorf("webhook url %q: user info is not allowed", raw)
	case u.RawQuery != "" || u.ForceQuery:
		return fmt.Errorf("webhook url %q: a query is not allowed", raw)
	case u.Fragment != "":
		return fmt.Errorf("webhook url %q: a fragment is not allowed", raw)
	}
	return nil
}

// kueueReadAnyway are the Kueue labels and annotations Sluice reads on a job
// of its own: the queue and priority labels (honoured with --kueue-labels,
// and left alone beside Sluice's for Kueue running side by side) and the
// partial admission and elastic job annotations, the maximum execution
// time label and the topology-aware scheduling annotations of pod
// templates.
var kueueReadAnyway = map[string]bool{
	v1beta1.KueueQueueNameLabel: true, v1beta1.KueuePriorityClassLabel: true,
	v1beta1.KueueMinParallelismAnnotation: true, v1beta1.KueueMaxExecTimeLabel: true, v1beta1.KueueElasticJobAnnotation: true,
	// Topology-aware scheduling's pod-set annotations.
	v1beta1.KueuePodSetRequiredTopologyAnnotation: true, v1beta1.KueuePodSetPreferredTopologyAnnotation: true,
	v1beta1.KueuePodSetUnconstrainedTopologyAnnotation: true, v1beta1.KueuePodSetSliceRequiredTopologyAnnotation: true,
	v1beta1.KueuePodSetSliceSizeAnnotation: true, v1beta1.KueuePodSetGroupNameAnnotation: true,
}

// kueueOnly warns, for the client to show, of each Kueue label or
// annotation on a job Sluice queues that Sluice does not read (on the job
// or a pod set's template: topology-aware scheduling, Kueue's pod groups,
// …), so nobody is surprised that it does nothing.
func kueueOnly(job Job) []string {
	var out []string
	seen := map[string]bool{} // a Pod is its own pod set: say each key once
	check := func(where string, m map[string]string, what string) {
		keys := make([]string, 0, len(m))
		for k := range m {
			if strings.HasPrefix(k, "kueue.x-k8s.io/") && !kueueReadAnyway[k] && !seen[what+k] {
				seen[what+k] = true
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, fmt.Sprintf("%s%s %s is Kueue's; Sluice does not read it (docs/migrate-from-kueue.md)", where, what, k))
		}
	}
	m := job.Meta()
	check("", m.GetLabels(), "label")
	check("", m.GetAnnotations(), "annotation")
	if sets, err := job.PodSets(); err == nil {
		for _, ps := range sets {
			if ps.Meta == nil {
				continue
			}
			where := "pod set " + ps.Name + ": "
			check(where, ps.Meta.Labels, "label")
			check(where, ps.Meta.Annotations, "annotation")
		}
	}
	return out
}
