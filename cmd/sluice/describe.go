package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/internal/bus"
)

// describedEvent is one event of `sluice describe workload`.
type describedEvent struct {
	Time    time.Time       `json:"time"`
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	TraceID string          `json:"traceId,omitempty"`
	Data    json.RawMessage `json:"data"`
}

// newDescribeCmd: `sluice describe workload`, a workload's story from the
// event stream.
func newDescribeCmd() *cobra.Command {
	c := &common{}
	out := output("table")
	cmd := &cobra.Command{
		Use:   "describe workload [KIND/]NAMESPACE/NAME",
		Short: "Print every stored event of one workload, with its trace id",
		Long: "Print every event the stream holds about one workload (KIND is the job integration, job by default), " +
			"oldest first, with each event's trace id.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 || args[0] != "workload" {
				return usageError{Err: errors.New("give: workload [KIND/]NAMESPACE/NAME")}
			}
			if _, err := parseWorkloadRef(args[1]); err != nil {
				return usageError{Err: err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			ref, _ := parseWorkloadRef(args[1])
			nc, js, err := c.reader()
			if err != nil {
				return err
			}
			defer nc.Close()
			filter := events.WorkloadSubject(events.TypeWorkloadSubmittedV1, ref)
			// Every transition: the type's token is the fourth.
			parts := strings.Split(filter, ".")
			parts[3] = "*"
			filter = strings.Join(parts, ".")
			evs, err := readAll(cmd, js, filter)
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				return usageError{Err: fmt.Errorf("no events of workload %s/%s/%s are stored", ref.Kind, ref.Namespace, ref.Name)}
			}
			return out.print(cmd.OutOrStdout(), evs, func(w io.Writer) {
				// Every event of one workload carries its trace; a name
				// used again by a new job has a new one.
				seen := map[string]bool{}
				for _, e := range evs {
					if e.TraceID != "" && !seen[e.TraceID] {
						seen[e.TraceID] = true
						fmt.Fprintf(w, "Trace ID:\t%s\n", e.TraceID)
					}
				}
				fmt.Fprintln(w, "TIME\tEVENT\tTRACE\tDATA")
				for _, e := range evs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", e.Time.Format("15:04:05.000"), strings.TrimPrefix(e.Type, "dev.sluice."), dash(e.TraceID), e.Data)
				}
			})
		},
	}
	c.bindNATS(cmd)
	cmd.Flags().StringVarP((*string)(&out), "output", "o", "table", "table, json or yaml")
	return cmd
}

// parseWorkloadRef reads [KIND/]NAMESPACE/NAME.
func parseWorkloadRef(s string) (events.WorkloadRef, error) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return events.WorkloadRef{Kind: "job", Namespace: parts[0], Name: parts[1]}, nil
	case len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "":
		return events.WorkloadRef{Kind: parts[0], Namespace: parts[1], Name: parts[2]}, nil
	}
	return events.WorkloadRef{}, fmt.Errorf("workload %q: give [KIND/]NAMESPACE/NAME, e.g. team-a/train or jobset/team-a/train", s)
}

// readAll reads every stored message on filter, oldest first, and stops
// at the last one.
func readAll(cmd *cobra.Command, js jetstream.JetStream, filter string) ([]describedEvent, error) {
	var out []describedEvent
	_, err := bus.Page(cmd.Context(), js.Conn(), bus.StreamEvents, filter, 1, func(m bus.Stored) error {
		env, err := events.DecodeParts(m.Subject, m.Header, m.Data)
		if err != nil {
			out = append(out, describedEvent{Type: "undecodable: " + err.Error(), Data: json.RawMessage(`null`)})
			return nil
		}
		out = append(out, describedEvent{Time: env.Time, Type: env.Type, ID: env.ID, TraceID: env.TraceID(), Data: json.RawMessage(env.Data)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filter, err)
	}
	return out, nil
}
