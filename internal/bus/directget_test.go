package bus_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/bus"
)

// TestTailReadsWhatPageReads: Tail, one message per request and by pages
// past a few, gives the same messages as Page from any sequence of a
// bucket whose keys were overwritten (its stream has deleted messages),
// with a filter and without, and nothing from past the end.
func TestTailReadsWhatPageReads(t *testing.T) {
	ctx := context.Background()
	js, kv := workloadsBucket(t)
	var err error
	var last uint64
	for i := range 60 {
		// Keys 0..19 three times over, so two revisions of each are gone.
		if last, err = kv.Put(ctx, fmt.Sprintf("ns.job-%d", i%20), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	p, err := bus.NewPager(js.Conn(), "KV_"+bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	read := func(how func(context.Context, string, uint64, func(bus.Stored) error) (uint64, error), filter string, from uint64) ([]string, uint64) {
		t.Helper()
		var got []string
		end, err := how(ctx, filter, from, func(s bus.Stored) error {
			got = append(got, fmt.Sprintf("%d %s %s", s.Sequence, s.Subject, s.Data))
			return nil
		})
		if err != nil {
			t.Fatalf("read from %d with filter %q: %v", from, filter, err)
		}
		return got, end
	}
	for _, tc := range []struct {
		name   string
		filter string
		from   uint64
		want   int
	}{
		{name: "from the start: every key's last revision", from: 0, want: 20},
		{name: "the last three", from: last - 2, want: 3},
		{name: "more than one at a time reads", from: last - 19, want: 20},
		{name: "one key", filter: "$KV." + bus.BucketWorkloads + ".ns.job-7", from: 0, want: 1},
		{name: "past the end", from: last + 1, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantEnd := read(p.Page, tc.filter, tc.from)
			got, end := read(p.Tail, tc.filter, tc.from)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("Tail (-Page +Tail):\n%s", d)
			}
			if len(got) != tc.want || end != wantEnd {
				t.Errorf("Tail read %d messages up to %d, want %d up to %d", len(got), end, tc.want, wantEnd)
			}
		})
	}
}

// TestPagerReadsManyPages: one Pager reads a bucket of more keys than two
// pages hold (its answers wait in a channel of two pages) in full, twice.
func TestPagerReadsManyPages(t *testing.T) {
	ctx := context.Background()
	js, kv := workloadsBucket(t)
	var err error
	const keys = 2*bus.DefaultPage + 500
	for i := range keys {
		if _, err := kv.Put(ctx, fmt.Sprintf("ns.job-%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	p, err := bus.NewPager(js.Conn(), "KV_"+bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for round := range 2 {
		n := 0
		end, err := p.Page(ctx, "", 1, func(bus.Stored) error { n++; return nil })
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if n != keys || end != keys {
			t.Errorf("round %d: read %d messages up to %d, want %d up to %d", round, n, end, keys, keys)
		}
	}
}

// workloadsBucket is a JetStream set up as Sluice's (setup), and its
// workloads bucket.
func workloadsBucket(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	ctx, js := setup(t)
	kv, err := bus.OpenKV(ctx, js, bus.BucketWorkloads)
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}
