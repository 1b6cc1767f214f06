// Package tracing records one OpenTelemetry trace per workload: from the
// moment its job is first seen to the moment the job starts, across the
// services that move it (the job integration, admission, preemption).
//
// No service hands a span to another. Instead, a workload's trace id and
// the span id of its root span are derived from the workload's UID, so
// every replica of every service, before or after a restart, puts its
// spans into the same trace under the same root, and every event about
// the workload carries that trace in its traceparent. The root span itself
// ("workload") is recorded once, by the integration, when the job first
// starts: it begins at the job's creation and ends at its start, so it
// measures the admission latency and never stays open while the job runs.
//
// Tracing is configured by the standard OTEL_* environment variables and is
// on when an OTLP endpoint is set. A nil *Tracer is valid and records
// nothing, but still gives each workload its deterministic trace context,
// so event traceparents and `sluice describe workload` agree with or
// without a collector.
package tracing
