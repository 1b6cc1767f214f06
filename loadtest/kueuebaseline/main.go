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
// With -topology it writes Kueue's topology-aware scheduling configuration
// (test/performance/scheduler/configs/tas) instead: the same queues on a
// flavor with a Topology over 1 block × 10 racks × 64 nodes of 96 CPUs, and
// the sets of loadtest/baseline's tas profile (each size as 2, 4 or 8 pods,
// a third required in one rack, a third preferred, a third in slices).
//
// With -profile it writes another profile of loadtest/baseline (large-scale:
// 10 cohorts × 100 ClusterQueues, 50,000 workloads) or any Kueue generator
// file without a topology.
//
// Usage:
//
//	go run ./loadtest/kueuebaseline [-topology | -profile large-scale] > /tmp/b.yaml
//	sluice simulate -f /tmp/b.yaml
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/loadtest/baseline"
)

// Shape of the scenario.
const (
	cohorts      = 5
	queuesPerCoh = 6
	namespace    = "default"
	flavor       = "default"
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

// The topology configuration's data center.
const (
	topologyName = "datacenter"
	racks        = 10
	nodesPerRack = 64
	nodeGroup    = "node-group"
)

// writeScenario writes the whole scenario as multi-document YAML.
func writeScenario(out io.Writer, topology bool) error {
	w := bufio.NewWriterSize(out, 1<<16)
	if !topology {
		fmt.Fprintf(w, `# Kueue's baseline scheduler performance test as a sluice simulate scenario.
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: %s}
`, flavor)
	} else {
		writeTopology(w)
	}
	for _, q := range baseline.MustProfile("baseline").Queues {
		writeQueue(w, q)
	}
	for c := range cohorts {
		for q := range queuesPerCoh {
			cq := queueName(c, q)
			if topology {
				writeTopologyWorkloads(w, cq)
				continue
			}
			for _, cl := range classes {
				for i := range cl.count {
					writeWorkload(w, fmt.Sprintf("%s-%s-%03d", cq, cl.name, i), cq, cl.priority, time.Duration(i)*cl.every, cl.runtime,
						fmt.Sprintf(`{name: main, count: 1, requests: {cpu: "%d"}}`, cl.cpu))
				}
			}
		}
	}
	return w.Flush()
}

// writeTopology writes the Topology, the flavor naming it, and the nodes.
func writeTopology(w io.Writer) {
	fmt.Fprintf(w, `# Kueue's topology-aware scheduling performance test as a sluice simulate scenario.
apiVersion: sluice.dev/v1beta1
kind: Topology
metadata: {name: %s}
spec:
  levels:
`, topologyName)
	for _, l := range baseline.TopologyLevels {
		fmt.Fprintf(w, "  - nodeLabel: %s\n", l)
	}
	fmt.Fprintf(w, `---
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: %s}
spec:
  nodeLabels: {%s: tas}
  topologyName: %s
`, flavor, nodeGroup, topologyName)
	for r := range racks {
		for n := range nodesPerRack {
			name := fmt.Sprintf("b0-r%d-n%d", r, n)
			fmt.Fprintf(w, `---
apiVersion: v1
kind: Node
metadata:
  name: %s
  labels: {%s: tas, %s: block-0, %s: rack-%d, %s: %s}
status:
  allocatable: {cpu: "96", memory: 256Gi, pods: "110"}
`, name, nodeGroup, baseline.TopologyLevels[0], baseline.TopologyLevels[1], r, baseline.TopologyLevels[2], name)
		}
	}
}

// writeTopologyWorkloads writes one ClusterQueue's workloads of the
// topology configuration (loadtest/baseline's tas profile): each class's
// pods share its CPU evenly.
func writeTopologyWorkloads(w io.Writer, cq string) {
	p := baseline.MustProfile("tas")
	for _, set := range p.Queues[0].Sets {
		for _, k := range set.Classes {
			cl := p.Classes[k]
			keys := make([]string, 0, len(cl.Annotations))
			for k := range cl.Annotations {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			ann := make([]string, len(keys))
			for i, k := range keys {
				ann[i] = fmt.Sprintf("%s: %q", k, cl.Annotations[k])
			}
			for i := range set.Count {
				writeWorkload(w, fmt.Sprintf("%s-%s-%03d", cq, cl.Name, i), cq, cl.Priority, time.Duration(i)*set.Every, cl.Runtime,
					fmt.Sprintf("{name: main, count: %d, requests: {cpu: %dm}, annotations: {%s}}", cl.Pods, cl.PodMilliCPU, strings.Join(ann, ", ")))
			}
		}
	}
}

// writeWorkload writes one SimulatedWorkload of one pod set (podSet, as
// a YAML flow mapping).
func writeWorkload(w io.Writer, name, cq string, priority int32, at, runtime time.Duration, podSet string) {
	fmt.Fprintf(w, `---
apiVersion: sluice.dev/v1beta1
kind: SimulatedWorkload
metadata: {name: %s, namespace: %s}
spec:
  queueName: %s
  priority: %d
  submitAt: %s
  runtime: %s
  podSets:
  - %s
`, name, namespace, cq, priority, at, runtime, podSet)
}

// writeProfile writes a profile without topology (loadtest/baseline's
// large-scale, or any Kueue generator file) as a scenario: its queues with
// their quotas and policies, and its plan at scale 1.
func writeProfile(out io.Writer, p *baseline.Profile) error {
	if p.Topology != nil {
		return fmt.Errorf("profile %s has a topology: only the built-in tas profile is written with one (-topology)", p.Name)
	}
	w := bufio.NewWriterSize(out, 1<<16)
	fmt.Fprintf(w, `# Kueue's %s scheduler performance configuration as a sluice simulate scenario.
apiVersion: sluice.dev/v1beta1
kind: ResourceFlavor
metadata: {name: %s}
`, p.Name, flavor)
	queue := func(q baseline.Queue) string { return queueName(q.Cohort, q.Index) }
	for _, q := range p.Queues {
		writeQueue(w, q)
	}
	for _, it := range p.Plan(1) {
		cl, q := p.Classes[it.Class], p.Queues[it.Queue]
		writeWorkload(w, fmt.Sprintf("%s-%s-%03d", queue(q), cl.Name, it.Index), queue(q), cl.Priority, it.At, cl.Runtime,
			fmt.Sprintf(`{name: main, count: %d, requests: {cpu: %dm}}`, max(1, cl.Pods), cl.PodMilliCPU))
	}
	return w.Flush()
}

// writeQueue writes a profile's ClusterQueue and its LocalQueue.
func writeQueue(w io.Writer, q baseline.Queue) {
	cq := queueName(q.Cohort, q.Index)
	borrow := ""
	if q.BorrowingMilli >= 0 {
		borrow = fmt.Sprintf(", borrowingLimit: %dm", q.BorrowingMilli)
	}
	fmt.Fprintf(w, `---
apiVersion: sluice.dev/v1beta1
kind: ClusterQueue
metadata: {name: %s}
spec:
  cohort: cohort-%d
  namespaceSelector: {}
  preemption: {reclaimWithinCohort: %s, withinClusterQueue: %s}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: %s
      resources:
      - {name: cpu, nominalQuota: %dm%s}
---
apiVersion: sluice.dev/v1beta1
kind: LocalQueue
metadata: {name: %s, namespace: %s}
spec: {clusterQueue: %s}
`, cq, q.Cohort, cmp.Or(q.ReclaimWithinCohort, "Never"), cmp.Or(q.WithinCQueue, "Never"), flavor, q.NominalMilli, borrow, cq, namespace, cq)
}

func main() {
	topology := flag.Bool("topology", false, "write Kueue's topology-aware scheduling configuration instead of the baseline")
	profile := flag.String("profile", "", "write this profile instead (large-scale, or a Kueue generator file without a topology)")
	flag.Parse()
	if *profile != "" {
		p, err := baseline.LoadProfile(*profile)
		if err == nil {
			err = writeProfile(os.Stdout, p)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kueuebaseline:", err)
			os.Exit(1)
		}
		return
	}
	if err := writeScenario(os.Stdout, *topology); err != nil {
		fmt.Fprintln(os.Stderr, "kueuebaseline:", err)
		os.Exit(1)
	}
}
