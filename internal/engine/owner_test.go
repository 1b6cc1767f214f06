package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// ownerConfig is cohort a (queues a1 and a2, 2 CPUs each), cohort b
// (queue b1) and lone queue c, with LocalQueue "lq" in namespace ns-<q>.
func ownerConfig() Config {
	return Config{
		Flavors: flavors("f"),
		ClusterQueues: []ClusterQueue{
			newCQ("a1").cohort("a").quota("f", "cpu", 2000).obj(),
			newCQ("a2").cohort("a").quota("f", "cpu", 2000).obj(),
			newCQ("b1").cohort("b").quota("f", "cpu", 2000).obj(),
			newCQ("c").quota("f", "cpu", 2000).obj(),
		},
		LocalQueues: lqs("ns-a1", "a1", "ns-a2", "a2", "ns-b1", "b1", "ns-c", "c"),
	}
}

// decided lists a cycle's decisions as "kind key", sorted.
func decided(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Kind)+" "+d.Key)
	}
	slices.Sort(out)
	return out
}

func TestOwnerDecidesOnlyItsTrees(t *testing.T) {
	for _, tt := range []struct {
		name      string
		owned     []string // nil: every tree
		wantOwned []string
		want      []string
	}{
		{
			name:      "every tree by default",
			wantOwned: []string{"cohort/a", "cohort/b", "cq/c"},
			want: []string{"admitted ns-a1/fits", "admitted ns-a2/fits", "admitted ns-b1/fits", "admitted ns-c/fits",
				"pending nowhere/lost", "pending ns-a1/big", "pending ns-b1/big"},
		},
		{
			name:      "cohort a and queue c",
			owned:     []string{"cohort/a", "cq/c"},
			wantOwned: []string{"cohort/a", "cq/c"},
			want:      []string{"admitted ns-a1/fits", "admitted ns-a2/fits", "admitted ns-c/fits", "pending ns-a1/big"},
		},
		{
			name:      "cohort b and the workloads without a queue",
			owned:     []string{"cohort/b", ""},
			wantOwned: []string{"cohort/b"},
			want:      []string{"admitted ns-b1/fits", "pending nowhere/lost", "pending ns-b1/big"},
		},
		{
			name:      "none",
			owned:     []string{"cohort/zzz"},
			wantOwned: nil,
			want:      nil,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := New(ownerConfig(), WithDeferredEviction())
			if tt.owned != nil {
				e.SetOwner(func(tree string) bool { return slices.Contains(tt.owned, tree) })
			}
			for _, w := range []Workload{
				newWL("ns-a1", "fits").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns-a1", "big").pods("main", 1, "cpu", 9000).obj(),
				newWL("ns-a2", "fits").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns-b1", "fits").pods("main", 1, "cpu", 1000).obj(),
				newWL("ns-b1", "big").pods("main", 1, "cpu", 9000).obj(),
				newWL("ns-c", "fits").pods("main", 1, "cpu", 1000).obj(),
				newWL("nowhere", "lost").pods("main", 1, "cpu", 1000).obj(),
			} {
				if err := e.Submit(w); err != nil {
					t.Fatal(err)
				}
			}
			if d := cmp.Diff(tt.want, decided(e.Cycle(t0))); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantOwned, e.Owned()); d != "" {
				t.Errorf("Owned (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]string{"cohort/a", "cohort/b", "cq/c"}, e.Trees()); d != "" {
				t.Errorf("Trees (-want +got):\n%s", d)
			}
		})
	}
}

// TestOwnerHandover: a tree that moves to this engine is decided for at
// once, its waiting workloads told their reasons again (another engine
// told the last ones); a tree that moves away gets no decision more, not
// even an eviction its queue's stop asks for, until it comes back.
func TestOwnerHandover(t *testing.T) {
	cfg := ownerConfig()
	owned := map[string]bool{"cohort/a": true}
	e := New(cfg, WithDeferredEviction())
	e.SetOwner(func(tree string) bool { return owned[tree] })
	for _, w := range []Workload{
		newWL("ns-a1", "big").pods("main", 1, "cpu", 9000).obj(),
		newWL("ns-b1", "running").pods("main", 1, "cpu", 1000).admittedIn("b1", "f", 0).obj(),
		newWL("ns-b1", "fits").pods("main", 1, "cpu", 1000).obj(),
		newWL("ns-b1", "big").pods("main", 1, "cpu", 9000).obj(),
	} {
		if err := e.Submit(w); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name  string
		owned []string
		do    func()
		want  []string
	}{
		{name: "a only", owned: []string{"cohort/a"}, want: []string{"pending ns-a1/big"}},
		{name: "b gained", owned: []string{"cohort/a", "cohort/b"}, want: []string{"admitted ns-b1/fits", "pending ns-b1/big"}},
		{name: "nothing changed", owned: []string{"cohort/a", "cohort/b"}, want: nil},
		{name: "a lost and b1 stopped", owned: []string{"cohort/b"}, do: func() {
			cfg.ClusterQueues[2].StopPolicy = HoldAndDrain
			e.SetConfig(cfg)
		}, want: []string{"evicted ns-b1/fits", "evicted ns-b1/running", "pending ns-b1/big"}},
		{name: "b lost, a gained", owned: []string{"cohort/a"}, want: []string{"pending ns-a1/big"}},
	}
	for i, st := range steps {
		owned = map[string]bool{}
		for _, tree := range st.owned {
			owned[tree] = true
		}
		e.SetOwner(func(tree string) bool { return owned[tree] })
		if st.do != nil {
			st.do()
		}
		if d := cmp.Diff(st.want, decided(e.Cycle(t0.Add(time.Duration(i)*time.Second)))); d != "" {
			t.Errorf("%s: decisions (-want +got):\n%s", st.name, d)
		}
	}
}
