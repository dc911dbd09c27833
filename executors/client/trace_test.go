package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/executortest"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// One trace follows a goal from the caller's span through the service
// (each command, its commit, each work item dispatched) and the worker's
// jobs (also those handed in a report's reply) and reports, to the last
// task's acceptance — across the client,
// the service and the worker, linked by traceparent in NATS headers.
func TestOneTraceSpansClientServiceAndWorker(t *testing.T) {
	tp, exp := servicetest.Tracing(t)
	s := servicetest.Start(t, t.TempDir(), servicetest.Options{Secure: true, Listen: "127.0.0.1:0",
		Config: handlers.Config{Tracer: tp}})
	c := connectAs(t, s, "caller", domain.RoleClient)
	w, err := executors.NewWorker(executors.Config{Conn: s.Member(t, "default", "worker", domain.RoleExecutor, "build"),
		Queue: "build", Logger: servicetest.Logger(), Tracer: tp},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			_, span := tp.Tracer("handler").Start(ctx, "build "+job.Key) // the handler's own span joins in
			span.End()
			return executors.Result{Output: job.Key}, nil
		})
	require.NoError(t, err)
	executortest.StartWorker(t, w)

	ctx, root := tp.Tracer("caller").Start(within(t, 30*time.Second), "release")
	g, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: "release", Tasks: []schemas.TaskSpec{
		{Key: "compile", Queue: "build"}, {Key: "package", Queue: "build", DependsOn: []string{"compile"}},
		{Key: "publish", Queue: "build", DependsOn: []string{"package"}}}})
	require.NoError(t, err)
	end, err := c.WaitGoal(ctx, g.ID)
	require.NoError(t, err)
	require.Equal(t, schemas.GoalStateAchieved, end.State)
	root.End()

	want := []string{"release", "dwr.command goal.create", "dwr.commit", "dwr.dispatch build", "dwr.job build",
		"build compile", "build package", "build publish", "dwr.command task.succeed"}
	traceID := root.SpanContext().TraceID()
	var names []string
	require.Eventually(t, func() bool { // the last job's span ends after its report's reply
		names = names[:0]
		for _, sp := range exp.GetSpans() {
			if sp.SpanContext.TraceID() == traceID {
				names = append(names, sp.Name)
			}
		}
		for _, n := range want {
			if !slices.Contains(names, n) {
				return false
			}
		}
		// The first task goes out as a work item; the next two are handed
		// to the worker in its reports' replies, and their jobs stay in
		// the trace.
		return count(names, "dwr.job build") == 3 && count(names, "dwr.dispatch build") == 1
	}, 10*time.Second, 20*time.Millisecond, "spans of the trace: %v", names)
}

// The trace goes on through a rate-limited queue: each item the service
// lets out at the queue's rate carries a span of the command that made its
// task ready.
func TestATraceGoesThroughARateLimitedQueue(t *testing.T) {
	tp, exp := servicetest.Tracing(t)
	s := servicetest.Start(t, t.TempDir(), servicetest.Options{Secure: true, Listen: "127.0.0.1:0",
		Config: handlers.Config{Tracer: tp}})
	servicetest.Must(t, s.Admin, "default", "queue.configure", schemas.ConfigureQueue{Queue: "build", LeaseMS: 30_000, MaxDeliver: 5, RateLimit: 1_000})
	c := connectAs(t, s, "caller", domain.RoleClient)
	w, err := executors.NewWorker(executors.Config{Conn: s.Member(t, "default", "worker", domain.RoleExecutor, "build"),
		Queue: "build", Logger: servicetest.Logger(), Tracer: tp},
		func(_ context.Context, job *executors.Job) (executors.Result, error) {
			return executors.Result{Output: job.Key}, nil
		})
	require.NoError(t, err)
	executortest.StartWorker(t, w)

	ctx, root := tp.Tracer("caller").Start(within(t, 30*time.Second), "release")
	g, err := c.CreateGoal(ctx, schemas.CreateGoal{Title: "release", Tasks: []schemas.TaskSpec{
		{Key: "compile", Queue: "build"}, {Key: "package", Queue: "build", DependsOn: []string{"compile"}}}})
	require.NoError(t, err)
	end, err := c.WaitGoal(ctx, g.ID)
	require.NoError(t, err)
	require.Equal(t, schemas.GoalStateAchieved, end.State)
	root.End()

	traceID := root.SpanContext().TraceID()
	var names []string
	require.Eventually(t, func() bool {
		names = names[:0]
		for _, sp := range exp.GetSpans() {
			if sp.SpanContext.TraceID() == traceID {
				names = append(names, sp.Name)
			}
		}
		// No handoff from a rate-limited queue: both tasks go out as
		// items, each let out within the trace.
		return count(names, "dwr.dispatch build") == 2 && count(names, "dwr.job build") == 2
	}, 10*time.Second, 20*time.Millisecond, "spans of the trace: %v", names)
}
