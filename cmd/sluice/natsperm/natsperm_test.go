package natsperm_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/cmd/sluice/natsperm"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/fence"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/natsconn"
	"github.com/sluice-dev/sluice/internal/workloads"
	"github.com/sluice-dev/sluice/services/admission"
	"github.com/sluice-dev/sluice/services/integration"
	"github.com/sluice-dev/sluice/services/multicluster"
	"github.com/sluice-dev/sluice/services/preemption"
	"github.com/sluice-dev/sluice/services/provisioning"
	"github.com/sluice-dev/sluice/services/quota"
)

// TestServicesUnderTheirPermissions runs admission, preemption and quota
// against a real nats-server over TLS that enforces the table, each as its
// own user, and plays the integration's and the watcher's parts with their
// users: a workload is admitted, preempted by a higher priority one, stopped
// and released, and the other admitted and finished. No service meets a
// permission error; a service publishing outside its part is refused.
func TestServicesUnderTheirPermissions(t *testing.T) {
	srv, caFile := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	violations := &errorsSeen{}
	connect := func(service string) (*nats.Conn, jetstream.JetStream) {
		t.Helper()
		return connectAs(t, srv, caFile, service,
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations.add(service, err) }))
	}

	_, setupJS := connect("setup")
	if err := bus.Setup(ctx, setupJS, bus.Config{}); err != nil {
		t.Fatalf("setup user: bus.Setup: %v", err)
	}
	if err := bus.SetupConsumers(ctx, setupJS, admission.ChecksConsumer(), preemption.Consumer(), quota.ReleaseConsumer()); err != nil {
		t.Fatalf("setup user: durable consumers: %v", err)
	}

	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	run := func(name string, r interface{ Run(context.Context) error }) {
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("%s Run: %v", name, err)
			}
		})
	}
	_, ajs := connect("admission")
	adm, err := admission.New(admission.Config{Interval: 10 * time.Millisecond}, ajs, bus.NewPublisher(ajs, events.Source("admission")), admission.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	run("admission", adm)
	_, pjs := connect("preemption")
	run("preemption", preemption.New(pjs, bus.NewPublisher(pjs, events.Source("preemption")), preemption.WithLogger(log)))
	_, qjs := connect("quota")
	q, err := quota.New(quota.Config{Reconcile: time.Second}, qjs, bus.NewPublisher(qjs, events.Source("quota")), quota.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	run("quota", q)

	// The reader follows the stream, as `sluice events tail` does.
	_, rjs := connect("reader")
	seen := &eventLog{}
	rnc := rjs.Conn()
	go func() {
		_ = bus.Follow(ctx, rnc, bus.StreamEvents, "sluice.>", 1, func(m bus.Stored) error {
			if env, err := events.DecodeParts(m.Subject, m.Header, m.Data); err == nil {
				seen.add(env)
			}
			return nil
		}, bus.StreamSubjects...)
	}()

	// The watcher's part: queue configuration.
	_, wjs := connect("watcher")
	cfgKV, err := bus.OpenKV(ctx, wjs, configstore.Bucket)
	if err != nil {
		t.Fatalf("watcher: open %s: %v", configstore.Bucket, err)
	}
	put(t, ctx, cfgKV, configstore.Key(configstore.KindResourceFlavor, "", "default"), v1beta1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
	put(t, ctx, cfgKV, configstore.Key(configstore.KindClusterQueue, "", "cq"), v1beta1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "cq"},
		Spec: v1beta1.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			Preemption:        &v1beta1.ClusterQueuePreemption{WithinClusterQueue: v1beta1.PreemptionLowerPriority},
			ResourceGroups: []v1beta1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{"cpu"},
				Flavors: []v1beta1.FlavorQuotas{{Name: "default", Resources: []v1beta1.ResourceQuota{
					{Name: "cpu", NominalQuota: resource.MustParse("4")}}}},
			}},
		},
	})
	put(t, ctx, cfgKV, configstore.Key(configstore.KindLocalQueue, "team-a", "main"), v1beta1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "main"}, Spec: v1beta1.LocalQueueSpec{ClusterQueue: "cq"}})
	// The watcher reports every store's size.
	reg := prometheus.NewRegistry()
	reg.MustRegister(bus.StorageCollector(wjs))
	if n, err := testutil.GatherAndCount(reg, "sluice_storage_bytes"); err != nil || n != 2+len(bus.Buckets) {
		t.Errorf("watcher: %d sluice_storage_bytes samples (%v), want one per stream and bucket (%d)", n, err, 2+len(bus.Buckets))
	}

	// The integration's part: records, and the job's own transitions.
	_, ijs := connect("integration")
	wlKV, err := bus.OpenKV(ctx, ijs, workloads.Bucket)
	if err != nil {
		t.Fatalf("integration: open %s: %v", workloads.Bucket, err)
	}
	ipub := bus.NewPublisher(ijs, events.Source("integration"))
	submit := func(name string, prio int32) events.WorkloadSubmittedV1 {
		rec := events.WorkloadSubmittedV1{
			Workload:   events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: name, UID: "uid-" + name},
			LocalQueue: "main", Priority: prio, CreationTime: time.Now().UTC().Truncate(time.Second),
			PodSets: []events.PodSetV1{{Name: "main", Count: 4, Requests: map[string]string{"cpu": "1"}}},
		}
		put(t, ctx, wlKV, workloads.Key(rec.Workload), rec)
		if err := ipub.Publish(ctx, rec, events.ID(rec.Type(), rec.Workload.UID)); err != nil {
			t.Fatalf("integration: publish submitted: %v", err)
		}
		return rec
	}
	low := submit("low", 0)
	adm1 := seen.wait(t, "admitted low", func(e events.Envelope) bool {
		return e.Type == events.TypeWorkloadAdmittedV1 && strings.HasSuffix(e.Subject, "/low")
	})
	var a events.WorkloadAdmittedV1
	if err := adm1.As(&a); err != nil {
		t.Fatal(err)
	}
	started := events.WorkloadStartedV1{Workload: low.Workload, ClusterQueue: "cq", Admission: a.Admission}
	if err := ipub.Publish(ctx, started, events.ID(started.Type(), low.Workload.UID, a.Admission)); err != nil {
		t.Fatalf("integration: publish started: %v", err)
	}

	high := submit("high", 100)
	seen.wait(t, "preempted low", func(e events.Envelope) bool {
		return e.Type == events.TypeWorkloadPreemptedV1 && strings.HasSuffix(e.Subject, "/low")
	})
	stopped := events.WorkloadStoppedV1{Workload: low.Workload, ClusterQueue: "cq", Reason: "Preempted", Admission: a.Admission}
	if err := ipub.Publish(ctx, stopped, events.ID(stopped.Type(), low.Workload.UID, a.Admission)); err != nil {
		t.Fatalf("integration: publish stopped: %v", err)
	}
	seen.wait(t, "admitted high", func(e events.Envelope) bool {
		return e.Type == events.TypeWorkloadAdmittedV1 && strings.HasSuffix(e.Subject, "/high")
	})
	if err := wlKV.Delete(ctx, workloads.Key(high.Workload)); err != nil {
		t.Fatalf("integration: delete record: %v", err)
	}
	fin := events.WorkloadFinishedV1{Workload: high.Workload, ClusterQueue: "cq", Succeeded: true}
	if err := ipub.Publish(ctx, fin, events.ID(fin.Type(), high.Workload.UID)); err != nil {
		t.Fatalf("integration: publish finished: %v", err)
	}
	seen.wait(t, "quota of high released", func(e events.Envelope) bool {
		return e.Type == events.TypeQuotaReleasedV1 && strings.HasSuffix(e.Subject, "/high")
	})
	if v := violations.all(); len(v) > 0 {
		t.Fatalf("permission errors while every service kept to its part:\n%s", strings.Join(v, "\n"))
	}

	// Outside their parts: refused by the server.
	cases := []struct {
		name, user, subject string
	}{
		{"the admission service cannot announce a start", "admission", "sluice.workload.v1.started.job.team-a.low"},
		{"the integration cannot write the quota ledger", "integration", "$KV." + ledger.Bucket + ".cq"},
		{"the preemption service cannot admit", "preemption", "sluice.workload.v1.admitted.job.team-a.x"},
		{"the reader cannot publish events", "reader", "sluice.workload.v1.submitted.job.team-a.x"},
		{"the watcher cannot delete a stream", "watcher", "$JS.API.STREAM.DELETE." + bus.StreamEvents},
		{"the quota service cannot purge the fences", "quota", "$JS.API.STREAM.PURGE.KV_" + fence.Bucket},
		{"the integration cannot purge the records", "integration", "$JS.API.STREAM.PURGE.KV_" + workloads.Bucket},
		{"the admission service cannot purge the ledger", "admission", "$JS.API.STREAM.PURGE.KV_" + ledger.Bucket},
		{"the preemption service cannot forge a fence's copy", "preemption", bus.WatchSubject(fence.Bucket) + ".team-a.low"},
		{"the reader cannot make a consumer", "reader", "$JS.API.CONSUMER.CREATE." + bus.StreamEvents},
		{"the reader cannot delete a service's consumer", "reader", "$JS.API.CONSUMER.DELETE." + bus.StreamEvents + ".quota"},
		{"the quota service cannot make its own consumer", "quota", "$JS.API.CONSUMER.CREATE." + bus.StreamEvents + ".quota"},
		{"the admission service cannot make a consumer of the fences", "admission", "$JS.API.CONSUMER.CREATE.KV_" + fence.Bucket},
		{"the provisioning controller cannot answer as the multicluster one", "provisioning",
			events.CheckSubject(events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "low"}, v1beta1.MultiClusterController)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc, _ := connect(tc.user)
			_, err := nc.Request(tc.subject, []byte("{}"), 2*time.Second)
			if err == nil {
				t.Fatalf("%s published to %s", tc.user, tc.subject)
			}
			if !violations.has(tc.user, "Permissions Violation for Publish to \""+tc.subject+"\"") {
				t.Errorf("no permission violation for %s on %s (request error: %v; seen: %v)", tc.user, tc.subject, err, violations.all())
			}
		})
	}
}

func put(t *testing.T, ctx context.Context, kv jetstream.KeyValue, key string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, b); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// errorsSeen collects the asynchronous errors the server sent each user.
type errorsSeen struct {
	mu  sync.Mutex
	got []string
}

func (e *errorsSeen) add(user string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, user+": "+err.Error())
}

func (e *errorsSeen) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

func (e *errorsSeen) has(user, text string) bool {
	deadline := time.Now().Add(2 * time.Second)
	for {
		for _, s := range e.all() {
			if strings.HasPrefix(s, user+": ") && strings.Contains(s, text) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type eventLog struct {
	mu  sync.Mutex
	evs []events.Envelope
}

func (l *eventLog) add(e events.Envelope) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, e)
}

func (l *eventLog) wait(t *testing.T, what string, match func(events.Envelope) bool) events.Envelope {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l.mu.Lock()
		for _, e := range l.evs {
			if match(e) {
				l.mu.Unlock()
				return e
			}
		}
		var types []string
		for _, e := range l.evs {
			types = append(types, e.Type+" "+e.Subject)
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within 20s; events: %s", what, strings.Join(types, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// connectAs connects to the test server as a service's user.
func connectAs(t *testing.T, srv, caFile, service string, extra ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	cfg := natsconn.Config{URL: srv, User: service, Password: "pw-" + service, CAFile: caFile}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	opts, err := cfg.Options("sluice-" + service)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv, append(opts, extra...)...)
	if err != nil {
		t.Fatalf("%s: connect: %v", service, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// startServer starts a nats-server with JetStream on loopback that serves
// TLS with a fresh CA and knows one user per service with the table's
// permissions (password "pw-<service>"). It returns the URL and the CA file.
func startServer(t *testing.T, perm ...natsperm.Option) (string, string) {
	t.Helper()
	dir := t.TempDir()
	caFile, tlsCfg := serverTLS(t, dir)
	var users []*server.User
	for _, svc := range natsperm.Users(perm...) {
		p, err := natsperm.For(svc, perm...)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, &server.User{Username: svc, Password: "pw-" + svc, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: p.Publish, Deny: p.PublishDeny},
			Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
		}})
	}
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: filepath.Join(dir, "js"),
		Users: users, TLSConfig: tlsCfg, TLS: true,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return "tls://" + ns.Addr().String(), caFile
}

// serverTLS makes a CA and a server certificate for 127.0.0.1; it writes
// the CA to dir and returns its path and the server's TLS configuration.
func serverTLS(t *testing.T, dir string) (string, *tls.Config) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// TestServerConfigLoads: the rendered authorization block is a valid
// nats-server configuration that gives each service its table's
// permissions.
func TestServerConfigLoads(t *testing.T) {
	dir := t.TempDir()
	for _, svc := range natsperm.Services {
		t.Setenv("SLUICE_"+strings.ToUpper(svc)+"_PASSWORD", "pw-"+svc)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("jetstream: {store_dir: \""+filepath.Join(dir, "js")+"\"}\n"+natsperm.ServerConfig()), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server refuses the rendered configuration: %v", err)
	}
	got := map[string]bool{}
	for _, u := range opts.Users {
		want, err := natsperm.For(u.Username)
		if err != nil {
			t.Fatal(err)
		}
		if u.Password != "pw-"+u.Username {
			t.Errorf("user %s: password not taken from its environment variable", u.Username)
		}
		if u.Permissions == nil || !slices.Equal(u.Permissions.Publish.Allow, want.Publish) || !slices.Equal(u.Permissions.Subscribe.Allow, want.Subscribe) {
			t.Errorf("user %s: permissions differ from the table", u.Username)
		}
		got[u.Username] = true
	}
	for _, svc := range natsperm.Services {
		if !got[svc] {
			t.Errorf("no user %s in the rendered configuration", svc)
		}
	}
}

// TestServerConfigWithWorkers: each worker cluster named gets a user, its
// password from its own variable, allowed only its part.
func TestServerConfigWithWorkers(t *testing.T) {
	dir := t.TempDir()
	for _, svc := range natsperm.Services {
		t.Setenv("SLUICE_"+strings.ToUpper(svc)+"_PASSWORD", "pw-"+svc)
	}
	t.Setenv("SLUICE_WORKER_GPU_EAST_PASSWORD", "pw-east")
	conf := filepath.Join(dir, "nats.conf")
	rendered := natsperm.ServerConfig(natsperm.WithWorkers("hub", "gpu-east"))
	if err := os.WriteFile(conf, []byte("jetstream: {store_dir: \""+filepath.Join(dir, "js")+"\", domain: hub}\nleafnodes: {port: -1}\n"+rendered), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server refuses the rendered configuration: %v", err)
	}
	pub, sub := multicluster.WorkerPermissions("gpu-east", "hub")
	found := false
	for _, u := range opts.Users {
		if u.Username != "gpu-east" {
			continue
		}
		found = true
		if u.Password != "pw-east" {
			t.Errorf("worker user's password %q, want the one in SLUICE_WORKER_GPU_EAST_PASSWORD", u.Password)
		}
		if u.Permissions == nil || !slices.Equal(u.Permissions.Publish.Allow, pub) || !slices.Equal(u.Permissions.Subscribe.Allow, sub) {
			t.Errorf("worker user's permissions %+v, want publish %v, subscribe %v", u.Permissions, pub, sub)
		}
	}
	if !found {
		t.Errorf("no user gpu-east in:\n%s", rendered)
	}
}

// TestOnlySetupMakesConsumers: the setup user makes every durable
// consumer; each service reads its own (NATS wildcards match whole
// tokens, so each name is in the table) and no other. No user but setup
// may make a consumer at all, durable, ordered or push: whoever may can
// have stored messages delivered to any subject, a watch's among them.
func TestOnlySetupMakesConsumers(t *testing.T) {
	budget := natsperm.CheckControllerUser("example.com/budget")
	srv, caFile := startServer(t, natsperm.WithCheckControllers("example.com/budget"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	connect := func(service string) jetstream.JetStream {
		t.Helper()
		_, js := connectAs(t, srv, caFile, service)
		return js
	}
	setupJS := connect("setup")
	if err := bus.Setup(ctx, setupJS, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	specs := []bus.ConsumerSpec{integration.PendingConsumer("job"), integration.PendingConsumer("pytorchjob"), provisioning.EndedConsumer(),
		multicluster.EndedConsumer(), quota.ReleaseConsumer()}
	for _, c := range []string{v1beta1.ProvisioningRequestController, v1beta1.MultiClusterController, "example.com/budget", "example.com/unlisted"} {
		specs = append(specs, checks.Consumer(c))
	}
	if err := bus.SetupConsumers(ctx, setupJS, specs...); err != nil {
		t.Fatalf("setup user: %v", err)
	}
	cases := []struct {
		user, durable string
		wantAllowed   bool
	}{
		{"integration", "job-pending", true},
		{"integration", "pytorchjob-pending", true},
		{"provisioning", checks.Durable(v1beta1.ProvisioningRequestController), true},
		{"provisioning", provisioning.EndedDurable, true},
		{"multicluster", checks.Durable(v1beta1.MultiClusterController), true},
		{"multicluster", multicluster.EndedDurable, true},
		// Each check controller consumes for itself only.
		{"provisioning", checks.Durable(v1beta1.MultiClusterController), false},
		{"multicluster", checks.Durable(v1beta1.ProvisioningRequestController), false},
		{budget, checks.Durable("example.com/budget"), true},
		{budget, checks.Durable(v1beta1.ProvisioningRequestController), false},
		{"provisioning", checks.Durable("example.com/unlisted"), false},
		{"reader", "quota", false},
		{"reader", "job-pending", false},
	}
	// A refused request is never answered: each case waits a little, side
	// by side with the others, within the group.
	t.Run("group", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.user+" reads "+tc.durable, func(t *testing.T) {
				t.Parallel()
				js := connect(tc.user)
				cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
				defer ccancel()
				c, err := js.Consumer(cctx, bus.StreamEvents, tc.durable)
				if err == nil {
					_, err = c.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
				}
				if tc.wantAllowed && err != nil {
					t.Fatalf("%s: read %s: %v", tc.user, tc.durable, err)
				}
				if !tc.wantAllowed && err == nil {
					t.Fatalf("%s read consumer %s; want it refused", tc.user, tc.durable)
				}
			})
		}
		for _, user := range natsperm.Users(natsperm.WithCheckControllers("example.com/budget")) {
			if user == "setup" {
				continue
			}
			t.Run(user+" makes no consumer", func(t *testing.T) {
				t.Parallel()
				js := connect(user)
				try := func(what, stream string, cfg jetstream.ConsumerConfig) {
					t.Helper()
					cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
					defer ccancel()
					if _, err := js.CreateOrUpdateConsumer(cctx, stream, cfg); err == nil {
						t.Errorf("%s made %s", user, what)
					}
				}
				try("a push consumer delivering events into the fence watch", bus.StreamEvents, jetstream.ConsumerConfig{
					DeliverSubject: bus.WatchSubject(fence.Bucket) + ".team-a.x", FilterSubject: "sluice.workload.>"})
				try("an ephemeral consumer of the fences", "KV_"+fence.Bucket, jetstream.ConsumerConfig{FilterSubject: "$KV." + fence.Bucket + ".>"})
				try("the quota service's durable consumer", bus.StreamEvents, quota.ReleaseConsumer().ConsumerConfig())
			})
		}
	})
	// Nor may the reader delete one.
	dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer dcancel()
	if err := connect("reader").DeleteConsumer(dctx, bus.StreamEvents, "job-pending"); err == nil {
		t.Error("the reader deleted a consumer")
	}
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer icancel()
	if _, err := connect("integration").Consumer(ictx, bus.StreamEvents, "job-pending"); err != nil {
		t.Errorf("job-pending after the others' attempts: %v", err)
	}
	if _, err := natsperm.For(budget); err == nil {
		t.Errorf("a user for a check controller not named: %s", budget)
	}
	if got := natsperm.ServerConfig(natsperm.WithCheckControllers("example.com/budget")); !strings.Contains(got, `user: "`+budget+`"`) ||
		!strings.Contains(got, "$SLUICE_CHECK_EXAMPLE_COM_BUDGET_PASSWORD") {
		t.Errorf("ServerConfig lacks the user %s and its password variable:\n%s", budget, got)
	}
}

// TestDispatcherUnderItsUser: the setup user makes the multicluster
// stream and bucket; the multicluster user (the dispatcher) offers, reads
// reports and keeps its dispatches, and nothing else there; the
// provisioning user may not offer.
func TestDispatcherUnderItsUser(t *testing.T) {
	srv, caFile := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, setup := connectAs(t, srv, caFile, "setup")
	if err := multicluster.Setup(ctx, setup, 1); err != nil {
		t.Fatalf("setup user: %v", err)
	}
	short0, cancelShort0 := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort0()
	_, pjs := connectAs(t, srv, caFile, "provisioning")
	if _, err := pjs.Publish(short0, multicluster.ToWorker("w1", "u-1"), []byte(`{}`)); err == nil {
		t.Error("the provisioning user offered a workload to a worker")
	}
	_, js := connectAs(t, srv, caFile, "multicluster")
	if _, err := js.Publish(ctx, multicluster.ToWorker("w1", "u-1"), []byte(`{}`)); err != nil {
		t.Errorf("offer: %v", err)
	}
	if _, err := bus.EnsureConsumer(ctx, setup, multicluster.Stream, multicluster.ReportsConsumer()); err != nil {
		t.Fatalf("setup user: reports consumer: %v", err)
	}
	if _, err := bus.EnsureConsumer(ctx, js, multicluster.Stream, multicluster.ReportsConsumer()); err != nil {
		t.Errorf("reports consumer: %v", err)
	}
	kv, err := bus.OpenKV(ctx, js, multicluster.Bucket)
	if err != nil {
		t.Fatalf("open %s: %v", multicluster.Bucket, err)
	}
	if _, err := kv.Put(ctx, "u-1", []byte(`{}`)); err != nil {
		t.Errorf("keep a dispatch: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if _, err := js.Publish(short, multicluster.FromWorker("w1", "u-1"), []byte(`{}`)); err == nil {
		t.Error("the multicluster user reported as a worker")
	}
}
