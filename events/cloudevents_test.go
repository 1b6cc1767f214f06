package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/events"
)

var msgTime = time.Date(2025, 6, 7, 8, 9, 10, 123456789, time.UTC)

func newMsg(t *testing.T, ctx context.Context, ev events.Event) *nats.Msg {
	t.Helper()
	id := events.ID(ev.Type(), ev.CESubject(), "test")
	msg, err := events.NewMessage(ctx, events.Source("test"), ev, id, events.WithTime(msgTime))
	if err != nil {
		t.Fatalf("NewMessage(%s): %v", ev.Type(), err)
	}
	return msg
}

func TestRoundTrip(t *testing.T) {
	for typ, ex := range examples {
		msg := newMsg(t, context.Background(), ex)
		id := events.ID(typ, ex.CESubject(), "test")
		h := msg.Header
		want := map[string]string{
			"ce-specversion":     "1.0",
			"ce-id":              id,
			"ce-source":          "/sluice/test",
			"ce-type":            typ,
			"ce-time":            "2025-06-07T08:09:10.123456789Z",
			"ce-subject":         ex.CESubject(),
			"ce-datacontenttype": "application/json",
			"ce-dataschema":      "https://sluice.dev/schemas/" + typ + ".json",
			"content-type":       "application/json",
			"Nats-Msg-Id":        id,
		}
		for k, v := range want {
			if got := h.Get(k); got != v {
				t.Errorf("%s: header %s = %q, want %q", typ, k, got, v)
			}
		}
		if msg.Subject != ex.NATSSubject() {
			t.Errorf("%s: subject %q", typ, msg.Subject)
		}
		env, err := events.Decode(msg)
		if err != nil {
			t.Fatalf("%s: Decode: %v", typ, err)
		}
		if env.Type != typ || env.ID != id || env.Source != "/sluice/test" || !env.Time.Equal(msgTime) ||
			env.Subject != ex.CESubject() || env.NATSSubject != msg.Subject || env.SpecVersion != "1.0" {
			t.Errorf("%s: envelope %+v", typ, env)
		}
		got, err := env.Event()
		if err != nil {
			t.Fatalf("%s: Event: %v", typ, err)
		}
		if diff := cmp.Diff(ex, got); diff != "" {
			t.Errorf("%s: round trip (-sent +decoded):\n%s", typ, diff)
		}
		ptr, _ := events.New(typ)
		if err := env.As(ptr); err != nil {
			t.Errorf("%s: As: %v", typ, err)
		}
	}
}

func TestDecodeCaseInsensitiveHeaders(t *testing.T) {
	msg := newMsg(t, context.Background(), examples[events.TypeWorkloadStartedV1])
	upper := nats.Header{}
	for k, v := range msg.Header {
		upper[strings.ToUpper(k)] = v
	}
	msg.Header = upper
	env, err := events.Decode(msg)
	if err != nil {
		t.Fatal(err)
	}
	if env.Type != events.TypeWorkloadStartedV1 || env.TraceParent == "" {
		t.Errorf("envelope %+v", env)
	}
}

func TestDecodePoison(t *testing.T) {
	ex := examples[events.TypeWorkloadAdmittedV1]
	cases := []struct {
		name   string
		mutate func(m *nats.Msg)
		reason events.Reason
		field  string
	}{
		{"missing id", func(m *nats.Msg) { m.Header.Del("ce-id") }, events.ReasonMissingAttribute, "ce-id"},
		{"missing type", func(m *nats.Msg) { m.Header.Del("ce-type") }, events.ReasonMissingAttribute, "ce-type"},
		{"missing source", func(m *nats.Msg) { m.Header.Del("ce-source") }, events.ReasonMissingAttribute, "ce-source"},
		{"missing specversion", func(m *nats.Msg) { m.Header.Del("ce-specversion") }, events.ReasonMissingAttribute, "ce-specversion"},
		{"no headers", func(m *nats.Msg) { m.Header = nil }, events.ReasonMissingAttribute, "ce-specversion"},
		{"spec 0.3", func(m *nats.Msg) { m.Header.Set("ce-specversion", "0.3") }, events.ReasonInvalidAttribute, "ce-specversion"},
		{"bad time", func(m *nats.Msg) { m.Header.Set("ce-time", "yesterday") }, events.ReasonInvalidAttribute, "ce-time"},
		{"bad escape", func(m *nats.Msg) { m.Header.Set("ce-source", "/x%zz") }, events.ReasonInvalidAttribute, "ce-source"},
		{"overlong utf-8", func(m *nats.Msg) { m.Header.Set("ce-subject", "a%C0%A0b") }, events.ReasonInvalidAttribute, "ce-subject"},
		{"bad source", func(m *nats.Msg) { m.Header.Set("ce-source", "%3A%2F%2F") }, events.ReasonInvalidAttribute, ""},
		{"unknown type", func(m *nats.Msg) { m.Header.Set("ce-type", "dev.sluice.workload.v9.exploded") }, events.ReasonUnknownType, "ce-type"},
		{"structured mode", func(m *nats.Msg) { m.Header.Set("content-type", "application/cloudevents+json") }, events.ReasonUnsupportedContent, "content-type"},
		{"xml data", func(m *nats.Msg) { m.Header.Set("ce-datacontenttype", "application/xml") }, events.ReasonUnsupportedContent, "ce-datacontenttype"},
		{"bad json", func(m *nats.Msg) { m.Data = []byte(`{"workload":`) }, events.ReasonBadData, ""},
		{"empty data", func(m *nats.Msg) { m.Data = nil }, events.ReasonBadData, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg := newMsg(t, context.Background(), ex)
			c.mutate(msg)
			_, err := events.Decode(msg)
			if !events.IsPoison(err) {
				t.Fatalf("Decode = %v, want poison", err)
			}
			var de *events.DecodeError
			if !errors.As(err, &de) || de.Reason != c.reason || de.Field != c.field {
				t.Errorf("Decode = %#v (%v), want reason %s field %q", de, err, c.reason, c.field)
			}
			if events.ReasonOf(err) != c.reason {
				t.Errorf("ReasonOf = %q", events.ReasonOf(err))
			}
		})
	}
	if _, err := events.Decode(nil); !events.IsPoison(err) {
		t.Errorf("Decode(nil) = %v", err)
	}
	if events.IsPoison(errors.New("timeout")) || events.ReasonOf(errors.New("x")) != "" {
		t.Error("a plain error is poison")
	}
}

func TestDecodeMissingContentTypeIsJSON(t *testing.T) {
	msg := newMsg(t, context.Background(), examples[events.TypeWorkloadDeletedV1])
	msg.Header.Del("ce-datacontenttype")
	msg.Header.Del("content-type")
	msg.Header.Del("ce-time")
	env, err := events.Decode(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !env.Time.IsZero() {
		t.Errorf("time %v", env.Time)
	}
}

func TestAs(t *testing.T) {
	msg := newMsg(t, context.Background(), examples[events.TypeWorkloadAdmittedV1])
	env, err := events.Decode(msg)
	if err != nil {
		t.Fatal(err)
	}
	var wrong events.WorkloadEvictedV1
	if err := env.As(&wrong); events.ReasonOf(err) != events.ReasonTypeMismatch || !errors.Is(err, events.ErrTypeMismatch) {
		t.Errorf("As(other type) = %v", err)
	}
	var generic map[string]any
	if err := env.As(&generic); err != nil || generic["clusterQueue"] != "gpu" {
		t.Errorf("As(map) = %v, %v", err, generic)
	}
	env.Data = []byte(`{"workload":{"kind":"job","namespace":"a","name":"b","uid":""},"clusterQueue":"gpu","podSets":[{"name":"m","count":1}]}`)
	var adm events.WorkloadAdmittedV1
	if err := env.As(&adm); events.ReasonOf(err) != events.ReasonInvalidData {
		t.Errorf("As(invalid) = %v", err)
	}
	if _, err := env.Event(); events.ReasonOf(err) != events.ReasonInvalidData {
		t.Errorf("Event(invalid) = %v", err)
	}
	env.Data = []byte(`{"workload": 7}`)
	if err := env.As(&adm); events.ReasonOf(err) != events.ReasonBadData {
		t.Errorf("As(wrong shape) = %v", err)
	}
	if _, err := env.Event(); events.ReasonOf(err) != events.ReasonBadData {
		t.Errorf("Event(wrong shape) = %v", err)
	}
}

type unregistered struct{ events.WorkloadDeletedV1 }

func (unregistered) Type() string { return "dev.sluice.workload.v1.unregistered" }

func TestNewMessageRefuses(t *testing.T) {
	ctx := context.Background()
	src := events.Source("test")
	cases := map[string]events.Event{
		"nil":          nil,
		"invalid":      events.WorkloadDeletedV1{Workload: events.WorkloadRef{Kind: "job", Namespace: "ns", Name: "Bad Name", UID: "u"}},
		"unregistered": unregistered{events.WorkloadDeletedV1{Workload: exampleRef}},
	}
	for name, ev := range cases {
		if _, err := events.NewMessage(ctx, src, ev, "id-1"); !errors.Is(err, events.ErrInvalidEvent) {
			t.Errorf("%s: NewMessage = %v, want ErrInvalidEvent", name, err)
		}
	}
	ok := examples[events.TypeWorkloadDeletedV1]
	if _, err := events.NewMessage(ctx, src, ok, ""); !errors.Is(err, events.ErrInvalidEvent) {
		t.Errorf("empty id: %v", err)
	}
	if _, err := events.NewMessage(ctx, "", ok, "id"); !errors.Is(err, events.ErrInvalidEvent) {
		t.Errorf("empty source: %v", err)
	}
}

func TestTraceContext(t *testing.T) {
	ex := examples[events.TypeWorkloadSubmittedV1]
	first := newMsg(t, context.Background(), ex)
	tp := first.Header.Get("traceparent")
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || parts[3] != "01" {
		t.Fatalf("generated traceparent %q", tp)
	}
	env, err := events.Decode(first)
	if err != nil {
		t.Fatal(err)
	}
	if env.TraceParent != tp || env.TraceID() != parts[1] {
		t.Errorf("decoded trace %q / %q", env.TraceParent, env.TraceID())
	}

	// A handler publishing with the envelope's context continues the
	// trace under the same parent: the span that parent names exists,
	// while a made-up hop would dangle.
	next := newMsg(t, env.Context(context.Background()), examples[events.TypeWorkloadAdmittedV1])
	np := strings.Split(next.Header.Get("traceparent"), "-")
	if len(np) != 4 || np[1] != parts[1] || np[2] != parts[2] {
		t.Errorf("child traceparent %q of %q", next.Header.Get("traceparent"), tp)
	}

	// Two fresh publishes start two traces.
	other := newMsg(t, context.Background(), ex)
	if events.TraceID(other.Header.Get("traceparent")) == parts[1] {
		t.Error("two root publishes share a trace id")
	}

	// A span of this process (non-remote) is used as the parent as is.
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	local := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	if got := newMsg(t, local, ex).Header.Get("traceparent"); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00" {
		t.Errorf("local span traceparent %q", got)
	}
	if events.TraceParent(local) != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00" {
		t.Errorf("TraceParent(local) = %q", events.TraceParent(local))
	}

	// Garbage is ignored, never fatal.
	if ctx := events.ContextWithTraceParent(context.Background(), "nonsense", ""); trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("invalid traceparent produced a span context")
	}
	if events.TraceID("nonsense") != "" || events.TraceParent(context.Background()) != "" {
		t.Error("TraceID/TraceParent of nothing")
	}
}
