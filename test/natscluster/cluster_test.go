package natscluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/ledger"
	"github.com/sluice-dev/sluice/internal/workloads"
	"github.com/sluice-dev/sluice/services/admission"
	"github.com/sluice-dev/sluice/services/preemption"
	"github.com/sluice-dev/sluice/services/quota"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// cluster is three nats-servers in one JetStream cluster.
type cluster struct {
	servers map[string]*server.Server
	opts    map[string]*server.Options
	urls    []string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()
	names := []string{"n1", "n2", "n3"}
	routePorts := map[string]int{}
	for _, n := range names {
		routePorts[n] = freePort(t)
	}
	c := &cluster{servers: map[string]*server.Server{}, opts: map[string]*server.Options{}}
	for _, n := range names {
		var routes []string
		for _, o := range names {
			if o != n {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", routePorts[o]))
			}
		}
		opts := &server.Options{
			ServerName: n, Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
			JetStream: true, StoreDir: filepath.Join(dir, n),
			Cluster: server.ClusterOpts{Name: "sluice", Host: "127.0.0.1", Port: routePorts[n]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("server %s: %v", n, err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		c.servers[n], c.opts[n] = s, opts
	}
	for _, n := range names {
		s := c.servers[n]
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("server %s not ready", n)
		}
		c.urls = append(c.urls, s.ClientURL())
		// A restart comes back on the same client port.
		c.opts[n].Port = s.Addr().(*net.TCPAddr).Port
	}
	return c
}

// restart starts a server that was shut down again, on its own store.
func (c *cluster) restart(t *testing.T, name string) {
	t.Helper()
	s, err := server.NewServer(c.opts[name])
	if err != nil {
		t.Fatalf("restart %s: %v", name, err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("restarted server %s not ready", name)
	}
	c.servers[name] = s
}

// waitMetaLeader waits until the servers are routed to each other and
// have elected JetStream's meta leader.
func (c *cluster) waitMetaLeader(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state []string
		for n, s := range c.servers {
			if s.JetStreamIsLeader() {
				return
			}
			state = append(state, fmt.Sprintf("%s: routes %d, clustered %v", n, s.NumRoutes(), s.JetStreamIsClustered()))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no JetStream meta leader within 30 s: %s", strings.Join(state, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// connect opens a connection that knows every server and reconnects for
// ever, as a service given all URLs does.
func (c *cluster) connect(t *testing.T, name string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(strings.Join(c.urls, ","), nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("%s: connect: %v", name, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// streamLog keeps every event of the SLUICE stream in stream order.
type streamLog struct {
	mu  sync.Mutex
	all []events.Envelope
	at  []time.Time
}

func (l *streamLog) add(e events.Envelope) {
	l.mu.Lock()
	l.all = append(l.all, e)
	l.at = append(l.at, time.Now())
	l.mu.Unlock()
}

func (l *streamLog) snapshot() ([]events.Envelope, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]events.Envelope(nil), l.all...), append([]time.Time(nil), l.at...)
}

func put(t *testing.T, ctx context.Context, kv jetstream.KeyValue, key string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = kv.Put(pctx, key, b)
		pcancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond) // a leader election in progress
	}
}

// TestThreeNodeClusterSurvivesTheLossOfALeader: with --replicas 3, the
// services keep admitting when the server leading the event stream dies.
// Workloads are submitted for 12 s; at 4 s the stream's leader is shut
// down. Every workload is admitted once and released; no revision of the
// quota ledger books more than the quota; and the
// longest gap between two admissions is logged as the pause a leader loss
// costs. Then the node returns and its replicas catch up.
func TestThreeNodeClusterSurvivesTheLossOfALeader(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	const quotaCPU = 8
	c.waitMetaLeader(t)
	_, setupJS := c.connect(t, "setup")
	for {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		err := bus.Setup(sctx, setupJS, bus.Config{Replicas: 3})
		scancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("setup with 3 replicas: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	info, err := setupJS.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	si := info.CachedInfo()
	if si.Config.Replicas != 3 || si.Cluster == nil || len(si.Cluster.Replicas) != 2 {
		t.Fatalf("stream %s: replicas %d, cluster %+v; want 3 replicas", bus.StreamEvents, si.Config.Replicas, si.Cluster)
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
	for _, name := range []string{"admission-a", "admission-b"} {
		_, js := c.connect(t, name)
		adm, err := admission.New(admission.Config{Interval: 10 * time.Millisecond}, js, bus.NewPublisher(js, events.Source("admission")), admission.WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		run(name, adm)
	}
	_, pjs := c.connect(t, "preemption")
	run("preemption", preemption.New(pjs, bus.NewPublisher(pjs, events.Source("preemption")), preemption.WithLogger(log)))
	_, qjs := c.connect(t, "quota")
	q, err := quota.New(quota.Config{Reconcile: time.Second}, qjs, bus.NewPublisher(qjs, events.Source("quota")), quota.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	run("quota", q)

	// The outside subscriber.
	_, rjs := c.connect(t, "reader")
	seen := &streamLog{}
	cons, err := rjs.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"sluice.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if e, err := events.DecodeParts(m.Subject(), m.Headers(), m.Data()); err == nil {
			seen.add(e)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()

	// The quota check: every revision of the ledger fits the quota.
	_, ljs := c.connect(t, "ledger-check")
	lkv, err := bus.OpenKV(ctx, ljs, ledger.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	lw, err := lkv.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lw.Stop() }()
	var overMu sync.Mutex
	var over []string
	ledgerPeak := int64(0)
	go func() {
		held := map[string]ledger.Reservation{}
		for e := range lw.Updates() {
			if e == nil {
				continue
			}
			ch, err := ledger.Parse(e)
			if err != nil {
				overMu.Lock()
				over = append(over, fmt.Sprintf("revision %d: %v", e.Revision(), err))
				overMu.Unlock()
				continue
			}
			switch {
			case ch.Workload == "":
				continue // a tree's revision
			case ch.Reservation == nil:
				delete(held, ch.Workload)
				continue
			default:
				held[ch.Workload] = *ch.Reservation
			}
			var cpu int64
			for _, r := range held {
				for _, ps := range r.PodSets {
					q := resource.MustParse(r.Requests[ps.Name]["cpu"])
					cpu += q.Value() * int64(ps.Count)
				}
			}
			overMu.Lock()
			ledgerPeak = max(ledgerPeak, cpu)
			if cpu > quotaCPU {
				over = append(over, fmt.Sprintf("revision %d (%s) brings the ledger to %d CPUs", e.Revision(), e.Key(), cpu))
			}
			overMu.Unlock()
		}
	}()

	// The watcher's part: 8 CPUs of quota.
	_, wjs := c.connect(t, "watcher")
	cfgKV, err := bus.OpenKV(ctx, wjs, configstore.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	put(t, ctx, cfgKV, configstore.Key(configstore.KindResourceFlavor, "", "default"), v1beta1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
	put(t, ctx, cfgKV, configstore.Key(configstore.KindClusterQueue, "", "cq"), v1beta1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "cq"},
		Spec: v1beta1.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []v1beta1.ResourceGroup{{
				CoveredResources: []corev1.ResourceName{"cpu"},
				Flavors: []v1beta1.FlavorQuotas{{Name: "default", Resources: []v1beta1.ResourceQuota{
					{Name: "cpu", NominalQuota: *resource.NewQuantity(quotaCPU, resource.DecimalSI)}}}},
			}},
		},
	})
	put(t, ctx, cfgKV, configstore.Key(configstore.KindLocalQueue, "team-a", "main"), v1beta1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "main"}, Spec: v1beta1.LocalQueueSpec{ClusterQueue: "cq"}})

	// The integration's part: submit, start what is admitted, finish it
	// 200 ms later (record deleted, finished published).
	_, ijs := c.connect(t, "integration")
	wlKV, err := bus.OpenKV(ctx, ijs, workloads.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	ipub := bus.NewPublisher(ijs, events.Source("integration"))
	publish := func(e events.Event, id string) {
		var errs []string
		for {
			err := ipub.Publish(ctx, e, id)
			if err == nil {
				return
			} else if ctx.Err() != nil {
				t.Errorf("integration: publish %s: %v; earlier: %s", e.Type(), err, strings.Join(errs, " | "))
				return
			}
			if len(errs) < 5 {
				errs = append(errs, time.Now().Format("15:04:05.000")+" "+err.Error())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var subMu sync.Mutex
	submitted := map[string]events.WorkloadRef{}
	handled := map[string]bool{}
	ic, err := ijs.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"sluice.workload.v1.admitted.>"}})
	if err != nil {
		t.Fatal(err)
	}
	icc, err := ic.Consume(func(m jetstream.Msg) {
		e, err := events.DecodeParts(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			return
		}
		var a events.WorkloadAdmittedV1
		if e.As(&a) != nil {
			return
		}
		subMu.Lock()
		first := !handled[a.Workload.Name]
		handled[a.Workload.Name] = true
		subMu.Unlock()
		if !first {
			return
		}
		go func() {
			publish(events.WorkloadStartedV1{Workload: a.Workload, ClusterQueue: "cq", Admission: a.Admission},
				events.ID(events.TypeWorkloadStartedV1, a.Workload.UID, a.Admission))
			time.Sleep(200 * time.Millisecond)
			// As the integration does: the record goes, then the end is
			// reported.
			var errs []string
			for ctx.Err() == nil {
				// Each try bounded: a write whose acknowledgement was lost
				// with the old leader would otherwise wait for ctx.
				dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
				err := wlKV.Delete(dctx, workloads.Key(a.Workload))
				dcancel()
				if err == nil {
					break
				}
				if len(errs) < 5 {
					errs = append(errs, time.Now().Format("15:04:05.000")+" "+err.Error())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if ctx.Err() != nil {
				t.Errorf("integration: delete the record of %s: %s", a.Workload.Name, strings.Join(errs, " | "))
			}
			publish(events.WorkloadFinishedV1{Workload: a.Workload, ClusterQueue: "cq", Succeeded: true},
				events.ID(events.TypeWorkloadFinishedV1, a.Workload.UID))
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer icc.Stop()

	submit := func(i int) {
		name := fmt.Sprintf("w-%03d", i)
		rec := events.WorkloadSubmittedV1{
			Workload:   events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: name, UID: "uid-" + name},
			LocalQueue: "main", CreationTime: time.Now().UTC().Truncate(time.Second),
			PodSets: []events.PodSetV1{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "2"}}},
		}
		put(t, ctx, wlKV, workloads.Key(rec.Workload), rec)
		publish(rec, events.ID(rec.Type(), rec.Workload.UID))
		subMu.Lock()
		submitted[name] = rec.Workload
		subMu.Unlock()
	}

	// Submit for 12 s; kill the stream's leader at 4 s.
	start := time.Now()
	var killedAt time.Time
	var killed string
	for i := 0; time.Since(start) < 12*time.Second; i++ {
		submit(i)
		if killed == "" && time.Since(start) > 4*time.Second {
			si, err := setupJS.Stream(ctx, bus.StreamEvents)
			if err != nil {
				t.Fatal(err)
			}
			killed = si.CachedInfo().Cluster.Leader
			killedAt = time.Now()
			c.servers[killed].Shutdown()
			t.Logf("shut down %s, the leader of %s", killed, bus.StreamEvents)
		}
		time.Sleep(40 * time.Millisecond)
	}
	if killed == "" {
		t.Fatal("no leader was shut down")
	}

	// Everything submitted is admitted once and released.
	subMu.Lock()
	total := len(submitted)
	subMu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs, _ := seen.snapshot()
		released := map[string]bool{}
		for _, e := range evs {
			if e.Type == events.TypeQuotaReleasedV1 {
				released[e.Subject] = true
			}
		}
		if len(released) == total {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d of %d workloads released within 60 s of the last submission", len(released), total)
			stuck(t, ctx, setupJS, evs)
			// A service blocked on a request the dead leader never
			// answers shows in its goroutine.
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.FailNow()
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The node returns and catches up: its replica of every stream and
	// bucket is current again.
	c.restart(t, killed)
	caughtUp := time.Now()
	for _, name := range []string{bus.StreamEvents, "KV_" + workloads.Bucket, "KV_" + configstore.Bucket} {
		for {
			st, err := setupJS.Stream(ctx, name)
			var state string
			if err == nil {
				ci := st.CachedInfo().Cluster
				ok := ci != nil && len(ci.Replicas) == 2
				state = fmt.Sprintf("leader %s", ci.Leader)
				for _, r := range ci.Replicas {
					ok = ok && r.Current && !r.Offline
					state += fmt.Sprintf(", %s current %v lag %d", r.Name, r.Current, r.Lag)
				}
				if ok {
					break
				}
			} else {
				state = err.Error()
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: the returned node %s did not catch up: %s", name, killed, state)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("%s back and current in every stream checked after %s", killed, time.Since(caughtUp).Round(time.Millisecond))

	evs, at := seen.snapshot()
	admittedIDs := map[string]map[string]bool{}
	var admittedAt []time.Time
	for i, e := range evs {
		if e.Type == events.TypeWorkloadAdmittedV1 {
			if admittedIDs[e.Subject] == nil {
				admittedIDs[e.Subject] = map[string]bool{}
			}
			admittedIDs[e.Subject][e.ID] = true
			admittedAt = append(admittedAt, at[i])
		}
	}
	if len(admittedIDs) != total {
		t.Errorf("%d workloads admitted, want %d", len(admittedIDs), total)
	}
	for w, ids := range admittedIDs {
		if len(ids) > 1 {
			t.Errorf("%s announced as admitted %d times (no eviction happens here)", w, len(ids))
		}
	}
	overMu.Lock()
	for _, o := range over {
		t.Errorf("quota overrun: %s", o)
	}
	peak := ledgerPeak
	overMu.Unlock()
	sort.Slice(admittedAt, func(i, j int) bool { return admittedAt[i].Before(admittedAt[j]) })
	var gapBefore, gapAfter time.Duration
	for i := 1; i < len(admittedAt); i++ {
		g := admittedAt[i].Sub(admittedAt[i-1])
		if admittedAt[i].After(killedAt) {
			gapAfter = max(gapAfter, g)
		} else {
			gapBefore = max(gapBefore, g)
		}
	}
	t.Logf("%d workloads, %d events; ledger peak %d of %d CPUs; longest gap between two admissions: %s before the leader loss, %s after",
		total, len(evs), peak, quotaCPU, gapBefore.Round(time.Millisecond), gapAfter.Round(time.Millisecond))
}

// stuck tells where a stalled run stopped: per event type, how many
// workloads got it; the stream as the reader saw it and as the server
// holds it; and each durable consumer's backlog.
func stuck(t *testing.T, ctx context.Context, js jetstream.JetStream, evs []events.Envelope) {
	t.Helper()
	byType := map[string]map[string]bool{}
	for _, e := range evs {
		if byType[e.Type] == nil {
			byType[e.Type] = map[string]bool{}
		}
		byType[e.Type][e.Subject] = true
	}
	var lines []string
	for typ, ws := range byType {
		lines = append(lines, fmt.Sprintf("%s: %d", typ, len(ws)))
	}
	sort.Strings(lines)
	t.Logf("workloads per event type, as the reader saw the stream (%d events):\n%s", len(evs), strings.Join(lines, "\n"))
	st, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Logf("stream info: %v", err)
		return
	}
	t.Logf("stream %s: %d messages, last seq %d, cluster %+v", bus.StreamEvents, st.CachedInfo().State.Msgs, st.CachedInfo().State.LastSeq, st.CachedInfo().Cluster)
	for name := range st.ListConsumers(ctx).Info() {
		if name.Config.Durable == "" {
			continue
		}
		t.Logf("consumer %s: pending %d, ack pending %d, redelivered %d, waiting %d, delivered seq %d, ack floor %d",
			name.Name, name.NumPending, name.NumAckPending, name.NumRedelivered, name.NumWaiting, name.Delivered.Stream, name.AckFloor.Stream)
	}
}
