package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/cmd/sluice/natsperm"
)

// newNATSAuthCmd prints the nats-server authorization block with one user
// per service and the permissions it needs.
func newNATSAuthCmd() *cobra.Command {
	var controllers, workers []string
	var domain, agent, passwordsFrom, out string
	cmd := &cobra.Command{
		Use:   "nats-authorization",
		Short: "Print a nats-server authorization block: one user per service, each allowed only its subjects",
		Long: "Print a nats-server authorization block: one user per service (" + strings.Join(natsperm.Services, ", ") +
			") and per admission check controller of your own, each allowed only the subjects it uses. Passwords are read by the server from $SLUICE_<USER>_PASSWORD.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := []natsperm.Option{natsperm.WithCheckControllers(controllers...),
				natsperm.WithWorkers(domain, workers...), natsperm.WithWorkerAgent(domain, agent)}
			if passwordsFrom != "" {
				hashes, err := passwordHashes(passwordsFrom, natsperm.LoginUsers(opts...))
				if err != nil {
					return err
				}
				opts = append(opts, natsperm.WithPasswordHashes(hashes))
			}
			conf := natsperm.ServerConfig(opts...)
			if out == "" {
				_, err := fmt.Fprint(cmd.OutOrStdout(), conf)
				return err
			}
			if err := os.WriteFile(out, []byte(conf), 0o600); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&passwordsFrom, "passwords-from", "",
		"a directory with one file per user holding its password (a mounted Secret with a key per user): the block then carries each password's bcrypt hash instead of $SLUICE_<USER>_PASSWORD")
	cmd.Flags().StringVar(&out, "out", "", "write the block to this file (mode 0600) instead of standard output")
	cmd.Flags().StringSliceVar(&controllers, "check-controllers", nil,
		"admission check controllers of your own, by controllerName: a user each, check-<name> (Sluice's own, "+strings.Join(natsperm.BuiltinCheckControllers, ", ")+", are the users provisioning and multicluster)")
	cmd.Flags().StringSliceVar(&workers, "workers", nil,
		"worker clusters that join this (manager's) NATS as leaf nodes: a user each, allowed only its own offers and reports (password from $SLUICE_WORKER_<NAME>_PASSWORD)")
	cmd.Flags().StringVar(&domain, "manager-domain", "hub", "JetStream domain of the manager's NATS, as the workers reach it")
	cmd.Flags().StringVar(&agent, "worker-agent", "", "on a worker cluster's NATS: the user \"worker\" for the agent of the worker of this name (password from $SLUICE_WORKER_PASSWORD)")
	return cmd
}

// newSetupCmd creates or updates Sluice's streams and buckets and exits:
// run once per install or upgrade by a NATS user allowed to manage them,
// so that the services' own users need not be.
func newSetupCmd() *cobra.Command {
	c := &common{setup: true}
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Create or update Sluice's JetStream streams, buckets and durable consumers, then exit",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.logger("setup")
			if err != nil {
				return err
			}
			if err := c.retryAtStart(cmd.Context(), log, func(ctx context.Context) error {
				nc, _, err := c.connect(ctx, "setup")
				if err == nil {
					nc.Close()
				}
				return err
			}); err != nil {
				return err
			}
			log.Info().Int("replicas", c.replicas).Msg("streams and buckets ready")
			return nil
		},
	}
	c.bindSetup(cmd)
	cmd.Flags().BoolVar(&c.worker, "worker-cluster", false, "this NATS is a worker cluster's (docs/multicluster.md): leave out the multicluster stream, which only the manager's has")
	cmd.Flags().StringSliceVar(&c.checkControllers, "check-controllers", nil,
		"admission check controllers of your own, by controllerName: setup makes each one's durable consumer, check-<name> (no service's NATS user may make a consumer)")
	cmd.Flags().StringSliceVar(&c.workers, "workers", nil, "worker clusters of this manager: setup makes each one's durable consumer of its offers on the multicluster stream")
	return cmd
}
