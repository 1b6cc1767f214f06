package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// checkStep is one moment of an admission-check scenario: answers given
// at At, then (with cycle) a cycle at At.
type checkStep struct {
	at      time.Duration
	answers []checkAnswer
	config  *Config // replaces the configuration first, if set
	submit  []Workload
	cycle   bool
}

type checkAnswer struct {
	key string
	st  CheckStatus
}

func answer(key, check string, state CheckState, message string) checkAnswer {
	return checkAnswer{key: key, st: CheckStatus{Name: check, State: state, Message: message}}
}

func (b *cqBuilder) checks(rules ...AdmissionCheckRule) *cqBuilder {
	b.cq.AdmissionChecks = append(b.cq.AdmissionChecks, rules...)
	return b
}

func activeChecks(names ...string) []AdmissionCheck {
	var out []AdmissionCheck
	for _, n := range names {
		out = append(out, AdmissionCheck{Name: n, Active: true})
	}
	return out
}

func TestAdmissionChecks(t *testing.T) {
	prov := AdmissionCheckRule{Name: "prov"}
	scan := AdmissionCheckRule{Name: "scan"}
	config := func(cq *cqBuilder, checks []AdmissionCheck) Config {
		return Config{Flavors: flavors("on-demand", "spot"), ClusterQueues: []ClusterQueue{cq.obj()}, LocalQueues: lqs("ns", "cq"), AdmissionChecks: checks}
	}
	oneFlavor := config(newCQ("cq").quota("on-demand", "cpu", 1000).checks(prov, scan), activeChecks("prov", "scan"))
	retryIn := func(d time.Duration) checkAnswer {
		a := answer("ns/a", "prov", CheckRetry, "no capacity")
		a.st.RequeueAfter = d
		return a
	}
	added := config(newCQ("cq").quota("on-demand", "cpu", 1000).checks(prov, scan, AdmissionCheckRule{Name: "late"}), activeChecks("prov", "scan", "late"))
	cases := []struct {
		name  string
		cfg   Config
		wls   []Workload
		steps []checkStep
		// want lists every decision, as "at kind key reason [checks]".
		want []string
	}{
		{
			name: "quota is reserved, and the workload admitted once every check is ready",
			cfg:  oneFlavor,
			wls: []Workload{
				newWL("ns", "a").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			steps: []checkStep{
				{at: 0, cycle: true},
				{at: time.Second, answers: []checkAnswer{answer("ns/a", "prov", CheckReady, "")}, cycle: true},
				{at: 2 * time.Second, answers: []checkAnswer{answer("ns/a", "scan", CheckReady, "")}, cycle: true},
			},
			want: []string{
				"0s reserved ns/a  [prov=Pending scan=Pending]",
				"0s pending ns/b pod set main: insufficient unused quota for cpu in flavor on-demand: requested 1, available 0",
				"2s admitted ns/a  [prov=Ready scan=Ready]",
			},
		},
		{
			name: "a check on flavors runs only for admissions on those flavors",
			cfg: config(newCQ("cq").quota("spot", "cpu", 1000).quota("on-demand", "cpu", 1000).checks(AdmissionCheckRule{Name: "prov", OnFlavors: []string{"on-demand"}}),
				activeChecks("prov")),
			wls: []Workload{
				newWL("ns", "a").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			steps: []checkStep{{at: 0, cycle: true}},
			want: []string{
				"0s admitted ns/a",
				"0s reserved ns/b  [prov=Pending]",
			},
		},
		{
			name: "Retry gives the quota up; the workload queues again by its eviction time, after the longest delay asked",
			cfg:  oneFlavor,
			wls: []Workload{
				newWL("ns", "a").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b").at(time.Second).pods("main", 1, "cpu", 1000).obj(),
			},
			steps: []checkStep{
				{at: 0, cycle: true},
				{at: 10 * time.Second, answers: []checkAnswer{retryIn(time.Minute), {key: "ns/a", st: CheckStatus{Name: "scan", State: CheckRetry, RequeueAfter: 30 * time.Second}}}, cycle: true},
				{at: 20 * time.Second, answers: []checkAnswer{answer("ns/b", "prov", CheckReady, ""), answer("ns/b", "scan", CheckReady, "")}, cycle: true},
				{at: 30 * time.Second, cycle: true},
				{at: 70 * time.Second, cycle: true},
			},
			want: []string{
				"0s reserved ns/a  [prov=Pending scan=Pending]",
				"0s pending ns/b pod set main: insufficient unused quota for cpu in flavor on-demand: requested 1, available 0",
				"10s evicted ns/a AdmissionCheck admission check prov asked to retry: no capacity",
				"10s reserved ns/b  [prov=Pending scan=Pending]",
				"10s pending ns/a admission check prov asked to retry: backing off until 2000-01-01T00:01:10Z",
				"20s admitted ns/b  [prov=Ready scan=Ready]",
				"1m10s pending ns/a pod set main: insufficient unused quota for cpu in flavor on-demand: requested 1, available 0",
			},
		},
		{
			name: "Retry without a delay queues again at once",
			cfg:  oneFlavor,
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()},
			steps: []checkStep{
				{at: 0, cycle: true},
				{at: 5 * time.Second, answers: []checkAnswer{retryIn(0)}, cycle: true},
			},
			want: []string{
				"0s reserved ns/a  [prov=Pending scan=Pending]",
				"5s evicted ns/a AdmissionCheck admission check prov asked to retry: no capacity",
				"5s reserved ns/a  [prov=Pending scan=Pending]",
			},
		},
		{
			name: "Rejected deactivates the workload",
			cfg:  oneFlavor,
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()},
			steps: []checkStep{
				{at: 0, cycle: true},
				{at: 5 * time.Second, answers: []checkAnswer{answer("ns/a", "scan", CheckRejected, "image not signed"), answer("ns/a", "prov", CheckRetry, "")}, cycle: true},
				{at: time.Hour, cycle: true},
			},
			want: []string{
				"0s reserved ns/a  [prov=Pending scan=Pending]",
				"5s evicted ns/a Deactivated admission check scan rejected the workload: image not signed",
				"5s pending ns/a deactivated: admission check scan rejected the workload: image not signed",
			},
		},
		{
			name: "an admitted workload is evicted when a check later says Retry",
			cfg:  oneFlavor,
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()},
			steps: []checkStep{
				{at: 0, cycle: true},
				{at: time.Second, answers: []checkAnswer{answer("ns/a", "prov", CheckReady, ""), answer("ns/a", "scan", CheckReady, "")}, cycle: true},
				{at: time.Minute, answers: []checkAnswer{answer("ns/a", "prov", CheckRetry, "capacity revoked")}, cycle: true},
			},
			want: []string{
				"0s reserved ns/a  [prov=Pending scan=Pending]",
				"1s admitted ns/a  [prov=Ready scan=Ready]",
				"1m0s evicted ns/a AdmissionCheck admission check prov asked to retry: capacity revoked",
				"1m0s reserved ns/a  [prov=Pending scan=Pending]",
			},
		},
		{
			name: "a check added to the ClusterQueue: awaited by reservations, not by admitted workloads",
			cfg:  config(newCQ("cq").quota("on-demand", "cpu", 2000).checks(prov, scan), activeChecks("prov", "scan", "late")),
			wls: []Workload{
				newWL("ns", "a").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns", "b").pods("main", 1, "cpu", 1000).obj(),
			},
			steps: []checkStep{
				{at: 0, cycle: true},
				{at: time.Second, answers: []checkAnswer{answer("ns/a", "prov", CheckReady, ""), answer("ns/a", "scan", CheckReady, ""), answer("ns/b", "prov", CheckReady, "")}, cycle: true},
				{at: 2 * time.Second, config: &added, answers: []checkAnswer{answer("ns/b", "scan", CheckReady, "")}, cycle: true},
				{at: 3 * time.Second, answers: []checkAnswer{answer("ns/b", "late", CheckReady, "")}, cycle: true},
			},
			want: []string{
				"0s reserved ns/a  [prov=Pending scan=Pending]",
				"0s reserved ns/b  [prov=Pending scan=Pending]",
				"1s admitted ns/a  [prov=Ready scan=Ready]",
				"3s admitted ns/b  [prov=Ready scan=Ready late=Ready]",
			},
		},
		{
			name: "a ClusterQueue naming a missing or inactive check admits nothing",
			cfg:  config(newCQ("cq").quota("on-demand", "cpu", 1000).checks(prov, scan), []AdmissionCheck{{Name: "prov", Active: false}}),
			wls:  []Workload{newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()},
			steps: []checkStep{
				{at: 0, cycle: true},
				{at: time.Second, config: ptr(config(newCQ("cq").quota("on-demand", "cpu", 1000).checks(scan), nil)), cycle: true},
			},
			want: []string{
				"0s pending ns/a ClusterQueue cq is inactive: AdmissionCheck prov is not active (its controller does not run)",
				"1s pending ns/a ClusterQueue cq is inactive: AdmissionCheck scan does not exist",
			},
		},
		{
			name: "a preempted reservation gives its quota up like an admitted workload",
			cfg:  config(newCQ("cq").quota("on-demand", "cpu", 1000).preemption(LowerPriority, Never).checks(prov), activeChecks("prov")),
			wls:  []Workload{newWL("ns", "low").pods("main", 1, "cpu", 1000).obj()},
			steps: []checkStep{
				{at: 0, cycle: true},
				{at: time.Second, submit: []Workload{newWL("ns", "high").prio(10).at(time.Second).pods("main", 1, "cpu", 1000).obj()}, cycle: true},
			},
			want: []string{
				"0s reserved ns/low  [prov=Pending]",
				"1s preempted ns/low InClusterQueue",
				"1s reserved ns/high  [prov=Pending]",
				"1s pending ns/low pod set main: insufficient unused quota for cpu in flavor on-demand: requested 1, available 0",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(tc.cfg)
			for _, w := range tc.wls {
				if err := e.Submit(w); err != nil {
					t.Fatalf("Submit(%s): %v", w.Key(), err)
				}
			}
			var got []string
			for _, s := range tc.steps {
				if s.config != nil {
					e.SetConfig(*s.config)
				}
				for _, w := range s.submit {
					if err := e.Submit(w); err != nil {
						t.Fatal(err)
					}
				}
				for _, a := range s.answers {
					if err := e.SetCheck(a.key, a.st); err != nil {
						t.Fatal(err)
					}
				}
				if !s.cycle {
					continue
				}
				for _, d := range e.Cycle(t0.Add(s.at)) {
					line := strings.TrimSpace(fmt.Sprintf("%s %s %s %s %s", s.at, d.Kind, d.Key, d.Reason, d.Message))
					if len(d.Checks) > 0 {
						var cs []string
						for _, c := range d.Checks {
							cs = append(cs, fmt.Sprintf("%s=%s", c.Name, c.State))
						}
						line += "  [" + strings.Join(cs, " ") + "]"
					}
					got = append(got, line)
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestSetCheckRefusesAnUnknownState(t *testing.T) {
	e := New(Config{Flavors: flavors("f"), ClusterQueues: []ClusterQueue{newCQ("cq").quota("f", "cpu", 1000).checks(AdmissionCheckRule{Name: "prov"}).obj()},
		LocalQueues: lqs("ns", "cq"), AdmissionChecks: activeChecks("prov")})
	if err := e.Submit(newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()); err != nil {
		t.Fatal(err)
	}
	err := e.SetCheck("ns/a", CheckStatus{Name: "prov", State: "Maybe"})
	if err == nil || !strings.Contains(err.Error(), `state "Maybe"`) {
		t.Errorf("SetCheck with state Maybe: %v, want an error naming the state", err)
	}
	if err := e.SetCheck("ns/nobody", CheckStatus{Name: "prov", State: CheckReady}); err == nil {
		t.Error("SetCheck of an unknown workload: no error")
	}
}

func TestNextTimerOfACheckBackoff(t *testing.T) {
	e := New(Config{Flavors: flavors("f"), ClusterQueues: []ClusterQueue{newCQ("cq").quota("f", "cpu", 1000).checks(AdmissionCheckRule{Name: "prov"}).obj()},
		LocalQueues: lqs("ns", "cq"), AdmissionChecks: activeChecks("prov")})
	if err := e.Submit(newWL("ns", "a").pods("main", 1, "cpu", 1000).obj()); err != nil {
		t.Fatal(err)
	}
	e.Cycle(t0)
	if _, ok := e.NextTimer(t0); ok {
		t.Error("a timer while the check is pending")
	}
	if err := e.SetCheck("ns/a", CheckStatus{Name: "prov", State: CheckRetry, RequeueAfter: time.Minute}); err != nil {
		t.Fatal(err)
	}
	e.Cycle(t0.Add(time.Second))
	if got, ok := e.NextTimer(t0.Add(time.Second)); !ok || !got.Equal(t0.Add(61*time.Second)) {
		t.Errorf("NextTimer after Retry = %s, %v; want 1m1s, true", got.Sub(t0), ok)
	}
}
