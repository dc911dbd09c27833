package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// A dwr command run with TRACEPARENT (as dwr worker runs its command) sends
// its commands in that trace: the service's span is the parent's child.
func TestCLICommandsJoinTheTraceOfTRACEPARENT(t *testing.T) {
	tp, exp := servicetest.Tracing(t)
	st := servicetest.Start(t, t.TempDir(), servicetest.Options{Listen: "127.0.0.1:0", Config: handlers.Config{Tracer: tp}})
	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	t.Setenv("TRACEPARENT", "00-"+traceID+"-"+parent+"-01")
	var created map[string]any
	runJSON(t, st.URL, &created, "task", "create", "--queue", "traced")

	var found bool
	for _, sp := range exp.GetSpans() {
		if sp.Name == "dwr.command task.create" {
			require.Equal(t, traceID, sp.SpanContext.TraceID().String())
			require.Equal(t, parent, sp.Parent.SpanID().String())
			found = true
		}
	}
	require.True(t, found, "the command's span was made")
}
