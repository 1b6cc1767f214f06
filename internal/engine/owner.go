package engine

import "sort"

// Cohort trees (units, see TreeOf) are independent units of decision, so
// admission replicas divide them among themselves: each runs the whole
// engine on the whole state, mirrored, but decides only for the trees it
// owns. The ledger's compare-and-set per tree keeps two replicas that
// briefly both believe they own a tree from booking the same quota twice.

// SetOwner restricts the engine's decisions to the trees owns says this
// engine owns (by TreeOf's names; nil owns every tree, the default). A
// cycle looks at no queue of another tree: no admission, preemption,
// eviction or pending reason for its workloads, which are still known and
// hold their quota. owns("") says whether this engine tells workloads
// without a queue why they wait, so that one engine does. owns is asked
// again whenever the configuration or the nodes change the trees;
// SetOwner must be called again when ownership changes.
func (e *Engine) SetOwner(owns func(tree string) bool) {
	e.owns = owns
	e.applyOwner()
}

// Owned lists the trees this engine decides for, in name order.
func (e *Engine) Owned() []string { return e.treeNames(true) }

// Trees lists every tree's name (TreeOf), each once, in name order.
func (e *Engine) Trees() []string { return e.treeNames(false) }

func (e *Engine) treeNames(ownedOnly bool) []string {
	var out []string
	for _, root := range e.roots() {
		if ownedOnly && root.foreign {
			continue
		}
		// The roots of one unit are next to each other.
		if key := e.treeKey(root); len(out) == 0 || out[len(out)-1] != key {
			out = append(out, key)
		}
	}
	return out
}

// roots lists the roots of the cohort trees, each once, ordered by their
// tree's name and then the root's name.
func (e *Engine) roots() []*node {
	seen := map[*node]bool{}
	var out []*node
	for _, cq := range e.tree.cqOrder {
		if r := cq.node.root(); !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	keys := make(map[*node]string, len(out))
	for _, r := range out {
		keys[r] = e.treeKey(r)
	}
	sort.Slice(out, func(i, j int) bool {
		if keys[out[i]] != keys[out[j]] {
			return keys[out[i]] < keys[out[j]]
		}
		return out[i].name < out[j].name
	})
	return out
}

// treeKey is TreeOf of the queues under root.
func (e *Engine) treeKey(root *node) string {
	if u, ok := e.units[root]; ok {
		return u
	}
	if root.cq == nil {
		return "cohort/" + root.name
	}
	return "cq/" + root.cq.Name
}

// applyOwner marks the trees this engine does not own. A tree it gains
// is looked at afresh: its workloads are judged again, and each one's
// reason is told again, since another engine told the last ones.
func (e *Engine) applyOwner() {
	owned := map[string]bool{}
	for _, root := range e.roots() {
		key := e.treeKey(root)
		root.foreign = e.owns != nil && !e.owns(key)
		if root.foreign {
			continue
		}
		owned[key] = true
		if e.ownedTrees != nil && !e.ownedTrees[key] {
			e.gain(root)
		}
	}
	e.tellsUnresolved = e.owns == nil || e.owns("")
	e.ownedTrees = owned
}

// gain readies a tree that another engine decided for until now.
func (e *Engine) gain(root *node) {
	for _, cq := range e.tree.members[root] {
		cq.settled = false
		for _, ws := range cq.pending {
			ws.parked, ws.reason, ws.why, ws.behind, ws.class = false, "", nil, nil, ""
		}
	}
	// Nodes that failed while another engine decided: its placements
	// there are looked at again.
	e.nodesChanged = e.nodesChanged || e.tas != nil
}

// ours says whether this engine decides for cq's tree.
func ours(cq *cqState) bool { return !cq.node.root().foreign }
