package handlers

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dwr-run/dwr/schemas"
)

// traceContext propagates W3C trace context (traceparent, tracestate) in
// NATS headers: the wire's format, whatever propagator the program sets
// globally.
var traceContext = propagation.TraceContext{}

// tracerName names the service's tracer (its instrumentation scope).
const tracerName = "github.com/dwr-run/dwr/handlers"

// refusalOf returns the error of a reply that refuses, or nil.
func refusalOf(reply []byte) *schemas.Error {
	if !bytes.HasPrefix(reply, []byte(`{"ok":false`)) {
		return nil
	}
	var r schemas.Reply
	if json.Unmarshal(reply, &r) != nil {
		return nil
	}
	return r.Error
}

// traceCommand starts the span of command name's handling, "dwr.command
// <name>": a child of the trace its request carries (traceparent), or a new
// trace. The span's context goes with the command through the writer (its
// commit's span, the work items it dispatches). end records the command's
// outcome (the wire error of a refusal, or nil) and ends the span.
func (s *Service) traceCommand(name, ws string, req micro.Request) (ctx context.Context, end func(werr *schemas.Error)) {
	ctx = traceContext.Extract(context.Background(), schemas.TraceCarrier(req.Headers()))
	ctx, span := s.tracer.Start(ctx, "dwr.command "+name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("dwr.command", name), attribute.String("dwr.workspace", ws)))
	return ctx, func(werr *schemas.Error) {
		if werr != nil {
			span.SetAttributes(attribute.String("dwr.error_code", werr.Code))
			span.SetStatus(codes.Error, werr.Message)
		}
		span.End()
	}
}
