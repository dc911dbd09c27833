package executors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/schemas"
)

// nest is the handler of a task that delegates a task like itself one level
// deeper until depth 3, whose task answers; each level answers with what
// its child's accepted result was.
func nest(ctx context.Context, job *executors.Job) (executors.Result, error) {
	var in struct{ Depth int }
	if err := job.Decode(&in); err != nil {
		return executors.Result{}, executors.Permanent(err)
	}
	if in.Depth >= 3 {
		return executors.Result{Output: map[string]any{"leaf": job.TaskID}}, nil
	}
	out, err := job.Delegate(ctx, executors.Delegation{Key: "deeper", Title: fmt.Sprint("level ", in.Depth+1),
		Labels: schemas.Labels{"level": fmt.Sprint(in.Depth + 1)},
		Tasks:  []schemas.TaskSpec{{Key: "child", Queue: "agents", Input: json.RawMessage(fmt.Sprintf(`{"depth":%d}`, in.Depth+1))}}})
	if err != nil {
		return executors.Result{}, err // parks the task: the child goal runs
	}
	return executors.Result{Output: map[string]any{"depth": in.Depth, "child": out.Results["child"].Result}}, nil
}

// A task delegates, through the SDK, two levels down: each level parks its
// attempt, and resumes with its child's accepted result.
func TestDelegateThreeLevelsThroughWorkers(t *testing.T) {
	b := setup(t)
	b.startWorker(t, executors.Config{Queue: "agents", Concurrency: 2}, nest)
	var top schemas.CommandResult
	require.NoError(t, json.Unmarshal(b.Command(t, "goal.create", map[string]any{"title": "top",
		"tasks": []map[string]any{{"key": "lead", "queue": "agents", "input": map[string]int{"depth": 1}}}}), &top))
	lead := b.WaitState(t, top.Tasks[0].TaskID, "accepted", 30*time.Second)
	require.Len(t, lead.Delegations, 1)
	require.Equal(t, schemas.GoalStateAchieved, lead.Delegations[0].State)
	require.Len(t, lead.Attempts, 2, "parked, then resumed")
	require.Equal(t, schemas.AttemptStateParked, lead.Attempts[0].State)
	var got struct {
		Depth int
		Child struct {
			Depth int
			Child struct{ Leaf string }
		}
	}
	require.NoError(t, json.Unmarshal(lead.Attempts[1].Result, &got))
	require.Equal(t, 1, got.Depth)
	require.Equal(t, 2, got.Child.Depth)
	require.NotEmpty(t, got.Child.Child.Leaf, "the leaf's result came up two levels: %s", lead.Attempts[1].Result)
	var child schemas.Goal
	b.Query(t, "goal.get", schemas.Query{ID: lead.Delegations[0].GoalID}, &child)
	require.Equal(t, schemas.Labels{"level": "2"}, child.Labels, "the child goal carries the labels its delegation gave")
	b.waitSettled(t, "agents")
}

// A child goal that fails resumes its parent (on_failure resume): the new
// attempt's Delegate returns the failure, and the handler decides.
func TestDelegateHandsTheFailureToTheResumedAttempt(t *testing.T) {
	b := setup(t)
	b.startWorker(t, executors.Config{Queue: "broken"}, func(context.Context, *executors.Job) (executors.Result, error) {
		return executors.Result{}, executors.Permanent(errors.New("no access to the archive"))
	})
	b.startWorker(t, executors.Config{Queue: "lead"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		out, err := job.Delegate(ctx, executors.Delegation{Key: "archive", Title: "read the archive", OnFailure: executors.DelegationResume,
			Tasks: []schemas.TaskSpec{{Key: "read", Queue: "broken"}}})
		var wait *executors.WaitError
		switch {
		case errors.As(err, &wait):
			return executors.Result{}, err
		case errors.Is(err, executors.ErrDelegationFailed):
			return executors.Result{Output: map[string]string{"fallback": out.State, "goal": out.GoalID}}, nil
		}
		return executors.Result{}, executors.Permanent(fmt.Errorf("unexpected: %v %+v", err, out))
	})
	id := b.CreateTask(t, map[string]any{"queue": "lead"})
	done := b.WaitState(t, id, "accepted", 30*time.Second)
	require.Equal(t, schemas.GoalStateFailed, done.Delegations[0].State)
	require.JSONEq(t, fmt.Sprintf(`{"fallback":"failed","goal":%q}`, done.Delegations[0].GoalID), string(done.Attempts[1].Result))
}

// Cancelling the delegating task cancels its child goal and the child's
// running job.
func TestCancellingTheDelegatingTaskCancelsTheChildsJob(t *testing.T) {
	b := setup(t)
	running := make(chan string, 1)
	stopped := make(chan error, 1)
	b.startWorker(t, executors.Config{Queue: "slow"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		running <- job.TaskID
		return untilCancelled(ctx, stopped)
	})
	b.startWorker(t, executors.Config{Queue: "lead"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		_, err := job.Delegate(ctx, executors.Delegation{Key: "slow", Title: "slow work", Tasks: []schemas.TaskSpec{{Key: "s", Queue: "slow"}}})
		return executors.Result{}, err
	})
	id := b.CreateTask(t, map[string]any{"queue": "lead"})
	child := recv(t, running)
	b.Command(t, "task.cancel", map[string]any{"task_id": id, "reason": "changed my mind"})
	require.ErrorIs(t, recv(t, stopped), executors.ErrCancelled)
	require.Equal(t, schemas.StateCancelled, b.WaitState(t, child, "cancelled", 10*time.Second).State)
	lead := b.Task(t, id)
	require.Equal(t, schemas.GoalStateCancelled, lead.Delegations[0].State)
}
