package admission_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configstore"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/lqusage"
)

// TestAdmissionFairSharingKeepsUsageInKV: the LocalQueues' usage is read
// from the bucket when admission starts (so it survives restarts and a
// tree's move to another replica), orders the shared ClusterQueue's
// workloads, and each admission's entry penalty is stored back.
func TestAdmissionFairSharingKeepsUsageInKV(t *testing.T) {
	h := newHarness(t)
	h.afs = &engine.AdmissionFairSharing{HalfLife: time.Hour, SamplingInterval: time.Minute}
	cq := clusterQueue("cq", "1", nil)
	cq.Spec.AdmissionScope = &v1beta1.AdmissionScope{AdmissionMode: v1beta1.UsageBasedAdmissionFairSharing}
	h.put(h.cfg, configstore.Key(configstore.KindResourceFlavor, "", "default"), flavor("default"))
	h.put(h.cfg, configstore.Key(configstore.KindClusterQueue, "", "cq"), cq)
	h.put(h.cfg, configstore.Key(configstore.KindLocalQueue, ns, "main"), localQueue("main", "cq"))
	h.put(h.cfg, configstore.Key(configstore.KindLocalQueue, ns, "other"), localQueue("other", "cq"))
	usageKV, err := bus.OpenKV(h.ctx, h.js, lqusage.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := lqusage.Encode(engine.LocalQueueUsage{Consumed: map[string]float64{"cpu": 10}, LastUpdate: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := usageKV.Put(h.ctx, lqusage.Key(ns, "main"), stored); err != nil {
		t.Fatal(err)
	}
	// main's job was created first and has the higher priority; other's
	// queue has used nothing.
	h.submit("a", "main", 10, 1, "1")
	h.submit("b", "other", 0, 1, "1")
	h.start()
	h.eventually("b admitted before a", func() (bool, string) {
		res := h.reservations()
		_, a := res[key("a")]
		_, b := res[key("b")]
		return b && !a, fmt.Sprintf("a %t, b %t", a, b)
	})
	h.eventually("other's entry penalty stored", func() (bool, string) {
		e, err := usageKV.Get(h.ctx, lqusage.Key(ns, "other"))
		if err != nil {
			return false, err.Error()
		}
		v, err := lqusage.Decode(e.Value())
		// One core for one sampling interval of a one-hour half-life.
		want := 1 - 0.9885140203528962
		return err == nil && v.ConsumedResources["cpu"] > want*0.999 && v.ConsumedResources["cpu"] < want*1.001,
			fmt.Sprintf("%+v %v", v, err)
	})
}
