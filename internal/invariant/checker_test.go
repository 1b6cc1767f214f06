package invariant

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// event is one Job state fed to Observe and what it must return.
type event struct {
	job     *jobBuilder
	deleted bool
	want    []Violation
}

// over is a broken limit: flavorRes is "flavor/resource".
func over(node, flavorRes, used, limit string, jobs ...string) Violation {
	flavor, res, _ := strings.Cut(flavorRes, "/")
	return Violation{
		Node: node, Flavor: flavor, Resource: res,
		Used: resource.MustParse(used), Limit: resource.MustParse(limit),
		Jobs: jobs,
	}
}

// jobViolation is a violation about one Job's admission.
func jobViolation(node, res, job string) Violation {
	return Violation{Node: node, Resource: res, Jobs: []string{job}}
}

// Messages are checked by TestViolationMessages; here the structure is.
var ignoreMessage = cmpopts.IgnoreFields(Violation{}, "Message")

// runEvents feeds the events in order, each as the next resourceVersion,
// and reports every step whose violations differ.
func runEvents(t *testing.T, c *Checker, events []event) {
	t.Helper()
	for i, ev := range events {
		rv := strconv.Itoa(i + 1)
		j := ev.job.obj()
		j.ResourceVersion = rv
		want := make([]Violation, len(ev.want))
		for k, v := range ev.want {
			v.ResourceVersion = rv
			want[k] = v
		}
		got := c.Observe(j, ev.deleted)
		if diff := cmp.Diff(want, got, ignoreMessage, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("event %d (Job %s, deleted=%v): violations (-want +got):\n%s", i+1, j.Name, ev.deleted, diff)
		}
	}
}

func TestObserve(t *testing.T) {
	loneCQ := config(newCQ("a").quota("default", "cpu", "4"))
	pair := func(aOpts ...quotaOpt) Config {
		return config(
			newCQ("a").cohort("c").quota("default", "cpu", "4", aOpts...),
			newCQ("b").cohort("c").quota("default", "cpu", "4"),
		)
	}
	cpu := func(name, perPod string, cq string) *jobBuilder {
		return newJob(name).request("cpu", perPod).admit(cq, 1, "default")
	}

	tests := []struct {
		name   string
		cfg    Config
		events []event
	}{
		{
			name: "fits exactly at nominal",
			cfg:  loneCQ,
			events: []event{
				{job: newJob("j1").request("cpu", "1").parallelism(2).admit("a", 2, "default")},
				{job: newJob("j2").request("cpu", "1").parallelism(2).admit("a", 2, "default")},
			},
		},
		{
			name: "one CPU over a lone ClusterQueue's nominal names the jobs",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j2", "1", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "5", "4", "default/j1", "default/j2")}},
			},
		},
		{
			name: "milli-units count: half a CPU over",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "3500m", "a")},
				{job: cpu("j2", "1", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "4500m", "4", "default/j1", "default/j2")}},
			},
		},
		{
			name: "memory over nominal is reported in the configuration's units",
			cfg:  config(newCQ("a").quota("default", "memory", "4Gi")),
			events: []event{
				{job: newJob("j1").request("memory", "5Gi").admit("a", 1, "default"),
					want: []Violation{over("ClusterQueue/a", "default/memory", "5Gi", "4Gi", "default/j1")}},
			},
		},
		{
			name: "borrowing within borrowingLimit fits",
			cfg:  pair(borrowing("2")),
			events: []event{
				{job: cpu("j1", "6", "a")},
			},
		},
		{
			name: "borrowing beyond borrowingLimit breaks the ClusterQueue's limit",
			cfg:  pair(borrowing("2")),
			events: []event{
				{job: cpu("j1", "6", "a")},
				{job: cpu("j2", "1", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "7", "6", "default/j1", "default/j2")}},
			},
		},
		{
			name: "borrowing without borrowingLimit may take the whole cohort",
			cfg:  pair(),
			events: []event{
				{job: cpu("j1", "8", "a")},
			},
		},
		{
			name: "cohort total beyond the sum of nominal quotas breaks the cohort's limit",
			cfg:  pair(),
			events: []event{
				{job: cpu("a1", "5", "a")},
				{job: cpu("b1", "3", "b")},
				{job: cpu("b2", "1", "b"), want: []Violation{over("Cohort/c", "default/cpu", "9", "8", "default/a1", "default/b1", "default/b2")}},
			},
		},
		{
			name: "one event can break a ClusterQueue's and its cohort's limits",
			cfg:  pair(borrowing("1")),
			events: []event{
				{job: cpu("a1", "9", "a"), want: []Violation{
					over("ClusterQueue/a", "default/cpu", "9", "5", "default/a1"),
					over("Cohort/c", "default/cpu", "9", "8", "default/a1"),
				}},
			},
		},
		{
			name: "lendingLimit restricts what others borrow",
			cfg:  pair(lending("1")),
			events: []event{
				{job: cpu("b1", "5", "b")},
				{job: cpu("b2", "1", "b"), want: []Violation{over("Cohort/c", "default/cpu", "6", "5", "default/b1", "default/b2")}},
			},
		},
		{
			name: "use of the part a lendingLimit keeps back takes nothing from the cohort",
			cfg:  pair(lending("1")),
			events: []event{
				{job: cpu("b1", "5", "b")},
				{job: cpu("a1", "3", "a")},
				{job: cpu("a2", "1", "a"), want: []Violation{over("Cohort/c", "default/cpu", "6", "5", "default/a1", "default/a2", "default/b1")}},
			},
		},
		{
			name: "a lendingLimit above nominal lends only nominal",
			cfg:  pair(lending("10")),
			events: []event{
				{job: cpu("b1", "8", "b")},
				{job: cpu("b2", "1", "b"), want: []Violation{over("Cohort/c", "default/cpu", "9", "8", "default/b1", "default/b2")}},
			},
		},
		{
			name: "a parent cohort's own quota is borrowed by its grandchildren",
			cfg: config(
				newCohort("root").quota("default", "cpu", "2"),
				newCohort("c").parent("root"),
				newCQ("a").cohort("c").quota("default", "cpu", "4"),
			),
			events: []event{
				{job: cpu("j1", "6", "a")},
				{job: cpu("j2", "1", "a"), want: []Violation{over("Cohort/root", "default/cpu", "7", "6", "default/j1", "default/j2")}},
			},
		},
		{
			name: "a child cohort's borrowingLimit caps what its subtree takes from the parent",
			cfg: config(
				newCohort("root").quota("default", "cpu", "4"),
				newCohort("c").parent("root").quota("default", "cpu", "1", borrowing("2")),
				newCQ("a").cohort("c").quota("default", "cpu", "4"),
			),
			events: []event{
				{job: cpu("j1", "7", "a")},
				{job: cpu("j2", "1", "a"), want: []Violation{over("Cohort/c", "default/cpu", "8", "7", "default/j1", "default/j2")}},
			},
		},
		{
			name: "a child cohort's lendingLimit keeps its quota from the parent's other members",
			cfg: config(
				newCohort("root"),
				newCohort("c1").parent("root").quota("default", "cpu", "0", lending("1")),
				newCohort("c2").parent("root"),
				newCQ("a").cohort("c1").quota("default", "cpu", "4"),
				newCQ("b").cohort("c2").quota("default", "cpu", "4"),
			),
			events: []event{
				{job: cpu("b1", "5", "b")},
				{job: cpu("b2", "1", "b"), want: []Violation{over("Cohort/root", "default/cpu", "6", "5", "default/b1", "default/b2")}},
			},
		},
		{
			name: "a suspended Job frees its usage",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j1", "4", "a").suspended()},
				{job: cpu("j2", "4", "a")},
			},
		},
		{
			name: "a completed Job frees its usage",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j1", "4", "a").condition(batchv1.JobComplete, corev1.ConditionTrue)},
				{job: cpu("j2", "4", "a")},
			},
		},
		{
			name: "a failed Job frees its usage",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j1", "4", "a").condition(batchv1.JobFailed, corev1.ConditionTrue)},
				{job: cpu("j2", "4", "a")},
			},
		},
		{
			name: "a condition that is not True does not finish a Job",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a").condition(batchv1.JobComplete, corev1.ConditionFalse)},
				{job: cpu("j2", "1", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "5", "4", "default/j1", "default/j2")}},
			},
		},
		{
			name: "a deleted Job frees its usage",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j1", "4", "a"), deleted: true},
				{job: cpu("j2", "4", "a")},
			},
		},
		{
			name: "freeing usage ends a violation and checks the tree again",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j2", "1", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "5", "4", "default/j1", "default/j2")}},
				{job: cpu("j3", "0", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "5", "4", "default/j1", "default/j2")}},
				{job: cpu("j2", "1", "a").suspended()},
			},
		},
		{
			name: "re-observing a running Job does not double count",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "3", "a")},
				{job: cpu("j1", "3", "a")},
				{job: cpu("j1", "3", "a")},
				{job: cpu("j2", "1", "a")},
			},
		},
		{
			name: "the admitted count of a partial admission is used, not parallelism",
			cfg:  config(newCQ("a").quota("default", "cpu", "2")),
			events: []event{
				{job: newJob("j1").request("cpu", "1").parallelism(4).admit("a", 2, "default")},
				{job: newJob("j1").request("cpu", "1").parallelism(4).admit("a", 3, "default"),
					want: []Violation{over("ClusterQueue/a", "default/cpu", "3", "2", "default/j1")}},
			},
		},
		{
			name: "a running labelled Job without an admission is a violation",
			cfg:  loneCQ,
			events: []event{
				{job: newJob("j1").request("cpu", "1"), want: []Violation{jobViolation("", "", "default/j1")}},
				{job: newJob("j1").request("cpu", "1").suspended()},
			},
		},
		{
			name: "a running labelled Job with an unreadable admission is a violation",
			cfg:  loneCQ,
			events: []event{
				{job: newJob("j1").request("cpu", "1").rawAdmission("{"), want: []Violation{jobViolation("", "", "default/j1")}},
			},
		},
		{
			name: "an admission to an unknown ClusterQueue is a violation",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "1", "nope"), want: []Violation{jobViolation("ClusterQueue/nope", "", "default/j1")}},
			},
		},
		{
			name: "a requested resource the admission gives no flavor is a violation",
			cfg:  loneCQ,
			events: []event{
				{job: newJob("j1").request("cpu", "1").request("nvidia.com/gpu", "1").admit("a", 1, "default").flavorOf("nvidia.com/gpu", ""),
					want: []Violation{jobViolation("ClusterQueue/a", "nvidia.com/gpu", "default/j1")}},
			},
		},
		{
			name: "a zero request needs no flavor",
			cfg:  loneCQ,
			events: []event{
				{job: newJob("j1").request("cpu", "1").request("memory", "0").admit("a", 1, "default").flavorOf("memory", "")},
			},
		},
		{
			name: "an admission to a flavor without quota breaks a limit of zero",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "1", "a").flavorOf("cpu", "spot"), want: []Violation{over("ClusterQueue/a", "spot/cpu", "1", "0", "default/j1")}},
			},
		},
		{
			name: "unlabelled Jobs are ignored",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "100", "a").unlabelled()},
				{job: newJob("j2").request("cpu", "1").unlabelled()},
			},
		},
		{
			name: "a Job that loses its label no longer counts",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j1", "4", "a").unlabelled()},
				{job: cpu("j2", "4", "a")},
			},
		},
		{
			name: "a Job running, then suspended, then running again",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j1", "4", "a").suspended()},
				{job: cpu("j2", "4", "a")},
				{job: cpu("j1", "4", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "8", "4", "default/j1", "default/j2")}},
				{job: cpu("j1", "4", "a").suspended()},
			},
		},
		{
			name: "a Job readmitted to another tree frees the first",
			cfg:  config(newCQ("a").quota("default", "cpu", "4"), newCQ("b").quota("default", "cpu", "4")),
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j1", "4", "b")},
				{job: cpu("j2", "4", "a")},
			},
		},
		{
			name: "a violation in another tree is not reported for an unrelated change",
			cfg:  config(newCQ("a").quota("default", "cpu", "4"), newCQ("b").quota("default", "cpu", "4")),
			events: []event{
				{job: cpu("j1", "5", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "5", "4", "default/j1")}},
				{job: cpu("j2", "1", "b")},
			},
		},
		{
			name: "a Job that uses no quota of the broken resource is not named",
			cfg:  config(newCQ("a").quota("default", "cpu", "4").quota("default", "memory", "4Gi")),
			events: []event{
				{job: newJob("j1").request("memory", "1Gi").admit("a", 1, "default")},
				{job: cpu("j2", "5", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "5", "4", "default/j2")}},
			},
		},
		{
			name: "Jobs of the same name in other namespaces are apart",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a")},
				{job: cpu("j1", "1", "a").namespace("other"), want: []Violation{over("ClusterQueue/a", "default/cpu", "5", "4", "default/j1", "other/j1")}},
			},
		},
		{
			name: "a Job recreated under the same name replaces the old booking",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a").uid("first")},
				{job: cpu("j1", "4", "a").uid("second")},
			},
		},
		{
			name: "a late deletion of an earlier Job of the same name leaves the newer booked",
			cfg:  loneCQ,
			events: []event{
				{job: cpu("j1", "4", "a").uid("second")},
				{job: cpu("j1", "4", "a").uid("first"), deleted: true},
				{job: cpu("j2", "1", "a"), want: []Violation{over("ClusterQueue/a", "default/cpu", "5", "4", "default/j1", "default/j2")}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			runEvents(t, c, tt.events)
		})
	}
}

func TestViolationMessages(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		events      []*jobBuilder
		wantMessage []string
		wantString  []string
	}{
		{
			name:        "a lone ClusterQueue over its nominal quota",
			cfg:         config(newCQ("a").quota("default", "cpu", "4")),
			events:      []*jobBuilder{newJob("j1").request("cpu", "5").admit("a", 1, "default")},
			wantMessage: []string{"after Job default/j1, ClusterQueue a uses 5 of cpu in flavor default, over its limit of 4 (nominal quota 4); running Jobs: default/j1"},
			wantString:  []string{"resourceVersion 1: after Job default/j1, ClusterQueue a uses 5 of cpu in flavor default, over its limit of 4 (nominal quota 4); running Jobs: default/j1"},
		},
		{
			name: "a ClusterQueue over its borrowingLimit and a cohort over its quota",
			cfg: config(
				newCohort("c").quota("default", "memory", "1Gi"),
				newCQ("a").cohort("c").quota("default", "memory", "2Gi", borrowing("1Gi")),
			),
			events: []*jobBuilder{newJob("j1").request("memory", "4Gi").admit("a", 1, "default")},
			wantMessage: []string{
				"after Job default/j1, ClusterQueue a uses 4Gi of memory in flavor default, over its limit of 3Gi (nominal quota 2Gi plus borrowingLimit 1Gi); running Jobs: default/j1",
				"after Job default/j1, Cohort c uses 4Gi of memory in flavor default, over its limit of 3Gi (cohort quota 3Gi: own 1Gi plus 2Gi lent by its members); running Jobs: default/j1",
			},
		},
		{
			name:        "a running Job without an admission",
			cfg:         config(newCQ("a").quota("default", "cpu", "4")),
			events:      []*jobBuilder{newJob("j1").request("cpu", "1")},
			wantMessage: []string{"Job default/j1 is running without an admission: it is not suspended, not finished and has no sluice.dev/admission annotation"},
		},
		{
			name:        "an admission to an unknown ClusterQueue",
			cfg:         config(newCQ("a").quota("default", "cpu", "4")),
			events:      []*jobBuilder{newJob("j1").request("cpu", "1").admit("b", 1, "default")},
			wantMessage: []string{`Job default/j1 runs under ClusterQueue "b", which does not exist`},
		},
		{
			name:        "a requested resource without a flavor",
			cfg:         config(newCQ("a").quota("default", "cpu", "4")),
			events:      []*jobBuilder{newJob("j1").request("cpu", "1").request("memory", "1Gi").admit("a", 1, "default").flavorOf("memory", "")},
			wantMessage: []string{"Job default/j1 requests 1Gi of memory per pod in pod set main, but its admission to ClusterQueue a gives memory no flavor"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			var got []Violation
			for i, b := range tt.events {
				j := b.obj()
				j.ResourceVersion = strconv.Itoa(i + 1)
				got = append(got, c.Observe(j, false)...)
			}
			var gotMessage, gotString []string
			for _, v := range got {
				gotMessage = append(gotMessage, v.Message)
				gotString = append(gotString, v.String())
			}
			if diff := cmp.Diff(tt.wantMessage, gotMessage); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
			if tt.wantString != nil {
				if diff := cmp.Diff(tt.wantString, gotString); diff != "" {
					t.Errorf("String() (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{
			name: "a valid hierarchy with implicit cohorts",
			cfg: config(
				newCohort("c").parent("implicit-root"),
				newCQ("a").cohort("c").quota("default", "cpu", "4"),
				newCQ("b").cohort("other").quota("default", "cpu", "4"),
				newCQ("lone"),
			),
		},
		{
			name: "a cohort cycle is refused, naming a cohort on it",
			cfg: config(
				newCohort("x").parent("y"),
				newCohort("y").parent("x"),
			),
			wantErr: "Cohort/x: the parent chain loops: x → y → x",
		},
		{
			name:    "a cohort that is its own parent is refused",
			cfg:     config(newCohort("x").parent("x")),
			wantErr: "Cohort/x is its own parent",
		},
		{
			name:    "a ClusterQueue given twice is refused",
			cfg:     config(newCQ("a"), newCQ("a")),
			wantErr: "ClusterQueue/a is given twice",
		},
		{
			name:    "a Cohort given twice is refused",
			cfg:     config(newCohort("c"), newCohort("c")),
			wantErr: "Cohort/c is given twice",
		},
		{
			name:    "a negative quota is refused",
			cfg:     config(newCQ("a").quota("default", "cpu", "-1")),
			wantErr: "ClusterQueue/a: nominalQuota of cpu in flavor default is negative (-1)",
		},
		{
			name:    "a negative borrowingLimit is refused",
			cfg:     config(newCQ("a").cohort("c").quota("default", "cpu", "1", borrowing("-1"))),
			wantErr: "ClusterQueue/a: borrowingLimit of cpu in flavor default is negative (-1)",
		},
		{
			name:    "a negative lendingLimit on a cohort is refused",
			cfg:     config(newCohort("c").parent("p").quota("default", "cpu", "1", lending("-1"))),
			wantErr: "Cohort/c: lendingLimit of cpu in flavor default is negative (-1)",
		},
		{
			name:    "a flavor and resource given twice in one object is refused",
			cfg:     config(newCQ("a").quota("default", "cpu", "1").quota("default", "cpu", "2")),
			wantErr: "ClusterQueue/a: quota for cpu in flavor default is given twice",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			var gotErr string
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr {
				t.Errorf("New error = %q, want %q", gotErr, tt.wantErr)
			}
		})
	}
}

func TestMax(t *testing.T) {
	q := resource.MustParse
	tests := []struct {
		name    string
		cfg     Config
		events  []event
		wantMax map[string]map[string]resource.Quantity
	}{
		{
			name: "the highest usage of ClusterQueues and the cohort, not the last",
			cfg: config(
				newCQ("a").cohort("c").quota("default", "cpu", "4").quota("default", "memory", "4Gi", lending("1Gi")),
				newCQ("b").cohort("c").quota("default", "cpu", "5"),
			),
			events: []event{
				{job: newJob("a1").request("cpu", "3").request("memory", "4Gi").admit("a", 1, "default")},
				{job: newJob("b1").request("cpu", "2").parallelism(3).admit("b", 3, "default")},
				{job: newJob("b1").request("cpu", "2").parallelism(3).admit("b", 3, "default"), deleted: true},
				{job: newJob("b2").request("cpu", "1").admit("b", 1, "default")},
			},
			wantMax: map[string]map[string]resource.Quantity{
				"ClusterQueue/a": {"default/cpu": q("3"), "default/memory": q("4Gi")},
				"ClusterQueue/b": {"default/cpu": q("6")},
				// a keeps 3Gi of memory back: only 1Gi of its 4Gi reaches the cohort.
				"Cohort/c": {"default/cpu": q("9"), "default/memory": q("1Gi")},
			},
		},
		{
			name:    "nothing used, nothing recorded",
			cfg:     config(newCQ("a").quota("default", "cpu", "4")),
			events:  []event{{job: newJob("j1").request("cpu", "1").admit("a", 1, "default").suspended()}},
			wantMax: map[string]map[string]resource.Quantity{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			runEvents(t, c, tt.events)
			if diff := cmp.Diff(tt.wantMax, c.Max()); diff != "" {
				t.Errorf("Max (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResync(t *testing.T) {
	cfg := config(
		newCQ("a").quota("default", "cpu", "4"),
		newCQ("b").quota("default", "cpu", "4"),
	)
	list := func(bs ...*jobBuilder) []batchv1.Job {
		var out []batchv1.Job
		for _, b := range bs {
			out = append(out, *b.obj())
		}
		return out
	}
	tests := []struct {
		name   string
		before []event
		list   []batchv1.Job
		want   []Violation
		after  []event
	}{
		{
			name: "a list is checked once, as one state, in every tree",
			list: list(
				newJob("j1").request("cpu", "3").admit("a", 1, "default"),
				newJob("j2").request("cpu", "2").admit("a", 1, "default"),
				newJob("j3").request("cpu", "5").admit("b", 1, "default"),
				newJob("j4").request("cpu", "1"),
			),
			want: []Violation{
				jobViolation("", "", "default/j4"),
				over("ClusterQueue/a", "default/cpu", "5", "4", "default/j1", "default/j2"),
				over("ClusterQueue/b", "default/cpu", "5", "4", "default/j3"),
			},
		},
		{
			name: "Jobs missing from the list are no longer booked",
			before: []event{
				{job: newJob("gone").request("cpu", "4").admit("a", 1, "default")},
			},
			list: list(newJob("j1").request("cpu", "4").admit("b", 1, "default")),
			after: []event{
				{job: newJob("j2").request("cpu", "4").admit("a", 1, "default")},
				{job: newJob("j3").request("cpu", "1").admit("b", 1, "default"),
					want: []Violation{over("ClusterQueue/b", "default/cpu", "5", "4", "default/j1", "default/j3")}},
			},
		},
		{
			name: "Jobs in the list replace their earlier state",
			before: []event{
				{job: newJob("j1").request("cpu", "4").admit("a", 1, "default")},
			},
			list: list(newJob("j1").request("cpu", "1").admit("a", 1, "default")),
			after: []event{
				{job: newJob("j2").request("cpu", "3").admit("a", 1, "default")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			runEvents(t, c, tt.before)
			want := make([]Violation, len(tt.want))
			for i, v := range tt.want {
				v.ResourceVersion = "100"
				want[i] = v
			}
			got := c.resync(tt.list, "100")
			if diff := cmp.Diff(want, got, ignoreMessage, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("resync violations (-want +got):\n%s", diff)
			}
			runEvents(t, c, tt.after)
		})
	}
}
