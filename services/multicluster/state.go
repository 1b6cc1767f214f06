package multicluster

import (
	"maps"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/events"
)

// dispatch is the manager's record of one workload's reservation offered
// to workers. It is kept in the KV bucket under the workload's UID.
type dispatch struct {
	Workload     events.WorkloadRef `json:"workload"`
	Check        string             `json:"check"`
	Admission    string             `json:"admission"`
	ClusterQueue string             `json:"clusterQueue"`
	Config       string             `json:"config"`
	// Offered are the workers offered the workload, in the order offered.
	Offered []string `json:"offered"`
	// RoundAt is when the last workers were added (Incremental).
	RoundAt time.Time `json:"roundAt"`
	// Winner is the worker that admitted it first ("" while none has).
	Winner string `json:"winner,omitempty"`
	// Given is the workers that reported the copy gone (could not create
	// it, or it was deleted there).
	Given []string `json:"given,omitempty"`
	// Answered: the winner was told to run it, the others to withdraw,
	// and the check answered Ready.
	Answered bool `json:"answered,omitempty"`
	// Members is how many members of a pod group were sent; Growing: fewer
	// than the group's total (a group admitted on its first member), so
	// those created later are sent to the winner as they come.
	Members int  `json:"members,omitempty"`
	Growing bool `json:"growing,omitempty"`
	// Set names the LeaderWorkerSet (namespace/name) a pod group is a
	// group of: its groups go to the worker the first one went to.
	Set string `json:"set,omitempty"`

	rev uint64 // the bucket's revision it was read at
}

// settings are a MultiClusterConfig's dispatching, defaults filled in.
type settings struct {
	clusters    []string
	incremental bool
	step        int
	round, lost time.Duration
}

func settingsOf(c *v1beta1.MultiClusterConfig) settings {
	s := settings{clusters: c.Spec.Clusters, step: v1beta1.DefaultStepSize,
		round: v1beta1.DefaultRoundTimeout * time.Second, lost: v1beta1.DefaultWorkerLostTimeout * time.Second}
	if d := c.Spec.Dispatching; d != nil {
		s.incremental = d.Mode == v1beta1.DispatchIncremental
		if d.StepSize != nil && *d.StepSize > 0 {
			s.step = int(*d.StepSize)
		}
		if d.RoundTimeout != nil && d.RoundTimeout.Duration > 0 {
			s.round = d.RoundTimeout.Duration
		}
	}
	if t := c.Spec.WorkerLostTimeout; t != nil && t.Duration > 0 {
		s.lost = t.Duration
	}
	return s
}

// nominate returns the workers to offer a workload to next, given those
// offered already: every worker at once (AllAtOnce), or the next step of
// them in the config's order (Incremental). Only workers heard from
// (alive) are offered it while there are any: a lost worker may still run
// the copy it had, and must not get a new one to run beside another
// worker's. When none is alive, every one is offered it, to take it up
// when it comes back.
func (s settings) nominate(offered []string, alive func(string) bool) []string {
	var live, lost []string
	for _, c := range s.clusters {
		if slices.Contains(offered, c) {
			continue
		}
		if alive(c) {
			live = append(live, c)
		} else {
			lost = append(lost, c)
		}
	}
	next := live
	if len(live) == 0 && len(offered) == 0 {
		next = lost
	}
	if !s.incremental || len(next) <= s.step {
		return next
	}
	return next[:s.step]
}

// verdict is what a report from a worker calls for.
type verdict struct {
	// win: the worker admitted the workload first; answer Ready.
	win bool
	// mirror: copy the report's status onto the manager's object.
	mirror bool
	// withdraw: tell the worker to delete its copy.
	withdraw bool
	// retry: the workload's copy is lost; answer Retry.
	retry string
}

// judge decides what a report about d from worker calls for.
func judge(d *dispatch, worker string, r Report) verdict {
	offered := slices.Contains(d.Offered, worker)
	switch {
	case r.State == Gone:
		if d.Winner == worker && r.Admission == d.Admission {
			return verdict{retry: "the copy in worker cluster " + worker + " is gone" + colon(r.Message)}
		}
		return verdict{}
	case r.State == Stopped:
		if d.Winner == worker && r.Admission == d.Admission {
			return verdict{retry: "the copy in worker cluster " + worker + " was stopped there" + colon(r.Message)}
		}
		return verdict{withdraw: d.Winner != worker}
	case !offered:
		return verdict{withdraw: true}
	case r.Admission != d.Admission:
		// A report about an earlier offer; the worker replaces its copy
		// when it reads the current one.
		return verdict{}
	case d.Winner == "" && (r.State == Admitted || r.State == Finished):
		return verdict{win: true, mirror: true}
	case d.Winner == worker:
		return verdict{mirror: r.State == Admitted || r.State == Finished}
	case d.Winner != "":
		return verdict{withdraw: true}
	}
	return verdict{}
}

// allGone reports whether every worker offered d gave it up, with no
// more to offer.
func allGone(d *dispatch, s settings) bool {
	for _, c := range s.clusters {
		if !slices.Contains(d.Given, c) {
			return false
		}
	}
	return len(s.clusters) > 0
}

func colon(m string) string {
	if m == "" {
		return ""
	}
	return ": " + m
}

// keepCounters is status with every number that prev holds higher kept
// from prev: a status after a re-dispatch starts its counters again.
func keepCounters(prev, status map[string]any) map[string]any {
	out := maps.Clone(status)
	for k, v := range prev {
		pv, ok1 := number(v)
		nv, ok2 := number(status[k])
		if ok1 && (!ok2 || pv > nv) {
			out[k] = v
		}
	}
	return out
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case int:
		return float64(n), true
	}
	return 0, false
}
