package workloop_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluice-dev/sluice/internal/workloop"
)

func TestNext(t *testing.T) {
	errBoom := errors.New("boom")
	cases := []struct {
		name        string
		result      error
		wantFailed  []string
		wantBackoff int  // the key's failures the limiter counts after Next
		wantAgain   bool // the key is back in the queue within a second
	}{
		{name: "success forgets the key", result: nil, wantBackoff: 0},
		{name: "an error requeues with backoff and is told", result: errBoom, wantFailed: []string{"a: boom"}, wantBackoff: 1, wantAgain: true},
		{name: "After requeues after its delay, untold, without backoff", result: workloop.After(10*time.Millisecond, errBoom), wantBackoff: 0, wantAgain: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second))
			defer q.ShutDown()
			q.Add("a")
			var failed []string
			more := workloop.Next(q, func(string) error { return tc.result }, func(k string, err error) { failed = append(failed, k+": "+err.Error()) })
			if !more {
				t.Fatal("Next reported a shut down queue")
			}
			if diff := cmp.Diff(tc.wantFailed, failed); diff != "" {
				t.Errorf("told (-want +got):\n%s", diff)
			}
			if got := q.NumRequeues("a"); got != tc.wantBackoff {
				t.Errorf("requeues counted %d; want %d", got, tc.wantBackoff)
			}
			deadline := time.Now().Add(time.Second)
			for q.Len() == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if again := q.Len() > 0; again != tc.wantAgain {
				t.Errorf("key queued again: %v; want %v", again, tc.wantAgain)
			}
		})
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	q.ShutDown()
	if workloop.Next(q, func(string) error { return nil }, nil) {
		t.Error("Next on a shut down queue reported more")
	}
}
