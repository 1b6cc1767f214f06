// Package configfile reads the services' --config file: one Configuration
// document, under Kueue's names (fairSharing, admissionFairSharing,
// waitForPodsReady, resources, manageJobsWithoutQueueName,
// managedJobsNamespaceSelector),
// decoded and validated by the same reader `sluice simulate` uses, so that
// a file the simulator takes is one the services take.
package configfile

import (
	"fmt"
	"os"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/queueconfig"
	"github.com/sluice-dev/sluice/internal/simulate"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Settings are what a Configuration decides.
type Settings struct {
	FairSharing    bool
	FairStrategies engine.FairStrategies
	// PodsReady is waitForPodsReady; nil when off.
	PodsReady *engine.WaitForPodsReady
	// Resources is Kueue's resources block, which the integrations apply
	// to the requests they queue jobs with; nil when absent.
	Resources *queueconfig.Resources
	// ManageJobsWithoutQueueName: the integrations hold jobs created
	// without a queue label in ManagedNamespaces until they get one.
	ManageJobsWithoutQueueName bool
	// ManagedNamespaces selects the namespaces where jobs without a queue
	// label are held (ManageJobsWithoutQueueName) or put in a LocalQueue
	// named "default"; never nil.
	ManagedNamespaces *metav1.LabelSelector
	// AdmissionFairSharing is nil when Admission Fair Sharing is off.
	AdmissionFairSharing *engine.AdmissionFairSharing
}

// Load reads the file at path; "" is no file (every setting off). An
// error names the file and what in it is wrong.
func Load(path string) (Settings, error) {
	if path == "" {
		return Settings{ManagedNamespaces: queueconfig.DefaultManagedNamespaces()}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return Settings{}, err
	}
	defer f.Close()
	sc, err := simulate.Load([]simulate.Source{{Name: path, R: f}})
	if err != nil {
		return Settings{}, err
	}
	o := sc.Config
	if len(sc.Workloads)+len(o.Flavors)+len(o.ClusterQueues)+len(o.Cohorts)+len(o.LocalQueues)+len(o.PriorityClasses)+len(o.Namespaces) > 0 {
		return Settings{}, fmt.Errorf("%s: only a Configuration document belongs here (queues come from the cluster)", path)
	}
	return Settings{FairSharing: o.FairSharing, FairStrategies: o.FairStrategies, PodsReady: o.WaitForPodsReady, Resources: o.Resources,
		ManageJobsWithoutQueueName: o.ManageJobsWithoutQueueName, ManagedNamespaces: queueconfig.ManagedNamespaces(o.ManagedJobsNamespaceSelector),
		AdmissionFairSharing: o.AdmissionFairSharing}, nil
}

// BindFlag binds --config to path, for each service that reads the file
// (in `sluice dev`, one flag for all).
func BindFlag(fs *pflag.FlagSet, path *string) {
	fs.StringVar(path, "config", *path,
		"file with a Configuration document, as sluice simulate reads it: fairSharing, admissionFairSharing, waitForPodsReady, resources, manageJobsWithoutQueueName and managedJobsNamespaceSelector, under Kueue's names")
}
