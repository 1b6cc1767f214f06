// Package kinds registers every kind Sluice integrates. Adding a kind is
// its adapter's own folder under services/integration plus one line in All.
package kinds

import (
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/internal/jobframework"
	"github.com/sluice-dev/sluice/services/integration/appwrapper"
	"github.com/sluice-dev/sluice/services/integration/deployment"
	"github.com/sluice-dev/sluice/services/integration/jaxjob"
	"github.com/sluice-dev/sluice/services/integration/job"
	"github.com/sluice-dev/sluice/services/integration/jobset"
	"github.com/sluice-dev/sluice/services/integration/leaderworkerset"
	"github.com/sluice-dev/sluice/services/integration/mpijob"
	"github.com/sluice-dev/sluice/services/integration/paddlejob"
	"github.com/sluice-dev/sluice/services/integration/pod"
	"github.com/sluice-dev/sluice/services/integration/pytorchjob"
	"github.com/sluice-dev/sluice/services/integration/raycluster"
	"github.com/sluice-dev/sluice/services/integration/rayjob"
	"github.com/sluice-dev/sluice/services/integration/rayservice"
	"github.com/sluice-dev/sluice/services/integration/statefulset"
	"github.com/sluice-dev/sluice/services/integration/tfjob"
	"github.com/sluice-dev/sluice/services/integration/trainjob"
	"github.com/sluice-dev/sluice/services/integration/xgboostjob"
)

// All lists the adapters, one line per kind.
var All = []jobframework.Adapter{
	job.Adapter{},
	jobset.Adapter{},
	rayjob.Adapter{},
	raycluster.Adapter{},
	mpijob.Adapter{},
	pytorchjob.Adapter{},
	tfjob.Adapter{},
	xgboostjob.Adapter{},
	paddlejob.Adapter{},
	jaxjob.Adapter{},
	appwrapper.Adapter{},
	trainjob.Adapter{},
	pod.Adapter{},
	deployment.Adapter{},
	statefulset.Adapter{},
	leaderworkerset.Adapter{},
	rayservice.Adapter{},
}

// Queued leaves out of ads the parent kinds (Kind.QueuedBy), whose objects
// are never queued themselves: a service that reads workloads' objects
// (multi-cluster dispatch, provisioning) has nothing to do with them.
func Queued(ads []jobframework.Adapter) []jobframework.Adapter {
	var out []jobframework.Adapter
	for _, ad := range ads {
		if !ad.Kind().IsParent() {
			out = append(out, ad)
		}
	}
	return out
}

// QueuedNames returns the names of the kinds whose objects are queued, in
// the order of All: those with a workload of their own.
func QueuedNames() []string {
	var out []string
	for _, ad := range Queued(All) {
		out = append(out, ad.Kind().Name)
	}
	return out
}

// Names returns the kinds' names in the order of All.
func Names() []string {
	out := make([]string, len(All))
	for i, ad := range All {
		out[i] = ad.Kind().Name
	}
	return out
}

// Select returns the adapters named, in the order given; an unknown name
// is an error that lists the known ones.
func Select(names []string) ([]jobframework.Adapter, error) {
	var out []jobframework.Adapter
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if seen[n] {
			continue
		}
		seen[n] = true
		ad, ok := byName(n)
		if !ok {
			return nil, fmt.Errorf("unknown integration %q: known are %s", n, strings.Join(Names(), ", "))
		}
		out = append(out, ad)
	}
	return out, nil
}

func byName(n string) (jobframework.Adapter, bool) {
	for _, ad := range All {
		if ad.Kind().Name == n {
			return ad, true
		}
	}
	return nil, false
}
