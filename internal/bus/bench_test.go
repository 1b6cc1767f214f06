package bus_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natstest"
)

// BenchmarkPublish measures one validated, acknowledged publish.
func BenchmarkPublish(b *testing.B) {
	ctx := context.Background()
	js := natstest.JetStream(b)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		b.Fatal(err)
	}
	p := bus.NewPublisher(js, events.Source("bench"))
	ev := submitted("bench")
	b.ResetTimer()
	for i := range b.N {
		if err := p.Publish(ctx, ev, events.ID(ev.Type(), "bench", i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRun measures consuming (decode, handle, ack) pre-published events.
func BenchmarkRun(b *testing.B) {
	benchmarkRun(b, func(env events.Envelope) error {
		var ev events.WorkloadSubmittedV1
		return env.As(&ev)
	}, bus.WithBatch(100), bus.WithFetchWait(100*time.Millisecond))
}

// BenchmarkRunPartitioned consumes as quota accounting does: eight
// partitions by workload, 32 messages a fetch.
func BenchmarkRunPartitioned(b *testing.B) {
	benchmarkRun(b, func(events.Envelope) error { return nil },
		bus.WithPartitions(8, events.SubjectWorkload), bus.WithBatch(32))
}

func benchmarkRun(b *testing.B, h func(events.Envelope) error, opts ...bus.RunOption) {
	ctx := context.Background()
	js := natstest.JetStream(b)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		b.Fatal(err)
	}
	p := bus.NewPublisher(js, events.Source("bench"))
	for i := range b.N {
		ev := submitted(fmt.Sprintf("w%d", i))
		if err := p.Publish(ctx, ev, events.ID(ev.Type(), ev.Workload.UID)); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	done := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.ResetTimer()
	go func() {
		_ = bus.Run(rctx, js, bus.ConsumerSpec{Durable: "bench", FilterSubjects: []string{"sluice.>"}},
			func(ctx context.Context, env events.Envelope) error {
				if err := h(env); err != nil {
					return err
				}
				if n.Add(1) == int64(b.N) {
					close(done)
				}
				return nil
			}, opts...)
	}()
	<-done
}

// BenchmarkPageAtTheEnd measures what a watch pays per write it follows:
// one read of a Pager from the end of a bucket of 20,000 keys, each
// written twice (a bucket keeps one revision per key, so the stream has
// as many deleted messages as keys), which finds the one new entry: a
// page by subject filter and without (Page with ""), and Tail, which
// asks for one message at a time.
func BenchmarkPageAtTheEnd(b *testing.B) {
	ctx := context.Background()
	js := natstest.JetStream(b)
	if err := bus.Setup(ctx, js, bus.Config{}); err != nil {
		b.Fatal(err)
	}
	kv, err := bus.OpenKV(ctx, js, bus.BucketWorkloads)
	if err != nil {
		b.Fatal(err)
	}
	var last uint64
	for round := range 2 {
		for i := range 20000 {
			if last, err = kv.Put(ctx, fmt.Sprintf("ns.job-%d", i), value(round)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, bc := range []struct {
		name, filter string
		tail         bool
	}{{"filtered", "$KV." + bus.BucketWorkloads + ".>", false}, {"all", "", false}, {"tail", "", true}} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := bus.NewPager(js.Conn(), "KV_"+bus.BucketWorkloads)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			read := p.Page
			if bc.tail {
				read = p.Tail
			}
			for range b.N {
				n := 0
				if _, err := read(ctx, bc.filter, last, func(bus.Stored) error { n++; return nil }); err != nil || n != 1 {
					b.Fatalf("read: %d entries, %v", n, err)
				}
			}
		})
	}
}

// value is a record's size (a workload record is about a kilobyte).
func value(round int) []byte {
	return []byte(fmt.Sprintf(`{"round":%d,"pad":%q}`, round, strings.Repeat("x", 1000)))
}
