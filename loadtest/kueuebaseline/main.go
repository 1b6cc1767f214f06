// Command kueuebaseline writes, as a `sluice simulate` scenario on stdout,
// the workload of Kueue's baseline scheduler performance test
// (test/performance/scheduler/configs/baseline in the Kueue repository):
//
//   - 5 cohorts of 6 ClusterQueues, each with nominal quota 20 CPU and
//     borrowingLimit 100, preemption reclaimWithinCohort Any and
//     withinClusterQueue LowerPriority, namespaceSelector {};
//   - one LocalQueue per ClusterQueue;
//   - per ClusterQueue, 350 small workloads (1 CPU, 200ms, priority 50, one
//     every 100ms), 100 medium (5 CPU, 500ms, priority 100, one every 500ms)
//     and 50 large (20 CPU, 1s, priority 200, one every 1.2s).
//
// Usage:
//
//	go run ./loadtest/kueuebaseline > /tmp/b.yaml
//	sluice simulate -f /tmp/b.yaml
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"time"
)

// Shape of the scenario.
const (
	cohorts        = 5
	queuesPerCoh   = 6
	nominalCPU     = 20
	borrowingLimit = 100
	namespace      = "default"
	flavor         = "default"
)

// class is one kind of workload submitted to every ClusterQueue.
type class struct {
	name     string
	count    int
	every    time.Duration
	cpu      int
	runtime  time.Duration
	priority int32
}

// classes are the baseline's workload sets, in the order Kueue lists them.
var classes = []class{
	{name: "small", count: 350, every: 100 * time.Millisecond, cpu: 1, runtime: 200 * time.Millisecond, priority: 50},
	{name: "medium", count: 100, every: 500 * time.Millisecond, cpu: 5, runtime: 500 * time.Millisecond, priority: 100},
	{name: "large", count: 50, every: 1200 * time.Millisecond, cpu: 20, runtime: time.Second, priority: 200},
}

func queueName(cohort, queue int) string { return fmt.Sprintf("cohort-%d-cq-%d", cohort, queue) }

// writeScenario writes the whole scenario as multi-document YAML.
func writeScenario(out io.Writer) error {
	w := bufio.NewWriterSize(out, 1<<16)
	fmt.Fprintf(w, `# Kueue's baseline scheduler performance test as a sluice simulate scenario.
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: %s}
`, flavor)
	for c := range cohorts {
		for q := range queuesPerCoh {
			cq := queueName(c, q)
			fmt.Fprintf(w, `---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: %s}
spec:
  cohort: cohort-%d
  namespaceSelector: {}
  preemption: {reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: %s
      resources:
      - {name: cpu, nominalQuota: %d, borrowingLimit: %d}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: %s, namespace: %s}
spec: {clusterQueue: %s}
`, cq, c, flavor, nominalCPU, borrowingLimit, cq, namespace, cq)
		}
	}
	for c := range cohorts {
		for q := range queuesPerCoh {
			cq := queueName(c, q)
			for _, cl := range classes {
				for i := range cl.count {
					fmt.Fprintf(w, `---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: %s-%s-%03d, namespace: %s}
spec:
  queueName: %s
  priority: %d
  submitAt: %s
  runtime: %s
  podSets:
  - {name: main, count: 1, requests: {cpu: "%d"}}
`, cq, cl.name, i, namespace, cq, cl.priority, time.Duration(i)*cl.every, cl.runtime, cl.cpu)
				}
			}
		}
	}
	return w.Flush()
}

func main() {
	if err := writeScenario(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kueuebaseline:", err)
		os.Exit(1)
	}
}
