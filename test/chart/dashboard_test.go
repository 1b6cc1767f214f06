package chart_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/services/admission"
	"github.com/sluice-dev/sluice/test/chart"
)

// TestDashboardQueriesExistingMetrics: every sluice_ metric the Grafana
// dashboard queries is one the services register, so a renamed metric
// cannot leave a dead panel behind.
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(chart.Dir()), "dashboards", "sluice.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	svc, err := admission.New(admission.Config{Interval: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range append(svc.Collectors(), bus.Collectors()...) {
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			if m := fq.FindStringSubmatch(d.String()); m != nil {
				known[m[1]] = true
			}
		}
	}
	used := regexp.MustCompile(`sluice_[a-z_]+`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range used.FindAllString(tg.Expr, -1) {
				n++
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
				if !known[base] {
					t.Errorf("panel %q queries %s, which no service registers", p.Title, name)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard queries no sluice_ metric")
	}
}
