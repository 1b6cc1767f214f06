package baseline

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
)

func TestNATSRequestKind(t *testing.T) {
	cases := []struct {
		name, subject, want string
		wantCounted         bool
	}{
		{"last by subject", "$JS.API.DIRECT.GET.KV_sluice-fence.$KV.sluice-fence.job.ns.a", "direct get KV_sluice-fence last", true},
		{"page", "$JS.API.DIRECT.GET.SLUICE", "direct get SLUICE next", true},
		{"pull", "$JS.API.CONSUMER.MSG.NEXT.SLUICE.sluice-quota", "pull sluice-quota", true},
		{"other API", "$JS.API.STREAM.INFO.SLUICE", "API STREAM.INFO", true},
		{"ack", "$JS.ACK.SLUICE.sluice-job.1.200.180.1764000000000000000.3", "ack sluice-job", true},
		{"ack with domain and hash", "$JS.ACK.hub.ACCHASH.SLUICE.sluice-job.1.200.180.1764000000000000000.3.xyz", "ack sluice-job", true},
		{"bucket write", "$KV.sluice-quota.tree.t1", "write sluice-quota", true},
		{"an event", "sluice.workload.v1.submitted.job.ns.a", "", false},
		{"a reply", "_INBOX.abc.1", "", false},
		{"too short", "$JS.API", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, counted := natsRequestKind(c.subject)
			if got != c.want || counted != c.wantCounted {
				t.Errorf("natsRequestKind(%q) = %q, %v; want %q, %v", c.subject, got, counted, c.want, c.wantCounted)
			}
		})
	}
}

// TestCountNATS counts what a client asks of a real JetStream server
// between the counter's start and stop.
func TestCountNATS(t *testing.T) {
	url, shutdown := natstest.Start(t)
	defer shutdown()
	_, js := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenKV(ctx, js, bus.BucketFence)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "before", []byte("1")); err != nil {
		t.Fatal(err)
	}
	c, err := countNATS(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := kv.Put(ctx, k, []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := kv.Get(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if entries, err := bus.Entries(ctx, kv, nil); err != nil || len(entries) != 3 {
		t.Fatalf("Entries read %d keys, %v; want 3", len(entries), err)
	}
	got := c.stop()
	if _, err := kv.Put(ctx, "after", []byte("1")); err != nil {
		t.Fatal(err)
	}
	want := NATSRequests{Total: 6, ByKind: map[string]int{
		"write sluice-fence":              2,
		"direct get KV_sluice-fence last": 3,
		"direct get KV_sluice-fence next": 1,
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("counted (-want +got):\n%s", d)
	}
	if s, w := got.summary(2), "6, 3.00 per Job: direct get KV_sluice-fence last 1.50; write sluice-fence 1.00; direct get KV_sluice-fence next 0.50"; s != w {
		t.Errorf("summary:\n got %q\nwant %q", s, w)
	}
	if s, w := got.summary(100), "6, 0.06 per Job: other 0.06"; s != w {
		t.Errorf("summary of rare kinds:\n got %q\nwant %q", s, w)
	}
}
