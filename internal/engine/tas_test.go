package engine

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
)

const (
	lvlBlock = "example.com/block"
	lvlRack  = "example.com/rack"
)

// cluster builds blocks × racks × nodes nodes of gpus GPUs each, labelled
// block "b1", rack "r1" (within its block) and hostname "b1r1n1".
func cluster(blocks, racks, nodes int, gpus int64) []Node {
	var out []Node
	for b := 1; b <= blocks; b++ {
		for r := 1; r <= racks; r++ {
			for n := 1; n <= nodes; n++ {
				out = append(out, Node{
					Name: fmt.Sprintf("b%dr%dn%d", b, r, n),
					Labels: map[string]string{
						lvlBlock: fmt.Sprintf("b%d", b), lvlRack: fmt.Sprintf("r%d", r),
						corev1.LabelHostname: fmt.Sprintf("b%dr%dn%d", b, r, n),
						"pool":               "gpu",
					},
					Allocatable: map[string]int64{"gpu": gpus, "pods": 110, "cpu": 64000},
				})
			}
		}
	}
	return out
}

// withNode changes the named node.
func withNode(nodes []Node, name string, f func(*Node)) []Node {
	for i := range nodes {
		if nodes[i].Name == name {
			f(&nodes[i])
		}
	}
	return nodes
}

// tasConfig is one ClusterQueue "cq" with gpu quota on the
// topology-aware flavor "tas" (block, rack, hostname).
func tasConfig(cq *cqBuilder) Config {
	return Config{
		Flavors:       []Flavor{{Name: "tas", NodeLabels: map[string]string{"pool": "gpu"}, TopologyName: "dc"}},
		Topologies:    []Topology{{Name: "dc", Levels: []string{lvlBlock, lvlRack, corev1.LabelHostname}}},
		ClusterQueues: []ClusterQueue{cq.obj()},
		LocalQueues:   lqs("ns", "cq"),
	}
}

func (b *wlBuilder) topology(t TopologyRequest) *wlBuilder {
	b.w.PodSets[len(b.w.PodSets)-1].Topology = t
	return b
}

func (b *wlBuilder) tolerate(key string) *wlBuilder {
	ps := &b.w.PodSets[len(b.w.PodSets)-1]
	ps.Tolerations = append(ps.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	return b
}

// placedOn marks the workload as running in cq on flavor tas, its single
// pod set on the given hosts ("b1r1n1:4").
func (b *wlBuilder) placedOn(cq string, hosts ...string) *wlBuilder {
	b.admittedIn(cq, "tas", 0)
	ta := &TopologyAssignment{Levels: []string{lvlBlock, lvlRack, corev1.LabelHostname}}
	for _, h := range hosts {
		var bl, r, n int
		var c int32
		if _, err := fmt.Sscanf(h, "b%dr%dn%d:%d", &bl, &r, &n, &c); err != nil {
			panic(err)
		}
		ta.Domains = append(ta.Domains, TopologyDomain{Values: []string{fmt.Sprintf("b%d", bl), fmt.Sprintf("r%d", r), fmt.Sprintf("b%dr%dn%d", bl, r, n)}, Count: c})
	}
	b.w.Admission.PodSets[0].Topology = ta
	return b
}

// placed renders a decision's placement: "main=6 b1r1n1:4 b1r1n2:2".
func placed(d Decision) string {
	var parts []string
	for _, ps := range d.PodSets {
		s := fmt.Sprintf("%s=%d", ps.Name, ps.Count)
		if ps.Topology != nil {
			for _, dom := range ps.Topology.Domains {
				s += fmt.Sprintf(" %s:%d", dom.Values[len(dom.Values)-1], dom.Count)
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

type tasCase struct {
	name          string
	cq            *cqBuilder
	nodes         []Node
	workloads     []Workload
	wantPlaced    map[string]string
	wantPreempted []string
	wantPending   map[string]string
}

func runTAS(t *testing.T, cases []tasCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(tasConfig(tc.cq))
			e.SetNodes(tc.nodes)
			for _, w := range tc.workloads {
				if err := e.Submit(w); err != nil {
					t.Fatalf("Submit(%s): %v", w.Key(), err)
				}
			}
			gotPlaced, gotPending := map[string]string{}, map[string]string{}
			var gotPreempted []string
			for _, d := range e.Cycle(t0) {
				switch d.Kind {
				case KindAdmitted:
					gotPlaced[d.Key] = placed(d)
				case KindPreempted:
					gotPreempted = append(gotPreempted, d.Key)
				}
			}
			for _, w := range tc.workloads {
				if !e.IsAdmitted(w.Key()) {
					gotPending[w.Key()] = e.PendingReason(w.Key())
				}
			}
			sort.Strings(gotPreempted)
			opt := cmpopts.EquateEmpty()
			if d := cmp.Diff(tc.wantPlaced, gotPlaced, opt); d != "" {
				t.Errorf("placed (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantPreempted, gotPreempted, opt); d != "" {
				t.Errorf("preempted (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantPending, gotPending, opt); d != "" {
				t.Errorf("pending (-want +got):\n%s", d)
			}
		})
	}
}

// Every case runs on 2 blocks × 2 racks × 2 nodes of 4 GPUs (a rack holds
// 8 one-GPU pods, a block 16), with quota for all 32.
func TestTopologyPlacement(t *testing.T) {
	cq := func() *cqBuilder { return newCQ("cq").quota("tas", "gpu", 32) }
	runTAS(t, []tasCase{
		{
			name:       "required rack puts every pod in one rack, the first of the best fits",
			cq:         cq(),
			nodes:      cluster(2, 2, 2, 4),
			workloads:  []Workload{newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj()},
			wantPlaced: map[string]string{"ns/a": "main=6 b1r1n1:4 b1r1n2:2"},
		},
		{
			name:  "required rack chooses the rack it fills most tightly",
			cq:    cq(),
			nodes: cluster(2, 2, 2, 4),
			workloads: []Workload{
				newWL("ns", "running").pods("main", 6, "gpu", 1).placedOn("cq", "b2r1n1:4", "b2r1n2:2").obj(),
				newWL("ns", "a").pods("main", 2, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj(),
			},
			wantPlaced: map[string]string{"ns/a": "main=2 b2r1n2:2"},
		},
		{
			name:  "a job too big for any rack waits with the reason, a smaller one behind it is admitted",
			cq:    cq(),
			nodes: cluster(2, 2, 2, 4),
			workloads: []Workload{
				newWL("ns", "running").pods("main", 3, "gpu", 1).placedOn("cq", "b1r1n1:3").obj(),
				newWL("ns", "big").pods("main", 9, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj(),
				newWL("ns", "small").at(time.Second).pods("main", 4, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj(),
			},
			wantPlaced: map[string]string{"ns/small": "main=4 b1r1n2:4"},
			wantPending: map[string]string{
				"ns/big": "pod set main: 9 pods need one rack (level example.com/rack) of flavor tas; the best rack has room for 8 pods",
			},
		},
		{
			name:       "preferred rack widens to one block",
			cq:         cq(),
			nodes:      cluster(2, 2, 2, 4),
			workloads:  []Workload{newWL("ns", "a").pods("main", 12, "gpu", 1).topology(TopologyRequest{Preferred: lvlRack}).obj()},
			wantPlaced: map[string]string{"ns/a": "main=12 b1r1n1:4 b1r1n2:4 b1r2n1:4"},
		},
		{
			name:       "preferred takes the fewest blocks when none holds it",
			cq:         cq(),
			nodes:      cluster(2, 2, 2, 4),
			workloads:  []Workload{newWL("ns", "a").pods("main", 20, "gpu", 1).topology(TopologyRequest{Preferred: lvlRack}).obj()},
			wantPlaced: map[string]string{"ns/a": "main=20 b1r1n1:4 b1r1n2:4 b1r2n1:4 b1r2n2:4 b2r1n1:4"},
		},
		{
			name:  "preferred rack that does not fit anywhere says how much room there is",
			cq:    newCQ("cq").quota("tas", "gpu", 64),
			nodes: cluster(2, 2, 2, 4),
			workloads: []Workload{
				newWL("ns", "a").pods("main", 40, "gpu", 1).topology(TopologyRequest{Preferred: lvlRack}).obj(),
			},
			wantPending: map[string]string{
				"ns/a": "pod set main: 40 pods do not fit in the nodes of flavor tas; they have room for 32 pods",
			},
		},
		{
			name:  "unconstrained fills the fullest nodes first",
			cq:    cq(),
			nodes: cluster(2, 2, 2, 4),
			workloads: []Workload{
				newWL("ns", "running").pods("main", 3, "gpu", 1).placedOn("cq", "b1r2n1:3", "b2r1n1:1").obj(),
				newWL("ns", "a").pods("main", 5, "gpu", 1).topology(TopologyRequest{Unconstrained: true}).obj(),
			},
			wantPlaced: map[string]string{"ns/a": "main=5 b1r2n1:1 b2r1n1:3 b1r1n1:1"},
		},
		{
			name:       "without annotations the pods go to the node they fit most tightly",
			cq:         cq(),
			nodes:      cluster(2, 2, 2, 4),
			workloads:  []Workload{newWL("ns", "a").pods("main", 3, "gpu", 1).obj()},
			wantPlaced: map[string]string{"ns/a": "main=3 b1r1n1:3"},
		},
		{
			name:  "slices: each slice of 4 stays in one rack, all in one block",
			cq:    cq(),
			nodes: cluster(2, 2, 2, 4),
			workloads: []Workload{
				newWL("ns", "running").pods("main", 5, "gpu", 1).placedOn("cq", "b1r1n1:4", "b1r1n2:1").obj(),
				newWL("ns", "a").pods("main", 12, "gpu", 1).topology(TopologyRequest{Required: lvlBlock, SliceLevel: lvlRack, SliceSize: 4}).obj(),
			},
			wantPlaced: map[string]string{"ns/a": "main=12 b2r1n1:4 b2r1n2:4 b2r2n1:4"},
		},
		{
			name:  "slices never straddle racks, pods within one take the fewest nodes",
			cq:    cq(),
			nodes: cluster(1, 2, 2, 4),
			workloads: []Workload{
				newWL("ns", "running").pods("main", 6, "gpu", 1).placedOn("cq", "b1r1n1:3", "b1r2n1:3").obj(),
				newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlBlock, SliceLevel: lvlRack, SliceSize: 3}).obj(),
			},
			wantPlaced: map[string]string{"ns/a": "main=6 b1r1n2:3 b1r2n2:3"},
		},
		{
			name:  "slices of 6 cannot be made from racks with 5 free each",
			cq:    cq(),
			nodes: cluster(1, 2, 2, 4),
			workloads: []Workload{
				newWL("ns", "running").pods("main", 6, "gpu", 1).placedOn("cq", "b1r1n1:3", "b1r2n1:3").obj(),
				newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlBlock, SliceLevel: lvlRack, SliceSize: 6}).obj(),
			},
			wantPending: map[string]string{
				"ns/a": "pod set main: 1 slices of 6 pods (each in one rack) need one block (level example.com/block) of flavor tas; the best block has room for 0 slices",
			},
		},
		{
			name:  "a leader and its workers are placed in one rack",
			cq:    cq(),
			nodes: cluster(1, 2, 2, 4),
			workloads: []Workload{
				newWL("ns", "running").pods("main", 4, "gpu", 1).placedOn("cq", "b1r2n1:4").obj(),
				newWL("ns", "lws").
					pods("leader", 1, "gpu", 1).topology(TopologyRequest{Required: lvlRack, Group: "g"}).
					pods("workers", 4, "gpu", 1).topology(TopologyRequest{Required: lvlRack, Group: "g"}).obj(),
			},
			// Alone the leader fits r2 best (4 free), but the workers
			// would not fit beside it: the group goes to r1.
			wantPlaced: map[string]string{"ns/lws": "leader=1 b1r1n1:1; workers=4 b1r1n2:4"},
		},
		{
			name:  "a node with a taint the pods do not tolerate does not count",
			cq:    cq(),
			nodes: withNode(cluster(1, 2, 2, 4), "b1r1n1", func(n *Node) { n.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}} }),
			workloads: []Workload{
				newWL("ns", "a").pods("main", 8, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj(),
				newWL("ns", "b").at(time.Second).pods("main", 2, "gpu", 1).tolerate("maintenance").topology(TopologyRequest{Required: lvlRack}).obj(),
			},
			wantPlaced: map[string]string{"ns/a": "main=8 b1r2n1:4 b1r2n2:4", "ns/b": "main=2 b1r1n1:2"},
		},
		{
			name:  "an unschedulable node and other pods' usage leave less room",
			cq:    cq(),
			nodes: withNode(withNode(cluster(1, 2, 2, 4), "b1r1n1", func(n *Node) { n.Unschedulable = true }), "b1r2n2", func(n *Node) { n.Used = map[string]int64{"gpu": 3} }),
			workloads: []Workload{
				newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj(),
			},
			wantPending: map[string]string{
				"ns/a": "pod set main: 6 pods need one rack (level example.com/rack) of flavor tas; the best rack has room for 5 pods",
			},
		},
		{
			name:  "a level the topology does not have is named",
			cq:    cq(),
			nodes: cluster(1, 1, 1, 4),
			workloads: []Workload{
				newWL("ns", "a").pods("main", 1, "gpu", 1).topology(TopologyRequest{Required: "example.com/zone"}).obj(),
			},
			wantPending: map[string]string{
				"ns/a": "pod set main: level example.com/zone is not a level of the topology of flavor tas (example.com/block, example.com/rack, kubernetes.io/hostname)",
			},
		},
		{
			name:  "a request no node offers is named",
			cq:    newCQ("cq").quota("tas", "gpu", 32).quota("tas", "fpga", 4),
			nodes: cluster(1, 1, 1, 4),
			workloads: []Workload{
				newWL("ns", "a").pods("main", 1, "gpu", 1, "fpga", 1).obj(),
			},
			wantPending: map[string]string{"ns/a": "pod set main: no node of flavor tas offers fpga"},
		},
		{
			name:  "preemption frees the rack that makes room, and only it",
			cq:    cq().preemption(LowerPriority, Never),
			nodes: cluster(1, 2, 2, 4),
			workloads: []Workload{
				newWL("ns", "keep-1").prio(100).pods("main", 2, "gpu", 1).placedOn("cq", "b1r1n2:2").obj(),
				newWL("ns", "low-a").prio(2).pods("main", 6, "gpu", 1).placedOn("cq", "b1r1n1:4", "b1r1n2:2").obj(),
				newWL("ns", "keep-2").prio(100).pods("main", 5, "gpu", 1).placedOn("cq", "b1r2n1:4", "b1r2n2:1").obj(),
				newWL("ns", "low-b").prio(1).pods("main", 3, "gpu", 1).placedOn("cq", "b1r2n2:3").obj(),
				newWL("ns", "urgent").prio(50).pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj(),
			},
			wantPreempted: []string{"ns/low-a"},
			wantPlaced:    map[string]string{"ns/urgent": "main=6 b1r1n1:4 b1r1n2:2"},
			wantPending:   map[string]string{"ns/low-a": "pod set main: 6 pods do not fit in the nodes of flavor tas; they have room for 0 pods"},
		},
		{
			name:  "without a preemption policy a full rack is a wait",
			cq:    cq(),
			nodes: cluster(1, 1, 2, 4),
			workloads: []Workload{
				newWL("ns", "running").pods("main", 6, "gpu", 1).placedOn("cq", "b1r1n1:4", "b1r1n2:2").obj(),
				newWL("ns", "a").pods("main", 4, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj(),
			},
			wantPending: map[string]string{
				"ns/a": "pod set main: 4 pods need one rack (level example.com/rack) of flavor tas; the best rack has room for 2 pods",
			},
		},
	})
}

// TestNodeFailureEvictsAndRequeues: a workload placed on a node that goes
// away, or stops being Ready, is evicted with the node named, and placed
// anew where the nodes have room; a cordoned node keeps what runs there.
// TestNodeFailure: a node under a running workload's placement is
// deleted or stops being Ready. Its pods there move to other domains the
// pod set may use (KindReplaced: same quota, same admission), or, when
// they fit nowhere, the workload is evicted and placed anew.
func TestNodeFailure(t *testing.T) {
	gone := func(name string) func([]Node) []Node {
		return func(ns []Node) []Node { return slices.DeleteFunc(ns, func(n Node) bool { return n.Name == name }) }
	}
	notReady := func(names ...string) func([]Node) []Node {
		return func(ns []Node) []Node {
			for _, name := range names {
				ns = withNode(ns, name, func(n *Node) { n.NotReady = true })
			}
			return ns
		}
	}
	cases := []struct {
		name string
		// nodes: blocks, racks, nodes per rack, of 4 GPUs.
		nodes        [3]int
		first        []Workload
		wantFirst    map[string]string
		change       func([]Node) []Node
		wantReplaced map[string]string // placement after, by workload
		wantMessage  string            // of the replacement or eviction
		wantEvicted  string
		wantPlaced   string // the evicted workload's placement anew
	}{
		{
			name: "required rack: the pods of a deleted node go to another node of the rack", nodes: [3]int{1, 2, 4},
			first:     []Workload{newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj()},
			wantFirst: map[string]string{"ns/a": "main=6 b1r1n1:4 b1r1n2:2"},
			change:    gone("b1r1n1"), wantReplaced: map[string]string{"ns/a": "main=6 b1r1n2:2 b1r1n3:4"},
			wantMessage: "node b1r1n1 of its placement is gone; pod set main: 4 pods from b1r1n1 to b1r1n3:4",
		},
		{
			name: "required rack: a node not Ready, the rest of its rack full: evicted, placed anew in the other rack", nodes: [3]int{1, 2, 2},
			first:       []Workload{newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj()},
			wantFirst:   map[string]string{"ns/a": "main=6 b1r1n1:4 b1r1n2:2"},
			change:      notReady("b1r1n2"),
			wantEvicted: "ns/a", wantMessage: "node b1r1n2 of its placement is not Ready; its pods there fit nowhere else it may run",
			wantPlaced: "main=6 b1r2n1:4 b1r2n2:2",
		},
		{
			name: "required rack: room only in another rack is no replacement", nodes: [3]int{1, 2, 2},
			first:       []Workload{newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj()},
			wantFirst:   map[string]string{"ns/a": "main=6 b1r1n1:4 b1r1n2:2"},
			change:      gone("b1r1n1"),
			wantEvicted: "ns/a", wantMessage: "node b1r1n1 of its placement is gone; its pods there fit nowhere else it may run",
			wantPlaced: "main=6 b1r2n1:4 b1r2n2:2",
		},
		{
			name: "every pod on the failed node: placed anew, keeping the admission", nodes: [3]int{1, 2, 2},
			first:     []Workload{newWL("ns", "a").pods("main", 4, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj()},
			wantFirst: map[string]string{"ns/a": "main=4 b1r1n1:4"},
			change:    notReady("b1r1n1"), wantReplaced: map[string]string{"ns/a": "main=4 b1r1n2:4"},
			wantMessage: "node b1r1n1 of its placement is not Ready; pod set main: 4 pods from b1r1n1 to b1r1n2:4",
		},
		{
			name: "slices of one node move whole, within the required block", nodes: [3]int{2, 1, 2},
			first: []Workload{newWL("ns", "a").pods("main", 6, "gpu", 1).
				topology(TopologyRequest{Required: lvlBlock, SliceLevel: corev1.LabelHostname, SliceSize: 2}).obj()},
			wantFirst: map[string]string{"ns/a": "main=6 b1r1n1:4 b1r1n2:2"},
			change:    gone("b1r1n1"),
			// Two slices of two: only one fits on b1r1n2 (2 GPUs left), so none is a replacement within the block.
			wantEvicted: "ns/a", wantMessage: "node b1r1n1 of its placement is gone; its pods there fit nowhere else it may run",
			wantPlaced: "main=6 b2r1n1:4 b2r1n2:2",
		},
		{
			name: "slices of one node: each whole slice to a node with room for it", nodes: [3]int{1, 1, 3},
			first: []Workload{newWL("ns", "a").pods("main", 4, "gpu", 1).
				topology(TopologyRequest{Required: lvlBlock, SliceLevel: corev1.LabelHostname, SliceSize: 2}).obj(),
				newWL("ns", "b").pods("main", 4, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj()},
			wantFirst: map[string]string{"ns/a": "main=4 b1r1n1:4", "ns/b": "main=4 b1r1n2:4"},
			change:    gone("b1r1n2"),
			// b's pods cannot go to b1r1n1 (full); b1r1n3 is free.
			wantReplaced: map[string]string{"ns/b": "main=4 b1r1n3:4"},
			wantMessage:  "node b1r1n2 of its placement is gone; pod set main: 4 pods from b1r1n2 to b1r1n3:4",
		},
		{
			name: "slices spanning nodes stay in their rack", nodes: [3]int{1, 2, 3},
			first: []Workload{newWL("ns", "a").pods("main", 8, "gpu", 1).
				topology(TopologyRequest{Preferred: lvlBlock, SliceLevel: lvlRack, SliceSize: 4}).obj()},
			wantFirst: map[string]string{"ns/a": "main=8 b1r1n1:4 b1r1n2:4"},
			change:    notReady("b1r1n2"), wantReplaced: map[string]string{"ns/a": "main=8 b1r1n1:4 b1r1n3:4"},
			wantMessage: "node b1r1n2 of its placement is not Ready; pod set main: 4 pods from b1r1n2 to b1r1n3:4",
		},
		{
			name: "preferred rack: its rack full, the pods go to the next closest", nodes: [3]int{1, 2, 2},
			first:     []Workload{newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Preferred: lvlRack}).obj()},
			wantFirst: map[string]string{"ns/a": "main=6 b1r1n1:4 b1r1n2:2"},
			change:    gone("b1r1n1"), wantReplaced: map[string]string{"ns/a": "main=6 b1r1n2:2 b1r2n1:4"},
			wantMessage: "node b1r1n1 of its placement is gone; pod set main: 4 pods from b1r1n1 to b1r2n1:4",
		},
		{
			name: "unconstrained: anywhere with room", nodes: [3]int{1, 2, 1},
			first:     []Workload{newWL("ns", "a").pods("main", 3, "gpu", 1).topology(TopologyRequest{Unconstrained: true}).obj()},
			wantFirst: map[string]string{"ns/a": "main=3 b1r1n1:3"},
			change:    notReady("b1r1n1"), wantReplaced: map[string]string{"ns/a": "main=3 b1r2n1:3"},
			wantMessage: "node b1r1n1 of its placement is not Ready; pod set main: 3 pods from b1r1n1 to b1r2n1:3",
		},
		{
			name: "a node cordoned: nothing moves", nodes: [3]int{1, 2, 2},
			first:     []Workload{newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj()},
			wantFirst: map[string]string{"ns/a": "main=6 b1r1n1:4 b1r1n2:2"},
			change:    func(ns []Node) []Node { return withNode(ns, "b1r1n2", func(n *Node) { n.Unschedulable = true }) },
		},
		{
			name: "a node not under the placement deleted: nothing moves", nodes: [3]int{1, 2, 2},
			first:     []Workload{newWL("ns", "a").pods("main", 6, "gpu", 1).topology(TopologyRequest{Required: lvlRack}).obj()},
			wantFirst: map[string]string{"ns/a": "main=6 b1r1n1:4 b1r1n2:2"},
			change:    gone("b1r2n1"),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(tasConfig(newCQ("cq").quota("tas", "gpu", 64)))
			nodes := func() []Node { return cluster(tc.nodes[0], tc.nodes[1], tc.nodes[2], 4) }
			e.SetNodes(nodes())
			for _, w := range tc.first {
				if err := e.Submit(w); err != nil {
					t.Fatal(err)
				}
			}
			first := map[string]string{}
			for _, d := range e.Cycle(t0) {
				if d.Kind == KindAdmitted {
					first[d.Key] = placed(d)
				}
			}
			if d := cmp.Diff(tc.wantFirst, first); d != "" {
				t.Fatalf("first placement (-want +got):\n%s", d)
			}
			e.SetNodes(tc.change(nodes()))
			replaced := map[string]string{}
			var message, evicted, again string
			for _, d := range e.Cycle(t0.Add(time.Minute)) {
				switch d.Kind {
				case KindReplaced:
					if d.Reason != ReasonNodeReplaced {
						t.Errorf("replaced for %s, want %s", d.Reason, ReasonNodeReplaced)
					}
					replaced[d.Key], message = placed(d), d.Message
				case KindEvicted:
					if d.Reason != ReasonNodeFailure {
						t.Errorf("evicted for %s, want %s", d.Reason, ReasonNodeFailure)
					}
					evicted, message = d.Key, d.Message
				case KindAdmitted:
					again = placed(d)
				}
			}
			if d := cmp.Diff(tc.wantReplaced, replaced, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("replaced (-want +got):\n%s", d)
			}
			if message != tc.wantMessage || evicted != tc.wantEvicted || again != tc.wantPlaced {
				t.Errorf("message %q, evicted %q, placed again %q; want %q, %q, %q", message, evicted, again, tc.wantMessage, tc.wantEvicted, tc.wantPlaced)
			}
			// A replacement holds the same quota; the domains hold its pods where they are now.
			for key, want := range tc.wantReplaced {
				if got := placed(Decision{PodSets: e.workloads[key].admitted.podSets}); got != want {
					t.Errorf("%s holds %q, want %q", key, got, want)
				}
			}
			for _, du := range e.Domains() {
				// (A cordoned node keeps what runs on it: only moves are checked.)
				if len(tc.wantReplaced) > 0 && du.Used > du.Capacity {
					t.Errorf("domain %v uses %d of %d %s", du.Values, du.Used, du.Capacity, du.Resource)
				}
			}
		})
	}
}
