package checks_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/checks"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
)

func admissionCheck(name, controller string) *unstructured.Unstructured {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v1beta1.AdmissionCheck{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "AdmissionCheck"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1beta1.AdmissionCheckSpec{ControllerName: controller},
	})
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

func TestDurable(t *testing.T) {
	if got := checks.Durable("sluice.dev/provisioning-request"); got != "check-sluice-dev-provisioning-request" {
		t.Errorf("Durable = %q", got)
	}
}

// TestControllerAnswersItsChecks: the controller marks its own
// AdmissionChecks Active, leaves others' alone, and answers the checks of
// its controller that a reservation waits for (a Pending answer is not
// published).
func TestControllerAnswersItsChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := natstest.JetStream(t)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme() // unstructured objects only
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{checks.GVR: "AdmissionCheckList"}, admissionCheck("budget", "example.com/budget"), admissionCheck("other", "example.com/other"))
	var mu sync.Mutex
	var asked []string
	decide := checks.DeciderFunc(func(_ context.Context, r checks.Request) (checks.Answer, error) {
		mu.Lock()
		asked = append(asked, r.Workload.Name+"/"+r.Check)
		mu.Unlock()
		switch r.Workload.Name {
		case "cheap":
			return checks.Answer{State: events.CheckReady, Message: "within budget"}, nil
		case "dear":
			return checks.Answer{State: events.CheckRetry, Message: "over budget this hour", RequeueAfter: 1500 * time.Millisecond}, nil
		}
		return checks.Answer{State: events.CheckPending}, nil
	})
	pub := bus.NewPublisher(js, events.Source("test"))
	c, err := checks.New("example.com/budget", js, dyn, decide, checks.WithPublisher(pub))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for _, name := range []string{"cheap", "dear", "later"} {
		ev := events.WorkloadReservedV1{Workload: events.WorkloadRef{Kind: "job", Namespace: "ns", Name: name, UID: "uid-" + name}, ClusterQueue: "cq",
			PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1}}, Admission: "2026-01-01T00:00:00Z", Checks: []string{"budget", "other"}}
		if err := pub.Publish(ctx, ev, "reserved-"+name); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = answers(t, ctx, stream)
		mu.Lock()
		n := len(asked)
		mu.Unlock()
		if len(got) >= 2 && n >= 3 {
			break
		}
	}
	// Reservations of different workloads are decided side by side.
	sort.Strings(got)
	want := []string{"cheap budget Ready within budget <nil>", "dear budget Retry over budget this hour 2"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("answers (-want +got):\n%s", d)
	}
	mu.Lock()
	sort.Strings(asked)
	if d := cmp.Diff([]string{"cheap/budget", "dear/budget", "later/budget"}, asked); d != "" {
		t.Errorf("checks asked (-want +got):\n%s", d)
	}
	mu.Unlock()
	for name, want := range map[string]bool{"budget": true, "other": false} {
		u, err := dyn.Resource(checks.GVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ac v1beta1.AdmissionCheck
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ac); err != nil {
			t.Fatal(err)
		}
		if ac.IsActive() != want {
			t.Errorf("AdmissionCheck %s active = %v, want %v", name, ac.IsActive(), want)
		}
	}
}

// answers lists the check answers stored, in order.
func answers(t *testing.T, ctx context.Context, stream jetstream.Stream) []string {
	t.Helper()
	var out []string
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		env, err := events.DecodeParts(m.Subject, m.Header, m.Data)
		if err != nil || env.Type != events.TypeCheckUpdatedV1 {
			continue
		}
		var ev events.CheckUpdatedV1
		if err := env.As(&ev); err != nil {
			t.Fatal(err)
		}
		var after any = nil
		if ev.RequeueAfterSeconds != nil {
			after = *ev.RequeueAfterSeconds
		}
		out = append(out, fmt.Sprint(ev.Workload.Name, " ", ev.Check, " ", ev.State, " ", ev.Message, " ", after))
	}
	return out
}
