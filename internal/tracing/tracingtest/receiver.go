// Package tracingtest runs a real trace receiver for tests: the
// OpenTelemetry Collector's OTLP receiver (gRPC and HTTP/protobuf) in the
// test process, keeping every span it receives.
package tracingtest

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// Receiver is a running OTLP receiver.
type Receiver struct {
	// GRPC and HTTP are the endpoints, host:port on loopback.
	GRPC, HTTP string
	sink       *consumertest.TracesSink
	rcv        receiver.Traces
	once       sync.Once
}

// Start runs a receiver on two free loopback ports.
func Start(ctx context.Context) (*Receiver, error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = grpcAddr
	cfg.Protocols.HTTP.GetOrInsertDefault().ServerConfig.NetAddr.Endpoint = httpAddr
	r := &Receiver{GRPC: grpcAddr, HTTP: httpAddr, sink: new(consumertest.TracesSink)}
	r.rcv, err = f.CreateTraces(ctx, receivertest.NewNopSettings(f.Type()), cfg, r.sink)
	if err != nil {
		return nil, fmt.Errorf("otlp receiver: %w", err)
	}
	if err := r.rcv.Start(ctx, componenttest.NewNopHost()); err != nil {
		return nil, fmt.Errorf("otlp receiver: start: %w", err)
	}
	return r, nil
}

// Close stops the receiver.
func (r *Receiver) Close() {
	r.once.Do(func() { _ = r.rcv.Shutdown(context.Background()) })
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Span is a received span, flattened for assertions.
type Span struct {
	Service  string
	Name     string
	TraceID  string
	SpanID   string
	ParentID string // "" for a root
	Start    time.Time
	End      time.Time
	Attrs    map[string]string
	Events   []Event
	Links    []string // trace-id/span-id of each link
}

// Event is a span event.
type Event struct {
	Name  string
	Time  time.Time
	Attrs map[string]string
}

// Spans returns every span received so far, by start time.
func (r *Receiver) Spans() []Span {
	var out []Span
	for _, td := range r.sink.AllTraces() {
		rss := td.ResourceSpans()
		for i := range rss.Len() {
			rs := rss.At(i)
			svc, _ := rs.Resource().Attributes().Get("service.name")
			sss := rs.ScopeSpans()
			for j := range sss.Len() {
				spans := sss.At(j).Spans()
				for k := range spans.Len() {
					out = append(out, flatten(svc.AsString(), spans.At(k)))
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

func flatten(service string, s ptrace.Span) Span {
	sp := Span{Service: service, Name: s.Name(), TraceID: s.TraceID().String(), SpanID: s.SpanID().String(),
		Start: s.StartTimestamp().AsTime(), End: s.EndTimestamp().AsTime(), Attrs: map[string]string{}}
	if !s.ParentSpanID().IsEmpty() {
		sp.ParentID = s.ParentSpanID().String()
	}
	for k, v := range s.Attributes().All() {
		sp.Attrs[k] = v.AsString()
	}
	evs := s.Events()
	for i := range evs.Len() {
		e := evs.At(i)
		ev := Event{Name: e.Name(), Time: e.Timestamp().AsTime(), Attrs: map[string]string{}}
		for k, v := range e.Attributes().All() {
			ev.Attrs[k] = v.AsString()
		}
		sp.Events = append(sp.Events, ev)
	}
	links := s.Links()
	for i := range links.Len() {
		l := links.At(i)
		sp.Links = append(sp.Links, l.TraceID().String()+"/"+l.SpanID().String())
	}
	return sp
}

// Tree renders the spans of one trace as an indented tree, children by
// start time, each line with its service, duration and attributes (keys
// given in attrs only), and span events below their span.
func Tree(spans []Span, attrs ...string) string {
	children := map[string][]Span{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	var roots []Span
	for _, s := range spans {
		if s.ParentID == "" || !ids[s.ParentID] {
			roots = append(roots, s)
			continue
		}
		children[s.ParentID] = append(children[s.ParentID], s)
	}
	var b strings.Builder
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		indent := strings.Repeat("  ", depth)
		fmt.Fprintf(&b, "%s%s [%s] %s", indent, s.Name, s.Service, s.End.Sub(s.Start).Round(time.Millisecond))
		for _, k := range attrs {
			if v, ok := s.Attrs[k]; ok {
				fmt.Fprintf(&b, " %s=%s", k, v)
			}
		}
		b.WriteByte('\n')
		for _, e := range s.Events {
			fmt.Fprintf(&b, "%s  · %s +%s %v\n", indent, e.Name, e.Time.Sub(s.Start).Round(time.Millisecond), e.Attrs)
		}
		kids := children[s.SpanID]
		sort.SliceStable(kids, func(i, j int) bool { return kids[i].Start.Before(kids[j].Start) })
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}
