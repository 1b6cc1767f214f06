package simulate

import (
	"strconv"
	"strings"
	"testing"
)

const topoDocs = docHead + "kind: Topology\nmetadata: {name: dc}\nspec: {levels: [{nodeLabel: example.com/rack}, {nodeLabel: kubernetes.io/hostname}]}\n"

func node(name, rack, allocatable string) string {
	return "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + name + "\n  labels: {pool: gpu, example.com/rack: " + rack + ", kubernetes.io/hostname: " + name + "}\nstatus: {allocatable: " + allocatable + "}\n"
}

func tasFlavor() string {
	return docHead + "kind: ResourceFlavor\nmetadata: {name: tas}\nspec: {nodeLabels: {pool: gpu}, topologyName: dc}\n"
}

func tasBase() []string {
	return []string{topoDocs, tasFlavor(), node("n1", "r1", "{cpu: 4}"), node("n2", "r1", "{cpu: 4}"), node("n3", "r2", "{cpu: 4}"),
		clusterQueue("cq", cpuQueue("tas", "12", "")), localQueue("default", "lq", "  clusterQueue: cq\n")}
}

func TestTopologyInTheSimulator(t *testing.T) {
	cases := []struct {
		name, annotations string
		count             int
		want              string // the admitted pod set's placement, or the pending reason
	}{
		{"required rack with Sluice's annotation", "{sluice.dev/podset-required-topology: example.com/rack}", 6, "n1:4,n2:2"},
		{"required rack with Kueue's annotation", "{kueue.x-k8s.io/podset-required-topology: example.com/rack}", 6, "n1:4,n2:2"},
		{"Sluice's annotation wins over Kueue's", "{sluice.dev/podset-required-topology: kubernetes.io/hostname, kueue.x-k8s.io/podset-required-topology: example.com/rack}", 6,
			"pod set main: 6 pods need one node (level kubernetes.io/hostname) of flavor tas; the best node has room for 4 pods"},
		{"preferred widens past the rack", "{sluice.dev/podset-preferred-topology: example.com/rack}", 10, "n1:4,n2:4,n3:2"},
		{"no annotations: the tightest node", "", 3, "n1:3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ann := ""
			if c.annotations != "" {
				ann = ", annotations: " + c.annotations
			}
			yaml := scenario(append(tasBase(), workload("default", "a",
				"  queueName: lq\n  podSets: [{name: main, count: "+strconv.Itoa(c.count)+", requests: {cpu: 1}"+ann+"}]\n"))...)
			recs := run(t, yaml, Options{})
			got := ""
			for _, r := range recs {
				d, ok := r.Data.(WorkloadData)
				if !ok {
					continue
				}
				switch {
				case strings.HasSuffix(r.Type, ".admitted") && len(d.PodSets) == 1 && d.PodSets[0].Topology != nil:
					got = placement(d.PodSets[0].Topology)
				case strings.HasSuffix(r.Type, ".pending"):
					got = d.Reason
				}
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestLoadRefusesBadTopologyInput(t *testing.T) {
	wl := func(ann string) string {
		return workload("default", "a", "  queueName: lq\n  podSets: [{name: main, count: 2, requests: {cpu: 1}, annotations: "+ann+"}]\n")
	}
	cases := []struct {
		name string
		docs []string
		want string
	}{
		{"a flavor naming a missing Topology", []string{tasFlavor()}, `ResourceFlavor tas: spec.topologyName: Not found: "dc"`},
		{"a Topology without levels", []string{docHead + "kind: Topology\nmetadata: {name: dc}\nspec: {levels: []}\n"}, "spec.levels: Required value"},
		{"a level given twice", []string{docHead + "kind: Topology\nmetadata: {name: dc}\nspec: {levels: [{nodeLabel: a}, {nodeLabel: a}]}\n"}, `spec.levels[1].nodeLabel: Duplicate value: "a"`},
		{"hostname above another level", []string{docHead + "kind: Topology\nmetadata: {name: dc}\nspec: {levels: [{nodeLabel: kubernetes.io/hostname}, {nodeLabel: a}]}\n"}, "kubernetes.io/hostname can only be the last level"},
		{"a topology-aware flavor without nodeLabels", []string{topoDocs, docHead + "kind: ResourceFlavor\nmetadata: {name: tas}\nspec: {topologyName: dc}\n"}, "spec.nodeLabels: Required value"},
		{"a Node without allocatable", []string{node("n1", "r1", "{}")}, "Node n1): status.allocatable: Required value"},
		{"a Node with a negative allocatable", []string{node("n1", "r1", "{cpu: -1}")}, `status.allocatable[cpu]: Invalid value: "-1"`},
		{"a slice size that is not a number", append(tasBase(), wl("{sluice.dev/podset-slice-required-topology: example.com/rack, sluice.dev/podset-slice-size: two}")),
			`annotation sluice.dev/podset-slice-size: "two" is not a whole number above zero`},
		{"a slice level without a size", append(tasBase(), wl("{sluice.dev/podset-slice-required-topology: example.com/rack}")),
			"needs sluice.dev/podset-slice-size"},
		{"unconstrained that is not a boolean", append(tasBase(), wl("{kueue.x-k8s.io/podset-unconstrained-topology: yes-please}")),
			`annotation kueue.x-k8s.io/podset-unconstrained-topology: "yes-please" is not true or false`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load([]Source{{Name: "test.yaml", R: strings.NewReader(scenario(c.docs...))}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v, want an error with %q", err, c.want)
			}
		})
	}
}
