package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestPropertyTopology drives the engine with random clusters, topology
// requests, admissions, finishes, preemptions and node failures, and
// checks after every cycle, from the decisions alone, that no node holds
// more pods than its free capacity, that every placement keeps its request
// (one domain of a required level, whole slices per slice domain, every
// pod placed), and that no pod is on a node it may not use or that failed
// (its pods moved, or it was evicted).
func TestPropertyTopology(t *testing.T) {
	for _, deferred := range []bool{false, true} {
		for seed := uint64(1); seed <= 200; seed++ {
			var opts []Option
			if deferred {
				opts = append(opts, WithDeferredEviction())
			}
			if msg := tasPropRun(seed, opts...); msg != "" {
				t.Fatalf("seed %d (deferred %v): %s", seed, deferred, msg)
			}
		}
	}
}

func tasPropRun(seed uint64, opts ...Option) string {
	r := rand.New(rand.NewPCG(seed, 7))
	nodes := cluster(1+r.IntN(2), 1+r.IntN(3), 1+r.IntN(3), int64(2+r.IntN(7)))
	for i := range nodes {
		switch r.IntN(8) {
		case 0:
			nodes[i].Unschedulable = true
		case 1:
			nodes[i].Taints = []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}
		case 2:
			nodes[i].Used = map[string]int64{"gpu": int64(r.IntN(3))}
		}
	}
	cq := newCQ("cq").quota("tas", "gpu", int64(8+r.IntN(40)))
	if r.IntN(2) == 0 {
		cq = cq.preemption(LowerPriority, Never)
	}
	e := New(tasConfig(cq), opts...)
	e.SetNodes(nodes)
	byName := map[string]*Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	wls := map[string]Workload{}
	held := map[string]Admission{}
	evicting := map[string]bool{}
	n := 0
	for step := 0; step < 60; step++ {
		switch k := r.IntN(10); {
		case k < 5:
			n++
			w := tasRandomWorkload(r, n)
			wls[w.Key()] = w
			if err := e.Submit(w); err != nil {
				return fmt.Sprintf("submit %s: %v", w.Key(), err)
			}
		case k == 7 && r.IntN(2) == 0 && len(nodes) > 0:
			// A node fails: deleted, or no longer Ready. What ran there
			// moves or is evicted at the next cycle.
			names := sortedKeys(byName)
			name := names[r.IntN(len(names))]
			if r.IntN(2) == 0 {
				nodes = slices.DeleteFunc(nodes, func(n Node) bool { return n.Name == name })
			} else {
				nodes = withNode(nodes, name, func(n *Node) { n.NotReady = true })
			}
			byName = map[string]*Node{}
			for i := range nodes {
				byName[nodes[i].Name] = &nodes[i]
			}
			e.SetNodes(slices.Clone(nodes))

		case k < 7 && len(held) > 0:
			keys := sortedKeys(held)
			key := keys[r.IntN(len(keys))]
			if err := e.Remove(key); err != nil {
				return fmt.Sprintf("remove %s: %v", key, err)
			}
			delete(held, key)
			delete(wls, key)
			delete(evicting, key)
		default:
			for _, d := range e.Cycle(t0.Add(time.Duration(step) * time.Second)) {

				switch d.Kind {
				case KindAdmitted, KindReplaced:
					held[d.Key] = Admission{ClusterQueue: d.ClusterQueue, PodSets: d.PodSets}
				case KindPreempted:
					evicting[d.Key] = true
				case KindEvicted:
					if e.deferred {
						evicting[d.Key] = true
					} else {
						delete(held, d.Key)
					}
				}
			}
			// Deferred victims stop before the next cycle.
			for key := range evicting {
				if err := e.Evict(key); err != nil {
					return fmt.Sprintf("evict %s: %v", key, err)
				}
				delete(held, key)
				delete(evicting, key)
			}
			if msg := tasCheck(wls, held, byName); msg != "" {
				return fmt.Sprintf("after step %d: %s", step, msg)
			}
		}
	}
	return ""
}

func tasRandomWorkload(r *rand.Rand, n int) Workload {
	b := newWL("ns", fmt.Sprintf("w%d", n)).prio(int32(r.IntN(3))).at(time.Duration(n) * time.Second)
	sets := 1 + r.IntN(2)
	group := ""
	if sets == 2 && r.IntN(2) == 0 {
		group = "g"
	}
	for s := 0; s < sets; s++ {
		count := int32(1 + r.IntN(8))
		b = b.pods(fmt.Sprintf("ps%d", s), count, "gpu", 1+r.IntN(2))
		var t TopologyRequest
		switch r.IntN(5) {
		case 0:
			t.Required = propPick(r, lvlBlock, lvlRack, corev1.LabelHostname)
		case 1:
			t.Preferred = propPick(r, lvlBlock, lvlRack, corev1.LabelHostname)
		case 2:
			t.Unconstrained = true
		case 3:
			t.Required = lvlBlock
			t.SliceLevel = lvlRack
			for _, size := range []int32{4, 3, 2, 1} {
				if count%size == 0 {
					t.SliceSize = size
					break
				}
			}
		}
		if group != "" && !t.Unconstrained {
			t.Group = group
		}
		if r.IntN(6) == 0 {
			b = b.tolerate("dedicated")
		}
		b = b.topology(t)
	}
	return b.obj()
}

// tasCheck verifies the held admissions against the nodes.
func tasCheck(wls map[string]Workload, held map[string]Admission, nodes map[string]*Node) string {
	used := map[string]int64{}
	for _, key := range sortedKeys(held) {
		w, adm := wls[key], held[key]
		for _, psa := range adm.PodSets {
			ps := podSetNamed(&w, psa.Name)
			ta := psa.Topology
			if ta == nil {
				return fmt.Sprintf("%s pod set %s admitted on a topology-aware flavor without a placement", key, psa.Name)
			}
			if got := ta.Pods(); got != psa.Count {
				return fmt.Sprintf("%s pod set %s: %d pods admitted, %d placed", key, psa.Name, psa.Count, got)
			}
			perSlice := map[string]int32{}
			var first []string
			for _, d := range ta.Domains {
				host := d.Values[len(d.Values)-1]
				nd := nodes[host]
				if nd == nil || nd.Unschedulable || nd.NotReady {
					return fmt.Sprintf("%s placed on node %s that may not be used", key, host)
				}
				if len(nd.Taints) > 0 && len(ps.Tolerations) == 0 {
					return fmt.Sprintf("%s placed on tainted node %s", key, host)
				}
				used[host] += int64(d.Count) * ps.Requests["gpu"]
				if k := slices.Index(ta.Levels, ps.Topology.Required); k >= 0 {
					if first == nil {
						first = d.Values[:k+1]
					} else if !slices.Equal(first, d.Values[:k+1]) {
						return fmt.Sprintf("%s pod set %s required one %s, placed in %v and %v", key, psa.Name, ps.Topology.Required, first, d.Values[:k+1])
					}
				}
				if k := slices.Index(ta.Levels, ps.Topology.SliceLevel); k >= 0 {
					perSlice[strings.Join(d.Values[:k+1], "/")] += d.Count
				}
			}
			for dom, c := range perSlice {
				if c%ps.Topology.SliceSize != 0 {
					return fmt.Sprintf("%s pod set %s: %d pods in %s, not whole slices of %d", key, psa.Name, c, dom, ps.Topology.SliceSize)
				}
			}
		}
	}
	for host, u := range used {
		nd := nodes[host]
		if free := nd.Allocatable["gpu"] - nd.Used["gpu"]; u > free {
			return fmt.Sprintf("node %s holds %d GPUs of admitted pods, has %d free", host, u, free)
		}
	}
	return ""
}
