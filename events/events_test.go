package events_test

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/events"
)

var typePattern = regexp.MustCompile(`^dev\.sluice\.([a-z]+)\.v1\.([a-z]+)$`)

func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, ev := range events.All() {
		typ := ev.Type()
		m := typePattern.FindStringSubmatch(typ)
		if m == nil {
			t.Errorf("%T: type %q is not dev.sluice.<entity>.v1.<transition>", ev, typ)
			continue
		}
		if seen[typ] {
			t.Errorf("type %s registered twice", typ)
		}
		seen[typ] = true
		if !events.Known(typ) {
			t.Errorf("Known(%s) = false", typ)
		}
		ptr, err := events.New(typ)
		if err != nil {
			t.Fatal(err)
		}
		if reflect.TypeOf(ptr).Elem() != reflect.TypeOf(ev) {
			t.Errorf("New(%s) = %T, want *%T", typ, ptr, ev)
		}
		ex := examples[typ]
		if ex == nil {
			continue // reported by TestSchemas
		}
		subj := ex.NATSSubject()
		if want := "sluice." + m[1] + ".v1." + m[2] + "."; !strings.HasPrefix(subj, want) {
			t.Errorf("%s: subject %q does not start with %q", typ, subj, want)
		}
		if err := events.ValidateSubject(subj); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
		if ex.CESubject() == "" {
			t.Errorf("%s: empty CloudEvents subject", typ)
		}
	}
	if _, err := events.New("dev.sluice.nope.v1.never"); !errors.Is(err, events.ErrUnknownType) || !events.IsPoison(err) {
		t.Errorf("New(unknown) = %v, want a poison ErrUnknownType", err)
	}
	// All returns a copy.
	all := events.All()
	all[0] = nil
	if events.All()[0] == nil {
		t.Error("All exposes the registry")
	}
}

func TestSubjects(t *testing.T) {
	ref := events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train.v2.final", UID: "u"}
	cases := []struct {
		ev   events.Event
		want string
	}{
		{events.WorkloadSubmittedV1{Workload: ref}, "sluice.workload.v1.submitted.job.team-a.train_v2_final"},
		{events.WorkloadAdmittedV1{Workload: ref}, "sluice.workload.v1.admitted.job.team-a.train_v2_final"},
		{events.PreemptionRequestedV1{Preemptor: ref}, "sluice.preemption.v1.requested.job.team-a.train_v2_final"},
		{events.QuotaReleasedV1{Workload: ref}, "sluice.quota.v1.released.job.team-a.train_v2_final"},
		{events.QuotaUsageV1{ClusterQueue: "gpu.a100"}, "sluice.quota.v1.usage.gpu_a100"},
		{events.ConfigChangedV1{Kind: "clusterqueue", Name: "gpu"}, "sluice.config.v1.changed.clusterqueue._.gpu"},
		{events.ConfigChangedV1{Kind: "localqueue", Namespace: "team-a", Name: "q.1"}, "sluice.config.v1.changed.localqueue.team-a.q_1"},
	}
	for _, c := range cases {
		if got := c.ev.NATSSubject(); got != c.want {
			t.Errorf("%s: subject %q, want %q", c.ev.Type(), got, c.want)
		}
	}
	if got := (events.WorkloadAdmittedV1{Workload: ref}).CESubject(); got != "team-a/train.v2.final" {
		t.Errorf("CESubject = %q", got)
	}
	if got := (events.ConfigChangedV1{Kind: "clusterqueue", Name: "gpu"}).CESubject(); got != "gpu" {
		t.Errorf("cluster-scoped CESubject = %q", got)
	}
	if got := events.DLQSubject("admission"); got != "sluice.dlq.admission" {
		t.Errorf("DLQSubject = %q", got)
	}
}

func TestTokens(t *testing.T) {
	for _, name := range []string{"a", "train.v2", "a.b.c-d", "x-1", "", "1.2.3"} {
		tok := events.EncodeToken(name)
		if strings.ContainsAny(tok, ".*> ") || tok == "" {
			t.Errorf("EncodeToken(%q) = %q is not one NATS token", name, tok)
		}
		if back := events.DecodeToken(tok); back != name {
			t.Errorf("DecodeToken(EncodeToken(%q)) = %q", name, back)
		}
	}
	if events.EncodeToken("") != events.ClusterScope {
		t.Error("empty namespace is not ClusterScope")
	}
}

// matches is NATS subject matching for the test: "*" matches one token,
// a final ">" one or more.
func matches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || tok != "*" && tok != s[i] {
			return false
		}
	}
	return len(f) == len(s)
}

func TestSubjectFilter(t *testing.T) {
	ref := events.WorkloadRef{Kind: "job", Namespace: "team-a", Name: "train.v2", UID: "u"}
	admitted := events.WorkloadAdmittedV1{Workload: ref}.NATSSubject()
	submitted := events.WorkloadSubmittedV1{Workload: ref}.NATSSubject()
	usage := events.QuotaUsageV1{ClusterQueue: "gpu"}.NATSSubject()
	released := events.QuotaReleasedV1{Workload: ref}.NATSSubject()
	cases := []struct {
		entity, transition, kind, ns string
		want                         string
		match, noMatch               []string
	}{
		{"workload", "admitted", "job", "", "sluice.workload.v1.admitted.job.*.*", []string{admitted}, []string{submitted, usage}},
		{"workload", "", "job", "team-a", "sluice.workload.v1.*.job.team-a.*", []string{admitted, submitted}, []string{released}},
		{"workload", "", "rayjob", "", "sluice.workload.v1.*.rayjob.*.*", nil, []string{admitted}},
		{"quota", "", "", "", "sluice.quota.v1.*.>", []string{usage, released}, []string{admitted}},
		{"quota", "usage", "", "", "sluice.quota.v1.usage.>", []string{usage}, []string{released}},
		{"", "", "", "", "sluice.*.v1.*.>", []string{usage, released, admitted}, nil},
		{"config", "changed", "clusterqueue", "", "sluice.config.v1.changed.clusterqueue.*.*",
			[]string{events.ConfigChangedV1{Kind: "clusterqueue", Name: "gpu"}.NATSSubject()}, nil},
	}
	for _, c := range cases {
		got := events.SubjectFilter(c.entity, c.transition, c.kind, c.ns)
		if got != c.want {
			t.Errorf("SubjectFilter(%q,%q,%q,%q) = %q, want %q", c.entity, c.transition, c.kind, c.ns, got, c.want)
		}
		for _, s := range c.match {
			if !matches(got, s) {
				t.Errorf("%s does not match %s", got, s)
			}
		}
		for _, s := range c.noMatch {
			if matches(got, s) {
				t.Errorf("%s matches %s", got, s)
			}
		}
	}
}

func TestValidateSubject(t *testing.T) {
	for _, bad := range []string{"", "a..b", "a.b.", ".a", "a.*", "a.>", "a.b c", "a.b\r\n", "a.ü"} {
		if err := events.ValidateSubject(bad); !errors.Is(err, events.ErrInvalidSubject) {
			t.Errorf("ValidateSubject(%q) = %v", bad, err)
		}
	}
	if err := events.ValidateSubject("sluice.workload.v1.admitted.job.team-a.train_v2"); err != nil {
		t.Error(err)
	}
}

func TestID(t *testing.T) {
	a := events.ID(events.TypeWorkloadAdmittedV1, "uid-1", uint64(7))
	if a != events.ID(events.TypeWorkloadAdmittedV1, "uid-1", uint64(7)) {
		t.Fatal("ID is not deterministic")
	}
	if len(a) != 32 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Errorf("ID %q is not 32 hex digits", a)
	}
	distinct := []string{
		a,
		events.ID(events.TypeWorkloadAdmittedV1, "uid-1", uint64(8)),
		events.ID(events.TypeWorkloadAdmittedV1, "uid-2", uint64(7)),
		events.ID(events.TypeWorkloadEvictedV1, "uid-1", uint64(7)),
		events.ID(events.TypeWorkloadAdmittedV1, "uid-1"),
		events.ID(events.TypeWorkloadAdmittedV1, "uid-", "17"),
		events.ID(events.TypeWorkloadAdmittedV1, "uid-1", "7", ""),
		events.ID(events.TypePreemptionRequestedV1, "uid-1", []string{"a", "b"}),
		events.ID(events.TypePreemptionRequestedV1, "uid-1", []string{"a b"}),
	}
	seen := map[string]int{}
	for i, id := range distinct {
		if j, dup := seen[id]; dup {
			t.Errorf("ids %d and %d collide: %s", j, i, id)
		}
		seen[id] = i
	}
}

func TestValidate(t *testing.T) {
	good := examples[events.TypeWorkloadSubmittedV1].(events.WorkloadSubmittedV1)
	mutate := func(f func(*events.WorkloadSubmittedV1)) events.WorkloadSubmittedV1 {
		c := good
		c.PodSets = append([]events.PodSetV1(nil), good.PodSets...)
		f(&c)
		return c
	}
	bad := map[string]events.Event{
		"no uid":                  mutate(func(e *events.WorkloadSubmittedV1) { e.Workload.UID = "" }),
		"upper-case name":         mutate(func(e *events.WorkloadSubmittedV1) { e.Workload.Name = "Train" }),
		"name with space":         mutate(func(e *events.WorkloadSubmittedV1) { e.Workload.Name = "a b" }),
		"name with _":             mutate(func(e *events.WorkloadSubmittedV1) { e.Workload.Name = "a_b" }),
		"name ends with .":        mutate(func(e *events.WorkloadSubmittedV1) { e.Workload.Name = "a." }),
		"kind upper":              mutate(func(e *events.WorkloadSubmittedV1) { e.Workload.Kind = "Job" }),
		"no local queue":          mutate(func(e *events.WorkloadSubmittedV1) { e.LocalQueue = "" }),
		"no pod sets":             mutate(func(e *events.WorkloadSubmittedV1) { e.PodSets = nil }),
		"bad quantity":            mutate(func(e *events.WorkloadSubmittedV1) { e.PodSets[0].Requests = map[string]string{"cpu": "two"} }),
		"minCount > count":        mutate(func(e *events.WorkloadSubmittedV1) { e.PodSets[0].MinCount = 9 }),
		"negative count":          mutate(func(e *events.WorkloadSubmittedV1) { e.PodSets[0].Count = -1 }),
		"pending no reason":       events.WorkloadPendingV1{Workload: exampleRef},
		"admitted no cq":          events.WorkloadAdmittedV1{Workload: exampleRef, PodSets: []events.PodSetAssignmentV1{{Name: "main", Count: 1}}},
		"preempted bad preemptor": events.WorkloadPreemptedV1{Workload: exampleRef, ClusterQueue: "q", Reason: "r"},
		"preemption no victims":   events.PreemptionRequestedV1{Preemptor: exampleRef, ClusterQueue: "q"},
		"usage negative":          events.QuotaUsageV1{ClusterQueue: "q", Pending: -1},
		"usage bad quantity":      events.QuotaUsageV1{ClusterQueue: "q", Usage: map[string]map[string]string{"f": {"cpu": "x"}}},
		"config no kind":          events.ConfigChangedV1{Name: "q"},
		"config long name":        events.ConfigChangedV1{Kind: "cohort", Name: strings.Repeat("a", 254)},
	}
	for name, ev := range bad {
		if err := ev.Validate(); !errors.Is(err, events.ErrInvalidEvent) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidEvent", name, err)
		}
	}
}

func TestSubjectWorkload(t *testing.T) {
	w := events.WorkloadRef{Kind: "jobset", Namespace: "team-a", Name: "train.v2"}
	cases := []struct {
		name    string
		subject string
		want    string
	}{
		{"every event of a workload has one key", events.WorkloadSubject(events.TypeWorkloadFinishedV1, w), events.WorkloadSubject(events.TypeWorkloadStoppedV1, w)[len("sluice.workload.v1.stopped."):]},
		{"a preemption request is no workload event", "sluice.preemption.v1.requested.job.team-a.x", ""},
		{"a short subject", "sluice.workload.v1", ""},
	}
	for _, c := range cases {
		if got := events.SubjectWorkload(c.subject); got != c.want {
			t.Errorf("%s: SubjectWorkload(%q) = %q, want %q", c.name, c.subject, got, c.want)
		}
	}
}
