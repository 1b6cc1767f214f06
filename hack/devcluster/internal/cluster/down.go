package cluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/hack/devcluster/internal/build"
	"github.com/sluice-dev/sluice/hack/devcluster/internal/proc"
)

// Down stops every process of the devcluster in c.Dir: SIGTERM to each
// process group, SIGKILL after a grace period. Data, certificates and logs
// stay, so that a later Up continues the same cluster (Up with Fresh starts
// an empty one). Purge also removes the state directory.
func Down(ctx context.Context, c Config, purge bool) error {
	c.defaults()
	dir, err := absDir(c.Dir)
	if err != nil {
		return err
	}
	l := layout{dir}
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		fmt.Fprintf(c.Out, "devcluster is not running (no %s)\n", dir)
		return nil
	}
	lockCtx, cancel := context.WithTimeout(ctx, time.Minute)
	unlock, err := proc.Lock(lockCtx, l.lockFile())
	cancel()
	if err != nil {
		return fmt.Errorf("another devcluster command is busy in %s: %w", dir, err)
	}
	defer unlock()

	st, err := readState(l)
	if err != nil {
		return err
	}
	stopped := 0
	if st != nil {
		for _, p := range st.Processes {
			if proc.Alive(p.Identity) {
				stopped++
			}
		}
	}
	// The real node first: its containers, then its processes, then what
	// it set up on the machine, while the API server still answers.
	if err := stopRealNode(ctx, c, l, st); err != nil {
		return fmt.Errorf("stop the real node: %w", err)
	}
	if st != nil {
		if err := stopProcesses(ctx, c.Out, st.Processes); err != nil {
			return err
		}
	}
	strays, err := stopStrays(ctx, c, l, st)
	if err != nil {
		return err
	}
	stopped += strays
	if st != nil {
		st.Processes = nil
		st.RealNode = nil
		if err := writeState(l, st); err != nil {
			return err
		}
	}
	if stopped == 0 {
		fmt.Fprintf(c.Out, "devcluster in %s was not running\n", dir)
	} else {
		fmt.Fprintf(c.Out, "devcluster in %s stopped (%d processes)\n", dir, stopped)
	}
	if purge {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		fmt.Fprintf(c.Out, "removed %s\n", dir)
	}
	return nil
}

// findStrays finds component processes of this state dir that the state
// file does not list (it was lost, or a start was cut short): the cached
// Kubernetes and kwok binaries with a path in dir among their arguments, and
// devcluster's own "etcd" subcommand with its data dir in dir.
func findStrays(c Config, l layout, st *State) ([]proc.Identity, error) {
	prefix := l.dir + string(os.PathSeparator)
	hasDir := func(args []string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, prefix) })
	}
	bins := build.Paths(c.CacheDir).All()
	etcdExes := []string{c.Self}
	if self, err := os.Executable(); err == nil {
		etcdExes = append(etcdExes, self)
	}
	if st != nil {
		for _, p := range st.Processes {
			if p.Name == Etcd {
				etcdExes = append(etcdExes, p.Exe)
			} else {
				bins = append(bins, p.Exe)
			}
		}
	}
	found, err := proc.Find(bins, hasDir)
	if err != nil {
		return nil, err
	}
	etcds, err := proc.Find(etcdExes, func(args []string) bool {
		return len(args) > 0 && args[0] == "etcd" && hasDir(args)
	})
	if err != nil {
		return nil, err
	}
	return append(found, etcds...), nil
}

// stopStrays stops what findStrays finds and says how many it stopped.
func stopStrays(ctx context.Context, c Config, l layout, st *State) (int, error) {
	strays, err := findStrays(c, l, st)
	if err != nil {
		return 0, err
	}
	for _, id := range strays {
		if err := proc.Stop(ctx, id, 15*time.Second); err != nil {
			return 0, fmt.Errorf("stop leftover process %d: %w", id.PID, err)
		}
		fmt.Fprintf(c.Out, "stopped leftover process %d of %s\n", id.PID, l.dir)
	}
	return len(strays), nil
}
