package executortest_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/executortest"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// steps is a handler that does n steps, saving a checkpoint after each, and
// resumes after the last step a checkpoint records.
func steps(n int) executors.Handler {
	return func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		var at struct{ Done int }
		if job.Checkpoint != nil {
			if err := json.Unmarshal(job.Checkpoint, &at); err != nil {
				return executors.Result{}, executors.Permanent(err)
			}
		}
		for at.Done < n {
			if err := ctx.Err(); err != nil {
				return executors.Result{}, err
			}
			at.Done++
			if err := job.SaveCheckpoint(ctx, at); err != nil {
				return executors.Result{}, err
			}
		}
		return executors.Result{Output: map[string]any{"done": at.Done, "op": job.OperationKey}}, nil
	}
}

func TestRunReportsTheOutputAndEveryCheckpoint(t *testing.T) {
	out, err := executortest.Run(context.Background(), steps(3), executortest.Job{})
	require.NoError(t, err)
	require.True(t, out.Succeeded())
	require.False(t, out.Retryable())
	var got struct {
		Done int
		Op   string
	}
	require.NoError(t, out.Output(&got))
	require.Equal(t, 3, got.Done)
	require.Equal(t, "op-"+executortest.DefaultTaskID, got.Op, "the operation key defaults as the service makes it")
	require.Len(t, out.Checkpoints, 3)
	require.JSONEq(t, `{"Done":2}`, string(out.Checkpoints[1]))
	require.False(t, out.Cancelled)
}

func TestRunResumesFromTheCheckpointGiven(t *testing.T) {
	out, err := executortest.Run(context.Background(), steps(3), executortest.Job{Attempt: 2, Checkpoint: map[string]int{"Done": 2}})
	require.NoError(t, err)
	require.Len(t, out.Checkpoints, 1, "only the last step ran")
	require.JSONEq(t, `{"Done":3}`, string(out.Checkpoints[0]))
}

func TestRunHandsTheJobItsFields(t *testing.T) {
	ended := time.Now().Add(-time.Minute)
	prior := []executors.PriorAttempt{{N: 1, State: "failed", Error: &executors.ErrorInfo{Code: "rate_limited", Message: "slow down"}, EndedAt: &ended}}
	var seen *executors.Job
	out, err := executortest.Run(context.Background(), func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		seen = job
		var in struct{ URL string }
		return executors.Result{Output: json.RawMessage(`{"ok":true}`)}, job.Decode(&in)
	}, executortest.Job{TaskID: "T1", Queue: "fetch", Key: "k", Attempt: 2, Input: map[string]string{"url": "https://x"},
		PriorAttempts: prior, Timeout: time.Hour})
	require.NoError(t, err)
	require.True(t, out.Succeeded())
	require.JSONEq(t, `{"ok":true}`, string(out.Report.Output))
	require.Equal(t, "T1", seen.TaskID)
	require.Equal(t, "fetch", seen.Queue)
	require.Equal(t, "default", seen.Workspace)
	require.Equal(t, "op-T1", seen.OperationKey)
	require.Equal(t, 2, seen.Attempt)
	require.JSONEq(t, `{"url":"https://x"}`, string(seen.Input))
	require.Equal(t, prior, seen.PriorAttempts)
	require.WithinDuration(t, time.Now().Add(time.Hour), seen.Deadline, time.Minute)
}

func TestRunReportsFailuresAsAWorkerWould(t *testing.T) {
	fail := func(err error) executors.Handler {
		return func(context.Context, *executors.Job) (executors.Result, error) { return executors.Result{}, err }
	}
	cases := []struct {
		name      string
		h         executors.Handler
		code      string
		retryable bool
	}{
		{"an error is retryable", fail(errors.New("flaky")), "", true},
		{"Permanent is not", fail(executors.Permanent(errors.New("bad input"))), "", false},
		{"a Failure says", fail(executors.Failure{Code: "quota", Message: "over", Retryable: true}), "quota", true},
		{"a panic is recovered", func(context.Context, *executors.Job) (executors.Result, error) { panic("bug") }, executors.CodePanic, true},
		{"an output that does not encode", func(context.Context, *executors.Job) (executors.Result, error) {
			return executors.Result{Output: make(chan int)}, nil
		}, executors.CodeInvalidResult, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := executortest.Run(context.Background(), tc.h, executortest.Job{})
			require.NoError(t, err)
			require.False(t, out.Succeeded())
			require.Equal(t, tc.code, out.Report.Failure.Code)
			require.Equal(t, tc.retryable, out.Retryable())
			require.NotEmpty(t, out.Report.Failure.Message)
			require.Error(t, out.Output(new(any)))
		})
	}
}

func TestCancelAfterCheckpointsStopsTheJobMidRun(t *testing.T) {
	out, err := executortest.Run(context.Background(), steps(5), executortest.Job{CancelAfterCheckpoints: 2})
	require.NoError(t, err)
	require.True(t, out.Cancelled)
	require.ErrorIs(t, out.Cause, executors.ErrCancelled)
	require.Len(t, out.Checkpoints, 2, "the job stopped after the second checkpoint")
	require.ErrorIs(t, out.Err, context.Canceled)
	require.True(t, out.Retryable())
}

func TestACancelledJobsCheckpointsAreRefused(t *testing.T) {
	cancel := make(chan struct{})
	var cpErr error
	out, err := executortest.Run(context.Background(), func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		close(cancel) // e.g. the task is cancelled while the job works
		<-ctx.Done()
		cpErr = job.SaveCheckpoint(context.Background(), "late")
		return executors.Result{}, context.Cause(ctx)
	}, executortest.Job{Cancel: cancel, CancelCause: executors.ErrLeaseLost})
	require.NoError(t, err)
	require.ErrorIs(t, out.Cause, executors.ErrLeaseLost)
	require.ErrorIs(t, cpErr, executors.ErrLeaseLost)
	require.Empty(t, out.Checkpoints)
}

func TestTimeoutCancelsWithErrTimeout(t *testing.T) {
	out, err := executortest.Run(context.Background(), func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		<-ctx.Done()
		return executors.Result{}, ctx.Err()
	}, executortest.Job{Timeout: 20 * time.Millisecond})
	require.NoError(t, err)
	require.ErrorIs(t, out.Cause, executors.ErrTimeout)
	require.Equal(t, executors.CodeTimeout, out.Report.Failure.Code)
	require.True(t, out.Retryable())
}

func TestRunRefusesAJobThatCannotBeEncoded(t *testing.T) {
	_, err := executortest.Run(context.Background(), steps(1), executortest.Job{Input: func() {}})
	require.ErrorContains(t, err, "Input")
	_, err = executortest.Run(context.Background(), steps(1), executortest.Job{Checkpoint: json.RawMessage(`{`)})
	require.ErrorContains(t, err, "Checkpoint")
}

// StartWorker runs a worker until it is stopped, and stop reports how Run
// ended: here, on a server without the service, after asking for its
// queue's settings until it was stopped.
func TestStartWorkerRunsUntilStopped(t *testing.T) {
	_, nc := servicetest.StartNATS(t)
	asked := make(chan struct{}, 1)
	_, err := nc.Subscribe("dwr.cmd.default.queue.configure", func(*nats.Msg) { // heard, never answered
		select {
		case asked <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "test"},
		func(context.Context, *executors.Job) (executors.Result, error) { return executors.Result{}, nil })
	require.NoError(t, err)
	stop := executortest.StartWorker(t, w)
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not run")
	}
	require.NoError(t, stop())
	require.NoError(t, stop(), "stopping again is nothing")
}
