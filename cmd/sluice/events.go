package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/natsconn"
)

// newEventsCmd groups the event commands.
func newEventsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Read Sluice's event stream"}
	cmd.AddCommand(newTailCmd())
	return cmd
}

// newTailCmd is a read-only subscriber: the pattern for external tools. It
// pages through the stream with direct gets (bus.Follow): it keeps no
// state on the server and makes no consumer, so it cannot disturb the
// services.
func newTailCmd() *cobra.Command {
	var typ, namespace, kind string
	c := &common{}
	var all bool
	cmd := &cobra.Command{
		Use:   "tail [--type admitted] [--namespace NS]",
		Short: "Print events as they happen",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			entity, transition := "*", "*"
			if typ != "" {
				// Accept "admitted", "workload.admitted" or a full type.
				t := strings.TrimPrefix(typ, "dev.sluice.")
				parts := strings.Split(t, ".")
				switch len(parts) {
				case 1:
					transition = parts[0]
				case 2:
					entity, transition = parts[0], parts[1]
				case 3:
					entity, transition = parts[0], parts[2]
				default:
					return usageError{Err: fmt.Errorf("--type %q: give a transition such as admitted, or entity.transition", typ)}
				}
			}
			if typ != "" {
				if err := knownTransition(typ, entity, transition); err != nil {
					return usageError{Err: err}
				}
			}
			filter := events.SubjectFilter(entity, transition, kind, namespace)
			nc, js, err := c.reader()
			if err != nil {
				return err
			}
			defer nc.Close()
			var from uint64 = 1
			if !all {
				last, err := bus.LastSequence(cmd.Context(), js, bus.StreamEvents)
				if err != nil {
					return err
				}
				from = last + 1
			}
			// Woken by the events as they are published: a subscription
			// to the filter itself when it names its entity, else to the
			// stream's subjects (the reader may subscribe to those).
			wake := []string{filter}
			if entity == "*" {
				wake = bus.StreamSubjects
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			return bus.Follow(cmd.Context(), nc, bus.StreamEvents, filter, from, func(m bus.Stored) error {
				printEvent(out, m)
				return out.Flush()
			}, wake...)
		},
	}
	c.bindNATS(cmd)
	cmd.Flags().StringVar(&typ, "type", "", "only this transition, e.g. admitted, pending, preempted (default: all)")
	cmd.Flags().StringVar(&namespace, "namespace", "", "only workloads in this namespace")
	cmd.Flags().StringVar(&kind, "kind", "", "only this job kind, e.g. job")
	cmd.Flags().BoolVar(&all, "all", false, "start from the oldest stored event instead of now")
	return cmd
}

func printEvent(w io.Writer, msg bus.Stored) {
	env, err := events.DecodeParts(msg.Subject, msg.Header, msg.Data)
	if err != nil {
		fmt.Fprintf(w, "%s\tundecodable: %v\n", msg.Subject, err)
		return
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", env.Time.Format("15:04:05.000"), strings.TrimPrefix(env.Type, "dev.sluice."), env.Subject, env.Data)
}

// knownTransition refuses a --type no event has, listing those there are,
// rather than waiting for events that never come.
func knownTransition(typ, entity, transition string) error {
	var known []string
	for _, ev := range events.All() {
		// dev.sluice.<entity>.v1.<transition>
		parts := strings.Split(strings.TrimPrefix(ev.Type(), "dev.sluice."), ".")
		if len(parts) != 3 {
			continue
		}
		if (entity == "*" || entity == parts[0]) && transition == parts[2] {
			return nil
		}
		known = append(known, parts[0]+"."+parts[2])
	}
	return fmt.Errorf("--type %q: no such event; known: %s", typ, strings.Join(known, ", "))
}

// reader connects as the read-only "reader" user of the event stream.
func (c *common) reader() (*nats.Conn, jetstream.JetStream, error) {
	cfg, err := c.natsConfig()
	if err != nil {
		return nil, nil, err
	}
	return connectJS(cfg, "sluice-reader")
}

// connectJS opens a NATS connection as client and its JetStream context.
func connectJS(cfg natsconn.Config, client string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := natsconn.Connect(cfg, client)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
