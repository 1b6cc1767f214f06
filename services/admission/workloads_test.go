package admission_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/visibility"
)

// announce publishes a workload's submission as the job integration does.
func (h *harness) announce(name string) {
	h.t.Helper()
	rec := h.recs[name]
	pub := bus.NewPublisher(h.js, events.Source("integration"))
	if err := pub.Publish(h.ctx, rec, events.ID(rec.Type(), rec.Workload.UID)); err != nil {
		h.t.Fatal(err)
	}
}

// TestWorkloadsAPI: every workload the stream tells of is listed with its
// state, flavor, place and reason, one with its events, as JSON and as
// kubectl's Table, and a watch sends what changes.
func TestWorkloadsAPI(t *testing.T) {
	h := newHarness(t)
	h.configure("4", nil)
	h.start()
	for _, n := range []string{"running", "waiting"} {
		cpu := "4"
		h.submit(n, "main", 0, 1, cpu)
		h.announce(n)
		if n == "running" {
			ledgerIs(map[string]int32{"running": 1}).do(h)
		}
	}
	pending("waiting", "cq", "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 0").do(h)
	mux := http.NewServeMux()
	visibility.RegisterWorkloads(mux, h.svc, h.svc.Now)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	type row struct{ Name, State, CQ, Flavors, Position, Reason string }
	rowsOf := func(l visibility.WorkloadList) []row {
		var out []row
		for _, w := range l.Items {
			pos := ""
			if p := w.Status.PositionInClusterQueue; p != nil {
				pos = fmt.Sprint(*p)
			}
			out = append(out, row{w.Namespace + "/" + w.Name, w.Status.State, w.Status.ClusterQueue, strings.Join(w.Status.Flavors, ","), pos, w.Status.Reason})
		}
		return out
	}
	want := []row{
		{"team-a/job.running", "Admitted", "cq", "cpu=default", "", ""},
		{"team-a/job.waiting", "Pending", "cq", "", "0", "pod set main: insufficient unused quota for cpu in flavor default: requested 4, available 0"},
	}
	var list visibility.WorkloadList
	h.eventually("both listed", func() (bool, string) {
		list = visibility.WorkloadList{}
		code := h.get(srv, visibility.Prefix+"/namespaces/team-a/workloads", &list)
		return code == 200 && cmp.Diff(want, rowsOf(list)) == "", fmt.Sprintf("%d %+v", code, rowsOf(list))
	})
	if list.Kind != "WorkloadList" || list.APIVersion != visibility.APIVersion || list.ResourceVersion == "" {
		t.Errorf("list meta: %+v %+v", list.TypeMeta, list.ListMeta)
	}
	var other visibility.WorkloadList
	if h.get(srv, visibility.Prefix+"/namespaces/team-b/workloads", &other); len(other.Items) != 0 {
		t.Errorf("team-b lists %d workloads of team-a", len(other.Items))
	}
	var filtered visibility.WorkloadList
	h.get(srv, visibility.Prefix+"/workloads?fieldSelector=status.state%3DPending", &filtered)
	if len(filtered.Items) != 1 || filtered.Items[0].Name != "job.waiting" {
		t.Errorf("fieldSelector status.state=Pending: %+v", rowsOf(filtered))
	}
	var bad struct{ Code int }
	if code := h.get(srv, visibility.Prefix+"/workloads?fieldSelector=spec.foo%3Dx", &bad); code != 400 {
		t.Errorf("an unknown field selector: %d; want 400", code)
	}

	// One workload: its events, oldest first, with the trace id.
	var one visibility.Workload
	if code := h.get(srv, visibility.Prefix+"/namespaces/team-a/workloads/job.waiting", &one); code != 200 {
		t.Fatalf("get job.waiting: %d", code)
	}
	var types []string
	for _, e := range one.Status.Events {
		types = append(types, e.Type)
	}
	if len(types) < 2 || types[0] != "workload.v1.submitted" || types[len(types)-1] != "workload.v1.pending" {
		t.Errorf("events of job.waiting: %v", types)
	}
	var missing struct{ Code int }
	if code := h.get(srv, visibility.Prefix+"/namespaces/team-a/workloads/job.nope", &missing); code != 404 {
		t.Errorf("a missing workload: %d; want 404", code)
	}

	// kubectl's Table.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+visibility.Prefix+"/namespaces/team-a/workloads", nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tbl metav1.Table
	if err := json.NewDecoder(res.Body).Decode(&tbl); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var cols []string
	for _, c := range tbl.ColumnDefinitions {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		}
	}
	if d := cmp.Diff([]string{"Name", "Queue", "State", "Flavor", "Priority", "Position", "Reason", "Age"}, cols); d != "" {
		t.Errorf("columns (-want +got):\n%s", d)
	}
	if len(tbl.Rows) != 2 || fmt.Sprint(tbl.Rows[1].Cells[:6]) != "[job.waiting main Pending  0 0]" || len(tbl.Rows[0].Object.Raw) == 0 {
		t.Errorf("rows: %+v", tbl.Rows)
	}

	// A watch from the list's version sends what the end of running lets happen.
	wreq, _ := http.NewRequestWithContext(h.ctx, http.MethodGet, srv.URL+visibility.Prefix+"/namespaces/team-a/workloads?watch=true&resourceVersion="+list.ResourceVersion, nil)
	wres, err := http.DefaultClient.Do(wreq)
	if err != nil {
		t.Fatal(err)
	}
	defer wres.Body.Close()
	h.finish("running")
	h.eventually("waiting admitted", func() (bool, string) {
		var l visibility.WorkloadList
		code := h.get(srv, visibility.Prefix+"/namespaces/team-a/workloads", &l)
		return len(l.Items) == 2 && l.Items[1].Status.State == "Admitted", fmt.Sprintf("%d %+v", code, rowsOf(l))
	})
	sc := bufio.NewScanner(wres.Body)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && sc.Scan() {
		var ev struct {
			Type   string
			Object visibility.Workload
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("watch event %s: %v", sc.Text(), err)
		}
		if ev.Object.Name == "job.waiting" && ev.Object.Status.State == "Admitted" {
			if ev.Type != "MODIFIED" || ev.Object.Kind != "Workload" {
				t.Errorf("watch event %+v", ev)
			}
			return
		}
	}
	t.Error("the watch did not send job.waiting admitted")
}
