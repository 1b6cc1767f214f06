package bus_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/internal/bus"
)

// TestSetupBoundsStores: Setup bounds every stream and bucket as told; a
// later Setup that names no bound (a service setting up at start) keeps
// them, -1 removes them; a full bucket refuses a write rather than drop
// what it holds; the storage metrics report size and bound.
func TestSetupBoundsStores(t *testing.T) {
	ctx, js := setup(t)
	const mib = 1 << 20
	bounded := bus.Config{MaxBytes: 64 * mib, DLQMaxBytes: 8 * mib, KVMaxBytes: 2 * mib}
	bounds := func() map[string]int64 {
		out := map[string]int64{}
		for _, name := range []string{bus.StreamEvents, bus.StreamDLQ, "KV_" + bus.BucketQuota, "KV_" + bus.BucketFence, "KV_" + bus.BucketShards} {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = s.CachedInfo().Config.MaxBytes
		}
		return out
	}
	want := map[string]int64{bus.StreamEvents: 64 * mib, bus.StreamDLQ: 8 * mib, "KV_" + bus.BucketQuota: 2 * mib, "KV_" + bus.BucketFence: 2 * mib, "KV_" + bus.BucketShards: 2 * mib}
	for _, step := range []struct {
		name string
		cfg  bus.Config
		want map[string]int64
	}{
		{"bounded", bounded, want},
		{"a setup naming no bound keeps them", bus.Config{}, want},
		{"-1 removes them", bus.Config{MaxBytes: -1, DLQMaxBytes: -1, KVMaxBytes: -1}, map[string]int64{
			bus.StreamEvents: -1, bus.StreamDLQ: -1, "KV_" + bus.BucketQuota: -1, "KV_" + bus.BucketFence: -1, "KV_" + bus.BucketShards: -1}},
		{"bounded again", bounded, want},
	} {
		if err := bus.Setup(ctx, js, step.cfg); err != nil {
			t.Fatalf("%s: Setup: %v", step.name, err)
		}
		got := bounds()
		for k, w := range step.want {
			if got[k] != w {
				t.Errorf("%s: %s bound %d, want %d", step.name, k, got[k], w)
			}
		}
	}
	if err := bus.Setup(ctx, js, bus.Config{KVMaxBytes: -2}); err == nil || !strings.Contains(err.Error(), "KV max bytes -2") {
		t.Errorf("Setup with KV max bytes -2: %v; want an error naming it", err)
	}

	// Fill the fence bucket: the write that does not fit is refused.
	kv, err := js.KeyValue(ctx, bus.BucketFence)
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 64<<10)
	var refused error
	for i := 0; i < 64 && refused == nil; i++ {
		_, refused = kv.Put(ctx, "job.ns.w"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26)), value)
	}
	if refused == nil {
		t.Fatal("4 MiB written into a bucket bounded at 2 MiB")
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(bus.StorageCollector(js))
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "store" && l.GetValue() == "KV_"+bus.BucketFence {
					got[mf.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if got["sluice_storage_max_bytes"] != 2*mib || got["sluice_storage_bytes"] < mib || got["sluice_storage_messages"] < 1 {
		t.Errorf("storage metrics of the fence bucket %v; want max 2 MiB, over 1 MiB held, some messages", got)
	}
	if n, err := testutil.GatherAndCount(reg, "sluice_storage_max_bytes"); err != nil || n != 2+len(bus.Buckets) {
		t.Errorf("%d sluice_storage_max_bytes samples (%v), want one per stream and bucket (%d)", n, err, 2+len(bus.Buckets))
	}
}
