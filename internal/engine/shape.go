package engine

import (
	"fmt"
	"sort"
	"strings"
)

// shapeKey renders what flavor assignment reads of a workload, its pod
// sets (names, counts, requests, node selectors, tolerations, topology
// requests), in a fixed
// order. Equal keys mean equal outcomes in the same queue and state.
func shapeKey(pss []PodSet) string {
	var b strings.Builder
	for _, ps := range pss {
		fmt.Fprintf(&b, "%s/%d/%d{", ps.Name, ps.Count, ps.MinCount)
		for _, k := range sortedKeys(ps.Requests) {
			fmt.Fprintf(&b, "%s=%d,", k, ps.Requests[k])
		}
		b.WriteString("}{")
		for _, k := range sortedKeys(ps.NodeSelector) {
			fmt.Fprintf(&b, "%q=%q,", k, ps.NodeSelector[k])
		}
		b.WriteString("}{")
		for _, t := range ps.Tolerations {
			fmt.Fprintf(&b, "%q%q%q%q%v,", t.Key, t.Operator, t.Value, t.Effect, t.TolerationSeconds)
		}
		b.WriteString("}")
		for _, k := range sortedKeys(ps.pinned) {
			fmt.Fprintf(&b, "@%s=%s,", k, ps.pinned[k])
		}
		if !ps.Topology.IsZero() {
			fmt.Fprintf(&b, "%+v", ps.Topology)
		}
	}
	return b.String()
}

// shapeID interns a workload's shape key so shapes compare as integers.
func (e *Engine) shapeID(pss []PodSet) uint32 {
	k := shapeKey(pss)
	id, ok := e.shapes[k]
	if !ok {
		id = uint32(len(e.shapes) + 1)
		e.shapes[k] = id
	}
	return id
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
