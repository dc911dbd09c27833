package executors_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors"
)

// chainOn submits a plan of three tasks on queue, each depending on the
// one before, and returns their ids in order.
func (b *bundle) chainOn(t *testing.T, queue string) []string {
	t.Helper()
	var goal struct{ ID string }
	require.NoError(t, json.Unmarshal(b.Command(t, "goal.create", map[string]any{"title": "chain"}), &goal))
	var plan struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
		} `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal(b.Command(t, "plan.submit", map[string]any{"goal_id": goal.ID, "tasks": []map[string]any{
		{"key": "a", "queue": queue},
		{"key": "b", "queue": queue, "depends_on": []string{"a"}},
		{"key": "c", "queue": queue, "depends_on": []string{"b"}},
	}}), &plan))
	ids := make([]string, len(plan.Tasks))
	for i, pt := range plan.Tasks {
		ids[i] = pt.TaskID
	}
	return ids
}

// A worker's report is handed the next task of its chain: the first task
// comes from the queue, the next two in the replies to the reports before
// them, and run on the same worker. With NoHandoff every task comes from
// the queue.
func TestAChainRunsOnTheAttemptsItsReportsAreHanded(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		queue  string
		noHand bool
		handed []bool
	}{
		{"handed", false, []bool{false, true, true}},
		{"fetched", true, []bool{false, false, false}},
	} {
		var mu sync.Mutex
		var ran []string
		b.startWorker(t, executors.Config{Queue: c.queue, Executor: "sdk-test", NoHandoff: c.noHand},
			func(ctx context.Context, job *executors.Job) (executors.Result, error) {
				mu.Lock()
				ran = append(ran, job.Key)
				mu.Unlock()
				deps := map[string]string{}
				for k, d := range job.Dependencies {
					var s string
					if err := json.Unmarshal(d.Result, &s); err != nil {
						return executors.Result{}, executors.Permanent(err)
					}
					deps[k] = s
				}
				return executors.Result{Output: job.Key + "+" + deps["a"] + deps["b"]}, nil
			})
		ids := b.chainOn(t, c.queue)
		var handed []bool
		for _, id := range ids {
			tk := b.WaitState(t, id, "accepted", 15*time.Second)
			require.Len(t, tk.Attempts, 1)
			require.Equal(t, "sdk-test", tk.Attempts[0].Executor)
			handed = append(handed, tk.Attempts[0].Handed)
		}
		last := b.WaitState(t, ids[2], "accepted", time.Second)
		require.JSONEq(t, `"c+b+a+"`, string(last.Attempts[0].Result), "each job saw its dependency's result")
		require.Equal(t, c.handed, handed, "queue %s: which attempts were handed", c.queue)
		mu.Lock()
		require.Equal(t, []string{"a", "b", "c"}, ran)
		mu.Unlock()
		b.waitSettled(t, c.queue)
	}
}

// A handed attempt whose worker hangs (no heartbeats) has no work item to
// be redelivered: the service abandons it when its lease lapses, the job
// is cancelled as a lost attempt, and the task goes back to the queue,
// where its next attempt runs and the chain ends.
func TestAHandedAttemptWhoseWorkerHangsGoesBackToTheQueue(t *testing.T) {
	b := setup(t)
	lost := make(chan error, 1)
	w := b.startWorker(t, executors.Config{Queue: "hang", Executor: "hung", Lease: executors.MinLease},
		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
			if job.Key == "b" && job.Attempt == 1 {
				<-ctx.Done() // hangs until the service takes the attempt away
				lost <- context.Cause(ctx)
				return executors.Result{}, ctx.Err()
			}
			return executors.Result{Output: job.Key}, nil
		})
	w.w.PauseHeartbeats(true) // as if its process hung: no heartbeats
	ids := b.chainOn(t, "hang")
	require.ErrorIs(t, recv(t, lost), executors.ErrLeaseLost)
	for _, id := range ids {
		b.WaitState(t, id, "accepted", 15*time.Second)
	}
	tk := b.WaitState(t, ids[1], "accepted", time.Second)
	require.Len(t, tk.Attempts, 2)
	require.True(t, tk.Attempts[0].Handed)
	require.Equal(t, "abandoned", tk.Attempts[0].State)
	require.Equal(t, "lease_lost", tk.Attempts[0].Reason)
	require.False(t, tk.Attempts[1].Handed, "attempt 2 came from the queue")
	require.Equal(t, "succeeded", tk.Attempts[1].State)
	w.logs.waitLine(t, 10*time.Second, "outcome=refused")
	b.waitSettled(t, "hang")
}

// A worker started on a paused queue says so, since it will get no job
// until the queue is resumed; once resumed, it runs the queue's task.
func TestAWorkerSaysItsQueueIsPaused(t *testing.T) {
	b := setup(t)
	b.Command(t, "queue.pause", map[string]any{"queue": "held"})
	id := b.CreateTask(t, map[string]any{"queue": "held"})
	w := b.startWorker(t, executors.Config{Queue: "held"}, func(ctx context.Context, job *executors.Job) (executors.Result, error) {
		return executors.Result{Output: "ran"}, nil
	})
	w.logs.waitLine(t, 10*time.Second, "the queue is paused", "queue=held")
	b.Command(t, "queue.resume", map[string]any{"queue": "held"})
	b.WaitState(t, id, "accepted", 15*time.Second)
}
