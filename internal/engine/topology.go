package engine

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Topology is a Topology object: the node labels of its levels, from the
// widest (a block) to the narrowest (a rack, then a node's hostname).
type Topology struct {
	Name   string
	Levels []string
}

// Node is one node's capacity as topology-aware scheduling counts it.
type Node struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// Allocatable is what the node offers, Used what pods outside
	// topology-aware workloads take of it; both in canonical units.
	Allocatable map[string]int64 `json:"allocatable,omitempty"`
	Used        map[string]int64 `json:"used,omitempty"`
	Taints      []corev1.Taint   `json:"taints,omitempty"`
	// Unschedulable: cordoned; nothing new is placed on it, what runs
	// there stays.
	Unschedulable bool `json:"unschedulable,omitempty"`
	// NotReady: the node does not report Ready. Nothing is placed on it,
	// and a workload placed on it is evicted (ReasonNodeFailure).
	NotReady bool `json:"notReady,omitempty"`
}

// TopologyRequest is how a pod set asks to be placed, from its pod
// template's annotations. The zero value asks nothing: on a
// topology-aware flavor its pods are placed unconstrained.
type TopologyRequest struct {
	// Required: all pods in one domain of this level (a node label).
	Required string `json:"required,omitempty"`
	// Preferred: as few domains as possible, one of this level if any
	// fits, else widening level by level.
	Preferred string `json:"preferred,omitempty"`
	// Unconstrained: anywhere, only counted against capacity.
	Unconstrained bool `json:"unconstrained,omitempty"`
	// SliceLevel with SliceSize: pods in slices of SliceSize, each slice
	// within one domain of SliceLevel.
	SliceLevel string `json:"sliceLevel,omitempty"`
	SliceSize  int32  `json:"sliceSize,omitempty"`
	// Group names pod sets placed together, in one domain of the level
	// they request (a leader and its workers).
	Group string `json:"group,omitempty"`
}

// IsZero reports whether the request asks nothing.
func (r TopologyRequest) IsZero() bool { return r == TopologyRequest{} }

// TopologyAssignment is where a pod set's pods go: counts per domain of
// the lowest level, each domain named by its values of Levels.
type TopologyAssignment struct {
	Levels  []string         `json:"levels"`
	Domains []TopologyDomain `json:"domains"`
}

// TopologyDomain is one domain of a TopologyAssignment.
type TopologyDomain struct {
	Values []string `json:"values"`
	Count  int32    `json:"count"`
}

// Pods counts the pods the assignment places.
func (t *TopologyAssignment) Pods() int32 {
	var n int32
	for _, d := range t.Domains {
		n += d.Count
	}
	return n
}

// LevelName is the short name of a topology level for messages: the last
// segment of its label, without a "topology-" prefix ("rack" for
// cloud.provider.com/topology-rack), and "node" for the hostname label.
func LevelName(label string) string {
	if label == corev1.LabelHostname {
		return "node"
	}
	s := label[strings.LastIndexByte(label, '/')+1:]
	return strings.TrimPrefix(s, "topology-")
}

// placeMode is how a placement chooses its widest domains.
type placeMode uint8

const (
	// placeRequired: one domain of the level, else no placement.
	placeRequired placeMode = iota
	// placePreferred: one domain of the level if any fits, else of the
	// next wider level, else the fewest top-level domains.
	placePreferred
	// placeUnconstrained: lowest-level domains, the fullest first.
	placeUnconstrained
)

// placeReq is one pod set's placement request over a flavor's leaves.
type placeReq struct {
	mode placeMode
	// level is the index of the requested level (the lowest for
	// unconstrained).
	level int
	// unitLevel is the level a slice must stay within, and size its pods;
	// without slices, size is 1 and unitLevel the lowest level.
	unitLevel int
	size      int64
	// units to place: pods / size.
	units int64
}

// leafCount is a number of pods placed in one leaf domain.
type leafCount struct {
	leaf  int
	count int64
}

// span is a domain: the leaves [lo, hi) that share its level's prefix.
type span struct{ lo, hi int }

// placement finds leaf counts for r within the leaves [lo, hi) of f,
// given how many pods fit in each leaf. On failure it says why, with
// best the most units any domain of the requested level has room for.
type placement struct {
	f    *tasFlavor
	t    *fitTable
	r    placeReq
	out  []leafCount
	best int64
}

// capOf is how many units fit in a domain of level k: above or at the
// unit level, whole slices of its unit-level domains; below it, pods.
func (p *placement) capOf(k int, d span) int64 {
	if k > p.r.unitLevel || p.r.size == 1 {
		return p.t.sum(p.f, k, d)
	}
	var n int64
	for _, u := range p.f.domains(p.r.unitLevel, d) {
		n += p.t.sum(p.f, p.r.unitLevel, u) / p.r.size
	}
	return n
}

// run places the request within d, or reports false.
func (p *placement) run(d span) bool {
	f, r := p.f, p.r
	switch r.mode {
	case placeRequired:
		doms := f.domains(r.level, d)
		caps := p.caps(r.level, doms)
		i := bestFit(caps, r.units)
		if i < 0 {
			p.best = maxOf(caps)
			return false
		}
		p.descend(r.level, doms[i:i+1], []int64{r.units})
		return true
	case placeUnconstrained:
		leaves := f.domains(len(f.levels)-1, d)
		caps := p.caps(len(f.levels)-1, leaves)
		if i := bestFit(caps, r.units); i >= 0 {
			p.descend(len(f.levels)-1, leaves[i:i+1], []int64{r.units})
			return true
		}
		return p.spread(len(f.levels)-1, leaves, caps, fullestFirst)
	}
	// Preferred: the requested level, then wider and wider.
	for k := r.level; k >= 0; k-- {
		doms := f.domains(k, d)
		caps := p.caps(k, doms)
		if k == r.level {
			p.best = maxOf(caps)
		}
		if i := bestFit(caps, r.units); i >= 0 {
			p.descend(k, doms[i:i+1], []int64{r.units})
			return true
		}
		if k == 0 {
			return p.spread(0, doms, caps, fewestFirst)
		}
	}
	return false
}

// spread places the units over several domains of level k, chosen by
// pick; when they cannot hold them all, best says how many they can.
func (p *placement) spread(k int, doms []span, caps []int64, pick func([]int64, int64) ([]int, []int64, bool)) bool {
	idx, counts, ok := pick(caps, p.r.units)
	if !ok {
		p.best = sum(caps)
		return false
	}
	start := make([]span, len(idx))
	for j, i := range idx {
		start[j] = doms[i]
	}
	p.descend(k, start, counts)
	return true
}

// caps is how many units fit in each of doms, domains of level k. When
// they are whole domains and a unit is a pod, the fit table has them: the
// result is then the table's own, to read, not to change.
func (p *placement) caps(k int, doms []span) []int64 {
	if len(doms) > 0 && (k > p.r.unitLevel || p.r.size == 1) {
		if i := p.f.spanOf[k][doms[0].lo]; p.f.spans[k][i] == doms[0] && i+len(doms) <= len(p.f.spans[k]) && p.f.spans[k][i+len(doms)-1] == doms[len(doms)-1] {
			return p.t.dom[k][i : i+len(doms)]
		}
	}
	out := make([]int64, len(doms))
	for i, d := range doms {
		out[i] = p.capOf(k, d)
	}
	return out
}

// descend splits each chosen domain's units among its children, level by
// level, down to the leaves: the fewest children, the last the tightest
// fit. Crossing below the unit level, a slice's units become its pods.
func (p *placement) descend(k int, doms []span, units []int64) {
	last := len(p.f.levels) - 1
	for k < last {
		var next []span
		var nextUnits []int64
		for i, d := range doms {
			n := units[i]
			if k == p.r.unitLevel && p.r.size > 1 {
				n *= p.r.size
			}
			children := p.f.domains(k+1, d)
			caps := p.caps(k+1, children)
			idx, counts, _ := fewestFirst(caps, n)
			for j, c := range idx {
				next, nextUnits = append(next, children[c]), append(nextUnits, counts[j])
			}
		}
		doms, units, k = next, nextUnits, k+1
	}
	for i, d := range doms {
		n := units[i]
		if k == p.r.unitLevel && p.r.size > 1 {
			n *= p.r.size
		}
		p.out = append(p.out, leafCount{leaf: d.lo, count: n})
	}
}

// bestFit is the index of the smallest capacity that holds n, or -1; the
// first such on a tie.
func bestFit(caps []int64, n int64) int {
	best := -1
	for i, c := range caps {
		if c >= n && (best < 0 || c < caps[best]) {
			best = i
		}
	}
	return best
}

// fewestFirst covers n with the fewest domains: the largest ones, until
// one can hold the rest, and then the tightest that can.
func fewestFirst(caps []int64, n int64) (idx []int, counts []int64, ok bool) {
	used := make([]bool, len(caps))
	for n > 0 {
		// The tightest unused domain that holds the rest ends it.
		fitAt, largest := -1, -1
		for i, c := range caps {
			if used[i] || c <= 0 {
				continue
			}
			if c >= n && (fitAt < 0 || c < caps[fitAt]) {
				fitAt = i
			}
			if largest < 0 || c > caps[largest] {
				largest = i
			}
		}
		if fitAt >= 0 {
			return append(idx, fitAt), append(counts, n), true
		}
		if largest < 0 {
			return idx, counts, false
		}
		used[largest] = true
		idx, counts = append(idx, largest), append(counts, caps[largest])
		n -= caps[largest]
	}
	return idx, counts, true
}

// fullestFirst covers n from the domains with the least room first, so
// unconstrained pods fill gaps and leave whole domains free.
func fullestFirst(caps []int64, n int64) (idx []int, counts []int64, ok bool) {
	order := make([]int, 0, len(caps))
	for i, c := range caps {
		if c > 0 {
			order = append(order, i)
		}
	}
	// Insertion sort keeps ties in domain order; the lists are short.
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && caps[order[j]] < caps[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	for _, i := range order {
		if n == 0 {
			break
		}
		take := min(caps[i], n)
		idx, counts = append(idx, i), append(counts, take)
		n -= take
	}
	return idx, counts, n == 0
}

func maxOf(v []int64) int64 {
	var m int64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}
