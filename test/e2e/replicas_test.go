package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/shard"
)

// TestIntegrationReplicasShareTheWork runs two replicas of the Job
// integration: both start Jobs, no Job is started twice, and when one
// replica dies its share is taken over by the other.
func TestIntegrationReplicasShareTheWork(t *testing.T) {
	a := startApart(t)
	ns := "e2e-replicas"
	queues(t, ns, 200, "Never")

	var names []string
	create := func(from, n int) {
		for i := from; i < from+n; i++ {
			name := fmt.Sprintf("r%03d", i)
			createJob(t, jobSpec{ns: ns, name: name, queue: "q", pods: 1, gpus: 1, runFor: "1s"})
			names = append(names, name)
		}
	}
	waitAll := func(within time.Duration) {
		t.Helper()
		for _, n := range names {
			waitComplete(t, ns, n, within)
		}
	}

	// The first replica up holds every shard until the other announces
	// itself; wait for the split, so both have Jobs to start.
	js := jetStreamAt(t, a.nats.ClientURL())
	eventually(t, 30*time.Second, "job shards split between two replicas", func() (bool, string) {
		holders := shardHolders(t, js, "job")
		return len(holders) == 2, fmt.Sprint(holders)
	})
	create(0, 40)
	waitAll(90 * time.Second)
	hosts := admittedBy(t, ns, names)
	if len(hosts) != 2 {
		t.Errorf("Jobs were started by %d replicas (%v), want both", len(hosts), hosts)
	}

	// One replica dies (SIGKILL: its leases are not given back) and stays
	// away for 20 s: Jobs in its shards wait for its leases to expire,
	// then the other replica starts them.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.kill("job-b", 20*time.Second)
	}()
	time.Sleep(500 * time.Millisecond)
	create(40, 40)
	waitAll(90 * time.Second)
	wg.Wait()
	admittedBy(t, ns, names)
	startedOnce(t, a.nats.ClientURL(), ns, names)
}

// admittedBy checks that each Job got exactly one Admitted Event, and
// returns how many Jobs each replica (the Event's source host) started.
func admittedBy(t *testing.T, ns string, names []string) map[string]int {
	t.Helper()
	evs, err := env.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Admitted"})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string][]string{}
	hosts := map[string]int{}
	for _, e := range evs.Items {
		for range max(e.Count, 1) {
			per[e.InvolvedObject.Name] = append(per[e.InvolvedObject.Name], e.Source.Host)
		}
		hosts[e.Source.Host]++
	}
	for _, n := range names {
		if got := per[n]; len(got) != 1 {
			t.Errorf("job %s: %d Admitted events (from %v), want 1", n, len(got), got)
		}
	}
	return hosts
}

// startedOnce reads the event stream: each Job has exactly one started
// event.
func startedOnce(t *testing.T, url, ns string, names []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := jetStreamAt(t, url)
	subject := events.SubjectFilter("workload", "started", "job", ns)
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for n := info.NumPending; n > 0; n-- {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("read started events: %v", err)
		}
		parts := strings.Split(msg.Subject(), ".")
		count[parts[len(parts)-1]]++
	}
	exactlyOnce(t, count, names)
}

// exactlyOnce fails the test for each Job not started exactly once,
// by the count of its started events.
func exactlyOnce(t *testing.T, count map[string]int, names []string) {
	t.Helper()
	var bad []string
	for _, n := range names {
		if count[n] != 1 {
			bad = append(bad, fmt.Sprintf("%s: %d", n, count[n]))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("Jobs without exactly one started event: %s", strings.Join(bad, ", "))
	}
}

// shardHolders returns how many of kind's shards each replica holds.
func shardHolders(t *testing.T, js jetstream.JetStream, kind string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := bus.OpenKV(ctx, js, bus.BucketShards)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for n := range shard.DefaultShards {
		e, err := kv.Get(ctx, fmt.Sprintf("%s.shard.%d", kind, n))
		if err != nil || len(e.Value()) == 0 {
			continue // free
		}
		out[string(e.Value())]++
	}
	return out
}

// jetStreamAt connects to the NATS server at url for the rest of the test.
func jetStreamAt(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestAdmissionReplicasShareTheTrees runs two admission replicas: each
// holds the leases of some cohort trees (here lone ClusterQueues) and
// admits there; when one is killed (its leases not given back), the other
// takes its trees once they expire and admits what waits in them, before
// the killed one comes back.
func TestAdmissionReplicasShareTheTrees(t *testing.T) {
	a := startApart(t)
	const queuesN = 4
	for q := range queuesN {
		applyQueues(t, fmt.Sprintf("e2e-trees-%d", q), "Never", `  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: nvidia.com/gpu, nominalQuota: 2}
`)
	}
	watchQuota(t) // knows all four queues from its start
	js := jetStreamAt(t, a.nats.ClientURL())
	eventually(t, 60*time.Second, "cohort trees split between the two admission replicas", func() (bool, string) {
		holders := shardHolders(t, js, "admission")
		return holders["admission-a"] > 0 && holders["admission-b"] > 0, fmt.Sprint(holders)
	})
	var names []string
	create := func(round int) []string {
		var made []string
		for q := range queuesN {
			for i := range 3 {
				name := fmt.Sprintf("t%d-%d", round, i)
				createJob(t, jobSpec{ns: fmt.Sprintf("e2e-trees-%d", q), name: name, queue: "q", pods: 1, gpus: 1, runFor: "1s"})
				made = append(made, fmt.Sprintf("e2e-trees-%d/%s", q, name))
			}
		}
		names = append(names, made...)
		return made
	}
	waitAll := func(made []string, within time.Duration) {
		t.Helper()
		for _, nn := range made {
			ns, name, _ := strings.Cut(nn, "/")
			waitComplete(t, ns, name, within)
		}
	}
	waitAll(create(0), 90*time.Second)

	// admission-a dies and stays away for 60 s: the trees it held come to
	// admission-b when their leases expire (10 s), and what waits there
	// is admitted well before admission-a is back.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.kill("admission-a", 60*time.Second)
	}()
	time.Sleep(500 * time.Millisecond)
	waitAll(create(1), 45*time.Second)
	wg.Wait()
	for q := range queuesN {
		var inQueue []string
		for _, nn := range names {
			if ns, name, _ := strings.Cut(nn, "/"); ns == fmt.Sprintf("e2e-trees-%d", q) {
				inQueue = append(inQueue, name)
			}
		}
		startedOnce(t, a.nats.ClientURL(), fmt.Sprintf("e2e-trees-%d", q), inQueue)
	}
}
