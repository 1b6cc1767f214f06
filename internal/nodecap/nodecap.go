// Package nodecap is the capacity of the nodes topology-aware flavors
// place pods on, as the watcher mirrors it into the sluice-nodes KV bucket
// and the admission service reads it: one key per node, whose value is
// what the engine counts of the node (engine.Node): its labels,
// allocatable, taints, whether it takes pods, and what the pods outside
// topology-aware workloads running on it request.
//
// Pods of topology-aware workloads (labelled v1beta1.TopologyPodLabel) are
// left out: their workload's placement already counts them, and counting
// them twice would leave their domain looking full.
package nodecap

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-dev/sluice/api/v1beta1"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/jobframework"
)

// Bucket is the KV bucket of node capacity.
const Bucket = bus.BucketNodes

const keyPrefix = "node."

// Key is a node's key. Node names are DNS subdomains: letters, digits, '-'
// and '.', all valid in KV keys.
func Key(node string) string { return keyPrefix + node }

// NodeOf is the node a key names, or false for a key that names none.
func NodeOf(key string) (string, bool) {
	n, ok := strings.CutPrefix(key, keyPrefix)
	return n, ok && n != ""
}

// InTopology reports whether a node carries every level label of one of
// the topologies: only those are mirrored.
func InTopology(labels map[string]string, topologies [][]string) bool {
	for _, levels := range topologies {
		all := len(levels) > 0
		for _, l := range levels {
			if _, ok := labels[l]; !ok {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// Counts reports whether a pod's requests count against its node: it is
// bound, has not ended, and is not of a topology-aware workload.
func Counts(p *corev1.Pod) bool {
	if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	_, tas := p.Labels[v1beta1.TopologyPodLabel]
	return !tas
}

// Capacity is what the engine counts of a node with the given pods bound
// to it (those that do not count are skipped).
func Capacity(n *corev1.Node, pods []*corev1.Pod) engine.Node {
	out := engine.Node{
		Name:          n.Name,
		Labels:        n.Labels,
		Allocatable:   map[string]int64{},
		Taints:        n.Spec.Taints,
		Unschedulable: n.Spec.Unschedulable,
		NotReady:      !ready(n),
	}
	for r, q := range n.Status.Allocatable {
		out.Allocatable[string(r)] = engine.Canonical(string(r), q)
	}
	for _, p := range pods {
		if !Counts(p) {
			continue
		}
		if out.Used == nil {
			out.Used = map[string]int64{}
		}
		for r, q := range jobframework.PodRequests(&p.Spec) {
			out.Used[string(r)] += engine.Canonical(string(r), q)
		}
		out.Used[string(corev1.ResourcePods)]++
	}
	return out
}

// ready: the node's Ready condition is True. A node that has not reported
// it yet counts as not ready.
func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Encode is a node's value; the same capacity encodes to the same bytes.
func Encode(n engine.Node) ([]byte, error) {
	sort.Slice(n.Taints, func(i, j int) bool { return n.Taints[i].Key < n.Taints[j].Key })
	return json.Marshal(n)
}

// Decode reads a value.
func Decode(b []byte) (engine.Node, error) {
	var n engine.Node
	if err := json.Unmarshal(b, &n); err != nil {
		return n, fmt.Errorf("node capacity: %w", err)
	}
	if n.Name == "" {
		return n, fmt.Errorf("node capacity: no name")
	}
	return n, nil
}
