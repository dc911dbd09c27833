package executors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
)

func TestFailureOf(t *testing.T) {
	plain := errors.New("flaky upstream")
	cases := []struct {
		name string
		err  error
		want executors.Failure
	}{
		{"a plain error is retryable", plain, executors.Failure{Message: "flaky upstream", Retryable: true}},
		{"a wrapped error keeps its text", fmt.Errorf("call: %w", plain), executors.Failure{Message: "call: flaky upstream", Retryable: true}},
		{"Permanent is not retryable", executors.Permanent(plain), executors.Failure{Message: "flaky upstream"}},
		{"a Failure value", executors.Failure{Code: "quota", Message: "over quota", Retryable: true}, executors.Failure{Code: "quota", Message: "over quota", Retryable: true}},
		{"a Failure pointer, wrapped", fmt.Errorf("x: %w", &executors.Failure{Code: "bad", Message: "no"}), executors.Failure{Code: "bad", Message: "no"}},
		{"Permanent of a retryable Failure", executors.Permanent(executors.Failure{Code: "c", Message: "m", Retryable: true}), executors.Failure{Code: "c", Message: "m"}},
		{"a Failure without a message takes the error's text", executors.Failure{Code: "c", Retryable: true}, executors.Failure{Code: "c", Message: "c", Retryable: true}},
		{"an empty message is never reported", errors.New(" "), executors.Failure{Message: "the handler failed without a message", Retryable: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, executors.FailureOf(tc.err))
			require.Equal(t, !tc.want.Retryable, executors.IsPermanent(tc.err))
		})
	}
	require.Equal(t, executors.Failure{}, executors.FailureOf(nil))
	require.NoError(t, executors.Permanent(nil))
	require.True(t, errors.Is(executors.Permanent(plain), plain), "Permanent wraps")

	long := executors.FailureOf(errors.New(strings.Repeat("x", 20_000)))
	require.Len(t, long.Message, 10_000, "messages are clipped to the wire limit")
}

func TestReportFor(t *testing.T) {
	ctx := context.Background()
	rep := executors.ReportFor(ctx, executors.Result{Output: map[string]int{"n": 1}}, nil)
	require.Nil(t, rep.Failure)
	require.JSONEq(t, `{"n":1}`, string(rep.Output))

	raw := json.RawMessage(`{"kept":  "as is"}`)
	require.Equal(t, raw, executors.ReportFor(ctx, executors.Result{Output: raw}, nil).Output)
	require.Nil(t, executors.ReportFor(ctx, executors.Result{}, nil).Output, "no output, no result")

	bad := executors.ReportFor(ctx, executors.Result{Output: math.Inf(1)}, nil)
	require.Equal(t, executors.CodeInvalidResult, bad.Failure.Code)
	require.False(t, bad.Failure.Retryable)
	big := executors.ReportFor(ctx, executors.Result{Output: strings.Repeat("x", executors.MaxPayloadBytes)}, nil)
	require.Equal(t, executors.CodeInvalidResult, big.Failure.Code)
	invalid := executors.ReportFor(ctx, executors.Result{Output: json.RawMessage(`{"a":`)}, nil)
	require.Equal(t, executors.CodeInvalidResult, invalid.Failure.Code)

	tctx, cancel := context.WithDeadlineCause(ctx, time.Now().Add(-time.Second), executors.ErrTimeout)
	defer cancel()
	timedOut := executors.ReportFor(tctx, executors.Result{}, tctx.Err())
	require.Equal(t, executors.CodeTimeout, timedOut.Failure.Code)
	require.True(t, timedOut.Failure.Retryable)
	coded := executors.ReportFor(tctx, executors.Result{}, executors.Failure{Code: "mine", Message: "m"})
	require.Equal(t, "mine", coded.Failure.Code, "a handler's own code wins")
}

func TestCallRecoversAPanic(t *testing.T) {
	job := executors.NewJob(executors.Job{TaskID: "T"}, nil)
	_, err := executors.Call(context.Background(), func(context.Context, *executors.Job) (executors.Result, error) {
		panic("boom")
	}, job)
	f := executors.FailureOf(err)
	require.Equal(t, executors.CodePanic, f.Code)
	require.True(t, f.Retryable)
	require.Contains(t, f.Message, "boom")
	require.ErrorIs(t, job.SaveCheckpoint(context.Background(), 1), executors.ErrNoCheckpointStore)
	require.ErrorIs(t, (&executors.Job{}).SaveCheckpoint(context.Background(), 1), executors.ErrNoCheckpointStore)
}

func TestJobDecode(t *testing.T) {
	var v struct{ N int }
	require.NoError(t, (&executors.Job{Input: json.RawMessage(`{"N":3}`)}).Decode(&v))
	require.Equal(t, 3, v.N)
	require.NoError(t, (&executors.Job{}).Decode(&v), "no input leaves v as it is")
	require.Equal(t, 3, v.N)
	require.Error(t, (&executors.Job{Input: json.RawMessage(`[]`)}).Decode(&v))
}

func TestNewWorkerReportsEveryProblemAtOnce(t *testing.T) {
	_, err := executors.NewWorker(executors.Config{Queue: "Bad Queue", Workspace: "UP", Concurrency: -1,
		Lease: time.Millisecond, MaxDeliver: -2, DrainTimeout: -time.Second, Executor: strings.Repeat("e", 300)}, nil)
	require.Error(t, err)
	for _, want := range []string{"Conn", "Queue", "Workspace", "Concurrency", "Lease", "MaxDeliver", "DrainTimeout", "Executor", "handler"} {
		require.Contains(t, err.Error(), want)
	}
	_, err = executors.NewWorker(executors.Config{}, nil)
	require.ErrorContains(t, err, "Queue is required")
}

func TestNewWorkerAppliesDefaults(t *testing.T) {
	nc := &nats.Conn{} // never used: NewWorker does not talk to the server
	w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "q"}, func(context.Context, *executors.Job) (executors.Result, error) {
		return executors.Result{}, nil
	})
	require.NoError(t, err)
	c := w.Config()
	require.Equal(t, "default", c.Workspace)
	require.Equal(t, "dwr", c.Prefix)
	require.Equal(t, 1, c.Concurrency)
	require.Equal(t, 30*time.Second, c.Lease)
	require.Equal(t, 5, c.MaxDeliver)
	require.Equal(t, 30*time.Second, c.DrainTimeout)
	require.NotEmpty(t, c.Executor)
	require.NotNil(t, c.Logger)
}
