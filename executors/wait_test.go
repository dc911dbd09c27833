package executors_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/schemas"
)

// A handler that sleeps parks its task durably: no job runs meanwhile, and a
// new attempt resumes from the checkpoint once the time has come.
func TestSleepParksTheTaskUntilItsTime(t *testing.T) {
	b := setup(t)
	var until time.Time
	b.startWorker(t, executors.Config{Queue: "nap"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		if job.Checkpoint == nil {
			if err := job.SaveCheckpoint(ctx, map[string]string{"phase": "asked"}); err != nil {
				return executors.Result{}, err
			}
			until = time.Now().Add(time.Second)
			return executors.Result{}, executors.Sleep(until)
		}
		return executors.Result{Output: map[string]any{"resumed_from": job.Checkpoint, "attempt": job.Attempt}}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "nap", "retry": map[string]any{"max_attempts": 1}})
	parked := b.WaitState(t, id, "waiting", 10*time.Second)
	require.Equal(t, "parked", parked.Attempts[0].State)
	done := b.WaitState(t, id, "accepted", 15*time.Second)
	require.Len(t, done.Attempts, 2, "the parked attempt does not count against max_attempts 1")
	second := done.Attempts[1]
	require.False(t, second.StartedAt.Before(until), "resumed at %s, before %s", second.StartedAt, until)
	require.JSONEq(t, `{"resumed_from":{"phase":"asked"},"attempt":2}`, string(second.Result))
	b.waitSettled(t, "nap")
}

// A job that polls by sleeping goes on past the attempts its task lists:
// each resumption is a new attempt, the task lists its latest and tallies
// the rest, and the worker still runs each item of the next attempt.
func TestAPollerRunsPastTheAttemptsItsTaskLists(t *testing.T) {
	b := setup(t)
	const polls = schemas.MaxListedAttempts + 20
	b.startWorker(t, executors.Config{Queue: "poll"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		if job.Attempt <= polls {
			return executors.Result{}, executors.Sleep(time.Now().Add(20 * time.Millisecond))
		}
		return executors.Result{Output: map[string]int{"attempt": job.Attempt, "prior": len(job.PriorAttempts)}}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "poll", "retry": map[string]any{"max_attempts": 1}})
	done := b.WaitState(t, id, "accepted", 60*time.Second)
	require.Equal(t, polls+1, done.AttemptCount())
	require.Len(t, done.Attempts, schemas.MaxListedAttempts)
	require.Equal(t, polls+1-schemas.MaxListedAttempts, done.Earlier.Count)
	require.JSONEq(t, fmt.Sprintf(`{"attempt":%d,"prior":%d}`, polls+1, schemas.MaxListedAttempts), string(done.Current().Result))
	b.waitSettled(t, "poll")
}

// A handler that awaits a signal parks its task until the signal arrives.
func TestAwaitSignalResumesOnTheSignal(t *testing.T) {
	b := setup(t)
	b.startWorker(t, executors.Config{Queue: "pay"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		if job.Attempt == 1 {
			return executors.Result{}, executors.AwaitSignal("payment-settled")
		}
		if job.Signal == nil || job.Signal.Name != "payment-settled" {
			return executors.Result{}, executors.Permanent(errors.New("resumed without its signal"))
		}
		return executors.Result{Output: job.Signal.Payload}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "pay"})
	b.WaitState(t, id, "waiting", 10*time.Second)
	b.Command(t, "task.signal", map[string]any{"task_id": id, "name": "payment-settled", "payload": map[string]int{"amount": 12}})
	done := b.WaitState(t, id, "accepted", 10*time.Second)
	require.JSONEq(t, `{"amount":12}`, string(done.Attempts[1].Result), "the resumed attempt got the signal's payload")
	b.waitSettled(t, "pay")
}

// A signal sent while the job still runs, before it awaits it, is kept: the
// job's AwaitSignal then parks the task and it resumes at once with it.
func TestASignalSentBeforeAwaitSignalIsNotLost(t *testing.T) {
	b := setup(t)
	running := make(chan string, 1)
	sent := make(chan struct{})
	b.startWorker(t, executors.Config{Queue: "early"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		if job.Attempt == 1 {
			running <- job.TaskID
			select { // the signal is sent while this attempt runs
			case <-sent:
			case <-ctx.Done():
				return executors.Result{}, ctx.Err()
			}
			return executors.Result{}, executors.AwaitSignal("payment-settled")
		}
		if job.Signal == nil || job.Signal.Name != "payment-settled" {
			return executors.Result{}, executors.Permanent(errors.New("resumed without its signal"))
		}
		return executors.Result{Output: job.Signal.Payload}, nil
	})
	id := b.CreateTask(t, map[string]any{"queue": "early"})
	select {
	case got := <-running:
		require.Equal(t, id, got)
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	b.Command(t, "task.signal", map[string]any{"task_id": id, "name": "payment-settled", "payload": map[string]int{"amount": 7}})
	close(sent)
	done := b.WaitState(t, id, "accepted", 10*time.Second)
	require.JSONEq(t, `{"amount":7}`, string(done.Attempts[1].Result), "the resumed attempt got the early signal")
	require.Empty(t, done.PendingSignals)
	b.waitSettled(t, "early")
}
