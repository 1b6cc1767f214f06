package main

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestKueueMetricNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_local_queue_pending_workloads", Help: "h"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_pending_workloads", Help: "h"}),
		prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_ledger_conflicts_total", Help: "h"}),
	)
	for _, tc := range []struct {
		names string
		want  []string
	}{
		{"sluice", []string{"sluice_ledger_conflicts_total", "sluice_local_queue_pending_workloads", "sluice_pending_workloads"}},
		{"kueue", []string{"sluice_ledger_conflicts_total", "kueue_local_queue_pending_workloads", "kueue_pending_workloads"}},
	} {
		g, err := metricNames(reg, tc.names)
		if err != nil {
			t.Fatal(err)
		}
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, mf := range mfs {
			got = append(got, mf.GetName())
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("--metrics-names %s (-want +got):\n%s", tc.names, d)
		}
	}
	var ue usageError
	if _, err := metricNames(reg, "prometheus"); !errors.As(err, &ue) || err.Error() != `--metrics-names "prometheus": must be sluice or kueue` {
		t.Errorf("a wrong name: %v", err)
	}
}
