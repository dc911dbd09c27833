package executors

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dwr-run/dwr/schemas"
)

// tracerName names the SDK's tracer (its instrumentation scope).
const tracerName = "github.com/dwr-run/dwr/executors"

// traceContext propagates W3C trace context (traceparent, tracestate): the
// wire's format.
var traceContext = propagation.TraceContext{}

// traceJob starts the span of a work item's job, "dwr.job <queue>", a child
// of the trace the item carries, and returns ctx with it: every command the
// job sends carries it to the service (the client injects it).
func (w *Worker) traceJob(ctx context.Context, msg jetstream.Msg) (context.Context, trace.Span) {
	if h := msg.Headers(); h != nil {
		ctx = traceContext.Extract(ctx, schemas.TraceCarrier(h))
	}
	return w.tracer.Start(ctx, "dwr.job "+w.cfg.Queue, trace.WithSpanKind(trace.SpanKindConsumer))
}

// Traceparent returns the W3C traceparent of the trace ctx belongs to, or
// "" when none: what a job hands a process it starts (TRACEPARENT), so that
// the process's own commands join the job's trace.
func Traceparent(ctx context.Context) string {
	c := schemas.TraceCarrier{}
	traceContext.Inject(ctx, c)
	return c.Get(schemas.HeaderTraceparent)
}
