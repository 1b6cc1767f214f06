package integration

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

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
	"github.com/sluice-dev/sluice/services/preemption"
	"github.com/sluice-dev/sluice/services/quota"
)

// TestVictimAdmittedAgainAfterALedgerOutage: quota accounting cannot write
// the ledger for longer than the ten attempts after which it used to give
// a release up (here the ledger refuses every message as too large). A
// victim preempted meanwhile is stopped, its release fails again and
// again; once the ledger takes writes again its quota is released, the
// preemptor is admitted, and when the preemptor finishes the victim is
// admitted again. Before releases were retried forever, the victim's
// release went to the dead letters and its quota stayed booked for good.
func TestVictimAdmittedAgainAfterALedgerOutage(t *testing.T) {
	e := newEnv(t, 3*time.Minute)
	const namespace, lq = "team-s", "q"
	_, js := e.connect("test")
	cfg, err := bus.OpenKV(e.ctx, js, configstore.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	put := func(kv jetstream.KeyValue, key string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(e.ctx, key, b); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put(cfg, configstore.Key(configstore.KindResourceFlavor, "", "default"), v1beta1.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
	put(cfg, configstore.Key(configstore.KindClusterQueue, "", "solo"), v1beta1.ClusterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "solo"},
		Spec: v1beta1.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []v1beta1.ResourceGroup{{CoveredResources: []corev1.ResourceName{"cpu"}, Flavors: []v1beta1.FlavorQuotas{{
				Name: "default", Resources: []v1beta1.ResourceQuota{{Name: "cpu", NominalQuota: resource.MustParse("4")}},
			}}}},
			Preemption: &v1beta1.ClusterQueuePreemption{WithinClusterQueue: v1beta1.PreemptionLowerPriority},
		},
	})
	put(cfg, configstore.Key(configstore.KindLocalQueue, namespace, lq), v1beta1.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: lq}, Spec: v1beta1.LocalQueueSpec{ClusterQueue: "solo"}})

	e.startAdmission("admission")
	e.start("preemption", func(js jetstream.JetStream, log zerolog.Logger) (func(context.Context) error, error) {
		return preemption.New(js, bus.NewPublisher(js, events.Source("preemption")), preemption.WithLogger(log)).Run, nil
	})
	e.start("quota", func(js jetstream.JetStream, log zerolog.Logger) (func(context.Context) error, error) {
		q, err := quota.New(quota.Config{Reconcile: time.Hour}, js, bus.NewPublisher(js, events.Source("quota")), quota.WithLogger(log),
			quota.WithReleaseBackoff(10*time.Millisecond, 50*time.Millisecond))
		if err != nil {
			return nil, err
		}
		return q.Run, nil
	})
	// The job integration's part: a preempted job is stopped and its stop
	// announced.
	var stops atomic.Int64
	jobPub := bus.NewPublisher(js, events.Source("job"))
	e.start("jobs", func(js jetstream.JetStream, log zerolog.Logger) (func(context.Context) error, error) {
		return func(ctx context.Context) error {
			return bus.Run(ctx, js, bus.ConsumerSpec{Durable: "test-jobs",
				FilterSubjects: []string{events.SubjectFilter("workload", "preempted", "*", "*")}},
				func(ctx context.Context, env events.Envelope) error {
					var ev events.WorkloadPreemptedV1
					if err := env.As(&ev); err != nil {
						return bus.Poison(err)
					}
					st := events.WorkloadStoppedV1{Workload: ev.Workload, ClusterQueue: ev.ClusterQueue, Reason: "Preempted", Admission: ev.Admission}
					if err := jobPub.Publish(ctx, st, events.ID(st.Type(), ev.Workload.UID, ev.Admission)); err != nil {
						return err
					}
					stops.Add(1)
					return nil
				}, bus.WithLogger(log), bus.WithFetchWait(200*time.Millisecond))
		}, nil
	})

	wls, err := bus.OpenKV(e.ctx, js, workloads.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	led, err := bus.OpenKV(e.ctx, js, ledger.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	ref := func(name string) events.WorkloadRef {
		return events.WorkloadRef{Kind: "job", Namespace: namespace, Name: name, UID: "uid-" + name}
	}
	submit := func(name string, priority int32, at time.Time) {
		put(wls, workloads.Key(ref(name)), events.WorkloadSubmittedV1{Workload: ref(name), LocalQueue: lq, Priority: priority, CreationTime: at,
			PodSets: []events.PodSetV1{{Name: "main", Count: 1, Requests: map[string]string{"cpu": "4"}}}})
	}
	holds := func(name string) bool {
		_, ok, err := ledger.Get(e.ctx, led, workloads.EngineKey(ref(name)))
		return err == nil && ok
	}
	await := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s", what, d)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	start := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	submit("victim", 0, start)
	await("victim admitted", 20*time.Second, func() bool { return holds("victim") })

	// The outage: the ledger takes no message.
	stream, err := js.Stream(e.ctx, "KV_"+ledger.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	setMaxMsgSize := func(n int32) {
		t.Helper()
		sc := stream.CachedInfo().Config
		sc.MaxMsgSize = n
		if _, err := js.UpdateStream(e.ctx, sc); err != nil {
			t.Fatalf("set the ledger's largest message to %d: %v", n, err)
		}
	}
	setMaxMsgSize(8)
	submit("preemptor", 100, start.Add(time.Second))
	await("the victim stopped", 20*time.Second, func() bool { return stops.Load() > 0 })
	qc, err := js.Consumer(e.ctx, bus.StreamEvents, quota.ReleaseConsumer().Durable)
	if err != nil {
		t.Fatal(err)
	}
	await("the release failed more often than the old limit of attempts", 30*time.Second, func() bool {
		ci, err := qc.Info(e.ctx)
		return err == nil && ci.NumRedelivered > 0 && ci.Delivered.Consumer > 3*bus.DefaultMaxDeliver
	})
	if !holds("victim") || holds("preemptor") {
		t.Fatalf("during the outage: victim holds %t (want true), preemptor holds %t (want false)", holds("victim"), holds("preemptor"))
	}

	setMaxMsgSize(-1)
	await("the victim's quota released and the preemptor admitted", 20*time.Second, func() bool { return !holds("victim") && holds("preemptor") })
	// The preemptor ends as the job integration reports an end: its
	// record goes, then its finish is announced.
	if err := wls.Delete(e.ctx, workloads.Key(ref("preemptor"))); err != nil {
		t.Fatal(err)
	}
	fin := events.WorkloadFinishedV1{Workload: ref("preemptor"), ClusterQueue: "solo", Succeeded: true}
	if err := jobPub.Publish(e.ctx, fin, events.ID(fin.Type(), fin.Workload.UID)); err != nil {
		t.Fatal(err)
	}
	await("the victim admitted again", 20*time.Second, func() bool { return holds("victim") && !holds("preemptor") })
	dlq, err := js.Stream(e.ctx, bus.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dlq.GetLastMsgForSubject(e.ctx, "sluice.dlq.quota"); err == nil {
		t.Error("a release was dead-lettered")
	}
}
