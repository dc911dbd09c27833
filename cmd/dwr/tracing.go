package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// otlpFlag adds --otlp-endpoint to f.
func otlpFlag(f *pflag.FlagSet, endpoint *string) {
	f.StringVar(endpoint, "otlp-endpoint", os.Getenv("DWR_OTLP_ENDPOINT"),
		"export OpenTelemetry traces by OTLP over HTTP to this URL, e.g. http://127.0.0.1:4318 (env DWR_OTLP_ENDPOINT, or the standard OTEL_EXPORTER_OTLP_ENDPOINT); none by default")
}

// otlpFromEnv reports whether the standard OpenTelemetry environment names
// an OTLP endpoint for traces.
func otlpFromEnv() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// tracerProvider returns the tracer provider that exports spans by OTLP
// over HTTP to endpoint (a URL such as http://127.0.0.1:4318), or to the
// one the standard environment names (OTEL_EXPORTER_OTLP_ENDPOINT), as the
// service or worker named service; nil when neither is set (no spans are
// made). shutdown exports what is left, for up to 5 s.
func tracerProvider(ctx context.Context, endpoint, service string) (tp trace.TracerProvider, shutdown func(), err error) {
	if endpoint == "" && !otlpFromEnv() {
		return nil, func() {}, nil
	}
	var opts []otlptracehttp.Option
	if endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fail(exitInvalid, "--otlp-endpoint %q: %v", endpoint, err)
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	return p, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			fmt.Fprintln(os.Stderr, "dwr: exporting the last spans:", err)
		}
	}, nil
}
