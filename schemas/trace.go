package schemas

import "slices"

// W3C trace context in NATS headers: a command, a query or a work item may
// carry the trace it belongs to, so that one trace follows a task from the
// command that made it ready through its executor's job and reports.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
	// EnvTraceparent is the environment variable that carries a trace
	// context to a process: dwr worker sets it for its command, and the CLI
	// sends its commands in the trace it names.
	EnvTraceparent = "TRACEPARENT"
)

// TraceCarrier reads and writes trace context in a message's headers (a
// nats.Header or micro.Headers converted to it), as OpenTelemetry's
// propagators do through their TextMapCarrier: keys as the W3C names them,
// lowercase, as any client of the wire sets them.
type TraceCarrier map[string][]string

// Get returns the first value of key, or "".
func (c TraceCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (c TraceCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys returns the keys, sorted.
func (c TraceCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
