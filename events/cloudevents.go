package events

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
)

// NATS headers of an event in CloudEvents binary content mode (NATS protocol
// binding 1.0.3: every attribute is a "ce-" header, the payload is the data).
const (
	HeaderSpecVersion     = "ce-specversion"
	HeaderID              = "ce-id"
	HeaderSource          = "ce-source"
	HeaderType            = "ce-type"
	HeaderTime            = "ce-time"
	HeaderSubject         = "ce-subject"
	HeaderDataContentType = "ce-datacontenttype"
	HeaderDataSchema      = "ce-dataschema"
	// HeaderContentType repeats the data content type for tools (such as
	// the CloudEvents Go SDK's JetStream binding) that read it there.
	HeaderContentType = "content-type"
	// HeaderMsgID is JetStream's de-duplication header; it always equals ce-id.
	HeaderMsgID = "Nats-Msg-Id"
)

// ContentTypeJSON is the data content type of every Sluice event.
const ContentTypeJSON = "application/json"

// SchemaBaseURL prefixes the dataschema URI of every event: the schema of
// type T is SchemaBaseURL + T + ".json", which is also the $id of the file
// schemas/T.json.
const SchemaBaseURL = "https://sluice.dev/schemas/"

// SchemaURL is the dataschema URI (and JSON Schema $id) of eventType.
func SchemaURL(eventType string) string { return SchemaBaseURL + eventType + ".json" }

// Source is the CloudEvents source of a Sluice service: "/sluice/<service>".
func Source(service string) string { return "/sluice/" + service }

// MessageOption tunes NewMessage.
type MessageOption func(*messageOptions)

type messageOptions struct {
	now time.Time
}

// WithTime sets ce-time (default: now).
func WithTime(t time.Time) MessageOption { return func(o *messageOptions) { o.now = t } }

// NewMessage renders ev as a NATS message in CloudEvents binary mode: the
// JSON payload as data, the attributes as ce-* headers, the W3C traceparent
// of ctx (a new trace when ctx has none), and Nats-Msg-Id = ce-id = id so
// JetStream drops a second publish of the same logical event. Use ID to make
// id. The event is validated first; an invalid one is refused with an error
// wrapping ErrInvalidEvent.
func NewMessage(ctx context.Context, source string, ev Event, id string, opts ...MessageOption) (*nats.Msg, error) {
	if ev == nil {
		return nil, invalidf("nil event")
	}
	o := messageOptions{now: time.Now()}
	for _, opt := range opts {
		opt(&o)
	}
	typ := ev.Type()
	if !Known(typ) {
		return nil, fmt.Errorf("events: %w: %w: %q", ErrInvalidEvent, ErrUnknownType, typ)
	}
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("events: %s: %w", typ, err)
	}
	subject := ev.NATSSubject()
	if err := ValidateSubject(subject); err != nil {
		return nil, fmt.Errorf("events: %s: %w: %w", typ, ErrInvalidEvent, err)
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("events: %s: encode: %w", typ, err)
	}
	ce := cloudevents.New(SpecVersion)
	ce.SetID(id)
	ce.SetSource(source)
	ce.SetType(typ)
	ce.SetTime(o.now.UTC())
	ce.SetSubject(ev.CESubject())
	ce.SetDataSchema(SchemaURL(typ))
	ce.SetDataContentType(ContentTypeJSON)
	if err := ce.Validate(); err != nil {
		return nil, fmt.Errorf("events: %s: %w: %s", typ, ErrInvalidEvent, oneLine(err.Error()))
	}

	msg := nats.NewMsg(subject)
	msg.Data = data
	h := msg.Header
	h.Set(HeaderSpecVersion, SpecVersion)
	h.Set(HeaderID, encodeHeaderValue(id))
	h.Set(HeaderSource, encodeHeaderValue(source))
	h.Set(HeaderType, encodeHeaderValue(typ))
	h.Set(HeaderTime, ce.Time().Format(time.RFC3339Nano))
	h.Set(HeaderSubject, encodeHeaderValue(ev.CESubject()))
	h.Set(HeaderDataContentType, ContentTypeJSON)
	h.Set(HeaderDataSchema, encodeHeaderValue(SchemaURL(typ)))
	h.Set(HeaderContentType, ContentTypeJSON)
	h.Set(HeaderMsgID, id)
	if err := injectTrace(ctx, h); err != nil {
		return nil, fmt.Errorf("events: %s: trace context: %w", typ, err)
	}
	return msg, nil
}

// Envelope is a decoded event: its CloudEvents attributes, trace context and
// raw JSON data. Use As or Event to get the typed payload.
type Envelope struct {
	SpecVersion     string
	Type            string
	ID              string
	Source          string
	Time            time.Time
	Subject         string // ce-subject: "namespace/name"
	DataContentType string
	DataSchema      string
	TraceParent     string
	TraceState      string
	// NATSSubject is the subject the message was published on.
	NATSSubject string
	Data        []byte
}

// As decodes the data into v, which must be a pointer. When v is the pointer
// to a registered event type, its type must be the envelope's and the result
// is validated. Every failure is a *DecodeError (poison).
func (e Envelope) As(v any) error {
	if ev, ok := v.(Event); ok && ev.Type() != e.Type {
		return &DecodeError{Reason: ReasonTypeMismatch, Err: fmt.Errorf("%w: envelope is %s, target %T is %s", ErrTypeMismatch, e.Type, v, ev.Type())}
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return &DecodeError{Reason: ReasonBadData, Err: err}
	}
	if ev, ok := v.(Event); ok {
		if err := ev.Validate(); err != nil {
			return &DecodeError{Reason: ReasonInvalidData, Err: err}
		}
	}
	return nil
}

// CheckRouting reports, as a *DecodeError with ReasonSubjectMismatch,
// an event whose payload does not belong on the subject it came on: every
// event has one NATS subject, derived from its payload, and one
// ce-subject. A payload that does not decode is left to the handler
// (nil), which refuses it as it always has.
func (e Envelope) CheckRouting() error {
	ev, err := e.Event()
	if err != nil {
		return nil
	}
	if want := ev.NATSSubject(); e.NATSSubject != "" && e.NATSSubject != want {
		return decodeErr(ReasonSubjectMismatch, "subject", "the %s payload belongs on %s, not %s", e.Type, want, e.NATSSubject)
	}
	if want := ev.CESubject(); e.Subject != "" && e.Subject != want {
		return decodeErr(ReasonSubjectMismatch, HeaderSubject, "the %s payload is about %s, not %s", e.Type, want, e.Subject)
	}
	return nil
}

// Event decodes and validates the data as the registered Go type of
// e.Type, returned by value (e.g. WorkloadAdmittedV1).
func (e Envelope) Event() (Event, error) { return Parse(e.Type, e.Data) }

// Context returns ctx carrying the envelope's trace context, so events
// published while handling this one join its trace.
func (e Envelope) Context(ctx context.Context) context.Context {
	return ContextWithTraceParent(ctx, e.TraceParent, e.TraceState)
}

// TraceID is the trace id of the envelope's traceparent, or "".
func (e Envelope) TraceID() string { return TraceID(e.TraceParent) }

// Decode reads a NATS message in CloudEvents binary mode. It checks the
// required attributes, the type (must be registered), ce-time, the content
// type and that the data is JSON. Every error is a *DecodeError, i.e. the
// message is poison.
func Decode(msg *nats.Msg) (Envelope, error) {
	if msg == nil {
		return Envelope{}, decodeErr(ReasonMissingAttribute, "", "nil message")
	}
	return DecodeParts(msg.Subject, msg.Header, msg.Data)
}

// DecodeParts is Decode for a message given as its parts, e.g. from a
// jetstream.Msg's Subject(), Headers() and Data().
func DecodeParts(subject string, h nats.Header, data []byte) (Envelope, error) {
	env := Envelope{NATSSubject: subject, Data: data}

	if ct := headerGet(h, HeaderContentType); isStructured(ct) {
		return env, decodeErr(ReasonUnsupportedContent, HeaderContentType, "structured content mode (%s) is not supported", ct)
	}
	var err error
	get := func(name string, required bool) string {
		if err != nil {
			return ""
		}
		raw := headerGet(h, name)
		if raw == "" {
			if required {
				err = decodeErr(ReasonMissingAttribute, name, "")
			}
			return ""
		}
		v, derr := decodeHeaderValue(raw)
		if derr != nil {
			err = &DecodeError{Reason: ReasonInvalidAttribute, Field: name, Err: derr}
		}
		return v
	}
	env.SpecVersion = get(HeaderSpecVersion, true)
	env.ID = get(HeaderID, true)
	env.Source = get(HeaderSource, true)
	env.Type = get(HeaderType, true)
	rawTime := get(HeaderTime, false)
	env.Subject = get(HeaderSubject, false)
	env.DataContentType = get(HeaderDataContentType, false)
	env.DataSchema = get(HeaderDataSchema, false)
	if err != nil {
		return env, err
	}
	env.TraceParent = headerGet(h, HeaderTraceParent)
	env.TraceState = headerGet(h, HeaderTraceState)

	if env.SpecVersion != SpecVersion {
		return env, decodeErr(ReasonInvalidAttribute, HeaderSpecVersion, "%q, want %q", env.SpecVersion, SpecVersion)
	}
	if rawTime != "" {
		t, perr := time.Parse(time.RFC3339Nano, rawTime)
		if perr != nil {
			return env, &DecodeError{Reason: ReasonInvalidAttribute, Field: HeaderTime, Err: perr}
		}
		env.Time = t
	}
	if env.DataContentType == "" {
		env.DataContentType = headerGet(h, HeaderContentType)
	}
	if env.DataContentType != "" && !isJSON(env.DataContentType) {
		return env, decodeErr(ReasonUnsupportedContent, HeaderDataContentType, "%q is not JSON", env.DataContentType)
	}

	ce := cloudevents.New(SpecVersion)
	ce.SetID(env.ID)
	ce.SetSource(env.Source)
	ce.SetType(env.Type)
	if !env.Time.IsZero() {
		ce.SetTime(env.Time)
	}
	if env.Subject != "" {
		ce.SetSubject(env.Subject)
	}
	if env.DataContentType != "" {
		ce.SetDataContentType(env.DataContentType)
	}
	if env.DataSchema != "" {
		ce.SetDataSchema(env.DataSchema)
	}
	if verr := ce.Validate(); verr != nil {
		return env, decodeErr(ReasonInvalidAttribute, "", "%s", oneLine(verr.Error()))
	}

	if !Known(env.Type) {
		return env, &DecodeError{Reason: ReasonUnknownType, Field: HeaderType, Err: fmt.Errorf("%w: %q", ErrUnknownType, env.Type)}
	}
	if len(data) == 0 || !json.Valid(data) {
		return env, decodeErr(ReasonBadData, "", "data is not valid JSON (%d bytes)", len(data))
	}
	return env, nil
}

// headerGet looks a header up by exact name, then case-insensitively (NATS
// header names are case-insensitive per the binding, but nats.Header is not).
func headerGet(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			return vs[0]
		}
	}
	return ""
}

func isStructured(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && strings.HasPrefix(mt, "application/cloudevents")
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == ContentTypeJSON || strings.HasSuffix(mt, "+json"))
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
