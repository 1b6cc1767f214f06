package cluster

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/proc"
)

// ComponentStatus is what Status found about one process.
type ComponentStatus struct {
	Process
	Alive  bool
	RSS    int64 // bytes; 0 if not alive
	Health error // nil if healthy
}

// Report is the result of Status.
type Report struct {
	Dir        string
	State      *State // nil if the cluster was never started here
	Components []ComponentStatus
	TotalRSS   int64
	Nodes      int
	ReadyNodes int
	NodesErr   error
}

// Healthy reports whether every component runs and answers its health check.
func (r *Report) Healthy() bool {
	if r.State == nil || len(r.Components) == 0 {
		return false
	}
	for _, c := range r.Components {
		if !c.Alive || c.Health != nil {
			return false
		}
	}
	return true
}

// Inspect finds out what of the devcluster in c.Dir runs.
func Inspect(ctx context.Context, c Config) (*Report, error) {
	c.defaults()
	dir, err := absDir(c.Dir)
	if err != nil {
		return nil, err
	}
	l := layout{dir}
	r := &Report{Dir: dir}
	if r.State, err = readState(l); err != nil || r.State == nil {
		return r, err
	}
	hc, hcErr := healthClient(l)
	for _, p := range r.State.Processes {
		cs := ComponentStatus{Process: p, Alive: proc.Alive(p.Identity)}
		switch {
		case !cs.Alive:
			cs.Health = errors.New("not running")
		case hcErr != nil:
			cs.Health = hcErr
		default:
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			cs.Health = checkHealth(cctx, hc, p.Health)
			cancel()
		}
		if cs.Alive {
			if rss, err := proc.RSS(p.PID); err == nil {
				cs.RSS = rss
				r.TotalRSS += rss
			}
		}
		r.Components = append(r.Components, cs)
	}
	if len(r.Components) > 0 && r.Components[0].Alive {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		cs, err := clientset(l)
		if err == nil {
			r.Nodes, r.ReadyNodes, err = countNodes(cctx, cs)
		}
		r.NodesErr = err
	}
	return r, nil
}

// Status prints what of the devcluster in c.Dir runs and reports whether all
// of it runs and is healthy.
func Status(ctx context.Context, c Config) (bool, error) {
	c.defaults()
	r, err := Inspect(ctx, c)
	if err != nil {
		return false, err
	}
	if r.State == nil || len(r.State.Processes) == 0 {
		fmt.Fprintf(c.Out, "devcluster is not running (state dir %s)\n", r.Dir)
		if strays, err := findStrays(c, layout{r.Dir}, r.State); err == nil && len(strays) > 0 {
			fmt.Fprintf(c.Out, "but %d of its processes are left over without a record; \"devcluster down\" stops them\n", len(strays))
		}
		return false, nil
	}
	st := r.State
	fmt.Fprintf(c.Out, "devcluster in %s: Kubernetes %s, kwok %s, started %s\n",
		r.Dir, st.KubeVersion, st.KwokVersion, st.StartedAt.Local().Format(time.RFC3339))
	w := tabwriter.NewWriter(c.Out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "COMPONENT\tPID\tSTATE\tRSS\tHEALTH")
	for _, cs := range r.Components {
		state, health, rss := "running", "ok", fmt.Sprintf("%d MiB", cs.RSS>>20)
		if !cs.Alive {
			state, rss = "stopped", "-"
		}
		if cs.Health != nil {
			health = cs.Health.Error()
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", cs.Name, cs.PID, state, rss, health)
	}
	if err := w.Flush(); err != nil {
		return false, fmt.Errorf("print status: %w", err)
	}
	fmt.Fprintf(c.Out, "memory (RSS, all components): %d MiB\n", r.TotalRSS>>20)
	if r.NodesErr != nil {
		fmt.Fprintf(c.Out, "nodes: unknown (%v)\n", r.NodesErr)
	} else {
		fmt.Fprintf(c.Out, "nodes: %d, %d Ready\n", r.Nodes, r.ReadyNodes)
	}
	fmt.Fprintf(c.Out, "API server: %s\nkubeconfig: %s\n", st.Server, st.Kubeconfig)
	return r.Healthy(), nil
}
