package tracing

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Protocols of the OTLP exporter (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// ErrConfig marks a bad OTEL_* setting; the message names the variable.
var ErrConfig = errors.New("tracing configuration")

// Config is what the OTEL_* environment says about traces. The exporters
// read the rest themselves (headers, TLS, timeout, compression).
type Config struct {
	// Endpoint is the OTLP endpoint; empty turns tracing off.
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTP.
	Protocol string
	// Sampler decides which workloads' traces are recorded.
	Sampler sdktrace.Sampler
}

// Enabled reports whether spans are recorded and exported.
func (c Config) Enabled() bool { return c.Endpoint != "" }

// ConfigFromEnv reads the standard variables through getenv (os.Getenv):
// OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER (otlp or none),
// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL
// (grpc or http/protobuf, the default), OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on).
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); strings.EqualFold(v, "true") {
		return c, nil
	}
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "", "otlp":
	case "none":
		return c, nil
	default:
		return c, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: Sluice exports traces with otlp (or none)", ErrConfig, v)
	}
	c.Endpoint = firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	if c.Endpoint == "" {
		return c, nil
	}
	c.Protocol = firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	switch c.Protocol {
	case "":
		c.Protocol = ProtocolHTTP
	case ProtocolGRPC, ProtocolHTTP:
	default:
		return c, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL=%q: want %s or %s", ErrConfig, c.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
	s, err := samplerFromEnv(getenv)
	if err != nil {
		return c, err
	}
	c.Sampler = s
	return c, nil
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// samplerFromEnv builds the sampler OTEL_TRACES_SAMPLER names. Every
// Sluice span has a parent (its workload's root), so the parent-based
// samplers decide by the root, which is decided the same way by every
// service: the ratio sampler looks only at the trace id, which is the
// workload's.
func samplerFromEnv(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER"))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("%w: OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", ErrConfig, arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return defaultSampler, nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	default:
		return nil, fmt.Errorf("%w: OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or their parentbased_ forms", ErrConfig, name)
	}
}
