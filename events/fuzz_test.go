package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/events"
)

// FuzzDecode feeds the decoder messages as they could arrive from anyone
// who can publish on the stream: any subject, any headers (one "Name:
// value" per line), any data. It must never panic; every refusal must be a
// *DecodeError with a message, and whatever it accepts must decode into
// its registered type or be refused the same way.
func FuzzDecode(f *testing.F) {
	for _, ev := range examples {
		msg, err := events.NewMessage(context.Background(), "fuzz", ev, "seed-"+ev.Type())
		if err != nil {
			f.Fatal(err)
		}
		var hb strings.Builder
		for name, vals := range msg.Header {
			for _, v := range vals {
				hb.WriteString(name + ": " + v + "\n")
			}
		}
		f.Add(msg.Subject, hb.String(), msg.Data)
	}
	f.Add("", "", []byte(nil))
	f.Add("sluice.workload.v1.admitted.job.a.b", "ce-specversion: 1.0\nce-type: dev.sluice.workload.v1.admitted\n", []byte(`{"workload":{}}`))

	f.Fuzz(func(t *testing.T, subject, headers string, data []byte) {
		h := nats.Header{}
		for _, line := range strings.Split(headers, "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok {
				h.Add(strings.TrimSpace(name), strings.TrimSpace(value))
			}
		}
		env, err := events.DecodeParts(subject, h, data)
		if err != nil {
			var de *events.DecodeError
			if !errors.As(err, &de) || err.Error() == "" {
				t.Fatalf("refusal %T %q is not a *DecodeError with a message", err, err)
			}
			return
		}
		ev, err := env.Event()
		if err != nil {
			var de *events.DecodeError
			if err.Error() == "" || (!errors.As(err, &de) && !errors.Is(err, events.ErrUnknownType)) {
				t.Fatalf("data of an accepted %s refused without a clear error: %T %q", env.Type, err, err)
			}
			return
		}
		if ev.Type() != env.Type {
			t.Fatalf("envelope of type %s decoded as %s", env.Type, ev.Type())
		}
	})
}
