package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/internal/embeddednats"
	"github.com/sluice-dev/sluice/services/multicluster"
)

// leafFlags are `sluice dev`'s multicluster settings: a manager accepts
// workers' leaf nodes, a worker joins its manager as one.
type leafFlags struct {
	domain  string
	port    int
	adv     string
	workers []string // NAME=PASSWORD
	remote  string
	worker  multicluster.WorkerOptions
}

func (l *leafFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&l.domain, "nats-domain", "", "JetStream domain of the embedded server (default: hub with --leaf-port, the worker's name with --leaf-remote)")
	cmd.Flags().IntVar(&l.port, "leaf-port", 0, "as a manager: port accepting worker clusters' leaf nodes (0: none)")
	cmd.Flags().StringVar(&l.adv, "leaf-advertise", "", "as a manager: HOST:PORT worker clusters reach the leaf port at, when something stands between (a load balancer); they reconnect there (default: the listen address)")
	cmd.Flags().StringSliceVar(&l.workers, "leaf-worker", nil, "as a manager: a worker cluster allowed to join, NAME=PASSWORD (repeat per worker)")
	cmd.Flags().StringVar(&l.remote, "leaf-remote", "", "as a worker: the manager's leaf node URL, nats-leaf://NAME:PASSWORD@HOST:PORT (runs the worker agent)")
	cmd.Flags().StringVar(&l.worker.ManagerDomain, "manager-domain", l.worker.ManagerDomain, "as a worker: the JetStream domain of the manager's NATS")
	cmd.Flags().DurationVar(&l.worker.Heartbeat, "worker-heartbeat", l.worker.Heartbeat, "as a worker: how often the manager is told this worker is there")
}

// apply sets the embedded server's leaf node options.
func (l *leafFlags) apply(o *embeddednats.Options) error {
	o.JetStreamDomain = l.domain
	if l.port != 0 {
		if o.JetStreamDomain == "" {
			o.JetStreamDomain = "hub"
		}
		o.LeafPort = l.port
		o.LeafAdvertise = l.adv
		for _, w := range l.workers {
			name, pw, ok := strings.Cut(w, "=")
			if !ok || name == "" || pw == "" {
				return usageError{Err: fmt.Errorf("--leaf-worker %q: must be NAME=PASSWORD", w)}
			}
			pub, sub := multicluster.WorkerPermissions(name, o.JetStreamDomain)
			o.LeafUsers = append(o.LeafUsers, embeddednats.LeafUser{Name: name, Password: pw, Publish: pub, Subscribe: sub})
		}
	} else if len(l.workers) > 0 || l.adv != "" {
		return usageError{Err: fmt.Errorf("--leaf-worker and --leaf-advertise need --leaf-port")}
	}
	if l.remote != "" {
		name, err := leafUser(l.remote)
		if err != nil {
			return usageError{Err: err}
		}
		l.worker.Name = name
		if o.JetStreamDomain == "" {
			o.JetStreamDomain = name
		}
		o.LeafRemotes = []string{l.remote}
	}
	return nil
}

// leafUser is the user of a nats-leaf:// URL: the worker's name.
func leafUser(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil || u.User.Username() == "" || u.Host == "" {
		return "", fmt.Errorf("--leaf-remote %q: must be nats-leaf://NAME:PASSWORD@HOST:PORT", raw)
	}
	return u.User.Username(), nil
}
